"""The device hand-over, for every device class (GPUs and any other:
:mod:`governor.core.devices`): a device a task leaves goes to the next task only once no
governed process but its new holder's may still use it (DESIGN.md §3, devices).

The kernel checks device rules at ``open()`` only: a node opened before its task ended, or
passed over a Unix socket (``SCM_RIGHTS``) to a process without that device, keeps working
after the device is handed on. So a device whose task ended *drains*
(:meth:`~governor.core.state.Tasks.draining`): each process in governor's tasks and sessions
(login sessions too) that still holds its node open (``/proc/<pid>/fd``, and the class's own
process list where it has one: NVML's for a GPU it knows) is killed and logged with its owner,
and the device becomes free when a look finds none left. A process of a task that holds
another MIG instance of the same GPU shares the node rightly: it is left alone. Processes
outside governor (``nvidia-persistenced``, a DCGM exporter) are never touched and never keep a
device from draining. The look runs on a thread of its own: ``/proc`` of a busy host is
thousands of directories.

The same look, over every device, is the sweep (:meth:`Handover.sweep`): where the kernel
cannot deny the nodes where sessions start, a session process that opened one before governor
moved it is ended so (:mod:`governor.daemon.gpu_guard`); and each process moved into a session
is looked at so once moved (:meth:`Handover.moved`): it may have started outside the guarded
places.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from governor.cgroups.hierarchy import Hierarchy, Location
from governor.daemon import device_places, inbox
from governor.daemon.journal import Journal
from governor.daemon.policy import Policy
from governor.errors import CgroupError
from governor.core.devices import Inventory
from governor.config.kinds import login_id, task_in
from governor.host import devices as providers
from governor.host.openfiles import PROC, node_holders, owner_uid
from governor.host.processes import end_if
from governor.core.state import GPU, Slot, Task, Tasks

__all__ = ["DRAIN_RETRY_MAX_S", "DRAIN_RETRY_S", "SWEEP_AFTER_HANDOVER_S", "Handover", "Holder"]

log = logging.getLogger("governor.daemon")
# How long a look waits for the last one's killed holders to exit and close their descriptors.
DRAIN_RETRY_S = 0.2
DRAIN_RETRY_MAX_S = 5.0
# An fd in flight at the hand-over (sent over a socket, not received yet) is held by no process:
# one more look this long after a device is handed on finds its receiver.
SWEEP_AFTER_HANDOVER_S = 1.0


@dataclass(frozen=True)
class Holder:
    """A process found holding a draining device's node.

    Attributes:
        pid: the process; uid: its owner (None: gone since).
        nodes: the ``(major, minor)`` of draining nodes it holds.
        where: its cgroup (:class:`~governor.cgroups.hierarchy.Location`).
        listed_only: NVML named it, ``/proc`` showed no descriptor of the node.
    """

    pid: int
    uid: int | None
    nodes: frozenset[tuple[int, int]]
    where: Location
    listed_only: bool = False


class Handover:
    """Draining the devices ended tasks held.

    Args:
        hierarchy: where a process is; policy: the devices governed; tasks: who holds which
            device and which drain; inbox: told once a device is free (settle admits);
            journal: events.
        proc: the proc filesystem (tests pass a fake one).
        listed: (entry, inventory, indices) → the processes its class's own list names per
            device (NVML's for GPUs: :attr:`Provider.listed
            <governor.core.devices.Provider.listed>`), None where it has none.
        kill: ends a holder (default: SIGKILL through a pidfd; tests on fake pids pass a fake).
    """

    def __init__(self, *, hierarchy: Hierarchy, policy: Policy, tasks: Tasks, inbox: inbox.Inbox, journal: Journal,
                 proc: Path = PROC,
                 listed: Callable[[str, Inventory, Sequence[int]], Mapping[int, set[int]] | None] | None = None,
                 kill: Callable[[Holder], None] | None = None):
        self.hierarchy = hierarchy
        self.policy = policy
        self.tasks = tasks
        self.inbox = inbox
        self.journal = journal
        self.proc = proc
        self.listed = listed or _provider_listed
        self.kill = kill or self._kill
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="device-handover")
        self._running: asyncio.Task | None = None  # the drain under way
        self._sweeping: asyncio.Task | None = None  # the sweep under way
        self._later: asyncio.TimerHandle | None = None  # the sweep after the last hand-over
        self._checking: asyncio.Task | None = None  # the look at processes moved into sessions
        self._moved: set[int] = set()  # pids moved into sessions, not looked at yet
        self._ended: set[int] = set()  # pids killed and not yet seen gone

    def start(self) -> None:
        """Drain every device no running task holds, and sweep every device once (the daemon
        starts, its tasks re-adopted): a task that ended while no daemon ran may have left a
        holder, and while none ran no guard kept a session's process from opening a device a
        running task holds (a clean stop takes the guard off: :meth:`GpuGuard.stop
        <governor.daemon.gpu_guard.GpuGuard.stop>`)."""
        if self.policy.devices:
            for entry, inventory in self.policy.devices.items():
                for index in self.tasks.free(entry, len(inventory.devices)):
                    self.tasks.drain((entry, index))
            self.sweep()

    def drain(self) -> None:
        """Look for the holders of every draining device, kill those governor governs, and free
        each device none holds; on the event loop, again every :data:`DRAIN_RETRY_S` until
        every device is free, less often while a holder stays (one look at a time)."""
        if not self.tasks.draining():
            return
        if self._running is None or self._running.done():
            self._running = asyncio.get_running_loop().create_task(self._drain())

    def close(self) -> None:
        """Stop looking (the daemon stops; a device still draining is drained by no one)."""
        for running in (self._running, self._sweeping, self._later, self._checking):
            if running is not None:
                running.cancel()
        self._thread.shutdown(wait=True, cancel_futures=True)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        wait = DRAIN_RETRY_S
        while self.tasks.draining():
            nodes = self._nodes()
            found = await loop.run_in_executor(self._thread, self._find, nodes)
            if self._look(found, nodes):
                return
            await asyncio.sleep(wait)
            wait = min(2 * wait, DRAIN_RETRY_MAX_S)  # a holder that will not die: look less often

    def _nodes(self) -> dict[Slot, tuple[int, int]]:
        """Draining device → its node; a device its class's inventory no longer has is free at once."""
        known = self._every_node()
        for slot in [s for s in self.tasks.draining() if s not in known]:
            self.tasks.drained(slot)
        return {slot: known[slot] for slot in self.tasks.draining()}

    def _every_node(self) -> dict[Slot, tuple[int, int]]:
        """Every governed device → its node, class by class."""
        return {(entry, device.index): (device.major, device.minor)
                for entry, inventory in self.policy.devices.items() for device in inventory.devices}

    def _find(self, nodes: Mapping[Slot, tuple[int, int]], only: set[int] | None = None) -> list[Holder]:
        """(On the hand-over thread) every process holding one of ``nodes`` open; of the pids
        ``only``, where given."""
        held = node_holders(set(nodes.values()), self.proc, pids=only)
        seen = set(held)
        for entry, inventory in self.policy.devices.items():
            indices = [index for (of, index) in nodes if of == entry]
            listed = self.listed(entry, inventory, indices) if indices else None
            for index, pids in (listed or {}).items():
                for pid in pids if only is None else pids & only:
                    held.setdefault(pid, set()).add(nodes[(entry, index)])
        found = []
        for pid, numbers in held.items():
            try:
                where = self.hierarchy.locate(pid)
            except CgroupError:
                continue  # gone
            found.append(Holder(pid, owner_uid(pid, self.proc), frozenset(numbers), where, pid not in seen))
        return found

    def sweep(self) -> None:
        """End every governed process holding a device node its task (or session) was not given
        (one look, on the hand-over thread): where the kernel cannot deny the nodes where
        sessions start (:attr:`~governor.daemon.gpu_guard.GpuGuard.sweeps`), a process that
        opened one before governor moved it into its session is found here."""
        nodes = self._every_node()
        if not nodes:
            return
        if self._sweeping is None or self._sweeping.done():
            self._sweeping = asyncio.get_running_loop().create_task(self._sweep(nodes))

    async def _sweep(self, nodes: dict[Slot, tuple[int, int]]) -> None:
        found = await asyncio.get_running_loop().run_in_executor(self._thread, self._find, nodes)
        self._end_wrong(found, nodes)

    def moved(self, pid: int) -> None:
        """Process ``pid`` was just moved into a session: end it if it holds a device node open
        that its session was not given, as the sweep does. It may have started where no guard
        denies the nodes (a cron job in ``system.slice``, where the guard covers the login
        slices) and opened one before the move. Pids moved meanwhile are looked at together,
        on the hand-over thread."""
        if not self.policy.devices:
            return
        self._moved.add(pid)
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(self._check_moved())

    async def _check_moved(self) -> None:
        while self._moved and self.policy.devices:
            pids, self._moved = self._moved, set()
            nodes = self._every_node()
            found = await asyncio.get_running_loop().run_in_executor(self._thread, self._find, nodes, pids)
            self._end_wrong(found, nodes, pids)

    def _look(self, found: list[Holder], scanned: Mapping[Slot, tuple[int, int]]) -> bool:
        """Kill the governed holders of the draining devices ``scanned`` (device → node) was
        looked for, free those none holds (a device that began draining since waits for the
        next look); True when none drains any more."""
        nodes = {slot: node for slot, node in self._nodes().items() if scanned.get(slot) == node}
        blocked = self._end_wrong(found, nodes)
        freed = [slot for slot in nodes if slot not in blocked]
        for slot in freed:
            ended = self.tasks.draining()[slot]
            self.tasks.drained(slot)
            since = f"since task {ended} ended" if ended else "at the daemon's start"
            self.journal.event(_kind(slot, "free"), f"{_called(slot)} is free: no process holds it {since}")
            if ended and slot[0] == GPU:  # (every device drains once as the daemon starts: nothing to tell)
                self.journal.alert("gpu_drained", f"{_called(slot)} is drained and free again: no process holds it "
                                                  f"{since}", details={"gpu": slot[1], "after_task": ended})
            self.inbox.put(inbox.Handover(_called(slot)))
        if freed:
            self._later = asyncio.get_running_loop().call_later(SWEEP_AFTER_HANDOVER_S, self.sweep)
        return not self.tasks.draining()

    def _end_wrong(self, found: list[Holder], nodes: Mapping[Slot, tuple[int, int]],
                   looked: set[int] | None = None) -> set[Slot]:
        """Kill each governed holder of one of ``nodes`` (device → node) its task was not given
        (``found`` by a look at every process, or at the pids ``looked``); returns the devices
        such a process holds."""
        holding = {holder.pid for holder in found}
        # Those looked at and holding none any more (or gone) may be ended again if they do.
        if looked is None:
            self._ended &= holding
        else:
            self._ended -= looked - holding
        blocked: set[Slot] = set()
        for holder in found:
            governed, task = self._governed(holder.where)
            if not governed:
                continue  # outside governor: a system service (nvidia-persistenced, DCGM)
            mine = self._own_nodes(task)
            wrong = [slot for slot, node in nodes.items() if node in holder.nodes and node not in mine]
            if not wrong:
                continue
            blocked.update(wrong)
            if holder.pid not in self._ended:
                self._end(holder, task, wrong)
        return blocked

    def _governed(self, where: Location) -> tuple[bool, Task | None]:
        """Whether a process there is governor's (in its root, or in a login session it
        governs), and the task or session it runs in, if known."""
        if where.rel is not None:
            found = task_in(where.rel) if where.rel else None
            return True, self.tasks.get(found[1]) if found else None
        if where.login_uid is not None:
            login = self.tasks.get(login_id(where.login_uid))
            return login is not None, login
        return False, None

    def _own_nodes(self, task: Task | None) -> set[tuple[int, int]]:
        """The nodes of the devices ``task`` holds (a MIG instance shares its GPU's node)."""
        if task is None or not task.devices:
            return set()
        every = self._every_node()
        return {every[slot] for slot in task.held() if slot in every}

    def _end(self, holder: Holder, task: Task | None, slots: list[Slot]) -> None:
        """Kill ``holder`` (through a pidfd, once it is sure to be the process that holds the
        node: a pid may be reused) and log it."""
        self._ended.add(holder.pid)
        who = f"uid {holder.uid}" if holder.uid is not None else "an unknown user"
        if task is not None:
            who = f"user {task.user}" if task.uid == holder.uid else who
        where = task.label if task is not None else "governor's cgroup " + (holder.where.rel or "?")
        names = ", ".join(map(_called, slots))
        try:
            self.kill(holder)
        except OSError as error:
            self.journal.event("error", f"cannot end a process ({who}, {where}) that holds {names} open: "
                                        f"{error.strerror}", logging.ERROR, detail=f"pid {holder.pid}")
            return
        draining = self.tasks.draining()
        ended = ", ".join(f"task {draining[slot]}" for slot in slots if draining.get(slot))
        if ended:
            why = f"after {ended} ended"
        elif any(slot in draining for slot in slots):
            why = "after its task ended, before the daemon started"
        else:
            why = f"though {'it' if task is None else task.label} was not given it"
        self.journal.event(_kind(slots[0], "holder_ended"),
                           f"a process ({who}, {where}) ended: it held {names} open {why}",
                           logging.WARNING, detail=f"pid {holder.pid}")

    def _kill(self, holder: Holder) -> None:
        """SIGKILL ``holder`` through a pidfd, once a last look after opening it (:meth:`_still_wrong`)
        shows it is still a governed process holding a node it was not given.

        Raises:
            OSError: the process cannot be signalled (one gone is not an error: nothing is
                raised then).
        """
        end_if(holder.pid, lambda: self._still_wrong(holder))

    def _still_wrong(self, holder: Holder) -> bool:
        """Whether the process now at ``holder.pid`` is governed (where it is now, not where it
        was found: the pid may have been reused since) and holds one of ``holder.nodes`` its
        task or session was not given. Called once its pidfd is open: from then on the pid
        names that process, whatever the look finds is about it."""
        try:
            where = self.hierarchy.locate(holder.pid)
        except CgroupError:
            return False  # gone
        governed, task = self._governed(where)
        wrong = holder.nodes - self._own_nodes(task)
        if not governed or not wrong:
            return False  # another process now (outside governor), or one given that device
        # Only NVML named it: /proc cannot show its descriptor (another mount namespace's path).
        return holder.listed_only or bool(node_holders(wrong, self.proc, pids=[holder.pid]))


def _kind(slot: Slot, what: str) -> str:
    """The journal's kind of an event about a device: ``gpu_free`` for a GPU, as the docs and
    alert rules name it; ``device_free`` for a device of any other class (its message names it)."""
    return f"{'gpu' if slot[0] == GPU else 'device'}_{what}"


def _called(slot: Slot) -> str:
    """How messages name a device: ``GPU 0``."""
    return f"{device_places.named(slot[0])[1]} {slot[1]}"


def _provider_listed(entry: str, inventory: Inventory, indices: Sequence[int]) -> Mapping[int, set[int]] | None:
    """What class ``entry``'s provider lists of the processes using ``indices``
    (:attr:`Provider.listed <governor.core.devices.Provider.listed>`); None where it lists none."""
    provider = next((p for p in providers.providers() if p.entry == entry), None)
    return provider.listed(inventory, indices) if provider is not None and provider.listed is not None else None
