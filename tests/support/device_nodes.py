"""Stand-in device nodes for the tests that guard GPUs on a real kernel, shared by
tests/cgroups (the device program, ``devices.deny``) and tests/integration (the daemon's GPU
scenario). Importable as ``support.device_nodes`` (tests/ is on ``sys.path`` through its conftest).

A stand-in is a character node on a major number no driver holds here: one of the majors
Documentation/admin-guide/devices.txt keeps for local and experimental use (60–63, 120–127,
240–254) that ``/proc/devices`` does not list. An open the device cgroup lets through then
reaches no driver (``ENXIO``) and one it refuses gives ``EPERM``, on a host with a real NVIDIA driver too (whose
nodes, 195:N, would open). Their minors are 0, 1, …: governor tells CUDA a listed node that NVML
does not know (any major but NVIDIA's 195) by its minor number.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

# A sh function: ``opens NODE…`` prints one JSON object, each node → "ok" or the shell's reason
# its open failed (the error's strerror; :func:`outcomes` names it). The probes run sh, not Python:
# under the cgroup v2 VM's emulated CPU each Python start took seconds.
OPENS = ('opens() { sep=; printf "{"; for p; do '
         'if err=$( (true <"$p") 2>&1 ); then r=ok; else r=${err##*: }; fi; '
         'printf "%s\\"%s\\": \\"%s\\"" "$sep" "$p" "$r"; sep=", "; done; echo "}"; }\n')
_ERRNO_NAMES = {os.strerror(number): name for number, name in errno.errorcode.items()}


def errno_name(said: str) -> str:
    """An open's outcome by name: "ok", or the error a shell's message ends in (its strerror:
    ``EPERM``, ``ENXIO``); anything else as said."""
    said = said.strip()
    for text, name in _ERRNO_NAMES.items():
        if said == text or said.endswith(": " + text):
            return name
    return said


def outcomes(line: str) -> dict[str, str]:
    """What a line of :data:`OPENS` says: node → "ok" or the error's name."""
    return {node: errno_name(outcome) for node, outcome in json.loads(line).items()}


# 60-63 and 120-127 first: the kernel hands out dynamic majors from 254 down to 234 (fs/char_dev.c),
# and on a GPU host NVIDIA's uvm and caps drivers and others take every one of 240-254 (an H200 host
# did: the stand-in tests skipped there).
LOCAL_MAJORS = [*range(60, 64), *range(120, 128), *range(240, 255)]


def char_majors(proc_devices: Path = Path("/proc/devices")) -> set[int]:
    """The character majors a driver holds here (``/proc/devices``)."""
    text = proc_devices.read_text()
    block = text.split("Character devices:")[1].split("Block devices:")[0]
    return {int(line.split()[0]) for line in block.splitlines() if line.strip()}


def free_major() -> int | None:
    """A local/experimental character major (60–63, 120–127, 240–254) no driver holds here, or
    None."""
    taken = char_majors()
    return next((major for major in LOCAL_MAJORS if major not in taken), None)


@contextlib.contextmanager
def device_nodes(tmp_path: Path, numbers: Sequence[tuple[int, int]]) -> Iterator[list[str]]:
    """Character nodes ``major:minor`` for each of ``numbers`` (mode 0666, named ``gpu0`` … in
    that order) in ``tmp_path/dev``, on a tmpfs mounted ``dev`` for the test when ``tmp_path``'s
    filesystem is ``nodev`` (whose nodes open nothing). Skips the test, saying why, without
    root or where nodes cannot be made or mounted."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make device nodes")
    scratch = tmp_path / "dev"
    scratch.mkdir()
    mounted = False
    if os.statvfs(scratch).f_flag & os.ST_NODEV:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "dev,mode=0755,size=64k", "governor-test", str(scratch)],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"{tmp_path} is nodev and a dev tmpfs cannot be mounted: {done.stderr.strip()}")
        mounted = True
    try:
        paths = []
        for index, (major, minor) in enumerate(numbers):
            path = scratch / f"gpu{index}"
            try:
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            except PermissionError as e:
                pytest.skip(f"cannot make device nodes here: {e}")
            os.chmod(path, 0o666)  # mknod's mode is masked by the umask
            paths.append(str(path))
        yield paths
    finally:
        if mounted:
            subprocess.run(["umount", str(scratch)], check=True)


@contextlib.contextmanager
def stand_in_nodes(tmp_path: Path, count: int = 2) -> Iterator[tuple[int, list[str]]]:
    """``(major, paths)``: ``count`` character nodes ``major:0`` … ``major:count-1`` on a
    :func:`free_major`, made as :func:`device_nodes` makes them. Skips the test, saying why,
    without a free major too."""
    major = free_major()
    if major is None:
        pytest.skip("every local/experimental character major (60-63, 120-127, 240-254) is held by a "
                    "driver here (/proc/devices): a stand-in node would reach it")
    with device_nodes(tmp_path, [(major, minor) for minor in range(count)]) as paths:
        yield major, paths
