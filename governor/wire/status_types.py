"""The status object as types: what the daemon builds (:mod:`governor.wire.status`), what
``status``, ``watch``, ``top`` and the metrics read. Schema and words in docs/operator.md and
:mod:`governor.cli.status_view`; :mod:`governor.wire.status_json` is its one encoder (to the
JSON the socket carries) and decoder (from it).

Each field is the JSON key of the same name (``lambda_``: ``lambda``; a field whose metadata
says ``spread`` holds the keys ending so, written in its place: a queue item's ``waits``). A field's default is
what an older daemon, which did not send it, means by leaving it out; a field whose metadata
says ``omit`` is left out of the JSON when it holds that value (a key the daemon sends only
with a feature on: ``gpus``, ``daemon.gpu_guard``…). Amounts are base units (cores, bytes,
bytes/s), times Unix seconds; a resource vector is resource → amount, the numbers as the daemon
wrote them (an int stays an int). Pure: no I/O; ``governor run``'s launch never imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["DaemonInfo", "Event", "Filling", "FillingError", "ForeignTenant", "Gpu", "GpuGuard", "Group", "Psi",
           "QueueItem", "Status", "TaskEntry", "TaskFields"]

Vector = Mapping[str, float]  # resource → amount (cores, bytes, bytes/s, whole devices)
# resource (cpu, memory, io) → kind (some, full) → avg10 (percent of the last 10 s), total (seconds)
Stall = Mapping[str, Mapping[str, Mapping[str, float]]]


def empty(**metadata) -> Mapping:
    """A mapping field's default: empty."""
    return field(default_factory=dict, metadata=metadata)


def _omit(value: object) -> dict:
    """A field's metadata: left out of the JSON when it holds ``value``."""
    return {"omit": value}


@dataclass(frozen=True, slots=True)
class TaskFields:
    """What every view of a task shares (:meth:`governor.core.state.Task.to_json`): a status's
    task entry, a ``ps`` row and an ended record (:mod:`governor.wire.ps_types`) each begin so.
    ``pid`` None and ``command`` empty: another user's task (:mod:`governor.wire.visibility`)."""

    id: str
    name: str | None = None
    group: str | None = None
    user: str | None = None
    uid: int | None = None
    session: bool = False
    pid: int | None = None
    command: tuple[str, ...] = ()
    command_cut: int = 0
    started: float | None = None
    time_limit: float | None = None
    demand: Vector = empty()
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TaskEntry(TaskFields):
    """A running task (or a user's session) in its group: what it declared (``demand``: its
    cap), the limits the kernel accepted for its cgroup (file → value), what it ``reserved``
    in the admission count, its measured ``usage``, throttling signs (``pressure``) and
    ``stall`` (PSI). ``private`` True: another user's task (:mod:`governor.wire.visibility`)."""

    limits: Mapping[str, object] = empty()
    reserved: Vector = empty()
    usage: Vector = empty()
    pressure: Vector = empty()
    stall: Stall = empty()
    private: bool = field(default=False, metadata=_omit(False))

    @property
    def who(self) -> object:
        """Its user's name, else its uid, else ``?``."""
        return self.user if self.user is not None else self.uid if self.uid is not None else "?"


@dataclass(frozen=True, slots=True)
class Group:
    """A group: its DRF allocation (``weight``, ``allocation``, ``dominant_resources`` and
    ``share``, ``stop``), ``floor``, ``members``, ``idle`` (no task), its cap (``demand``),
    ``guarantee``, ``reserved``, ``lambda_`` (tasks-worth granted), the limits in force on its
    cgroup, ``usage``, ``borrowed``, ``pressure``, ``stall`` and ``tasks``. ``internal``: a
    group of a tree showing its subtree's sums; ``accounts``: the row ``"*"`` standing for that
    many idle accounts; ``parent``: the group it nests under; ``effective_weight`` and
    ``past_use`` (capacity-seconds) with ``[fairshare]``."""

    weight: float = 1.0
    allocation: Vector = empty()
    dominant_resources: tuple[str, ...] = ()
    dominant_share: float = 0.0
    stop: str = ""
    internal: bool = field(default=False, metadata=_omit(False))
    floor: float | None = None
    members: tuple[str, ...] = ()
    idle: bool = False
    demand: Vector = empty()
    guarantee: Vector = empty()
    reserved: Vector = empty()
    lambda_: float = 0.0
    limits: Mapping[str, object] = empty()
    usage: Vector = empty()
    borrowed: Vector = empty()
    pressure: Vector = empty()
    stall: Stall = empty()
    tasks: tuple[TaskEntry, ...] = ()
    accounts: int | None = field(default=None, metadata=_omit(None))
    parent: str | None = None
    effective_weight: float | None = field(default=None, metadata=_omit(None))
    past_use: float | None = field(default=None, metadata=_omit(None))


@dataclass(frozen=True, slots=True)
class QueueItem:
    """A task waiting in the admission queue (:func:`governor.core.queue.queue_view`): who,
    what it declared, since when, its ``position`` (1: next), ``waits`` (each admitted
    resource's ``<queue>waiting_for`` and ``<queue>held_by`` keys, as sent: ``waiting_for``
    bytes of memory, ``gpus_waiting_for``…), the task holding the reservation
    (``reserved_for``), the limit holding it back (``limited_by``) and ``reason`` in words."""

    task: str
    group: str | None = None
    user: str | None = None
    uid: int | None = None
    command: tuple[str, ...] = ()
    demand: Vector = empty()
    queued_at: float | None = None
    position: int | None = None
    waits: Mapping[str, object] = empty(spread=("waiting_for", "held_by"))
    reserved_for: str | None = None
    limited_by: str | None = None
    reason: str | None = None
    private: bool = field(default=False, metadata=_omit(False))

    @property
    def who(self) -> object:
        """Its user's name, else its uid, else ``?``."""
        return self.user if self.user is not None else self.uid if self.uid is not None else "?"

    def waiting_for(self, queue: str) -> object:
        """``<queue>waiting_for`` (``queue`` a resource's prefix, ``""`` for memory), or None."""
        return self.waits.get(queue + "waiting_for")


@dataclass(frozen=True, slots=True)
class GpuGuard:
    """Where GPU nodes are denied outside governor's tasks: ``kind`` (``sessions``, ``host``,
    ``tasks``), the cgroup dirs ``guarded``, ``notes`` in sentences."""

    kind: str = "tasks"
    guarded: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    """The daemon: ``pid``, ``started``, its cgroup hierarchy (``cgroup_mode`` v1/v2,
    ``cgroup_root``), ``config`` (path), ``io_sharing`` (device → ``io.weight``,
    ``io.bfq.weight`` or ``io.max``), ``cpu_saturated`` (every group held to its CPU
    guarantee), ``settle_generation``; with GPUs governed ``gpu_guard``, with systemd units
    protected ``unit_protection`` (unit → property → value), with ``[notify]`` its runs by
    outcome (``notify``)."""

    pid: int | None = None
    started: float | None = None
    cgroup_mode: str | None = None
    cgroup_root: str | None = None
    config: str | None = None
    io_sharing: Mapping[str, str] = empty()
    cpu_saturated: bool = False
    settle_generation: int | None = None
    gpu_guard: GpuGuard | None = field(default=None, metadata=_omit(None))
    unit_protection: Mapping[str, Mapping[str, str]] | None = field(default=None, metadata=_omit(None))
    notify: Mapping[str, int] | None = field(default=None, metadata=_omit(None))


@dataclass(frozen=True, slots=True)
class FillingError:
    """A refill whose filling diverged: when, its trigger, the error in words."""

    at: float | None = None
    trigger: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Filling:
    """The last refill: when (``at``, None: never), its ``trigger``, ``duration_ms``,
    ``files_written``, ``delay_ms`` (from its event to the last write), ``failures`` (refills
    that diverged since the start), ``error`` (while the last one did)."""

    at: float | None = None
    trigger: str | None = None
    duration_ms: float = 0.0
    files_written: int = 0
    delay_ms: float | None = field(default=None, metadata=_omit(None))
    failures: int = 0
    error: FillingError | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """A recent event: ``at``, ``kind`` (``task_started``, ``refill``, ``error``…), ``message``."""

    at: float | None = None
    kind: str | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class ForeignTenant:
    """A foreign tenant (Slurm, a container manager…): its cgroup ``path``, ``manager``, what
    it ``held`` (subtracted from the capacity) and on what ``basis`` (allocated, used)."""

    path: str | None = None
    manager: str | None = None
    held: Vector = empty()
    basis: str | None = None


@dataclass(frozen=True, slots=True)
class Gpu:
    """A governed GPU (:meth:`governor.core.gpus.Gpu.to_json`) and who holds it (``task``,
    ``group``, ``user``; None: free); ``draining``: its task ended and a process may still
    hold its node."""

    index: int
    node: str | None = None
    uuid: str | None = None
    name: str | None = None
    mig_parent: int | None = field(default=None, metadata=_omit(None))
    task: str | None = None
    group: str | None = None
    user: str | None = None
    draining: bool = False


@dataclass(frozen=True, slots=True)
class Device:
    """A governed device of a class other than GPUs (:class:`governor.core.devices.Device`) and
    who holds it (``task``, ``group``, ``user``; None: free); ``draining``: its task ended and a
    process may still hold its node."""

    index: int
    node: str | None = None
    task: str | None = None
    group: str | None = None
    user: str | None = None
    draining: bool = False


@dataclass(frozen=True, slots=True)
class Psi:
    """Whether the host measures stalls (``available``; None: an older daemon did not say) and,
    where not, ``why``."""

    available: bool | None = None
    why: str | None = None


@dataclass(frozen=True, slots=True)
class Status:
    """The status: the daemon, what governor divides (``capacity``; ``caps``: each count's
    root cap, never divided; ``host_capacity``: before the ``foreign`` tenants' holdings),
    the sums of the groups' ``guaranteed``, ``reserved`` and ``used``, the last ``filling``,
    ``fair_level`` (the highest dominant share per unit of weight), recent ``events``, the
    ``groups`` by name, the admission ``queue`` in order, ``psi``, with GPUs governed
    ``gpus``, and with devices of another class governed ``devices``: each such class's
    registry entry → its devices."""

    daemon: DaemonInfo = DaemonInfo()
    capacity: Vector = empty()
    caps: Mapping[str, int] = empty()
    host_capacity: Vector = empty()
    foreign: Mapping[str, ForeignTenant] = empty()
    guaranteed: Vector = empty()
    reserved: Vector = empty()
    used: Vector = empty()
    filling: Filling = Filling()
    fair_level: float = 0.0
    events: tuple[Event, ...] = ()
    groups: Mapping[str, Group] = empty()
    queue: tuple[QueueItem, ...] = ()
    psi: Psi = Psi()
    gpus: tuple[Gpu, ...] | None = field(default=None, metadata=_omit(None))
    devices: Mapping[str, tuple[Device, ...]] | None = field(default=None, metadata=_omit(None))

    def resources(self) -> list[str]:
        """Resources in capacity order, then any others the groups mention, first seen first."""
        seen = dict.fromkeys(self.capacity)
        for group in self.groups.values():
            for vector in (group.demand, group.allocation, group.usage, group.borrowed):
                seen.update(dict.fromkeys(vector))
        return list(seen)
