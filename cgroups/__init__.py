"""cgroup drivers: everything in governor that touches cgroupfs lives in this package.

- :mod:`governor.cgroups.files`: the only module that opens cgroup files (errors name path, value, errno).
- :mod:`governor.cgroups.parse`: pure parsers (``max`` ↔ None, keyed files, ``cpu.max``...).
- :mod:`governor.cgroups.limits`: :class:`CgroupLimits`, the planner → driver contract, and its mapping
  to v2 / v1 files in a fixed order.
- :mod:`governor.cgroups.detect`: unified / hybrid / legacy mode, own cgroup, controllers, v1 mounts.
- :mod:`governor.cgroups.devices`: block device path → whole disk ``MAJ:MIN``.
- :mod:`governor.cgroups.device_rules`: device nodes as limits name them (``devices_denied``);
  :mod:`governor.cgroups.device_filter` the v2 BPF device program that enforces them.
- :mod:`governor.cgroups.driver`: the one driver protocol; :mod:`governor.cgroups.base` what every driver
  shares (the record of what the kernel accepted, plans applied in order, kills in rounds).
- :mod:`governor.cgroups.stats`: one sample of a cgroup's counters, whatever read it.
- :mod:`governor.cgroups.v2`, :mod:`governor.cgroups.v1`: the drivers (the same protocol); v1's quota
  rule for nested cgroups in :mod:`governor.cgroups.nesting`.
- :mod:`governor.cgroups.hierarchy`: the factory (which driver this host gets, where governor's root
  lives) and the one way in from above, which routes a login slice to systemd.
- :mod:`governor.cgroups.systemd`: limits on systemd's units (a login session's slice), set through
  systemd, counters read by a v2 reader; :mod:`governor.cgroups.logind` the slices' names.
- :mod:`governor.cgroups.errors`: the errors of all of them, and the base of every governor error.

Nothing is imported here: ``governor run`` imports :mod:`governor.cgroups.errors` (through
:mod:`governor.errors`) and must not pay for the drivers (cgroupspy).
"""
