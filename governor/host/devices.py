"""The device classes this host may govern: each a provider (:class:`governor.core.devices.Provider`)
registered against the registry's entry of kind ``device`` (:mod:`governor.config.resources`).
A new class is an entry there and its provider here; the daemon's guard asks these, never one
class by name. Tests put a stand-in class in both tables (``monkeypatch.setattr``): they are
read when called."""

from __future__ import annotations

from governor.config import resources
from governor.core.devices import Provider
from governor.host import nvml

__all__ = ["PROVIDERS", "governs_any", "providers"]

PROVIDERS: tuple[Provider, ...] = (nvml.PROVIDER,)


def providers() -> tuple[Provider, ...]:
    """The providers of the registry's device entries, in registry order; an entry without a
    provider has no devices on this host.

    Raises:
        ValueError: a provider names no device entry of the registry (a table out of step).
    """
    entries = [entry.name for entry in resources.RESOURCES if entry.kind is resources.ResourceKind.DEVICE]
    by_entry = {provider.entry: provider for provider in PROVIDERS}
    stray = sorted(set(by_entry) - set(entries))
    if stray:
        raise ValueError(f"device providers for {', '.join(stray)}: no device entry of that name in the registry")
    return tuple(by_entry[name] for name in entries if name in by_entry)


def governs_any(config) -> bool:
    """Whether ``config`` governs a device of any class (the daemon then opens the device
    cgroups: the v1 ``devices`` hierarchy), read without looking at the host.

    Raises:
        ValueError: as :func:`providers`.
    """
    return any(provider.governs(config) for provider in providers())
