"""A fake NVML for the tests of governor.host.nvml: a module object a test puts in
sys.modules["pynvml"] that has only the functions and error classes governor calls, shaped like
nvidia-ml-py's (handles are opaque, errors carry an NVML code, MIG mode is a [current, pending]
list, a process's usedGpuMemory may be None); :func:`two_gpus` is the host most tests see."""

from __future__ import annotations

import types
from dataclasses import dataclass, field


NOT_SUPPORTED, NOT_FOUND, INVALID_ARGUMENT, DRIVER_NOT_LOADED, GPU_IS_LOST = 3, 6, 2, 9, 15
_STRINGS = {NOT_SUPPORTED: "Not Supported", NOT_FOUND: "Not Found", INVALID_ARGUMENT: "Invalid Argument",
            DRIVER_NOT_LOADED: "Driver Not Loaded", GPU_IS_LOST: "GPU is lost"}


class NVMLError(Exception):
    value = 999

    def __init__(self, value: int | None = None):
        super().__init__()
        if value is not None:
            self.value = value

    def __str__(self):
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_NotFound(NVMLError):  # noqa: N801 - pynvml's names
    value = NOT_FOUND


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
    value = INVALID_ARGUMENT


class NVMLLibraryMismatchError(Exception):
    """Not an NVMLError in pynvml either."""


@dataclass(eq=False)
class Device:
    uuid: str | bytes
    name: str | bytes = "NVIDIA A100-SXM4-40GB"
    minor: int = 0
    mig_mode: list[int] | int = NOT_SUPPORTED  # [current, pending], or the error code GetMigMode raises
    max_mig: int = 0
    migs: dict[int, Device] = field(default_factory=dict)  # slot → MIG device
    util: int | Exception = 0
    used: int | Exception = 0
    procs: list[tuple[int, int | None]] | Exception = field(default_factory=list)
    lost: bool = False


def fake_nvml(devices: list[Device], *, init_error: int | None = None, count_error: int | None = None):
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = NVMLError
    nvml.NVMLError_NotFound = NVMLError_NotFound
    nvml.NVMLError_InvalidArgument = NVMLError_InvalidArgument
    nvml.NVMLLibraryMismatchError = NVMLLibraryMismatchError
    nvml.NVML_DEVICE_MIG_DISABLE, nvml.NVML_DEVICE_MIG_ENABLE = 0, 1
    nvml.inits = nvml.shutdowns = 0
    by_uuid = {d.uuid.decode() if isinstance(d.uuid, bytes) else d.uuid: d for d in devices}
    by_uuid.update({m.uuid: m for d in devices for m in d.migs.values()})

    def nvmlInit():
        if init_error is not None:
            raise NVMLError(init_error)
        nvml.inits += 1

    def nvmlShutdown():
        assert nvml.shutdowns < nvml.inits, "nvmlShutdown without a matching nvmlInit"
        nvml.shutdowns += 1

    def initialized():
        if nvml.inits == nvml.shutdowns:
            raise NVMLError(1)

    def nvmlDeviceGetCount():
        initialized()
        if count_error is not None:
            raise NVMLError(count_error)
        return len(devices)

    def nvmlDeviceGetHandleByIndex(index):
        initialized()
        if devices[index].lost:
            raise NVMLError(GPU_IS_LOST)
        return devices[index]

    def nvmlDeviceGetHandleByUUID(uuid):
        initialized()
        if uuid not in by_uuid:
            raise NVMLError_NotFound()
        return by_uuid[uuid]

    def value(v):
        if isinstance(v, BaseException):
            raise v
        return v

    def nvmlDeviceGetMigMode(handle):
        if isinstance(handle.mig_mode, int):
            raise NVMLError(handle.mig_mode)
        return list(handle.mig_mode)

    def nvmlDeviceGetMigDeviceHandleByIndex(handle, index):
        if index >= handle.max_mig:
            raise NVMLError_InvalidArgument()
        if index not in handle.migs:
            raise NVMLError_NotFound()
        return handle.migs[index]

    def nvmlDeviceGetMinorNumber(handle):
        return handle.minor

    def nvmlDeviceGetComputeRunningProcesses(handle):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in value(handle.procs)]

    nvml.__dict__.update(
        nvmlInit=nvmlInit, nvmlShutdown=nvmlShutdown, nvmlDeviceGetCount=nvmlDeviceGetCount,
        nvmlDeviceGetHandleByIndex=nvmlDeviceGetHandleByIndex, nvmlDeviceGetHandleByUUID=nvmlDeviceGetHandleByUUID,
        nvmlDeviceGetUUID=lambda h: h.uuid, nvmlDeviceGetName=lambda h: h.name,
        nvmlDeviceGetMinorNumber=nvmlDeviceGetMinorNumber, nvmlDeviceGetMigMode=nvmlDeviceGetMigMode,
        nvmlDeviceGetMaxMigDeviceCount=lambda h: h.max_mig,
        nvmlDeviceGetMigDeviceHandleByIndex=nvmlDeviceGetMigDeviceHandleByIndex,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=value(h.util), memory=0),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=value(h.used), total=40 << 30, free=0),
        nvmlDeviceGetComputeRunningProcesses=nvmlDeviceGetComputeRunningProcesses,
    )
    return nvml


def two_gpus() -> list[Device]:
    """GPU 0 whole (MIG not supported, old pynvml's bytes); GPU 1 with MIG on and 2 of 7 slots used."""
    mig_a = Device(uuid="MIG-1111", name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", util=NVMLError(NOT_SUPPORTED),
                   used=5 << 30, procs=[(10, 50), (12, 7)])
    mig_b = Device(uuid="MIG-2222", name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", util=NVMLError(NOT_SUPPORTED),
                   used=NVMLError(GPU_IS_LOST), procs=NVMLLibraryMismatchError("use _v2"))
    return [
        Device(uuid=b"GPU-aaaa", name=b"NVIDIA A100-SXM4-40GB", minor=0, util=50, used=1 << 30,
               procs=[(10, 100), (11, None)]),
        Device(uuid="GPU-bbbb", minor=3, mig_mode=[1, 1], max_mig=7, migs={0: mig_a, 2: mig_b}),
    ]
