"""cgroup drivers: everything in governor that touches cgroupfs lives in this package.

- :mod:`cgroups.files`: the only module that opens cgroup files (errors name path, value, errno).
- :mod:`cgroups.parse`: pure parsers (``max`` ↔ None, keyed files, ``cpu.max``...).
- :mod:`cgroups.limits`: :class:`CgroupLimits`, the planner → driver contract, and its mapping
  to v2 / v1 files in a fixed order.
- :mod:`cgroups.detect`: unified / hybrid / legacy mode, own cgroup, controllers, v1 mounts.
- :mod:`cgroups.devices`: block device path → whole disk ``MAJ:MIN``.
- :mod:`cgroups.driver`: the one driver interface, the record of what the kernel accepted.
- :mod:`cgroups.v2`, :mod:`cgroups.v1`: the drivers (same public interface).
- :mod:`cgroups.hierarchy`: which driver this host gets and where governor's root lives.
- :mod:`cgroups.systemd`: limits on systemd's units (a login session's slice), set through systemd.
- :mod:`cgroups.errors`: the errors of all of them, and the base of every governor error.

Nothing is imported here: ``governor run`` imports :mod:`cgroups.errors` (through
:mod:`governor.errors`) and must not pay for the drivers (cgroupspy).
"""
