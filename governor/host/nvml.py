"""NVIDIA's GPUs as a device class (:data:`PROVIDER`, registered against the registry's ``gpu``
entry in :data:`governor.host.devices.PROVIDERS`): their major number, their control nodes,
finding the GPUs ``[capacity] gpus`` names, and asking NVML how they are used: every NVML
call governor makes is in this module.

``[capacity] gpus = "auto"`` asks NVML (the ``pynvml`` module of the ``nvidia-ml-py`` package,
imported only when needed: a host without GPUs need not carry it); ``gpus = ["/dev/nvidia0", …]``
takes the listed character device nodes as they are and asks NVML only for their UUIDs.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from types import ModuleType

from governor.core.devices import Provider
from governor.core.state import GPU
from governor.core.gpus import Gpu, GpuError, GpuInventory, GpuUse

__all__ = ["CONTROL_NODES", "NVIDIA_MAJOR", "PROVIDER", "discover", "processes_on", "sample_use"]

NVIDIA_MAJOR = 195  # the kernel's devices.txt: "195 char Nvidia graphics controller"
# What every CUDA process opens besides its GPUs ([capacity] gpu_control's default).
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")

_LISTED = "[capacity] gpus"
_AUTO = '[capacity] gpus = "auto"'
_INSTALL = "install nvidia-ml-py (pip install 'drf-governor[nvidia]') and the NVIDIA driver"


def discover(spec: str | Sequence[str], control: Sequence[str] | None = None) -> GpuInventory:
    """The GPUs ``[capacity] gpus`` names.

    Args:
        spec: ``"auto"``: every GPU NVML sees, each MIG instance in place of a GPU with MIG
            enabled; or a list of character device node paths, whose UUIDs NVML supplies when it
            can (by minor number; else None and a note says so).
        control: the control node paths (None: :data:`CONTROL_NODES`); those that do not exist
            are left out.

    Returns:
        The inventory, GPUs numbered 0..n-1 in NVML's order or the list's.

    Raises:
        GpuError: NVML is not importable or ``nvmlInit`` fails (``"auto"``), NVML finds no GPU,
            a listed path is missing or not a character device, a node is listed twice, the
            list is empty, or ``spec`` is another string.
    """
    if isinstance(spec, str):
        if spec != "auto":
            raise GpuError(f"{_LISTED} = {spec!r}", 'expected "auto" or a list of device node paths')
        gpus, notes = _discover_nvml()
        source = "nvml"
    else:
        gpus, notes = _discover_listed(list(spec))
        source = "listed"
    nodes, control_notes = _control_nodes(CONTROL_NODES if control is None else control)
    return GpuInventory(gpus=tuple(gpus), control=nodes, source=source, notes=tuple(notes + control_notes))


def _governs(config) -> bool:
    return config.gpus is not None


def _find(config, discover_: Callable[..., GpuInventory] | None = None) -> GpuInventory | None:
    """The GPUs ``config``'s ``capacity.gpus`` and ``capacity.gpu_control`` name (through
    ``discover_`` in place of :func:`discover`: tests pass a fake); None where it governs none."""
    if not _governs(config):
        return None
    return (discover_ or discover)(config.gpus, config.gpu_control)


def sample_use(inventory: GpuInventory) -> GpuUse | None:
    """What NVML reports now for the inventory's GPUs, found by UUID.

    Returns:
        The use, leaving out each entry whose NVML call failed (a MIG instance has no
        utilization, for one); None when NVML is not importable or does not initialize, or
        no GPU in the inventory has a UUID.

    Never raises for NVML errors: it is called from the metrics endpoint.
    """
    with _session(inventory, None) as opened:
        if opened is None:
            return None
        nvml, failures, uuids = opened
        use = GpuUse(utilization={}, memory_used={}, process_memory={})
        for index, uuid in uuids.items():
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            except failures:
                continue
            with suppress(*failures):
                use.utilization[index] = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100
            with suppress(*failures):
                use.memory_used[index] = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
            with suppress(*failures):
                for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    # None: NVML may not say (no privilege for a MIG parent's aggregate, WDDM).
                    if process.usedGpuMemory is not None:
                        use.process_memory[process.pid] = (use.process_memory.get(process.pid, 0)
                                                           + int(process.usedGpuMemory))
        return use


def processes_on(inventory: GpuInventory, indices: Sequence[int]) -> dict[int, set[int]] | None:
    """The pids NVML says run on each of ``indices`` (compute and graphics contexts), found by
    UUID; a GPU whose list NVML cannot give is left out. None without NVML or UUIDs.

    Never raises for NVML errors: the GPU hand-over asks, and has the ``/proc`` scan besides.
    """
    with _session(inventory, indices) as opened:
        if opened is None:
            return None
        nvml, failures, uuids = opened
        found: dict[int, set[int]] = {}
        for index, uuid in uuids.items():
            with suppress(*failures):
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
                listed = [*nvml.nvmlDeviceGetComputeRunningProcesses(handle),
                          *nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)]
                found[index] = {int(process.pid) for process in listed}
        return found


@contextmanager
def _session(inventory: GpuInventory, indices: Sequence[int] | None):
    """NVML initialised for the inventory's GPUs with a UUID (only ``indices``, unless None):
    ``(nvml, its failure types, index → UUID)``, shut down afterwards; None when NVML is not
    importable, does not initialise, or no such GPU has a UUID."""
    nvml = _import_nvml()
    uuids = {gpu.index: gpu.uuid for gpu in inventory.gpus
             if gpu.uuid and (indices is None or gpu.index in indices)}
    if nvml is None or not uuids:
        yield None
        return
    failures = _failures(nvml)
    try:
        nvml.nvmlInit()
    except failures:
        yield None
        return
    try:
        yield nvml, failures, uuids
    finally:
        _shutdown(nvml)


def _import_nvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _failures(nvml: ModuleType) -> tuple[type[BaseException], ...]:
    # NVMLLibraryMismatchError (an unversioned call the installed driver lacks) is not an
    # NVMLError subclass.
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    return (nvml.NVMLError, mismatch) if mismatch else (nvml.NVMLError,)


def _shutdown(nvml: ModuleType) -> None:
    # After every nvmlInit that succeeded: NVML counts them, and a missed shutdown keeps it open.
    with suppress(nvml.NVMLError):
        nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    # Older pynvml returns bytes from nvmlDeviceGetUUID/GetName, newer decodes them.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _discover_nvml() -> tuple[list[Gpu], list[str]]:
    nvml = _import_nvml()
    if nvml is None:
        raise GpuError(_AUTO, f'NVML is not available: {_INSTALL}, or list the device nodes '
                              f'(gpus = ["/dev/nvidia0", …])')
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        raise GpuError(_AUTO, f"nvmlInit failed: {e}") from e
    try:
        gpus, notes = _nvml_devices(nvml)
    finally:
        _shutdown(nvml)
    if not gpus:
        raise GpuError(_AUTO, "no GPU found" + (f" ({'; '.join(notes)})" if notes else ""))
    return gpus, notes


def _nvml_devices(nvml: ModuleType) -> tuple[list[Gpu], list[str]]:
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as e:
        raise GpuError(_AUTO, f"NVML cannot count the GPUs: {e}") from e
    gpus: list[Gpu] = []
    notes: list[str] = []
    for n in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(n)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            name = _text(nvml.nvmlDeviceGetName(handle))
            minor = nvml.nvmlDeviceGetMinorNumber(handle)
        except nvml.NVMLError as e:
            # One GPU NVML cannot describe (lost, no permission) should not hide the others.
            notes.append(f"GPU {n} left out: NVML: {e}")
            continue
        node = f"/dev/nvidia{minor}"
        if not _mig_enabled(nvml, handle):
            gpus.append(Gpu(len(gpus), node, NVIDIA_MAJOR, minor, uuid, name))
            continue
        instances = 0
        for mig_uuid, mig_name in _mig_devices(nvml, handle, n, notes):
            gpus.append(Gpu(len(gpus), node, NVIDIA_MAJOR, minor, mig_uuid, mig_name, mig_parent=minor))
            instances += 1
        if instances:
            notes.append(f"MIG enabled on GPU {n}: {instances} instance{'s' if instances != 1 else ''}")
        else:
            # CUDA cannot run on a MIG-enabled GPU itself, only on its instances.
            notes.append(f"MIG enabled on GPU {n} but it has no MIG instances: not offered")
    return gpus, notes


def _mig_enabled(nvml: ModuleType, handle: object) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:
        # NotSupported on GPUs without MIG.
        return False
    return current == nvml.NVML_DEVICE_MIG_ENABLE


def _mig_devices(nvml: ModuleType, handle: object, n: int, notes: list[str]) -> Iterator[tuple[str, str]]:
    try:
        slots = nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    except nvml.NVMLError as e:
        notes.append(f"GPU {n}: NVML cannot count its MIG instances: {e}")
        return
    for slot in range(slots):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except (nvml.NVMLError_NotFound, nvml.NVMLError_InvalidArgument):
            # Slots run up to the most instances the GPU could hold; the empty ones are not found.
            continue
        except nvml.NVMLError as e:
            notes.append(f"GPU {n} MIG instance {slot} left out: NVML: {e}")
            continue
        try:
            described = _text(nvml.nvmlDeviceGetUUID(mig)), _text(nvml.nvmlDeviceGetName(mig))
        except nvml.NVMLError as e:
            notes.append(f"GPU {n} MIG instance {slot} left out: NVML: {e}")
            continue
        yield described


def _discover_listed(paths: list[str]) -> tuple[list[Gpu], list[str]]:
    if not paths:
        raise GpuError(_LISTED, "no GPU listed")
    numbers: dict[tuple[int, int], str] = {}
    for path in paths:
        major, minor = _char_device(path)
        if (major, minor) in numbers:
            first = numbers[(major, minor)]
            same = "listed twice" if first == path else f"the same device as {first} ({major}:{minor})"
            raise GpuError(f"{_LISTED}: {path}", same)
        numbers[(major, minor)] = path
    known, notes = _nvml_by_minor()
    gpus = []
    for index, ((major, minor), path) in enumerate(numbers.items()):
        uuid, name = (known or {}).get(minor, (None, "")) if major == NVIDIA_MAJOR else (None, "")
        if uuid is None and known is not None:
            notes.append(f"{path}: NVML knows no GPU at {major}:{minor}: CUDA is told its minor number")
        gpus.append(Gpu(index, path, major, minor, uuid, name))
    return gpus, notes


def _char_device(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError as e:
        raise GpuError(f"{_LISTED}: {path}", f"cannot stat: {e.strerror}") from e
    if not stat.S_ISCHR(st.st_mode):
        raise GpuError(f"{_LISTED}: {path}", "not a character device")
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def _nvml_by_minor() -> tuple[dict[int, tuple[str, str]] | None, list[str]]:
    """Minor number → (UUID, name) of every GPU NVML sees; None, with a note, without NVML."""
    nvml = _import_nvml()
    if nvml is None:
        return None, [f"NVML is not available ({_INSTALL}): CUDA is told the listed GPUs by minor number"]
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return None, [f"nvmlInit failed ({e}): CUDA is told the listed GPUs by minor number"]
    known: dict[int, tuple[str, str]] = {}
    notes: list[str] = []
    try:
        count = nvml.nvmlDeviceGetCount()
        for n in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(n)
                minor = nvml.nvmlDeviceGetMinorNumber(handle)
                known[minor] = (_text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle)))
            except nvml.NVMLError as e:
                notes.append(f"NVML cannot describe GPU {n}: {e}")
    except nvml.NVMLError as e:
        notes.append(f"NVML cannot count the GPUs: {e}")
    finally:
        _shutdown(nvml)
    return known, notes


def _control_nodes(paths: Sequence[str]) -> tuple[tuple[tuple[str, int, int], ...], list[str]]:
    nodes = []
    notes = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            nodes.append((path, os.major(st.st_rdev), os.minor(st.st_rdev)))
        else:
            notes.append(f"control node {path} is not a character device: left out")
    return tuple(nodes), notes


# NVIDIA's GPUs as a device class (:mod:`governor.host.devices`): NVML's process list is its own.
PROVIDER = Provider(GPU, "capacity.gpus", _governs, _find, processes_on)
