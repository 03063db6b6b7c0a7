"""A stand-in second device class (issue 45, point 3): a registry entry of kind ``device``
(``fpga``) and its provider, registered through the same tables as NVIDIA's GPUs
(:data:`governor.config.resources.RESOURCES`, :data:`governor.host.devices.PROVIDERS`) with no
GPU-named code touched. Its devices are the character nodes a test owns (made with mknod on a
free local major: :mod:`support.device_nodes`, or only numbers on a fake tree).

Run as a script, it is ``governor`` with the class registered: ``python standin_device.py
NODE[,NODE…] GOVERNOR ARGS…`` (the real-kernel tests' daemon wrapper,
:class:`daemon_harness.Governor`'s ``wrapper``)."""

from __future__ import annotations

import os
import runpy
import stat
import sys
from collections.abc import Sequence

from governor.config import resources
from governor.config.resource_values import devices, format_count
from governor.core.devices import Device, DeviceInventory, Provider
from governor.host import devices as providers

ENTRY = resources.Resource(
    "fpga", "devices", resources.ResourceKind.DEVICE, "--fpgas", "N", "Whole stand-in devices (tests only).",
    "fpga", None, devices, True, format_count, lambda config, host: {"fpga": float(len(_nodes))},
    lambda config: ("fpga",) if _nodes else (), noun="FPGA", queue="fpgas_",
    absent="no stand-in device is governed here")
_nodes: list[tuple[str, int, int]] = []  # the class's devices: (path, major, minor)
# Two devices of the unit tests (numbers only, on a fake tree), and the nodes the device cgroup names.
NODES = [("/dev/fpga0", 240, 0), ("/dev/fpga1", 240, 1)]
FPGA0, FPGA1 = ("c", 240, 0), ("c", 240, 1)


def _find(config, discover=None) -> DeviceInventory | None:
    if not _nodes:
        return None
    return DeviceInventory(tuple(Device(i, path, major, minor) for i, (path, major, minor) in enumerate(_nodes)))


PROVIDER = Provider("fpga", "the stand-in devices", lambda config: bool(_nodes), _find)


def numbers(paths: Sequence[str]) -> list[tuple[str, int, int]]:
    """``paths`` (character nodes) as ``(path, major, minor)``."""
    found = []
    for path in paths:
        st = os.stat(path)
        assert stat.S_ISCHR(st.st_mode), f"{path} is not a character device"
        found.append((path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return found


def register(nodes: Sequence[tuple[str, int, int]], setattr_=setattr) -> None:
    """Put the class in the registry and the provider table, governing ``nodes``; tests pass
    ``monkeypatch.setattr`` so that it is taken out after them."""
    setattr_(sys.modules[__name__], "_nodes", list(nodes))
    setattr_(resources, "RESOURCES", (*resources.RESOURCES, ENTRY))
    setattr_(providers, "PROVIDERS", (*providers.PROVIDERS, PROVIDER))


if __name__ == "__main__":
    register(numbers(sys.argv[1].split(",")))
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
