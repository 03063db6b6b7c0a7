"""What GPUs this host has: the whole devices governor admits (:class:`GpuInventory`), and what
NVML says of their use (:class:`GpuUse`). :mod:`governor.host.nvml` finds them and asks NVML.

A GPU with MIG enabled is offered as its MIG instances, each a device of its own with a
``MIG-…`` UUID; they share the parent's ``/dev/nvidia<minor>`` node, so the device cgroup
cannot tell them apart and CUDA is pointed at one by its UUID.
"""

from __future__ import annotations

from dataclasses import dataclass

from governor.errors import GovernorError
from governor.core.devices import Node, char_nodes
from governor.core.device_identity import DeviceIdentity

__all__ = ["Gpu", "GpuError", "GpuInventory", "GpuUse"]


class GpuError(GovernorError, ValueError):
    """The configured GPUs cannot be used; the message reads
    ``[capacity] gpus: /x/nvidia9: not a character device``.

    Attributes:
        where: the config key (and the listed path) concerned.
        reason: what is wrong, in words.
    """

    def __init__(self, where: str, reason: str):
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class Gpu:
    """One whole device governor hands out.

    Attributes:
        index: governor's number for it, 0..n-1 in discovery order.
        node: its device node path, e.g. ``/dev/nvidia1``.
        major: the node's major number (NVIDIA's: :data:`governor.host.nvml.NVIDIA_MAJOR`).
        minor: the node's minor number.
        uuid: ``GPU-…`` or ``MIG-…`` from NVML; None for a listed node NVML does not know.
        name: e.g. ``NVIDIA A100-SXM4-40GB``; ``""`` when unknown.
        mig_parent: for a MIG instance, the minor number of the physical GPU it is carved from
            (equal to ``minor``); None for a whole GPU.
    """

    index: int
    node: str
    major: int
    minor: int
    uuid: str | None
    name: str = ""
    mig_parent: int | None = None

    @property
    def identity(self) -> DeviceIdentity:
        """How a task's record names it: device number and UUID (:mod:`governor.core.device_identity`)."""
        return DeviceIdentity(f"{self.major}:{self.minor}", self.uuid)

    def visible_id(self) -> str:
        """What ``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES`` name it by: the UUID, else
        the minor number as a string."""
        return self.uuid if self.uuid else str(self.minor)

    def to_json(self) -> dict:
        """``{"index", "node", "uuid", "name"}``, plus ``"mig_parent"`` for a MIG instance."""
        out: dict = {"index": self.index, "node": self.node, "uuid": self.uuid, "name": self.name}
        if self.mig_parent is not None:
            out["mig_parent"] = self.mig_parent
        return out


@dataclass(frozen=True)
class GpuInventory:
    """The GPUs found, and the shared control nodes every GPU job also needs.

    Attributes:
        gpus: the devices, ``gpus[i].index == i``.
        control: the control nodes that exist, as ``(path, major, minor)``.
        source: ``"nvml"`` (``gpus = "auto"``) or ``"listed"``.
        notes: sentences for check-config (``MIG enabled on GPU 0: 3 instances``).
    """

    gpus: tuple[Gpu, ...]
    control: tuple[tuple[str, int, int], ...]
    source: str
    notes: tuple[str, ...] = ()

    @property
    def devices(self) -> tuple[Gpu, ...]:
        """Its GPUs, as every class's inventory names its devices
        (:class:`governor.core.devices.Inventory`)."""
        return self.gpus

    def nodes(self) -> frozenset[Node]:
        """Its GPUs' nodes and its control nodes, ``("c", major, minor)`` (a device class's
        inventory: :class:`governor.core.devices.Inventory`)."""
        return char_nodes(self.gpus, self.control)


@dataclass(frozen=True)
class GpuUse:
    """What NVML reports at one moment, for the metrics endpoint.

    Attributes:
        utilization: GPU index → fraction of the sample period a kernel ran, 0..1.
        memory_used: GPU index → bytes of device memory in use.
        process_memory: pid → bytes of GPU memory it holds, summed over the inventory's GPUs.
    """

    utilization: dict[int, float]
    memory_used: dict[int, int]
    process_memory: dict[int, int]
