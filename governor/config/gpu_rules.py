"""``[capacity] gpus`` and ``gpu_control``: the device nodes governed; ``gpu_guard`` and
``gpu_guard_parents``: where, outside governor's tasks, the GPU and control nodes are denied
(issue 31, point 4). Pure: which of the named cgroups exist
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

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from governor.errors import ConfigError

__all__ = ["GPU_GUARDS", "GpuGuardRules", "gpu_control_nodes", "gpu_guard", "gpu_nodes"]

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


def gpu_nodes(capacity: Mapping[str, object], file: str) -> str | tuple[str, ...] | None:
    """``capacity.gpus``: ``"auto"`` (NVML finds them), a list of device node paths, or None.

    Raises:
        ConfigError: neither ``"auto"`` nor a non-empty list of normalised absolute paths, or
            a path listed twice.
    """
    if "gpus" not in capacity:
        return None
    value = capacity["gpus"]
    if value == "auto":
        return "auto"
    if not isinstance(value, list) or not value:
        raise ConfigError(file, "capacity.gpus", f'must be "auto" or a non-empty list of device node paths, got {value!r}')
    paths = tuple(_node_path(path, f"capacity.gpus[{index}]", file) for index, path in enumerate(value))
    for index, path in enumerate(paths):
        if path in paths[:index]:
            raise ConfigError(file, f"capacity.gpus[{index}]", f"{path} is listed twice")
    return paths


def gpu_control_nodes(capacity: Mapping[str, object], file: str) -> tuple[str, ...] | None:
    """``capacity.gpu_control``: the control nodes a task with GPUs may open, or None (NVIDIA's).

    Raises:
        ConfigError: given without ``capacity.gpus``, or not a list of normalised absolute paths.
    """
    if "gpu_control" not in capacity:
        return None
    if "gpus" not in capacity:
        raise ConfigError(file, "capacity.gpu_control", "has no effect: no GPU is governed (capacity.gpus)")
    value = capacity["gpu_control"]
    if not isinstance(value, list):
        raise ConfigError(file, "capacity.gpu_control", f"must be a list of device node paths, got {value!r}")
    return tuple(_node_path(path, f"capacity.gpu_control[{index}]", file) for index, path in enumerate(value))


def _node_path(value: object, key: str, file: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(file, key, f"must be a non-empty string, got {value!r}")
    path = value
    if not posixpath.isabs(path) or posixpath.normpath(path) != path:
        raise ConfigError(file, key, f"must be a normalised absolute path like /dev/nvidia0, got {path!r}")
    return path
