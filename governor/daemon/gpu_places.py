"""Where each task's GPUs are in the inventory in force: a task holds its GPUs by identity
(UUID, device number), and a reload or restart may list them at other indices or drop them
(DESIGN.md §4, "Re-adoption is exact"); and the device nodes a task may not open. Pure: the
inventory is an argument."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from governor.cgroups.device_rules import Device
from governor.config.load import Config
from governor.errors import GovernorError
from governor.core.gpu_identity import GpuIdentity, GpuNotFound, locate
from governor.core.gpus import GpuInventory
from governor.core.state import Task

__all__ = ["clash", "denied_devices", "identities", "readopted", "remap_held", "renumbered", "starting"]


def remap_held(config: Config, old: GpuInventory | None, gpus: GpuInventory | None,
               held: Iterable[Task]) -> list[Task]:
    """The tasks of ``held`` (holding GPUs of the inventory ``old``) re-mapped to ``gpus``
    where their GPUs' indices or identities differ there.

    Raises:
        GovernorError: the new inventory lacks a held GPU (its task's cgroup allows that GPU's
            node, and CUDA was told its name), or cannot tell it from another, or finds two
            tasks' GPUs at one index (:func:`clash`); the message names the config's file.
    """
    known = old.gpus if old is not None else ()
    held, remapped = list(held), []
    for task in held:
        try:
            indices, identities = locate(task.gpu_identities, gpus.gpus if gpus is not None else ())
        except GpuNotFound as lost:
            index = task.gpus[task.gpu_identities.index(lost.identity)]
            named = ", ".join(filter(None, (known[index].node if index < len(known) else "",
                                            f"device {lost.identity.device}", lost.identity.uuid)))
            raise GovernorError(f"{config.file}: capacity.gpus: GPU {index} ({named}) is held by task {task.id} "
                                f"and this config {_lacks(lost)}; change it once that task has ended") from None
        if (indices, identities) != (task.gpus, task.gpu_identities):
            remapped.append(replace(task, gpus=indices, gpu_identities=identities))
    moved = {task.id: task for task in remapped}
    both = clash(moved.get(task.id, task) for task in held)
    if both is not None:
        index, first, second = both
        raise GovernorError(f"{config.file}: capacity.gpus: tasks {first.id} and {second.id} would both hold "
                            f"GPU {index} ({gpus.gpus[index].node}) under this config: it cannot tell their GPUs "
                            f"apart; change it once one of them has ended")
    return remapped


def readopted(config: Config, inventory: GpuInventory | None, task: Task) -> Task:
    """``task``, read back from its record at a restart, holding its GPUs by their indices
    in ``inventory`` (the one in force), found by identity; a record written before identities
    holds indices, taken as today's inventory's (as such a daemon took them).

    Raises:
        GovernorError: the inventory lacks a GPU the task holds, or cannot tell it from
            another: the daemon must not start and hand it to another task. The message
            names the task, the GPU and what to do.
    """
    if not task.gpus and not task.gpu_identities:
        return task
    gpus = inventory.gpus if inventory is not None else ()

    def refused(gpu: str, lacks: str) -> GovernorError:
        return GovernorError(f"{config.file}: capacity.gpus: task {task.id} (group {task.group}) holds GPU "
                             f"{gpu} and this config {lacks}: the daemon does not start, lest another task get "
                             f"it. List that GPU again, start the daemon and stop the task (governor stop "
                             f"{task.id}), then change the config")

    identities = task.gpu_identities
    if not identities:
        beyond = [index for index in task.gpus if index >= len(gpus)]
        if beyond:
            raise refused(f"{beyond[0]} (by index: an older record)", f"lists {len(gpus)} GPUs")
        identities = tuple(gpus[index].identity for index in task.gpus)
    try:
        indices, identities = locate(identities, gpus)
    except GpuNotFound as lost:
        raise refused(str(lost.identity), _lacks(lost)) from None
    return replace(task, gpus=indices, gpu_identities=identities)


def renumbered(old: GpuInventory | None, inventory: GpuInventory | None, draining: Mapping[int, str]) -> dict[int, str]:
    """The draining GPUs (index → the ended task that held it, :meth:`Tasks.draining
    <governor.core.state.Tasks.draining>`) of the inventory ``old``, by their indices in the
    inventory in force (found by identity, as held ones are). A GPU it no longer governs
    is left out (there is no hand-over of a node governor does not guard); one it cannot
    tell from others drains at each index it could be (they share a node: MIG instances
    without UUIDs)."""
    known = old.gpus if old is not None else ()
    now = inventory.gpus if inventory is not None else ()
    moved: dict[int, str] = {}
    for index, ended in draining.items():
        if index < len(known):
            moved.update((gpu.index, ended) for gpu in now if known[index].identity.matches(gpu.identity))
    return moved


def starting(inventory: GpuInventory | None, task: Task, taken: Collection[int]) -> Task:
    """``task``, given its GPUs under an inventory that a reload may have replaced since
    (while its cgroup was made), holding them by their indices in ``inventory`` (the one in force),
    found by identity.

    Args:
        taken: the indices no starting task may get (held by another, or draining).

    Raises:
        GovernorError: a GPU it was given is not in the inventory any more (or cannot be
            told from another), or is now at an index in ``taken``: the launch is refused.
    """
    if not task.gpus:
        return task
    try:
        indices, identities = locate(task.gpu_identities, inventory.gpus if inventory is not None else ())
    except GpuNotFound as lost:
        raise GovernorError(f"task {task.id} cannot start: a reload while it started changed the GPUs: {lost}; "
                            f"launch it again") from None
    clash = sorted(set(indices) & set(taken))
    if clash:
        raise GovernorError(f"task {task.id} cannot start: a reload while it started renumbered the GPUs and "
                            f"GPU {clash[0]} is held by another task or draining; launch it again")
    return replace(task, gpus=indices, gpu_identities=identities)


def identities(inventory: GpuInventory, indices: Iterable[int]) -> tuple[GpuIdentity, ...]:
    """The identities of the GPUs at ``indices`` of ``inventory`` (the one in force) (a task's
    :attr:`~governor.core.state.Task.gpu_identities`, from its ``gpus``)."""
    return tuple(inventory.gpus[index].identity for index in indices)


def denied_devices(inventory: GpuInventory | None, gpus: Iterable[int]) -> tuple[Device, ...]:
    """The device nodes a task holding the GPUs ``gpus`` (indexes, ``Task.gpus``) may not
    open (``("c", major, minor)``): every governed GPU's but those it holds (a MIG
    instance's node is its GPU's, open to each instance's holder), and NVIDIA's control
    nodes too when it holds none. Empty when no GPU is governed (``inventory`` None): governor then guards no
    device."""
    if inventory is None:
        return ()
    held = set(gpus)
    allowed = {(g.major, g.minor) for g in inventory.gpus if g.index in held}
    nodes = dict.fromkeys((g.major, g.minor) for g in inventory.gpus if (g.major, g.minor) not in allowed)
    if not held:
        nodes.update(dict.fromkeys((major, minor) for _, major, minor in inventory.control))
    return tuple(("c", major, minor) for major, minor in nodes)


def _lacks(lost: GpuNotFound) -> str:
    """What a config does to a held GPU it does not have once: ``drops it`` (none of its
    GPUs is it), lists several it could be (MIG instances of one node without UUIDs), or
    finds it where it finds another GPU the same task holds."""
    if lost.same_as is not None:
        return f"finds it where it finds GPU {lost.same_as} too"
    return "drops it" if not lost.candidates else f"cannot tell it apart from others ({lost.candidates} match)"


def clash(tasks: Iterable[Task]) -> tuple[int, Task, Task] | None:
    """The first GPU index two of ``tasks`` hold (identities that the inventory in force finds
    at one place: one by UUID, one by device number alone), and those two; None when none is."""
    holders: dict[int, Task] = {}
    for task in tasks:
        for index in task.gpus:
            if holders.setdefault(index, task) is not task:
                return index, holders[index], task
    return None
