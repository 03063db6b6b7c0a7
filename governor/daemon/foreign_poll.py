"""Foreign tenants (DESIGN.md §8): the subtrees other managers own (``[foreign]``), found and
read every :data:`FOREIGN_POLL_S` on a thread of their own, what they hold subtracted from
the capacity (:meth:`Policy.hold_foreign <governor.daemon.policy.Policy.hold_foreign>`), and a
refill asked when it moved by more than noise (:func:`governor.core.foreign_capacity.moved`): one per
change, however many tenants changed at once.

A poll, not inotify: a subtree's ``cgroup.events`` says when it empties, not when a job's
limits change or its use grows, and a Slurm scope gains and loses jobs below it; a read of a
few files per tenant every few seconds costs nothing next to the sampler's.

Governor never writes in a foreign subtree and never moves a process in or out of one
(:meth:`Foreign.holds`, asked before every move: :class:`~governor.daemon.tree.Tree`), nor
counts one as a session's (:class:`~governor.daemon.sessions.Sessions`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Mapping

from governor.cgroups.foreign_subtrees import ForeignPlaces, ForeignReading
from governor.config.foreign_rules import manager_of
from governor.core.foreign_capacity import Tenant, held, moved, total
from governor.daemon.inbox import ForeignChange, Inbox
from governor.daemon.journal import Journal, vector
from governor.daemon.policy import Policy
from governor.errors import CgroupError, RequestError

__all__ = ["FOREIGN_POLL_S", "Foreign", "refusal"]

log = logging.getLogger("governor.daemon")
# How often the foreign subtrees are looked for and read: a Slurm job's arrival shrinks the
# capacity within this long.
FOREIGN_POLL_S = 2.0


def refusal(pid: int, subtree: str) -> RequestError:
    """Why process ``pid``, in foreign ``subtree``, is not moved: ``bad_request``."""
    return RequestError("bad_request", f"process {pid} is in {subtree}, a subtree another manager owns ([foreign]): "
                                       "governor never moves a process out of it")


class Foreign:
    """The foreign tenants and what they hold.

    Args:
        places: where the host's hierarchies are (:meth:`ForeignPlaces.of_host
            <governor.cgroups.foreign_subtrees.ForeignPlaces.of_host>`); None: none is looked for (a
            daemon on a fake hierarchy).
        own_root: governor's root as ``/proc/<pid>/cgroup`` spells it (never foreign, nor is
            a subtree holding it), or None.
        policy: the config in force (``[foreign]``) and the capacity it divides; inbox: told
            when what the tenants hold moved; journal: tenants that come and go.

    Attributes:
        tenants: name → :class:`~governor.core.foreign_capacity.Tenant`, as last read.
    """

    def __init__(self, *, places: ForeignPlaces | None, own_root: str | None, policy: Policy, inbox: Inbox,
                 journal: Journal):
        self.places = places
        self.own_root = own_root
        self.policy = policy
        self.inbox = inbox
        self.journal = journal
        self.tenants: dict[str, Tenant] = {}
        self._paths: tuple[str, ...] = ()  # the tenants' paths, for holds()
        self._counters: dict[str, tuple[int, float]] = {}  # path → CPU counter (µs), when read (monotonic s)
        self._overlapping: set[str] = set()  # matched paths that hold governor's root or lie in it
        self._reader = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="foreign")

    def holds(self, paths: Mapping[str, str] | None) -> str | None:
        """The foreign subtree that holds a process whose ``/proc/<pid>/cgroup`` is ``paths``,
        or None. Every hierarchy looked in tells (:attr:`ForeignPlaces.mounts
        <governor.cgroups.foreign_subtrees.ForeignPlaces.mounts>`), not only the one governor
        locates a process by: Slurm's cgroup/v1 plugin holds a job in cpuset and memory, never
        in cpu, and a process in any of its subtrees is Slurm's."""
        if not paths or not self._paths:
            return None
        for key in self.places.mounts:
            where = paths.get(key)
            if where is not None:
                found = next((path for path in self._paths if where == path or where.startswith(path + "/")), None)
                if found is not None:
                    return found
        return None

    def poll_now(self) -> None:
        """Find and read the tenants on this thread (the start, before any process is moved or re-adopted)."""
        self._take(self._read())

    async def poll(self) -> None:
        """Find and read the tenants on the reader thread; refill if what they hold moved."""
        read = await asyncio.get_running_loop().run_in_executor(self._reader, self._read)
        self._take(read)

    def close(self) -> None:
        self._reader.shutdown(wait=False, cancel_futures=True)

    # ── reading ─────────────────────────────────────────────────────────────────────────

    def _read(self) -> tuple[float, dict[str, tuple[str, ForeignReading]]]:
        """(On the reader thread) when it read (monotonic s), and path → (manager,
        :class:`ForeignReading`) of every tenant."""
        at = time.monotonic()
        if self.places is None:
            return at, {}
        found: dict[str, str] = {}
        for pattern, manager in self.policy.config.foreign.patterns():
            for path in self.places.find(pattern):
                if path in found:
                    continue
                if self._overlaps_own(path):
                    if path not in self._overlapping:  # said once: it is looked for every poll
                        self._overlapping.add(path)
                        log.warning("foreign subtree %s holds or is inside governor's root %s: not foreign",
                                    path, self.own_root)
                    continue
                found[path] = manager or manager_of(path)
        # One inside another found (``/slurm`` and ``/slurm/*`` both listed) is part of it:
        # counted twice, it would shrink the capacity twice.
        found = {path: manager for path, manager in found.items()
                 if not any(path.startswith(outer + "/") for outer in found)}
        read = {}
        for path, manager in found.items():
            try:
                reading = self.places.read_allocated(path) if manager == "slurm" else self.places.read_used(path)
            except CgroupError as error:
                if not self.places.exists(path):
                    continue  # gone between the glob and the read
                # Still foreign, what it holds unknown (a controller off there): its processes
                # are left alone all the same.
                if not any(tenant.path == path for tenant in self.tenants.values()):  # once, not every poll
                    log.warning("cannot read foreign subtree %s: %s", path, error)
                reading = ForeignReading(None, None, {})
            read[path] = (manager, reading)
        return at, read

    def _overlaps_own(self, path: str) -> bool:
        own = self.own_root
        return own is not None and (own == path or own.startswith(path + "/") or path.startswith(own + "/"))

    def _take(self, taken: tuple[float, dict[str, tuple[str, ForeignReading]]]) -> None:
        now, read = taken
        before = self.tenants
        tenants: dict[str, Tenant] = {}
        counters: dict[str, tuple[int, float]] = {}
        names = [path.rstrip("/").rpartition("/")[2] for path in read]
        for (path, (manager, reading)), name in zip(read.items(), names):
            last = self._counters.get(path)
            usec = reading.cpu_usage_usec
            if usec is not None:
                counters[path] = (usec, now)
            pair = (last[0], usec) if last is not None and usec is not None else None
            amounts, basis = held(reading.allocated, pair, reading.memory_bytes, now - last[1] if last else 0.0)
            tenants[path if names.count(name) > 1 else name] = Tenant(name, path, manager, amounts, basis)
        self._counters = counters
        self._paths = tuple(tenant.path for tenant in tenants.values())
        self.tenants = tenants
        if tenants != before:
            self.journal.changed()  # status shows what they hold now
        for name in tenants.keys() - before.keys():
            tenant = tenants[name]
            self.journal.event("foreign", f"foreign subtree {tenant.path} ({tenant.manager}'s) found: holds "
                                          f"{vector(tenant.held)} ({tenant.basis})")
        for name in before.keys() - tenants.keys():
            self.journal.event("foreign", f"foreign subtree {before[name].path} is gone")
        # Against what the capacity was last cut by, not the last poll: a slow drift adds up.
        now_held = total(tenants.values())
        if moved(self.policy.foreign_held, now_held) or tenants.keys() != before.keys():
            self.policy.hold_foreign(now_held)
            self.inbox.put(ForeignChange(vector(now_held) if now_held else "nothing"))
