"""The status the daemon serves (``governor status --json``; schema in docs/operator.md), built
typed (:mod:`governor.wire.status_types`) a section at a time: :func:`groups_status`, the
sections other modules keep as JSON objects (:func:`sections`), :func:`status_of` with the sums;
then encoded once (:func:`governor.wire.status_json.encode`) into its reply (:class:`StatusReply`).
Pure."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace

try:
    import orjson
except ImportError:  # no wheel for this Python (a new CPython, an offline image): the standard library's line
    orjson = None

from governor.core import vocabulary
from governor.core.model import Allocation
from governor.wire.protocol import as_line, encode_json
from governor.config.resources import find
from governor.core.state import GPU, SHOWN_COMMAND_CHARS, Slot, Tasks
from governor.core.usage import STALL, stalls
from governor.wire.reply_types import StatusReply as WireStatusReply
from governor.wire.status_json import decode_section, drop_gone
from governor.wire.status_types import Group, Status, TaskEntry


def split_usage(vector: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """Measured usage → (resources used, pressure signs such as ``cpu.nr_throttled``); the
    stalls (PSI) are neither: :func:`governor.core.usage.stalls` nests them."""
    used, pressure = {}, {}
    for key, value in vector.items():
        if not key.startswith(STALL):
            (used if find(key) is not None else pressure)[key] = value
    return used, pressure


def psi_entry(no_psi: str | None) -> dict:
    """The status's ``psi``: ``available`` (bool) and, where not, ``why`` (one sentence)."""
    return {"available": no_psi is None, "why": no_psi}


def groups_status(*, tasks: Tasks, allocation: Allocation | None, usage: Mapping[str, Mapping[str, float]],
                  in_force: Callable[[str], dict[str, str]], configured: Mapping[str, dict] | None = None,
                  parents: Mapping[str, str] | None = None, place: Callable[[str], str] = str,
                  fairshare: Mapping[str, object] | None = None,
                  kept: dict | None = None, kept_groups: dict | None = None) -> dict[str, Group]:
    """The status's ``groups``: every group of the host, by name.

    Args:
        tasks: the running tasks.
        allocation: the last progressive filling's answer, None with no task.
        usage: cgroup (relative) → measured usage (:func:`governor.core.usage.usage`).
        in_force: cgroup (relative) → kernel file → value the kernel accepted.
        configured: every group of the host → ``weight``, ``floor``, ``members`` and
            ``everyone`` (a group of ``[groups."*"]`` at its weight): each is listed, idle or not
            (an idle one with no task, zeros and ``idle``), but idle ones of everyone.
        parents: group → the group it nests under (a group tree); place: group → its cgroup
            (relative), where its limits are.
        fairshare: group → its :class:`~governor.core.fairshare.Standing` with ``[fairshare]``:
            each group then says its ``effective_weight`` and ``past_use`` (decayed,
            capacity-seconds).
        kept: the task entries of the last status, by cgroup, replaced by this one's: a task
            whose record, limits in force and usage are the same objects keeps its entry (a
            status of 1,000 tasks in a launch storm rebuilt them all, 4 ms each time), and so
            its JSON (:func:`governor.wire.status_json.encode`).
        kept_groups: the busy groups' entries of the last status, by name, replaced by this
            one's: a group whose allocation, usage, demand, limits, configuration, place in the
            tree, standing and task entries are unchanged keeps its entry, and so its JSON
            (:func:`governor.wire.status_json.encode`): after a sample of 10,000 idle tasks in
            1,000 groups, rebuilding every group made a status 180 ms in process.

    Per group, its allocation (:meth:`GroupAllocation.to_json`: weight, allocation, dominant
    resources and share, stop) with the words of :mod:`governor.core.vocabulary`: ``floor``,
    ``demand`` (its cap: the sum of its tasks' declarations), ``guarantee`` (the compressible
    part of its allocation), ``reserved`` (memory and GPUs: the sum of its tasks', each of
    which says its own, :func:`governor.core.vocabulary.reserved_by_task`: what admission
    counts), ``usage``, ``borrowed``; and ``lambda``, ``limits``, ``pressure`` (throttling
    signs), ``stall`` (PSI, as in each task), ``members``, ``idle``, ``tasks``. Each group says
    its ``parent`` (None at the top); an internal group of a tree (``internal``) shows the sums
    of its subtree (allocation, demand, guarantee, reserved, usage) and counts in no total: its
    children do. The idle groups of ``[groups."*"]`` are one row, ``"*"``, whose ``accounts``
    says how many (:func:`_idle_everyone`); its weight and floor are each one's.
    """
    parents, fairshare = parents or {}, fairshare or {}
    groups: dict[str, Group] = {}
    last, last_groups = kept or {}, kept_groups or {}
    entries: dict[str, tuple] = {}
    busy: dict[str, tuple] = {}
    configured = configured or {}
    # A launched task's reserved is its declaration: looked at only where its entry is built.
    names, sessions = vocabulary.admitted_names(), vocabulary.sessions_reserved(tasks.sessions(), usage)

    def reserved_of(task) -> dict[str, float]:
        return sessions[task.id] if task.is_session else vocabulary.held(task, names)

    demands = tasks.demands()
    for name, members in tasks.groups().items():
        got = allocation.groups[name] if allocation and name in allocation.groups else None
        measured, limits, about = usage.get(name, _UNSAMPLED), in_force(place(name)), configured.get(name, {})
        task_entries = tuple(_task(t, in_force, usage, reserved_of, last, entries) for t in members)
        inputs = (got, measured, demands[name], limits, about, parents.get(name), fairshare.get(name))
        before = last_groups.get(name)
        if before is not None and _unchanged(before, inputs, task_entries):
            groups[name] = before[2]
        else:
            group_usage, group_pressure = split_usage(measured)
            granted = vocabulary.guarantee(got.allocation if got else {})
            groups[name] = _placed(Group(
                **_allocated(got), floor=about.get("floor", 0.0), members=tuple(about.get("members", ())), idle=False,
                demand=dict(demands[name]), guarantee=granted,
                reserved=vocabulary.total(entry.reserved for entry in task_entries),
                lambda_=float(got.tasks) if got else 0.0, limits=limits, usage=group_usage,
                borrowed=vocabulary.borrowed(group_usage, granted), pressure=group_pressure,
                stall=stalls(measured), tasks=task_entries), parents.get(name), fairshare.get(name))
        busy[name] = (inputs, task_entries, groups[name])
    summed_up = _idle_everyone(configured, groups, fairshare)
    for name, about in configured.items():
        if name not in groups and name not in summed_up:
            groups[name] = _idle(about)
    if summed_up:
        groups[EVERYONE] = replace(_idle(configured[next(iter(summed_up))]), members=(), accounts=len(summed_up))
    for name, got in (allocation.nodes.items() if allocation else ()):
        below = [group for leaf, group in groups.items() if name in _ancestors(leaf, parents)]
        granted = vocabulary.guarantee(got.allocation)
        group_usage = vocabulary.total(g.usage for g in below)
        groups[name] = Group(**_allocated(got), internal=True, idle=False,
                             floor=configured.get(name, {}).get("floor", 0.0),
                             demand=vocabulary.total(g.demand for g in below), guarantee=granted,
                             reserved=vocabulary.total(g.reserved for g in below), limits=in_force(place(name)),
                             usage=group_usage, borrowed=vocabulary.borrowed(group_usage, granted))
    for table, fresh in ((kept, entries), (kept_groups, busy)):
        if table is not None:
            table.clear()
            table.update(fresh)
    return {name: group if name in busy else _placed(group, parents.get(name), fairshare.get(name))
            for name, group in groups.items()}


def _unchanged(before: tuple, inputs: tuple, task_entries: tuple) -> bool:
    """Whether a busy group's entry of the last status (``before``: its inputs, task entries
    and entry) stands for ``inputs`` and ``task_entries``: each input the same or equal, each
    task entry the same object."""
    return (all(a is b or a == b for a, b in zip(before[0], inputs)) and len(before[1]) == len(task_entries)
            and all(a is b for a, b in zip(before[1], task_entries)))


def status_of(groups: Mapping[str, Group], **sections) -> Status:
    """The status: ``groups`` (:func:`groups_status`) with the sums of the groups' that count
    (not the internal ones of a tree): ``guaranteed``, ``reserved`` and ``used``, and
    ``fair_level``, the highest dominant share / weight among them (the water level at which
    the last filling stopped the groups a saturated resource held back); ``sections``: the
    other fields of :class:`~governor.wire.status_types.Status` (``daemon``, ``capacity``,
    ``queue``…)."""
    leaves = [group for group in groups.values() if not group.internal]
    return Status(groups=groups, guaranteed=vocabulary.total(g.guarantee for g in leaves),
                  reserved=vocabulary.total(g.reserved for g in leaves), used=vocabulary.total(g.usage for g in leaves),
                  fair_level=max((g.dominant_share / g.weight for g in leaves), default=0.0), **sections)


def sections(**given: object) -> dict:
    """The status's sections that other modules hand over as JSON objects (``filling``,
    ``events``, ``queue`` from :func:`governor.core.queue.queue_view`, ``gpus`` from
    :func:`gpu_entries`, ``devices`` from :func:`device_entries`, ``daemon``), typed as the client's decoder types them.

    Raises:
        MalformedStatus: a section that is not of its type (a bug of its maker).
    """
    return {name: decode_section(name, value) for name, value in given.items()}


def _allocated(got) -> dict:
    """A group's allocation fields (a :class:`~governor.core.model.GroupAllocation` or None:
    not allocated yet, its first filling to come)."""
    if got is None:
        return {}
    about = got.to_json()
    return {**about, "dominant_resources": tuple(about["dominant_resources"])}


def _placed(group: Group, parent: str | None, standing) -> Group:
    """``group`` with its ``parent`` and, with ``[fairshare]``, its standing."""
    if standing is None:
        return replace(group, parent=parent) if parent is not None else group
    return replace(group, parent=parent, effective_weight=standing.effective, past_use=standing.usage)


EVERYONE = "*"  # the status's one row for the idle groups of [groups."*"]


def _idle_everyone(configured: Mapping[str, dict], busy: Mapping[str, Group],
                   fairshare: Mapping[str, object]) -> dict[str, None]:
    """The idle groups of ``[groups."*"]`` (one per account of the host) that status sums up
    in one row, :data:`EVERYONE`: those with no task (not in ``busy``), no past use
    (``[fairshare]``) and the rule's weight (``everyone`` of :meth:`Policy.configured
    <governor.daemon.policy.Policy.configured>`). 10,000 accounts listed one by one made a
    status of 2.9 MB (5.5 MB of metrics) and took 0.37 s to build."""
    return dict.fromkeys(name for name, about in configured.items()
                         if about.get("everyone") and name not in busy
                         and not getattr(fairshare.get(name), "usage", 0.0))


def _idle(about: Mapping[str, object]) -> Group:
    """A group's entry with no task: zeros, and its ``weight``, ``floor`` and ``members``."""
    return Group(weight=about["weight"], floor=about["floor"], members=tuple(about.get("members", ())), idle=True)


def gpu_entries(inventory, holders: Mapping[Slot, str], tasks: Tasks) -> list[dict] | None:
    """The status's ``gpus``: each GPU of ``inventory`` (a :class:`governor.core.gpus.GpuInventory`,
    None: no GPU governed, None returned) with the ``task``, ``group`` and ``user`` holding it
    (``holders``: :meth:`Tasks.holders <governor.core.state.Tasks.holders>`), and ``draining``:
    its task ended and a process may still hold its node (not free yet)."""
    if inventory is None:
        return None
    entries = []
    draining = tasks.draining()
    for gpu in inventory.gpus:
        holder = tasks.get(holders[(GPU, gpu.index)]) if (GPU, gpu.index) in holders else None
        entries.append({**gpu.to_json(), "task": holder.id if holder else None,
                        "group": holder.group if holder else None, "user": holder.user if holder else None,
                        "draining": (GPU, gpu.index) in draining})
    return entries


def device_entries(inventories: Mapping[str, object], tasks: Tasks) -> dict[str, list[dict]] | None:
    """The status's ``devices``: for each governed device class but the GPUs (``inventories``:
    entry → its inventory, :attr:`Policy.devices <governor.daemon.policy.Policy.devices>`), each
    device's index and node with the ``task``, ``group`` and ``user`` holding it, and
    ``draining``; None where no other class is governed."""
    holders, draining = tasks.holders(), tasks.draining()
    entries = {}
    for entry, inventory in inventories.items():
        if entry == GPU:
            continue  # the status's gpus, with what NVML says of each
        rows = []
        for device in inventory.devices:
            holder = tasks.get(holders[(entry, device.index)]) if (entry, device.index) in holders else None
            rows.append({"index": device.index, "node": device.node, "task": holder.id if holder else None,
                         "group": holder.group if holder else None, "user": holder.user if holder else None,
                         "draining": (entry, device.index) in draining})
        entries[entry] = rows
    return entries or None


def _ancestors(group: str, parents: Mapping[str, str]) -> list[str]:
    found, node = [], parents.get(group)
    while node is not None and node not in found:
        found.append(node)
        node = parents.get(node)
    return found


_UNSAMPLED: Mapping[str, float] = {}  # one object: an unsampled task keeps its entry too


def _task(task, in_force: Callable[[str], dict[str, str]], usage: Mapping[str, Mapping[str, float]],
          reserved_of: Callable[[object], dict[str, float]], kept: Mapping[str, tuple],
          entries: dict[str, tuple]) -> TaskEntry:
    limits, sampled = in_force(task.cgroup), usage.get(task.cgroup, _UNSAMPLED)
    last = kept.get(task.cgroup)
    # A session's reserved follows its user's other place's use too: compared, not identity (a
    # launched task's is its declaration: the same task, the same). A sample is compared too:
    # an idle task's is equal from one sample to the next (no CPU used, the same memory), and
    # rebuilding 10,000 of them after each sample made a status 350 ms.
    if (last is not None and last[0] is task and last[1] is limits and (last[2] is sampled or last[2] == sampled)
            and (not last[5] or last[3] == reserved_of(task))):
        entries[task.cgroup] = last
        return last[4]
    reserved = reserved_of(task)
    used, pressure = split_usage(sampled)
    about = task.to_json(command_chars=SHOWN_COMMAND_CHARS)
    entry = TaskEntry(**{**about, "command": tuple(about["command"]), "gpus": tuple(about["gpus"])}, limits=limits,
                      reserved=reserved, usage=used, pressure=pressure, stall=stalls(sampled))
    entries[task.cgroup] = (task, limits, sampled, reserved, entry, task.is_session)
    return entry


class StatusReply(WireStatusReply):
    """The daemon's reply ``{"status": status}``, whose line (:meth:`encoded`) says what
    :func:`governor.wire.protocol.ok` says of it, encoded by orjson on the event loop: a status
    of 10,000 tasks (5 MB) took the standard library 51 ms with the JSON of every task entry
    kept from the last, 108 ms with none; orjson, with the check below, 14.5 and 38 ms (a loaded
    2-core host). Each task entry's encoded text is kept with it (an ``orjson.Fragment``), so
    an entry unchanged since the last status is neither checked nor encoded again. Where orjson
    cannot encode it (a lone surrogate in a name, an integer beyond 64 bits), or is not
    installed (pip may find no wheel of it for a new CPython or an offline host), the standard
    library does, as ``ok`` would. The line
    is the same but for how some floats are spelled (orjson writes 1e-05 as 0.00001): the
    same numbers, and `governor status --json` prints the same text.

    orjson writes NaN and infinity as ``null``; a reply refuses them instead, as ``ok`` does.
    Looking at every number of 10,000 tasks costs as much as encoding them with the standard
    library, so a task entry checked for the last status (the same object: :func:`build_status`
    keeps an unchanged task's entry) is not looked at again.

    Args:
        status: the status object (:func:`build_status`).
        checked: id of a task entry → (the entry, its encoded text: an ``orjson.Fragment``,
            None where orjson cannot encode it); id of a group entry → (the entry, a copy of it
            whose tasks are their fragments, whether all are encoded): what the statuses
            encoded looked at, this one's added once it is encoded (the entry is held so that
            its id is not reused; those no status holds are dropped once they are a quarter of
            it, :func:`~governor.wire.status_json.drop_gone`).
    """

    def __init__(self, status: dict, checked: dict[int, tuple]):
        super().__init__(status)
        self._checked = checked
        self._line: bytes | None = None

    def encoded(self) -> bytes:
        """The reply line (once; the same bytes at each call).

        Raises:
            ValueError, TypeError: as :func:`governor.wire.protocol.encode_json`.
        """
        if self._line is None:
            status, checked = self.status, self._checked
            added: dict[int, tuple] = {}  # kept once the status is encoded: a refused one keeps nothing
            groups, whole = {}, orjson is not None
            for name, group in status["groups"].items():
                last = checked.get(id(group))
                if last is None or last[0] is not group:
                    _require_finite(group, skip="tasks")
                    fragments = []
                    for entry in group["tasks"]:
                        known = checked.get(id(entry)) or added.get(id(entry))
                        if known is None or known[0] is not entry:
                            _require_finite(entry)
                            known = added[id(entry)] = (entry, _fragment(entry))
                        fragments.append(known[1])
                    last = added[id(group)] = (group, {**group, "tasks": fragments}, None not in fragments)
                whole = whole and last[2]
                groups[name] = last[1]
            _require_finite(status, skip="groups")
            if whole:
                # Each task entry's text as it was encoded: an unchanged one is not encoded again.
                try:
                    self._line = orjson.dumps({"ok": True, "status": {**status, "groups": groups}},
                                              option=orjson.OPT_APPEND_NEWLINE)
                except TypeError:  # orjson.JSONEncodeError: what the standard library encodes or refuses alone
                    pass
            if self._line is None:
                self._line = as_line(encode_json({"ok": True, "status": status}))
            checked.update(added)
            drop_gone(checked, [(group, group["tasks"]) for group in status["groups"].values()])
        return self._line


def _fragment(entry: dict):
    """``entry``'s JSON as an ``orjson.Fragment``, or None where orjson cannot encode it (a lone
    surrogate in a name, an integer beyond 64 bits: the standard library encodes, or refuses,
    the whole reply) or is not installed."""
    if orjson is None:
        return None
    try:
        # As text: orjson's bytes of a 600-byte entry held 4 KiB each (40 MiB at 10,000 tasks).
        return orjson.Fragment(orjson.dumps(entry).decode())
    except TypeError:  # orjson.JSONEncodeError
        return None


def _require_finite(value: object, *, skip: str | None = None) -> None:
    """Raise ValueError for a NaN or infinity in ``value`` (nested dicts, lists and tuples),
    not looking at its member ``skip`` (``value`` a dict). The exact types first: 1,000
    groups' entries took 18 ms with ``isinstance`` alone, 12 so."""
    items = [v for k, v in value.items() if k != skip] if skip is not None else [value]
    pop, extend, finite = items.pop, items.extend, math.isfinite
    while items:
        item = pop()
        kind = type(item)
        if kind is float:
            if not finite(item):
                raise ValueError(f"Out of range float values are not JSON compliant: {item!r}")
        elif kind in _LEAVES:
            continue
        elif isinstance(item, dict):
            extend(item.values())
        elif isinstance(item, (list, tuple)):
            extend(item)
        elif isinstance(item, float) and not finite(item):
            raise ValueError(f"Out of range float values are not JSON compliant: {item!r}")


_LEAVES = frozenset({str, int, bool, type(None)})  # what holds no float
