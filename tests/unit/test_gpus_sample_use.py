"""governor.host.nvml's ``sample_use`` against a fake NVML (:mod:`support.nvml`): each GPU's
utilization and memory and each process's GPU memory, what NVML cannot tell left out, and no
sample at all without NVML or without UUIDs."""

import sys

from governor.core.gpus import Gpu, GpuInventory, GpuUse
from governor.host.nvml import NVIDIA_MAJOR, discover, sample_use
from support.nvml import DRIVER_NOT_LOADED, fake_nvml, two_gpus


def test_sample_use_reports_utilization_memory_and_per_process_memory(nvml):
    inventory = discover("auto", control=())

    use = sample_use(inventory)

    # GPU 0 busy half the time; the MIG instances have no utilization (NotSupported), the
    # second no memory (lost) and no process list (library mismatch): left out, not raised.
    assert use == GpuUse(utilization={0: 0.5}, memory_used={0: 1 << 30, 1: 5 << 30},
                         process_memory={10: 150, 12: 7})
    assert nvml.inits == nvml.shutdowns == 2


def test_sample_use_leaves_out_a_gpu_nvml_no_longer_knows(nvml):
    inventory = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", NVIDIA_MAJOR, 0, "GPU-gone"),
                                   Gpu(1, "/dev/nvidia0", NVIDIA_MAJOR, 0, "GPU-aaaa")), control=(), source="nvml")

    use = sample_use(inventory)

    assert use is not None
    assert (use.utilization, use.memory_used) == ({1: 0.5}, {1: 1 << 30})


def test_sample_use_is_none_without_nvml(no_nvml):
    inventory = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", NVIDIA_MAJOR, 0, "GPU-aaaa"),), control=(), source="nvml")

    assert sample_use(inventory) is None


def test_sample_use_is_none_without_uuids_and_does_not_start_nvml(nvml):
    inventory = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", NVIDIA_MAJOR, 0, None),), control=(), source="listed")

    assert sample_use(inventory) is None
    assert nvml.inits == 0


def test_sample_use_is_none_when_nvml_init_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(two_gpus(), init_error=DRIVER_NOT_LOADED))
    inventory = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", NVIDIA_MAJOR, 0, "GPU-aaaa"),), control=(), source="nvml")

    assert sample_use(inventory) is None
