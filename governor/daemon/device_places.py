"""Where each task's devices are in the inventories in force, class by class (GPUs and any
other class: :mod:`governor.core.devices`): a task holds its devices by identity (device number,
UUID), and a reload or restart may list them at other indices or drop them (DESIGN.md §4,
"Re-adoption is exact"); and the device nodes a task may not open. Pure: the inventories are
arguments (a class's entry name → its inventory, :attr:`Policy.devices
<governor.daemon.policy.Policy.devices>`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from governor.cgroups.device_rules import Device
from governor.config import resources
from governor.config.load import Config
from governor.core.device_identity import DeviceIdentity, DeviceNotFound, locate
from governor.core.devices import Inventory
from governor.core.state import Slot, Task
from governor.errors import GovernorError
from governor.host import devices as providers

__all__ = ["clash", "denied_devices", "identities", "named", "readopted", "remap_held", "renumbered", "starting"]

Inventories = Mapping[str, Inventory]


def remap_held(config: Config, old: Inventories, new: Inventories, held: Iterable[Task]) -> list[Task]:
    """The tasks of ``held`` (holding devices of the inventories ``old``) re-mapped to ``new``
    where their devices' indices or identities differ there.

    Raises:
        GovernorError: a new inventory lacks a held device (its task's cgroup allows that
            device's node, and CUDA was told a GPU's name), or cannot tell it from another, or
            finds two tasks' devices at one index (:func:`clash`); the message names the
            config's file and the class's key (``capacity.gpus``).
    """
    held, remapped = list(held), []
    for task in held:
        devices, known = {}, {}
        for entry, identities_ in task.device_identities.items():
            key, noun = named(entry)
            try:
                devices[entry], known[entry] = locate(identities_, _listed(new, entry), noun)
            except DeviceNotFound as lost:
                index = task.devices[entry][identities_.index(lost.identity)]
                before = _listed(old, entry)
                called = ", ".join(filter(None, (before[index].node if index < len(before) else "",
                                                 f"device {lost.identity.device}", lost.identity.uuid)))
                raise GovernorError(f"{config.file}: {key}: {noun} {index} ({called}) is held by task {task.id} "
                                    f"and this config {_lacks(lost, noun)}; change it once that task has "
                                    "ended") from None
        if (devices, known) != (dict(task.devices), dict(task.device_identities)):
            remapped.append(replace(task, devices=devices, device_identities=known))
    moved = {task.id: task for task in remapped}
    both = clash(moved.get(task.id, task) for task in held)
    if both is not None:
        (entry, index), first, second = both
        key, noun = named(entry)
        raise GovernorError(f"{config.file}: {key}: tasks {first.id} and {second.id} would both hold "
                            f"{noun} {index} ({new[entry].devices[index].node}) under this config: it cannot tell "
                            f"their {noun}s apart; change it once one of them has ended")
    return remapped


def readopted(config: Config, inventories: Inventories, task: Task) -> Task:
    """``task``, read back from its record at a restart, holding its devices by their indices
    in ``inventories`` (those in force), found by identity; a record written before identities
    holds a GPU's indices, taken as today's inventory's (as such a daemon took them).

    Raises:
        GovernorError: an inventory lacks a device the task holds, or cannot tell it from
            another, or its demand asks for devices of a class its record names none of (a
            record from before that class was placed device by device): the daemon must not
            start and hand them to another task. The message names the task, the device and
            what to do.
    """
    unnamed = [entry for entry in inventories if task.demand.get(entry)
               and entry not in task.devices and entry not in task.device_identities]
    if unnamed:
        (key, noun), amount = named(unnamed[0]), task.demand[unnamed[0]]
        raise GovernorError(f"{config.file}: {key}: task {task.id} (group {task.group}) asked for "
                            f"{amount:g} {noun}{'' if amount == 1 else 's'} and its record names none: the daemon "
                            f"does not start, lest another task get them. Stop the task (a daemon of the release that "
                            f"started it: governor stop {task.id}), then start this one")
    if not task.devices and not task.device_identities:
        return task
    devices, known = {}, {}
    for entry in {**task.devices, **task.device_identities}:
        key, noun = named(entry)
        listed = _listed(inventories, entry)

        def refused(device: str, lacks: str) -> GovernorError:
            return GovernorError(f"{config.file}: {key}: task {task.id} (group {task.group}) holds {noun} "
                                 f"{device} and this config {lacks}: the daemon does not start, lest another task "
                                 f"get it. List that {noun} again, start the daemon and stop the task (governor "
                                 f"stop {task.id}), then change the config")

        held = task.device_identities.get(entry, ())
        if not held:
            beyond = [index for index in task.devices[entry] if index >= len(listed)]
            if beyond:
                raise refused(f"{beyond[0]} (by index: an older record)", f"lists {len(listed)} {noun}s")
            held = tuple(listed[index].identity for index in task.devices[entry])
        try:
            devices[entry], known[entry] = locate(held, listed, noun)
        except DeviceNotFound as lost:
            raise refused(str(lost.identity), _lacks(lost, noun)) from None
    return replace(task, devices=devices, device_identities=known)


def renumbered(old: Inventories, new: Inventories, draining: Mapping[Slot, str]) -> dict[Slot, str]:
    """The draining devices (a device → the ended task that held it, :meth:`Tasks.draining
    <governor.core.state.Tasks.draining>`) of the inventories ``old``, by their indices in the
    inventories in force (found by identity, as held ones are). A device no longer governed
    is left out (there is no hand-over of a node governor does not guard); one it cannot
    tell from others drains at each index it could be (they share a node: MIG instances
    without UUIDs)."""
    moved: dict[Slot, str] = {}
    for (entry, index), ended in draining.items():
        known = _listed(old, entry)
        if index < len(known):
            moved.update(((entry, device.index), ended) for device in _listed(new, entry)
                         if known[index].identity.matches(device.identity))
    return moved


def starting(inventories: Inventories, task: Task, taken: Collection[Slot]) -> Task:
    """``task``, given its devices under inventories that a reload may have replaced since
    (while its cgroup was made), holding them by their indices in ``inventories`` (those in
    force), found by identity.

    Args:
        taken: the devices no starting task may get (held by another, or draining).

    Raises:
        GovernorError: a device it was given is not in the inventory any more (or cannot be
            told from another), or is now at a place in ``taken``: the launch is refused.
    """
    if not task.devices:
        return task
    devices, known = {}, {}
    for entry, held in task.device_identities.items():
        noun = named(entry)[1]
        try:
            devices[entry], known[entry] = locate(held, _listed(inventories, entry), noun)
        except DeviceNotFound as lost:
            raise GovernorError(f"task {task.id} cannot start: a reload while it started changed the {noun}s: "
                                f"{lost}; launch it again") from None
        both = sorted({(entry, index) for index in devices[entry]} & set(taken))
        if both:
            raise GovernorError(f"task {task.id} cannot start: a reload while it started renumbered the {noun}s "
                                f"and {noun} {both[0][1]} is held by another task or draining; launch it again")
    return replace(task, devices=devices, device_identities=known)


def identities(inventory: Inventory, indices: Iterable[int]) -> tuple[DeviceIdentity, ...]:
    """The identities of the devices at ``indices`` of a class's ``inventory`` (the one in force)
    (a task's :attr:`~governor.core.state.Task.device_identities` of that class, from its
    ``devices``)."""
    return tuple(inventory.devices[index].identity for index in indices)


def denied_devices(inventories: Inventories, held: Mapping[str, Iterable[int]]) -> tuple[Device, ...]:
    """The device nodes a task holding the devices ``held`` (entry → indices,
    :attr:`Task.devices <governor.core.state.Task.devices>`) may not open (``("c", major,
    minor)``), class by class in ``inventories``' order: every governed device's but those it
    holds (a MIG instance's node is its GPU's, open to each instance's holder), and a class's
    control nodes too when it holds none of that class. Empty when no device is governed:
    governor then guards none."""
    mine = {entry: set(indices) for entry, indices in held.items()}
    allowed = {(device.major, device.minor) for entry, inventory in inventories.items()
               for device in inventory.devices if device.index in mine.get(entry, ())}
    nodes: dict[tuple[int, int], None] = {}
    for entry, inventory in inventories.items():
        nodes.update(dict.fromkeys((device.major, device.minor) for device in inventory.devices))
        if not mine.get(entry):
            nodes.update(dict.fromkeys((major, minor) for _, major, minor in inventory.control))
    return tuple(("c", major, minor) for major, minor in nodes if (major, minor) not in allowed)


def clash(tasks: Iterable[Task]) -> tuple[Slot, Task, Task] | None:
    """The first device two of ``tasks`` hold (identities that the inventory in force finds
    at one place: one by UUID, one by device number alone), and those two; None when none is."""
    holders: dict[Slot, Task] = {}
    for task in tasks:
        for slot in task.held():
            if holders.setdefault(slot, task) is not task:
                return slot, holders[slot], task
    return None


def _listed(inventories: Inventories, entry: str) -> tuple:
    """Class ``entry``'s devices in ``inventories``; none where it is not governed."""
    found = inventories.get(entry)
    return tuple(found.devices) if found is not None else ()


def named(entry: str) -> tuple[str, str]:
    """How messages name class ``entry``: the config key that governs it (its provider's,
    ``capacity.gpus``) and the word for one of it (the registry's, ``GPU``); a class no
    longer registered (a record written while it was) by its entry's name."""
    key = next((provider.key for provider in providers.providers() if provider.entry == entry), entry)
    found = resources.find(entry)
    return key, (found.noun if found is not None and found.noun else entry)


def _lacks(lost: DeviceNotFound, noun: str) -> str:
    """What a config does to a held device it does not have once: ``drops it`` (none of its
    devices is it), lists several it could be (MIG instances of one node without UUIDs), or
    finds it where it finds another device the same task holds."""
    if lost.same_as is not None:
        return f"finds it where it finds {noun} {lost.same_as} too"
    return "drops it" if not lost.candidates else f"cannot tell it apart from others ({lost.candidates} match)"
