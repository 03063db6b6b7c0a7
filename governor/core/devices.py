"""A device class: an admitted resource of kind ``device`` in the registry
(:data:`governor.config.resources.RESOURCES`) plus the provider that finds its devices on this
host (:data:`governor.host.devices.PROVIDERS`; NVIDIA's GPUs: :data:`governor.host.nvml.PROVIDER`).
Pure: the shapes every class shares, and what the device-cgroup guard denies of them.

A class's inventory (:class:`DeviceInventory`, or a class's own such as
:class:`governor.core.gpus.GpuInventory`) says which character device nodes it governs
(:meth:`DeviceInventory.nodes`): its devices' and the shared control nodes every user of
one also opens (``/dev/nvidiactl``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from governor.core.device_identity import DeviceIdentity

__all__ = ["Device", "DeviceInventory", "Inventory", "Provider", "char_nodes", "denied_nodes"]

Node = tuple[str, int, int]  # ("c", major, minor): a character device, as the device cgroup names it


class Inventory(Protocol):
    """What the guard and placement read of any class's inventory."""

    @property
    def devices(self) -> Sequence[Device]:
        """Its devices, ``devices[i].index == i`` (each with ``index``, ``node``, ``major``,
        ``minor`` and ``identity``)."""

    @property
    def control(self) -> Sequence[tuple[str, int, int]]:
        """The shared control nodes every user of one also opens, ``(path, major, minor)``."""

    def nodes(self) -> frozenset[Node]:
        """Every node of the class: its devices' and its control nodes, ``("c", major, minor)``."""


@dataclass(frozen=True)
class Device:
    """One device of a class with no fields of its own (a class's own, like
    :class:`governor.core.gpus.Gpu`, has these and more).

    Attributes:
        index: governor's number for it, 0..n-1 in discovery order.
        node: its device node path.
        major, minor: the node's device number.
    """

    index: int
    node: str
    major: int
    minor: int

    @property
    def identity(self) -> DeviceIdentity:
        """How a task's record names it: its device number (:mod:`governor.core.device_identity`)."""
        return DeviceIdentity(f"{self.major}:{self.minor}")


@dataclass(frozen=True)
class DeviceInventory:
    """A class's devices found on this host.

    Attributes:
        devices: the devices, ``devices[i].index == i``.
        control: the control nodes that exist, as ``(path, major, minor)``.
        source: how they were found (``"listed"``).
        notes: sentences for check-config.
    """

    devices: tuple[Device, ...]
    control: tuple[tuple[str, int, int], ...] = ()
    source: str = "listed"
    notes: tuple[str, ...] = ()

    def nodes(self) -> frozenset[Node]:
        """Its devices' nodes and its control nodes, ``("c", major, minor)``."""
        return char_nodes(self.devices, self.control)


class Provider(NamedTuple):
    """How one device class is found on a host, registered against its registry entry.

    Attributes:
        entry: the name of its entry in :data:`governor.config.resources.RESOURCES` (kind
            ``device``).
        key: the config key that governs it, as messages name it (``capacity.gpus``).
        governs: config → whether it governs any of the class (``capacity.gpus`` is set), read
            without looking at the host: the daemon opens the device cgroups when one does.
        find: (config, discover) → the class's inventory on this host, or None where the
            config governs none of it; ``discover`` is a stand-in for the provider's own
            discovery (tests pass fakes), None: its own. Raises the class's error (a
            ``GovernorError``) when the configured devices cannot be used.
        listed: (inventory, indices) → index → the pids the class's own tooling says use that
            device (NVML's process list), for the hand-over to find beside ``/proc``'s open
            descriptors; None where the class has no such list, or it cannot be read.
    """

    entry: str
    key: str
    governs: Callable[[object], bool]
    find: Callable[[object, Callable[..., Inventory] | None], Inventory | None]
    listed: Callable[[Inventory, Sequence[int]], Mapping[int, set[int]] | None] | None = None


def char_nodes(devices: Iterable, control: Iterable[tuple[str, int, int]]) -> frozenset[Node]:
    """``devices`` (each with ``.major`` and ``.minor``) and ``control`` (``(path, major,
    minor)``) as character device nodes ``("c", major, minor)``, each once."""
    return frozenset({("c", d.major, d.minor) for d in devices} | {("c", major, minor) for _, major, minor in control})


def denied_nodes(inventories: Iterable[Inventory]) -> list[Node]:
    """Every node of every class in ``inventories``, sorted, each once: what the guard denies
    outside governor's tasks."""
    return sorted(set().union(*(inventory.nodes() for inventory in inventories)))
