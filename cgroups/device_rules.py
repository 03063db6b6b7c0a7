"""Device nodes as cgroup limits name them: ``("c" | "b", major, minor)``, checked, spelt as
the kernel spells a rule (``c 195:1``), and a list of them as one canonical text. Pure."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Device", "checked_device", "device_rule", "devices_text", "v1_line"]

Device = tuple[str, int, int]
"""A device node: ``("c" or "b", major, minor)``; a minor of ``-1`` means every minor of that major."""

# include/linux/kdev_t.h: MINORBITS 20, so majors have 12 bits.
_MAX_MAJOR, _MAX_MINOR = (1 << 12) - 1, (1 << 20) - 1


def checked_device(device: Device) -> Device:
    """``device`` as a ``("c" | "b", major, minor)`` tuple, checked.

    Raises:
        ValueError: not a 3-tuple, a type other than ``"c"``/``"b"``, or a number outside the
            kernel's 12-bit major / 20-bit minor (minor ``-1``: every minor).
    """
    try:
        kind, major, minor = device
    except (TypeError, ValueError):
        raise ValueError(f"a device must be (type, major, minor), got {device!r}") from None
    if kind not in ("b", "c"):
        raise ValueError(f"device type must be 'c' or 'b', not {kind!r} (in {device!r})")
    if not isinstance(major, int) or not 0 <= major <= _MAX_MAJOR:
        raise ValueError(f"device major {major!r} is outside 0..{_MAX_MAJOR} (in {device!r})")
    if not isinstance(minor, int) or (minor != -1 and not 0 <= minor <= _MAX_MINOR):
        raise ValueError(f"device minor {minor!r} is outside 0..{_MAX_MINOR} (or -1 for all) (in {device!r})")
    return kind, major, minor


def device_rule(device: Device) -> str:
    """The kernel's spelling of ``device``: ``"c 195:1"``, ``"c 195:*"`` for minor ``-1``."""
    kind, major, minor = device
    return f"{kind} {major}:{'*' if minor == -1 else minor}"


def devices_text(devices: Sequence[Device]) -> str:
    """``devices`` as one canonical text (:func:`device_rule` joined by ``", "``), the value a
    driver records for a device program: ``"c 195:1, c 195:255"``; ``""`` for none."""
    return ", ".join(map(device_rule, devices))


def v1_line(device: Device) -> str:
    """``device`` as a cgroup v1 ``devices.deny``/``devices.allow`` line, every access (read,
    write, mknod): ``"c 195:1 rwm"`` (kernel Documentation/admin-guide/cgroup-v1/devices.rst).

    Raises:
        ValueError: as :func:`checked_device`.
    """
    return f"{device_rule(checked_device(device))} rwm"
