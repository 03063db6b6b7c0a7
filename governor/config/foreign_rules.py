"""``[foreign]``: subtrees of the cgroup tree that another manager owns (DESIGN.md §8, "Foreign
tenants"). Governor never writes in them, never moves a process in or out of them, and
subtracts what they hold from the capacity it divides. Pure.

::

    [foreign]
    detect = true                       # the well-known managers' subtrees (WELL_KNOWN)
    paths = ["/batch.slice", "/lab/*.scope"]   # more, as /proc/<pid>/cgroup spells them; globs

A path is relative to the cgroup root (the hierarchy's mount on v2, each hierarchy's mount on
v1): ``/kubepods.slice`` is ``/sys/fs/cgroup/kubepods.slice`` on v2 and
``/sys/fs/cgroup/memory/kubepods.slice`` (…) on v1.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from governor.config.tomlcheck import no_unknown_keys, subtable, type_name
from governor.errors import ConfigError

__all__ = ["MANAGERS", "WELL_KNOWN", "ForeignRules", "manager_of", "parse_foreign"]

# Path patterns found with ``detect = true`` → the manager that owns what they match. Slurm's
# cgroup/v2 plugin makes ``system.slice/slurmstepd.scope`` (a systemd VM prefixes the unit's
# name: ``sysvm_slurmstepd.scope``), one or two levels under system.slice: not a walk of the
# whole slice every poll. Its cgroup/v1 plugin makes ``/slurm/uid_<N>/job_<N>/step_<N>`` in
# the cpuset, memory, cpuacct, devices and freezer hierarchies (not cpu): the tenant is
# ``/slurm`` (there from slurmd's start: a job started since the last poll is in it already),
# its jobs read one by one below ``uid_<N>``. A Slurm built with --enable-multiple-slurmd, as
# Debian's is, makes ``/slurm_<node name>`` instead (a real slurmd natively on v1 made
# ``/slurm_vm``: tests/integration/test_slurmd_v1.py).
WELL_KNOWN: tuple[tuple[str, str], ...] = (
    ("/system.slice/*slurmstepd.scope", "slurm"),
    ("/system.slice/*/*slurmstepd.scope", "slurm"),
    ("/slurm", "slurm"),
    ("/slurm_*", "slurm"),
    ("/kubepods.slice", "kubernetes"),
    ("/nomad.slice", "nomad"),
    ("/machine.slice", "machines"),
)
# A subtree's last name → its manager, for a configured path too (a listed Slurm scope is
# still Slurm's: its jobs count what they were allocated); none matching: "config".
MANAGERS: tuple[tuple[str, str], ...] = (
    ("*slurmstepd.scope", "slurm"),
    ("slurm", "slurm"),
    ("slurm_*", "slurm"),
    ("kubepods*", "kubernetes"),
    ("nomad.slice", "nomad"),
    ("machine.slice", "machines"),
)
_KEYS = ("detect", "paths")


@dataclass(frozen=True)
class ForeignRules:
    """``[foreign]``.

    Attributes:
        detect: whether the :data:`WELL_KNOWN` subtrees are looked for.
        paths: the configured path patterns, each normalised to start with ``/``.
    """

    detect: bool = True
    paths: tuple[str, ...] = ()

    def patterns(self) -> tuple[tuple[str, str | None], ...]:
        """What to look for: (path pattern, manager or None: :func:`manager_of` its match),
        the configured paths first (a path both lists is the config's)."""
        known = WELL_KNOWN if self.detect else ()
        return (*((path, None) for path in self.paths), *known)


def manager_of(path: str) -> str:
    """The manager that owns subtree ``path`` by its last name (``/system.slice/slurmstepd.scope``
    → ``slurm``), else ``config``."""
    name = posixpath.basename(path.rstrip("/"))
    return next((manager for pattern, manager in MANAGERS if fnmatch.fnmatchcase(name, pattern)), "config")


def parse_foreign(data: Mapping[str, object], file: str) -> ForeignRules:
    """The ``[foreign]`` table of a parsed config file.

    Raises:
        ConfigError: naming ``foreign.detect`` or ``foreign.paths[i]``: not a boolean; not an
            array of strings; a path that is empty, the cgroup root itself, has ``.``,
            ``..`` or empty components (``//``), or a ``**`` glob.
    """
    table = subtable(data, "foreign", None, file)
    no_unknown_keys(table, _KEYS, "foreign", file)
    detect = table.get("detect", True)
    if not isinstance(detect, bool):
        raise ConfigError(file, "foreign.detect", f"must be true or false, got {detect!r}")
    paths = table.get("paths", [])
    if not isinstance(paths, list):
        raise ConfigError(file, "foreign.paths", f"must be an array of cgroup paths, got {type_name(paths)}")
    return ForeignRules(detect, tuple(_path(value, f"foreign.paths[{i}]", file) for i, value in enumerate(paths)))


def _path(value: object, key: str, file: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(file, key, f"must be a cgroup path like \"/batch.slice\", got {type_name(value)}")
    path = "/" + value.lstrip("/")
    parts = path.split("/")[1:]
    if path == "/" or any(part in ("", ".", "..") for part in parts) or "\0" in path:
        raise ConfigError(file, key, f"must be a cgroup path below the root like \"/batch.slice\" (no empty, "
                                     f"\".\" or \"..\" parts), got {value!r}")
    # A glob matches one level: "**" (any depth, the root itself included) walks the whole tree
    # every poll, or is no pattern pathlib takes at all ("a**").
    if "**" in path:
        raise ConfigError(file, key, f"a glob matches one level (*, ?, [...]): no \"**\", got {value!r}")
    return path
