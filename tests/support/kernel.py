"""Whether this host can run the real-kernel tests: why not, or None."""

import os

from governor.cgroups import detect


def _mode_or_reason() -> tuple[str | None, str | None]:
    """The host's cgroup mode, or why no cgroup test can run here: (mode, None) or (None, why)."""
    if os.geteuid() != 0:
        return None, "needs root to create cgroups"
    try:
        return detect.host_mode(), None
    except Exception as error:  # no cgroup mount at all
        return None, f"no cgroup hierarchy: {error}"


def v1_skip_reason() -> str | None:
    """Why the cgroup v1 tests (marker ``kernel_v1``) cannot run here, or None when they can."""
    mode, why = _mode_or_reason()
    if why:
        return why
    if mode == "unified":
        return "host is cgroup v2 only (the v2 suite covers it)"
    missing = {"cpu", "cpuacct", "cpuset", "memory"} - set(detect.v1_mounts())
    return f"v1 controllers not mounted: {', '.join(sorted(missing))}" if missing else None


def v2_skip_reason() -> str | None:
    """Why the cgroup v2 tests (marker ``kernel_v2``) cannot run here, or None when they can."""
    mode, why = _mode_or_reason()
    if why:
        return why
    if mode != "unified":
        return f"host cgroups are {mode}, not v2 (run this suite with ../shared/vm/run-in-vm)"
    return None
