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
"""

from cgroups.limits import CgroupLimits, IoMax
from cgroups.v1 import CgroupV1Driver
from cgroups.v2 import CgroupStats, CgroupV2Driver

__all__ = ["CgroupLimits", "CgroupStats", "CgroupV1Driver", "CgroupV2Driver", "IoMax"]
