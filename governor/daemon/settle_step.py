"""Settle's pure step: a snapshot of the daemon in, the effects of one settle out (DESIGN.md
§4). No I/O and no clock: :class:`~governor.daemon.settle.Settle` takes the snapshot, and
carries the effects out through the cgroup tree and the refill."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from governor.config import resources
from governor.config.load import Config
from governor.core.admission import Admission, Waiting, admit
from governor.core.devices import Inventory
from governor.core.headroom import guarantees
from governor.core.quotas import quotas
from governor.core.state import Task, Tasks
from governor.core.vocabulary import reserved_by_group
from governor.daemon import device_places

__all__ = ["Effects", "Snapshot", "step"]


@dataclass(frozen=True)
class Snapshot:
    """What one settle decides on.

    Attributes:
        config: the config in force; capacity: the host's (cores, bytes, bytes/s, devices);
            devices: each governed device class's entry → its inventory (none: no device is
            governed).
        weight: group → what admission weighs it with (its effective weight).
        tasks: the running tasks (read, never changed); usage: cgroup → its measured use (a
            session holds what it uses).
        waiting: the queued tasks not decided yet, in arrival order.
        cpu_saturated: whether the groups are held to their CPU guarantees.
        refill: whether the events settled need a refill.
        now: unix seconds: a task that starts starts then.
    """

    config: Config
    capacity: Mapping[str, float]
    devices: Mapping[str, Inventory]
    weight: Callable[[str], float]
    tasks: Tasks
    usage: Mapping[str, Mapping[str, float]]
    waiting: Sequence[Task]
    cpu_saturated: bool
    refill: bool
    now: float


@dataclass(frozen=True)
class Effects:
    """What one settle does.

    Attributes:
        admission: the admission (:class:`~governor.core.admission.Admission`), for the
            queue's views.
        starts: the admitted tasks as they start: their place, their devices (free ones of
            each class, in index order) and their start time set; their cgroups are to be made, limited and
            joined, in this order.
        release: whether the groups are no longer to be held to their CPU guarantees (a task
            starts: the hold was measured without it).
        refill: whether the groups are to be refilled once the cgroups are made.
    """

    admission: Admission
    starts: tuple[Task, ...]
    release: bool
    refill: bool


def step(snapshot: Snapshot) -> Effects:
    """Admit the waiting tasks that fit (discrete DRF on memory, the quotas and guarantees of
    ``snapshot.config``), and say how they start. A draining device is not free yet: it goes
    to no one until its last holder is gone."""
    tasks, config = snapshot.tasks, snapshot.config
    waiting = [Waiting(t.id, t.group, t.demand, t.user) for t in snapshot.waiting]
    weights = {w.group: snapshot.weight(w.group) for w in waiting}
    # Admitted resources are counted as reserved (the figure every view shows), not as declared.
    held = reserved_by_group(tasks, snapshot.usage)
    counted = {entry.name for entry in resources.admitted()}
    running = {g: {**{r: a for r, a in d.items() if r not in counted}, **held.get(g, {})}
               for g, d in tasks.demands().items()}
    capacity = dict(snapshot.capacity)
    for entry, _ in tasks.draining():
        if entry in capacity:  # (a class no longer governed drains nothing: the hand-over frees it)
            capacity[entry] -= 1
    admission = admit(capacity, running, tasks.counts(), weights, waiting, quotas(config, tasks, waiting),
                      guarantees(config))
    by_id = {task.id: task for task in snapshot.waiting}
    free = {entry: tasks.free(entry, round(snapshot.capacity.get(entry, 0))) for entry in snapshot.devices}
    starts = []
    for task_id in admission.admitted:  # where its group is now (a reload may have moved an empty group)
        task = by_id[task_id]
        devices, identities = {}, {}
        for entry, inventory in snapshot.devices.items():
            wanted = round(task.demand.get(entry, 0))  # admission counted them free
            if wanted:
                devices[entry], free[entry] = tuple(free[entry][:wanted]), free[entry][wanted:]
                identities[entry] = device_places.identities(inventory, devices[entry])
        starts.append(replace(task, started=snapshot.now, place=config.place(task.group), devices=devices,
                              device_identities=identities))
    release = bool(starts) and snapshot.cpu_saturated
    return Effects(admission, tuple(starts), release, snapshot.refill or release)
