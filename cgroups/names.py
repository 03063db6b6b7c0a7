"""Which directory names a cgroup cannot take: those of the interface files the kernel already
puts in every cgroup directory (``cpu.max``, ``cgroup.procs``; cgroup v1's ``tasks``…), where a
``mkdir`` would fail or a write would land in the wrong file. Pure."""

from __future__ import annotations

__all__ = ["interface_name_problem"]

# Every cgroup directory holds files named <controller>.<file> (cpu.max, cgroup.procs).
_INTERFACE_PREFIXES = ("cgroup", "cpu", "cpuacct", "cpuset", "memory", "io", "blkio", "pids",
                       "hugetlb", "rdma", "misc", "freezer", "devices", "net_cls", "net_prio", "perf_event")
# cgroup v1's interface files without a controller prefix, in every directory.
_V1_FILES = ("tasks", "notify_on_release", "release_agent")


def interface_name_problem(name: str) -> str | None:
    """Why a cgroup cannot be named ``name`` (it is, or is shaped like, an interface file the
    kernel puts in every cgroup directory), or None."""
    if name in _V1_FILES:
        return f"clashes with the cgroup v1 interface file {name}"
    prefix, dot, _ = name.partition(".")
    if dot and prefix in _INTERFACE_PREFIXES:
        return f"clashes with the cgroup interface files {prefix}.*"
    return None
