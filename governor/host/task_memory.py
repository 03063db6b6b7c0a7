"""What a task's cgroup holds of memory now, for ``governor run`` to warn its user before a kill
(:mod:`governor.cli.memory_warning`): the cli reads the host through ``governor.host`` (issue
45, point 5), and the read itself is the driver's (:mod:`governor.cgroups.memory_now`: cgroupfs
is read in ``governor.cgroups`` alone). Loaded only once a command outlives ``governor run``'s
first look, as that is."""

from __future__ import annotations

from governor.cgroups.memory_now import memory_now

__all__ = ["memory_now"]
