"""Tasks waiting for admission, as the daemon holds them and as clients see them. No I/O.

An :class:`Entry` is one waiting ``governor run``: its task (not started yet), when it
queued, and the event that wakes its connection when its place changes or it is decided.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from governor.core.admission import Admission
from governor.errors import RequestError
from governor.core.state import SHOWN_COMMAND_CHARS, Task, bounded_command
from governor.config.resources import ResourceKind, admitted


@dataclass
class Entry:
    """One task in the admission queue.

    Attributes:
        task: the task, with its id, group, pid and declared demand; not started yet.
        queued_at: unix time it queued, seconds.
        pidfd: the launching process itself (:class:`governor.wire.protocol.Peer`), if known.
        wake: set when the entry's place changes or it is decided.
        reply: the launch reply once the task started; ``error`` once it was refused.
        stopped_by: who stopped it before it started (a user name), if anyone did.
        born: when its launching process was born (seconds since boot), read once it waits:
            its place is kept across a restart for that process (:mod:`governor.daemon.waiting`).
        held_launch: its ``launch`` journal entry, held back until it starts: its user left
            many launches unstarted this minute (:class:`~governor.daemon.launches.Launches`).
    """

    task: Task
    queued_at: float
    pidfd: int | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    reply: dict | None = None
    error: RequestError | None = None
    stopped_by: str | None = None
    born: float | None = None
    held_launch: dict | None = None

    @property
    def decided(self) -> bool:
        return self.reply is not None or self.error is not None

    def decide(self, reply: dict | None = None, error: RequestError | None = None) -> None:
        self.reply, self.error = reply, error
        self.wake.set()


def queue_view(entries: Mapping[str, Entry], admission: Admission | None) -> list[dict]:
    """The queue as status, explain and waiting clients show it, in serving order.

    Each item: ``task``, ``group``, ``user``, ``uid``, ``command``, ``demand`` (declared:
    cores, bytes, bytes/s), ``queued_at`` (unix s), ``position`` (1 = next), ``waiting_for``
    (bytes of memory that must free before it fits beside the others' headroom; the
    reservation, which ``reason`` names, not counted), ``held_by`` (``[{"group", "memory"}]``,
    the largest holders of declared memory, at most 3), ``gpus_waiting_for`` (GPUs that must free before it fits, 0 when its
    GPUs would fit) and ``gpus_held_by`` (``[{"group", "gpu"}]``, as ``held_by``; empty for a
    task asking for none): the same two keys for each admitted resource, prefixed with its
    :attr:`~governor.config.resources.Resource.queue`; ``reserved_for`` (the task holding the reservation, when another: what
    frees is kept for it first; see :mod:`governor.core.admission`), ``limited_by`` (the group limit
    or user limit that holds it back, in words, or None), ``reason`` (:func:`reason`).
    """
    if admission is None:
        return []
    counted = admitted()
    held_by = {r.name: [{"group": group, r.name: round(amount) if r.kind is ResourceKind.DEVICE else amount}
                        for group, amount in admission.holders.get(r.name, [])] for r in counted}
    view = []
    for position, task_id in enumerate(_known(admission.waiting, entries), start=1):
        entry = entries[task_id]
        holder = admission.reserved_for if admission.reserved_for != task_id else None
        item = {
            "task": task_id, "group": entry.task.group, "user": entry.task.user, "uid": entry.task.uid,
            "command": bounded_command(entry.task.command, SHOWN_COMMAND_CHARS)[0], "demand": dict(entry.task.demand),
            "queued_at": entry.queued_at, "position": position,
        }
        short = admission.short.get(task_id, {})
        for r in counted:
            wanted = entry.task.demand.get(r.name, 0.0)
            item[f"{r.queue}waiting_for"] = round(short.get(r.name, 0.0)) if wanted else 0
            item[f"{r.queue}held_by"] = held_by[r.name] if wanted else []
        item.update({"reserved_for": holder, "limited_by": admission.limited.get(task_id)})
        item["reason"] = reason(task_id, entry.task.group, entry.task.demand, admission,
                                entries[holder].task.group if holder in entries else None)
        view.append(item)
    return view


def reason(task_id: str, group: str, demand: Mapping[str, float], admission: Admission,
           holder_group: str | None = None) -> str:
    """Why a queued task waits, in words: the one string ``governor run --no-wait``, ``ps``,
    ``status``, ``explain``, ``top``, the metrics and the log show (DESIGN.md §2).

    Args: the task's id, group and declared demand (cores, bytes, GPUs); what :func:`admit`
    decided (:class:`~governor.core.admission.Admission`); the group of the task holding the
    reservation, where known (one of the task's own group is ahead of it in that group's line).

    ``memory: waits for 4.0G to free (held by physics 16.0G, ops 12.0G)`` or ``gpu: waits for
    1 GPU to free (held by vision 2)`` (the first admitted resource it is short of, in registry
    order), with ``; kept free for group bio's guarantee`` where others' headroom is part of
    what it lacks and ``; what frees goes first to task 7`` while another holds the reservation
    of that resource; ``gpu: task 7 of a group with a lower dominant share for its weight is
    served first (it reserves 2 GPUs)`` when it fits now but not beside that reservation; the quota that
    holds it back (``group science's limit: memory 60.0G of 64.0G declared…``); or ``its turn:
    the tasks ahead of it start first``.
    """
    if admission.limited.get(task_id):
        return f"{admission.limited[task_id]}; it starts when tasks under that limit end"
    counted = admitted()
    holder = admission.reserved_for if admission.reserved_for != task_id else None
    # Served in order of dominant share ÷ weight (DRF's weighted share), not of share alone.
    whose = ("ahead of it in its group" if holder_group == group
             else "of a group with a lower dominant share for its weight")
    short = admission.short.get(task_id, {})
    lacking = next((r for r in counted if short.get(r.name, 0.0) > 0), None)
    if lacking is not None:
        holders = ", ".join(f"{group} {lacking.format(amount, False)}"
                            for group, amount in admission.holders.get(lacking.name, []))
        words = f"{lacking.name}: waits for {lacking.said(short[lacking.name])} to free (held by {holders or 'nobody'})"
        if admission.lacks.get(task_id, {}).get(lacking.name, 0.0) < short[lacking.name]:
            keepers = [g for g, _ in admission.headroom.get(lacking.name, []) if g != group]
            words += f"; kept free for {', '.join(f'group {g}' for g in keepers) or 'other groups'}'s guarantee"
        if holder is not None and lacking.name in admission.reserved:
            words += f"; what frees goes first to task {holder}, {whose}"
        return words
    kept = next((r for r in counted if demand.get(r.name, 0.0) > 0 and r.name in admission.reserved), None)
    if holder is not None and kept is not None:
        return (f"{kept.name}: task {holder}, {whose}, is served first "
                f"(it reserves {kept.said(admission.reserved[kept.name])})")
    return "its turn: the tasks ahead of it start first"


def _known(order: Sequence[str], entries: Mapping[str, Entry]) -> list[str]:
    return [task_id for task_id in order if task_id in entries]
