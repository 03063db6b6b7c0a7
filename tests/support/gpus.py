"""What the GPU tests of the daemon share: a two-GPU config and inventory on the in-memory
cgroup driver that keeps each cgroup's device rules (:class:`DeviceDriver`)."""

from governor.cgroups.device_rules import devices_text
from governor.cgroups.limits import V2_DEVICE_PROGRAM
from governor.core.gpus import Gpu, GpuInventory
from support.daemons import FakeDriver


CONFIG = """
[capacity]
cpu = 2
memory = "4G"
gpus = ["/dev/nvidia0", "/dev/nvidia1"]
[groups.A]
users = ["root"]
[groups.B]
users = ["root"]
[sessions]
enabled = false
"""
INVENTORY = GpuInventory(
    gpus=(Gpu(0, "/dev/nvidia0", 195, 0, "GPU-aaaa", "Fake A100"), Gpu(1, "/dev/nvidia1", 195, 1, "GPU-bbbb")),
    control=(("/dev/nvidiactl", 195, 255),), source="listed")
GPU0, GPU1, CONTROL = ("c", 195, 0), ("c", 195, 1), ("c", 195, 255)


def gpu_holders(tasks) -> dict[int, str]:
    """GPU index → the task holding it (:meth:`Tasks.holders <governor.core.state.Tasks.holders>`, GPUs only)."""
    return {index: task for (entry, index), task in tasks.holders().items() if entry == "gpu"}


def gpus_draining(tasks) -> dict[int, str]:
    """GPU index → the ended task that held it, for each draining GPU."""
    return {index: task for (entry, index), task in tasks.draining().items() if entry == "gpu"}


class DeviceDriver(FakeDriver):
    """The in-memory driver, keeping each cgroup's device rules as the v2 driver records them
    (one "device program" entry), and the lists it was asked to put in force."""

    def __init__(self):
        super().__init__()
        self.denied: dict[str, tuple] = {}  # cgroup → the denied devices in force
        self.device_writes: list[tuple[str, tuple]] = []  # (cgroup, list) for each change, in order

    def _apply_one(self, rel, limits):
        before = self._written.get(rel, {}).get(V2_DEVICE_PROGRAM, "")
        written, errors = super()._apply_one(rel, limits)  # rewrites the record without devices
        wanted = devices_text(limits.devices_denied)
        if not errors:
            if wanted:
                self._record(rel)[V2_DEVICE_PROGRAM] = wanted
            if wanted != before:
                self.denied[rel] = limits.devices_denied
                self.device_writes.append((rel, limits.devices_denied))
                written.append(V2_DEVICE_PROGRAM[0])
        return written, errors

    def device_guard_problem(self):
        return None

