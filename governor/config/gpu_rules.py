"""``[capacity] gpu_guard`` and ``gpu_guard_parents``: where, outside governor's tasks, the
GPU and control nodes are denied (issue 31, point 4). Pure: which of the named cgroups exist
is the daemon's to find (:mod:`governor.cgroups.device_guard`).

- ``"sessions"`` (the default): with ``[sessions]`` on, the cgroups login processes start in
  before governor moves them, ``gpu_guard_parents`` (default ``["user.slice"]``, logind's),
  so none opens a GPU, moved yet or not. With sessions off nothing outside governor's tasks is
  guarded, and ``check-config`` and ``status`` say so.
- ``"host"``: every top-level cgroup but those holding governor's root or the daemon itself,
  sessions on or off.
- ``"tasks"``: governor's tasks only (each denied the GPUs it does not hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from governor.errors import ConfigError

__all__ = ["GPU_GUARDS", "GpuGuardRules", "gpu_guard"]

GPU_GUARDS = ("sessions", "host", "tasks")  # the first is the default
_PARENTS = ("user.slice",)


@dataclass(frozen=True)
class GpuGuardRules:
    """``[capacity] gpu_guard``.

    Attributes:
        kind: one of :data:`GPU_GUARDS`.
        parents: for ``"sessions"``, the cgroups login processes start in, relative to the
            cgroup mount (v1: to the ``devices`` hierarchy's), e.g. ``("user.slice",)``.
    """

    kind: str = GPU_GUARDS[0]
    parents: tuple[str, ...] = _PARENTS


def gpu_guard(capacity: Mapping[str, object], file: str) -> GpuGuardRules:
    """The guard ``[capacity]`` asks for (the default when its keys are left out).

    Raises:
        ConfigError: ``gpu_guard`` is not one of :data:`GPU_GUARDS`; ``gpu_guard_parents`` is
            not a list of relative cgroup paths (no ``..``, no leading ``/``, not empty), or is
            given with another guard than ``"sessions"``.
    """
    kind = capacity.get("gpu_guard", GPU_GUARDS[0])
    if kind not in GPU_GUARDS:
        raise ConfigError(file, "capacity.gpu_guard", f"must be one of {', '.join(map(repr, GPU_GUARDS))}, "
                                                      f"got {kind!r}")
    if "gpu_guard_parents" not in capacity:
        return GpuGuardRules(kind)
    if kind != "sessions":
        raise ConfigError(file, "capacity.gpu_guard_parents", f'has no effect with gpu_guard = "{kind}"')
    value = capacity["gpu_guard_parents"]
    if not isinstance(value, list):
        raise ConfigError(file, "capacity.gpu_guard_parents", f"must be a list of cgroup paths, got {value!r}")
    for index, path in enumerate(value):
        parts = path.split("/") if isinstance(path, str) else [""]
        if any(part in ("", ".", "..") for part in parts):
            raise ConfigError(file, f"capacity.gpu_guard_parents[{index}]",
                              f"must be a cgroup path relative to the cgroup mount (user.slice), got {path!r}")
    return GpuGuardRules(kind, tuple(value))
