"""Which GPU a task holds, by identity: its node's device number and its UUID.

Governor's index of a GPU (:attr:`governor.core.gpus.Gpu.index`) is only its place in today's
inventory (``capacity.gpus``' order, or NVML's): reordering the list, or a GPU added before
it, gives the same index to another device. A task's record therefore keeps each GPU it holds
by identity, and a daemon that restarts or reloads finds it again in the new inventory
(:func:`locate`). A UUID names a GPU (a MIG instance: one of the instances sharing its
parent's node) wherever it is; a listed node NVML does not know has only its device number.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["GpuIdentity", "GpuNotFound", "locate"]

_DEVICE = re.compile(r"(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,9})")
_MAX_UUID_CHARS = 96  # NVML's are 40 (GPU-…) to 44 (MIG-…): a longer one is not NVML's


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """One GPU as a task's record names it.

    Attributes:
        device: its node's device number, ``"MAJ:MIN"`` (``"195:0"`` for ``/dev/nvidia0``),
            as the devices controller spells it.
        uuid: ``GPU-…`` or ``MIG-…`` from NVML; None where NVML did not know it.
    """

    device: str
    uuid: str | None = None

    def matches(self, other: GpuIdentity) -> bool:
        """Whether ``other`` is the same GPU: by UUID when both have one, else by device number."""
        if self.uuid is not None and other.uuid is not None:
            return self.uuid == other.uuid
        return self.device == other.device

    def to_record(self) -> dict:
        """``{"device": "MAJ:MIN", "uuid": str | None}``, as a task record keeps it."""
        return {"device": self.device, "uuid": self.uuid}

    @classmethod
    def from_record(cls, value: object) -> GpuIdentity:
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


class GpuNotFound(LookupError):
    """A held GPU that an inventory does not have once (none of its GPUs is that one, or
    several could be), or finds where it finds another held one too.

    Attributes:
        identity: the GPU looked for; candidates: how many of the inventory's matched it (0
            or more than 1; 1 with ``same_as``); same_as: the held GPU found at the same place
            (one by UUID, one by device number alone), or None.
    """

    def __init__(self, identity: GpuIdentity, candidates: int, same_as: GpuIdentity | None = None):
        self.identity = identity
        self.candidates = candidates
        self.same_as = same_as
        where = ("is not in the inventory" if not candidates
                 else f"is where {same_as} is too in the inventory" if same_as is not None
                 else f"could be any of {candidates} GPUs of the inventory")
        super().__init__(f"GPU {identity} {where}")


class InventoryEntry(Protocol):
    """What :func:`locate` reads of a GPU of the inventory (:class:`governor.core.gpus.Gpu`, which
    builds on this module: named here by its shape, not imported)."""

    @property
    def index(self) -> int: ...  # its place in the inventory

    @property
    def identity(self) -> GpuIdentity: ...


def locate(held: Sequence[GpuIdentity], gpus: Sequence[InventoryEntry]) -> tuple[tuple[int, ...], tuple[GpuIdentity, ...]]:
    """Where each of ``held`` is in an inventory: its index there, and its identity as the
    inventory knows it now (a UUID NVML learned since, a device number that changed).

    Args:
        held: the GPUs a task holds, by identity.
        gpus: the inventory (:attr:`governor.core.gpus.GpuInventory.gpus`, ``gpus[i].index == i``).

    Returns:
        The indices and the identities, each in the order of ``held``.

    Raises:
        GpuNotFound: the first of ``held`` that matches no GPU of ``gpus``, or several, or the
            one another of ``held`` matches too (two GPUs of one task cannot be one GPU).
    """
    indices, identities = [], []
    for identity in held:
        found = [gpu for gpu in gpus if identity.matches(gpu.identity)]
        if len(found) != 1:
            raise GpuNotFound(identity, len(found))
        if found[0].index in indices:
            raise GpuNotFound(identity, 1, same_as=held[indices.index(found[0].index)])
        indices.append(found[0].index)
        identities.append(found[0].identity)
    return tuple(indices), tuple(identities)
