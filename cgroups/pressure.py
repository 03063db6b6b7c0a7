"""Pressure stall information (PSI): how long a cgroup's tasks waited for CPU, memory or I/O.

cgroup v2 keeps ``cpu.pressure``, ``memory.pressure`` and ``io.pressure`` in every cgroup (core
files, whatever controllers are enabled)::

    some avg10=23.01 avg60=4.10 avg300=0.88 total=1234567
    full avg10=0.00 avg60=0.00 avg300=0.00 total=0

``some``: the share of wall time in which at least one task waited for the resource; ``full``:
in which all of them did (no progress at all). ``avg10`` is in percent over the last 10 s,
``total`` the stall so far in µs. ``full`` of ``cpu.pressure`` exists since Linux 5.13.

There is no PSI on cgroup v1, nor on a kernel built without ``CONFIG_PSI`` (no such files) or
booted with ``psi=0`` (no such files since 6.1, reads refused with ``EOPNOTSUPP`` before):
:func:`psi_unavailable` tells which, once, when the hierarchy is opened.
"""

from __future__ import annotations

import errno
from pathlib import Path

from governor.cgroups.errors import CgroupReadError
from governor.cgroups.files import read_file
from governor.cgroups.stats import Stall

__all__ = ["PSI_RESOURCES", "PSI_KINDS", "parse_pressure", "psi_unavailable", "read_pressure"]

# The resources the kernel keeps a pressure file of, each ``<resource>.pressure``.
PSI_RESOURCES = ("cpu", "memory", "io")
PSI_KINDS = ("some", "full")
# What the kernel answers for a pressure file on a host without PSI.
_NO_PSI = (errno.ENOENT, errno.EOPNOTSUPP)


def parse_pressure(text: str) -> dict[str, Stall]:
    """Parse a pressure file: ``"some avg10=1.50 avg60=0 avg300=0 total=42\\n"`` →
    ``{"some": Stall(1.5, 42)}``. Lines of a kind other than ``some``/``full`` are left out
    (a later kernel may add one); ``avg60``, ``avg300`` and unknown fields are not kept.

    Raises:
        ValueError: a line of a known kind lacks ``avg10`` or ``total``, or a value is not a
            number (the text names the line).
    """
    result: dict[str, Stall] = {}
    for line in text.splitlines():
        kind, _, rest = line.strip().partition(" ")
        if kind not in PSI_KINDS:
            continue
        fields = dict(field.partition("=")[::2] for field in rest.split())
        try:
            avg10, total = float(fields["avg10"]), int(fields["total"])
        except (KeyError, ValueError):
            raise ValueError(f"expected '{kind} avg10=<percent> ... total=<usec>', got {line!r}") from None
        if not 0.0 <= avg10 <= 100.0 or total < 0:
            raise ValueError(f"a stall out of range in {line!r}")
        result[kind] = Stall(avg10, total)
    return result


def read_pressure(directory: Path) -> dict[str, dict[str, Stall]]:
    """The stalls of the cgroup at ``directory``: resource (:data:`PSI_RESOURCES`) → kind →
    :class:`Stall`; a resource whose file the kernel does not have (or refuses: ``psi=0``) is
    left out.

    Raises:
        CgroupReadError: a pressure file cannot be read otherwise.
        ValueError: its text is not a pressure file's (:func:`parse_pressure`).
    """
    stalls = {}
    for resource in PSI_RESOURCES:
        try:
            text = read_file(directory, f"{resource}.pressure")
        except CgroupReadError as error:
            if error.errno in _NO_PSI:
                continue
            raise
        stalls[resource] = parse_pressure(text)
    return stalls


def psi_unavailable(mode: str, directory: Path) -> str | None:
    """Why the cgroups of a ``mode`` (``"v2"``, ``"v1"``) hierarchy whose cgroup ``directory``
    (governor's root) is have no pressure stall information, in one sentence; None where they
    have it. Reads ``cpu.pressure`` once. Never raises."""
    if mode != "v2":
        return "this host's cgroups are v1, which keep no pressure stall information (PSI needs cgroup v2)"
    path = directory / "cpu.pressure"
    try:
        read_file(directory, "cpu.pressure")
    except CgroupReadError as error:
        if error.errno == errno.EOPNOTSUPP:
            return f"this kernel was booted with psi=0: it refuses to read {path}"
        if error.errno == errno.ENOENT:
            return (f"this kernel keeps no pressure stall information ({path} is absent: built without "
                    "CONFIG_PSI, or booted with psi=0)")
        return f"cannot read {path}: {error}"
    return None
