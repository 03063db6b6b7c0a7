"""Which device of a class (GPUs, or any other: :mod:`governor.core.devices`) a task holds, by
identity: its node's device number and, where its provider knows one, its UUID.

Governor's index of a device (:attr:`governor.core.devices.Device.index`) is only its place in
today's inventory (``capacity.gpus``' order, or NVML's): reordering the list, or a device added
before it, gives the same index to another device. A task's record therefore keeps each device
it holds by identity, and a daemon that restarts or reloads finds it again in the new inventory
(:func:`locate`). A UUID names a GPU (a MIG instance: one of the instances sharing its parent's
node) wherever it is; a listed node NVML does not know, and a device of a class without UUIDs,
has only its device number.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["DeviceIdentity", "DeviceNotFound", "locate"]

_DEVICE = re.compile(r"(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,9})")
_MAX_UUID_CHARS = 96  # NVML's are 40 (GPU-…) to 44 (MIG-…): a longer one is not NVML's


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """One device as a task's record names it.

    Attributes:
        device: its node's device number, ``"MAJ:MIN"`` (``"195:0"`` for ``/dev/nvidia0``),
            as the devices controller spells it.
        uuid: ``GPU-…`` or ``MIG-…`` from NVML; None where its provider knows none.
    """

    device: str
    uuid: str | None = None

    def matches(self, other: DeviceIdentity) -> bool:
        """Whether ``other`` is the same device: by UUID when both have one, else by device number."""
        if self.uuid is not None and other.uuid is not None:
            return self.uuid == other.uuid
        return self.device == other.device

    def to_record(self) -> dict:
        """``{"device": "MAJ:MIN", "uuid": str | None}``, as a task record keeps it."""
        return {"device": self.device, "uuid": self.uuid}

    @classmethod
    def from_record(cls, value: object) -> DeviceIdentity:
        """The identity a task record holds (:meth:`to_record`).

        Raises:
            ValueError: not an object of exactly ``device`` (``MAJ:MIN``, decimal) and
                ``uuid`` (a string of at most 96 characters, or null).
        """
        if not isinstance(value, dict) or set(value) != {"device", "uuid"}:
            raise ValueError('expected {"device": "MAJ:MIN", "uuid": ...}')
        device, uuid = value["device"], value["uuid"]
        if not isinstance(device, str) or not _DEVICE.fullmatch(device):
            raise ValueError(f"device {device!r} is not MAJ:MIN")
        if uuid is not None and not (isinstance(uuid, str) and 0 < len(uuid) <= _MAX_UUID_CHARS and uuid.isprintable()):
            raise ValueError("uuid is not a UUID")
        return cls(device, uuid)

    def __str__(self) -> str:
        """``195:0 (GPU-…)``, or ``195:0`` without a UUID: how messages name it."""
        return f"{self.device} ({self.uuid})" if self.uuid else self.device


class DeviceNotFound(LookupError):
    """A held device that an inventory does not have once (none of its devices is that one, or
    several could be), or finds where it finds another held one too.

    Attributes:
        identity: the device looked for; candidates: how many of the inventory's matched it (0
            or more than 1; 1 with ``same_as``); same_as: the held device found at the same place
            (one by UUID, one by device number alone), or None; noun: the class's word for
            one in messages (``GPU``).
    """

    def __init__(self, identity: DeviceIdentity, candidates: int, noun: str, same_as: DeviceIdentity | None = None):
        self.identity = identity
        self.candidates = candidates
        self.same_as = same_as
        where = ("is not in the inventory" if not candidates
                 else f"is where {same_as} is too in the inventory" if same_as is not None
                 else f"could be any of {candidates} {noun}s of the inventory")
        super().__init__(f"{noun} {identity} {where}")


class InventoryEntry(Protocol):
    """What :func:`locate` reads of a device of the inventory (:class:`governor.core.devices.Device`,
    :class:`governor.core.gpus.Gpu`, which build on this module: named here by their shape)."""

    @property
    def index(self) -> int: ...  # its place in the inventory

    @property
    def identity(self) -> DeviceIdentity: ...


def locate(held: Sequence[DeviceIdentity], devices: Sequence[InventoryEntry],
           noun: str) -> tuple[tuple[int, ...], tuple[DeviceIdentity, ...]]:
    """Where each of ``held`` is in an inventory: its index there, and its identity as the
    inventory knows it now (a UUID NVML learned since, a device number that changed).

    Args:
        held: the devices of one class a task holds, by identity.
        devices: the class's inventory (:attr:`governor.core.devices.Inventory.devices`,
            ``devices[i].index == i``).
        noun: the class's word for one, for messages.

    Returns:
        The indices and the identities, each in the order of ``held``.

    Raises:
        DeviceNotFound: the first of ``held`` that matches no device of ``devices``, or several,
            or the one another of ``held`` matches too (two devices of one task cannot be one).
    """
    indices, identities = [], []
    for identity in held:
        found = [device for device in devices if identity.matches(device.identity)]
        if len(found) != 1:
            raise DeviceNotFound(identity, len(found), noun)
        if found[0].index in indices:
            raise DeviceNotFound(identity, 1, noun, same_as=held[indices.index(found[0].index)])
        indices.append(found[0].index)
        identities.append(found[0].identity)
    return tuple(indices), tuple(identities)
