"""Foreign subtrees (another manager's: Slurm, Kubernetes, …), found and read, never written.

A subtree is named as ``/proc/<pid>/cgroup`` spells it (``/kubepods.slice``), the same in every
hierarchy (v1: as systemd lays them out). It is found by globbing its pattern in every
hierarchy looked in (v2's; on v1 each one governor's driver writes, and freezer), since
another manager may make it in some and not others (Slurm's cgroup/v1 plugin: cpuset, memory,
cpuacct, devices and freezer, never cpu), and read in each hierarchy that has it. Slurm's scope
is read job by job (``job_<N>``, v1 ``uid_<N>/job_<N>``): what each job was allocated
(:func:`read_allocated`); any other subtree, what it uses (:func:`read_used`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from governor.cgroups import detect
from governor.cgroups.errors import CgroupReadError
from governor.cgroups.files import read_file
from governor.cgroups.parse import parse_cpu_list, parse_cpu_max, parse_flat_keyed, parse_int, parse_max

__all__ = ["ForeignPlaces", "ForeignReading", "TRACKING", "V1_UNLIMITED_BYTES"]

# v1's memory.limit_in_bytes when unset: LONG_MAX rounded down to a page; anything this large
# bounds nothing.
V1_UNLIMITED_BYTES = 1 << 62
# v1 hierarchies governor never writes but looks in all the same: where another manager tracks
# its processes (Slurm's proctrack/cgroup, systemd-less container runtimes).
TRACKING = ("freezer",)
# Where a Slurm scope's jobs are, below it: cgroup/v2's ``slurmstepd.scope/job_<N>``, and
# cgroup/v1's ``/slurm/uid_<N>/job_<N>``.
_JOBS = ("job_*", "uid_*/job_*")


@dataclass(frozen=True)
class ForeignReading:
    """One read of a foreign subtree.

    Attributes:
        cpu_usage_usec: CPU time its processes used, cumulative, µs (None: unreadable here).
        memory_bytes: memory charged to it now, bytes (None: unreadable here).
        allocated: resource (``cpu`` cores, ``memory`` bytes) → the sum of its jobs'
            allocations, for each resource every job bounds (a Slurm scope; empty otherwise).
        jobs: the jobs read (Slurm's ``job_<N>``), 0 for another manager's subtree.
    """

    cpu_usage_usec: int | None
    memory_bytes: int | None
    allocated: dict[str, float]
    jobs: int = 0


@dataclass(frozen=True)
class ForeignPlaces:
    """Where the hierarchies are mounted: ``mounts``, hierarchy key (``""``: v2; else a v1
    controller, as ``/proc/<pid>/cgroup`` names its line) → (mount point, the cgroup path the
    mount shows at its top: ``/`` but in a cgroup namespace or a bind mount); ``finders``: the
    keys whose trees are globbed, one per hierarchy (co-mounted ``cpu,cpuacct``: one)."""

    mounts: dict[str, tuple[Path, str]]
    finders: tuple[str, ...]

    @classmethod
    def of_host(cls, mode: str, controllers: Iterable[str] = (), proc: Path = detect.PROC) -> ForeignPlaces:
        """This host's, for driver ``mode``: ``"v2"``, the unified hierarchy; ``"v1"``, the
        hierarchy of each of ``controllers`` (those governor's driver writes:
        :attr:`Hierarchy.hierarchies <governor.cgroups.hierarchy.Hierarchy.hierarchies>`) and
        of :data:`TRACKING`, each where mounted.

        Raises:
            CgroupReadError: ``/proc/self/mountinfo`` cannot be read.
        """
        mounts = detect.parse_mountinfo(read_file(proc / "self", "mountinfo"))
        if mode == "v2":
            v2 = next((m for m in mounts if m.fstype == "cgroup2"), None)
            return cls({"": (v2.mount_point, v2.root)} if v2 else {}, ("",) if v2 else ())
        wanted = {*controllers, *TRACKING}
        found = {c: (m.mount_point, m.root) for m in mounts if m.fstype == "cgroup" for c in sorted(m.controllers)
                 if c in wanted}
        finders = {}
        for key, (mount, _) in sorted(found.items()):
            finders.setdefault(mount, key)  # one key per hierarchy: each tree globbed once
        return cls(found, tuple(finders.values()))

    def directory(self, key: str, path: str) -> Path | None:
        """Where cgroup ``path`` is in hierarchy ``key``, or None (not mounted, or above the mount)."""
        if key not in self.mounts:
            return None
        mount, top = self.mounts[key]
        top = top.rstrip("/")
        if top and not (path == top or path.startswith(top + "/")):
            return None
        return mount / path[len(top):].lstrip("/")

    def exists(self, path: str) -> bool:
        """Whether cgroup ``path`` is there in some hierarchy that finds the subtrees."""
        return any(self._existing(key, path) is not None for key in self.finders)

    def find(self, pattern: str) -> list[str]:
        """The cgroup paths that glob ``pattern`` (``/system.slice/*slurmstepd.scope``) matches
        in some hierarchy that finds the subtrees, sorted; none where none is mounted."""
        found: set[str] = set()
        for key in self.finders:
            mount, top = self.mounts[key]
            matched = mount.glob(pattern.lstrip("/")) if pattern.strip("/") else iter(())
            found.update("/" + "/".join(p for p in (top.strip("/"), str(d.relative_to(mount))) if p)
                         for d in matched if d.is_dir())
        return sorted(found)

    def read_used(self, path: str) -> ForeignReading:
        """What subtree ``path`` uses: its CPU counter (v2 ``cpu.stat`` ``usage_usec``; v1
        ``cpuacct.usage``, ns) and its memory (v2 ``memory.current``; v1
        ``memory.usage_in_bytes``), each None where its hierarchy lacks the subtree.

        Raises:
            CgroupReadError: a file cannot be read (``vanished``: the subtree is gone meanwhile).
        """
        return ForeignReading(self._cpu_usage_usec(path), self._memory_bytes(path), {})

    def read_allocated(self, path: str) -> ForeignReading:
        """Slurm's scope ``path``: what it uses (:meth:`read_used`), and what its jobs
        (``job_<N>`` below it; cgroup/v1's ``uid_<N>/job_<N>``) were allocated, each read in
        whichever hierarchy bounds it: CPU, the job's ``cpu.max`` (v1 ``cpu.cfs_quota_us``) in
        cores, else its CPU set (``cpuset.cpus.effective``, v1 ``cpuset.effective_cpus``)
        counted where it is narrower than the scope's; memory, its ``memory.max`` (v1
        ``memory.limit_in_bytes``). A resource some job leaves unbounded is left out: the
        scope's use counts for it.

        Raises:
            CgroupReadError: a file cannot be read (a job ending meanwhile is skipped).
        """
        used = self.read_used(path)
        jobs = sorted({job for layout in _JOBS for job in self.find(f"{path.rstrip('/')}/{layout}")})
        allocated: dict[str, float] = {"cpu": 0.0, "memory": 0.0}
        read = 0
        for job in jobs:
            try:
                cpu, memory = self._cpu_allocated(job, path), self._memory_allocated(job)
            except CgroupReadError as error:
                if error.vanished:
                    continue  # the job ended between the glob and the read
                raise
            read += 1
            for resource, amount in (("cpu", cpu), ("memory", memory)):
                if amount is None:
                    allocated.pop(resource, None)
                elif resource in allocated:
                    allocated[resource] += amount
        return ForeignReading(used.cpu_usage_usec, used.memory_bytes, allocated, read)

    # ── files, v2 or v1 ────────────────────────────────────────────────────────────────

    def _cpu_usage_usec(self, path: str) -> int | None:
        if "" in self.mounts:
            return parse_flat_keyed(read_file(self.directory("", path), "cpu.stat"))["usage_usec"]
        directory = self._existing("cpuacct", path)
        return None if directory is None else parse_int(read_file(directory, "cpuacct.usage")) // 1000

    def _memory_bytes(self, path: str) -> int | None:
        if "" in self.mounts:
            directory = self.directory("", path)
            return parse_int(read_file(directory, "memory.current")) if (directory / "memory.current").exists() else None
        directory = self._existing("memory", path)
        return None if directory is None else parse_int(read_file(directory, "memory.usage_in_bytes"))

    def _cpu_allocated(self, path: str, scope: str) -> float | None:
        if "" in self.mounts:
            directory = self.directory("", path)
            if (directory / "cpu.max").exists():
                quota, period = parse_cpu_max(read_file(directory, "cpu.max"))
                if quota is not None:
                    return quota / period
            return self._cpu_set("", path, scope, "cpuset.cpus.effective")
        directory = self._existing("cpu", path)
        if directory is not None:
            quota = parse_int(read_file(directory, "cpu.cfs_quota_us"))
            if quota > 0:
                return quota / parse_int(read_file(directory, "cpu.cfs_period_us"))
        return self._cpu_set("cpuset", path, scope, "cpuset.effective_cpus")

    def _cpu_set(self, key: str, path: str, scope: str, name: str) -> float | None:
        """A job's CPUs counted, or None where its set is its scope's: it bounds nothing (a
        job Slurm does not confine to cores still has every CPU in its set). The scope's, not
        the parent's: cgroup/v1's ``uid_<N>`` holds the union of that user's jobs' CPUs, the
        same set as the job's when it is the user's only one."""
        directory, above = self._existing(key, path), self._existing(key, scope)
        if directory is None or not (directory / name).exists():
            return None
        cpus = parse_cpu_list(read_file(directory, name))
        within = parse_cpu_list(read_file(above, name)) if above is not None else None
        return None if cpus == within else float(len(cpus))

    def _memory_allocated(self, path: str) -> float | None:
        if "" in self.mounts:
            directory = self.directory("", path)
            if not (directory / "memory.max").exists():
                return None
            limit = parse_max(read_file(directory, "memory.max"))
            return None if limit is None else float(limit)
        directory = self._existing("memory", path)
        if directory is None:
            return None
        limit = parse_int(read_file(directory, "memory.limit_in_bytes"))
        return None if limit >= V1_UNLIMITED_BYTES else float(limit)

    def _existing(self, key: str, path: str) -> Path | None:
        directory = self.directory(key, path)
        return directory if directory is not None and directory.is_dir() else None
