"""A task's record as JSON (DESIGN.md §8): what :class:`governor.host.task_store.TaskStore` writes for a
running task, and every field checked as a request's would be when it is read back.

A record names the devices its task holds by identity, never by governor's index, which changes
with the inventory (:mod:`governor.core.device_identity`): its GPUs as ``"gpus": [{"device":
"195:0", "uuid": "GPU-…"}, …]``, and any other class's as ``"devices": {"<entry>": [{"device":
…, "uuid": null}, …]}``, a field written only when the task holds such a device (a record of an
earlier release's fields stays readable by that release: it refuses a field it does not know).
A record written before identities (``"gpus": [0, 1]``) is read back with those indices and no
identity: the daemon re-adopting it takes them as indices of today's inventory
(:mod:`governor.daemon.recovery`).
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING

from governor.config.groups import MAX_DEPTH
from governor.config.settings import group_name_problem
from governor.core.device_identity import DeviceIdentity
from governor.core.state import GPU
from governor.config.kinds import record_id_fits

if TYPE_CHECKING:
    from governor.core.state import Task

__all__ = ["record_of", "task_fields"]

_RECORD_FIELDS = {"id", "group", "pid", "uid", "user", "command", "demand", "started"}
# Fields added later: a record written before them is read without them.
_LATER_FIELDS = {"name", "time_limit", "place", "gpus", "devices"}
_MAX_GPU_INDEX = 1023
_ENTRY = re.compile(r"[a-z][a-z0-9_.-]{0,63}")  # a registry entry's name (``fpga``, ``intel-gpu``)
_STORED = (*sorted(_RECORD_FIELDS), *sorted(_LATER_FIELDS - {"gpus", "devices"}))


def record_of(task: Task) -> dict:
    """What ``task``'s record holds: every field but the derived ``kind`` and ``cgroup``, its
    devices by identity (:meth:`DeviceIdentity.to_record
    <governor.core.device_identity.DeviceIdentity.to_record>` of each of
    ``task.device_identities``): the GPUs' as ``gpus``, any other class's in ``devices`` (only
    when it holds some)."""
    record = {name: getattr(task, name) for name in _STORED}
    record["gpus"] = [identity.to_record() for identity in task.device_identities.get(GPU, ())]
    others = {entry: [identity.to_record() for identity in held]
              for entry, held in task.device_identities.items() if entry != GPU and held}
    if others:
        record["devices"] = others
    return record


def task_fields(task_id: str, data: bytes) -> dict:
    """The keyword arguments of :class:`~governor.core.state.Task` that record ``data`` (the file
    ``<task_id>.json``) holds, every field checked as a request's would be. Devices held by
    identity come as ``device_identities`` (``devices`` empty until re-mapped to an inventory);
    an older record's GPU indices as ``devices`` (no identities).

    Raises:
        ValueError: what is wrong, naming the field.
    """
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as error:  # bad JSON, bad UTF-8, an integer too long
        raise ValueError(f"not JSON: {error}") from None
    if not isinstance(record, dict) or not _RECORD_FIELDS <= set(record) <= _RECORD_FIELDS | _LATER_FIELDS:
        raise ValueError(f"not a task record: fields must be {', '.join(sorted(_RECORD_FIELDS))} "
                         f"(and optionally {', '.join(sorted(_LATER_FIELDS))})")
    problem = group_name_problem(record["group"]) if isinstance(record["group"], str) else "not a string"
    gpus, identities, gpu_problem = _gpus(record.get("gpus", []))
    others, devices_problem = _devices(record.get("devices", {}))
    checks = {
        "id": record["id"] == task_id and _whole(record["uid"], minimum=0) and record_id_fits(task_id, record["uid"]),
        "group": problem is None,
        "pid": _whole(record["pid"], minimum=1),
        "uid": _whole(record["uid"], minimum=0),
        "user": isinstance(record["user"], str),
        "command": isinstance(record["command"], list) and all(isinstance(arg, str) for arg in record["command"]),
        "demand": isinstance(record["demand"], dict) and all(
            isinstance(key, str) and _amount(value) for key, value in record["demand"].items()),
        "started": _amount(record["started"]),
        "name": isinstance(record.get("name", ""), str),
        "time_limit": record.get("time_limit") is None or (_amount(record["time_limit"]) and record["time_limit"] > 0),
        "place": _place_fits(record.get("place", ""), record["group"]),
        "gpus": gpu_problem is None,
        "devices": devices_problem is None,
    }
    bad = [field for field, fine in checks.items() if not fine]
    if bad:
        detail = {"group": problem, "gpus": gpu_problem, "devices": devices_problem}.get(bad[0])
        detail = f" ({detail})" if detail else ""
        raise ValueError(f"field {bad[0]}{detail} is out of bounds")
    return {"id": record["id"], "group": record["group"], "pid": record["pid"], "uid": record["uid"],
            "user": record["user"], "command": tuple(record["command"]),
            "demand": {k: float(v) for k, v in record["demand"].items()}, "started": float(record["started"]),
            "name": record.get("name", ""),
            "time_limit": None if record.get("time_limit") is None else float(record["time_limit"]),
            "place": record.get("place", ""), "devices": {GPU: gpus} if gpus else {},
            "device_identities": {**({GPU: identities} if identities else {}), **others}}


def _devices(stored: object) -> tuple[dict[str, tuple[DeviceIdentity, ...]], str | None]:
    """A record's ``devices``: class → its distinct identities, and what is wrong with them
    (None: nothing)."""
    if not isinstance(stored, dict):
        return {}, "not an object"
    found = {}
    for entry, held in stored.items():
        if not _ENTRY.fullmatch(entry) or entry == GPU:
            return {}, f"{entry!r} is not a device class (a GPU is kept in gpus)"
        try:
            identities = tuple(DeviceIdentity.from_record(device) for device in held) if isinstance(held, list) else ()
        except ValueError as error:
            return {}, f"{entry}: not device identities: {error}"
        if not identities or len(set(identities)) != len(identities):
            return {}, f"{entry}: not a list of distinct device identities"
        found[entry] = identities
    return found, None


def _gpus(stored: object) -> tuple[tuple[int, ...], tuple[DeviceIdentity, ...], str | None]:
    """A record's ``gpus``: distinct identities (or, written before them, distinct indices
    within :data:`_MAX_GPU_INDEX`), and what is wrong with them (None: nothing)."""
    if not isinstance(stored, list):
        return (), (), "not a list"
    if all(_whole(g, minimum=0) and g <= _MAX_GPU_INDEX for g in stored):
        if len(set(stored)) != len(stored):
            return (), (), "an index held twice"
        return tuple(stored), (), None
    try:
        identities = tuple(DeviceIdentity.from_record(g) for g in stored)
    except ValueError as error:
        return (), (), f"neither indices nor GPU identities: {error}"
    if len(set(identities)) != len(identities):
        return (), (), "a GPU held twice"
    return (), identities, None


def _place_fits(place: object, group: object) -> bool:
    """A stored place is empty (the group's own name) or ancestors' names then the group's."""
    if place == "":
        return True
    if not isinstance(place, str) or not isinstance(group, str):
        return False
    parts = place.split("/")
    return parts[-1] == group and len(parts) <= MAX_DEPTH and all(group_name_problem(p) is None for p in parts)


def _whole(value: object, *, minimum: int) -> bool:
    return type(value) is int and value >= minimum


def _amount(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0
