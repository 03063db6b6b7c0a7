"""Where ``install-systemd`` puts governor's files on a host, below ``--root``: what installing
writes and uninstalling removes (:mod:`governor.cli.install_systemd`,
:mod:`governor.cli.uninstall_systemd`), and the units the daemon protects (its ``OWN_UNITS``)."""

from __future__ import annotations

__all__ = ["CONFIG", "MAN_DIR", "OWN_UNITS", "SLICE", "UNITS", "UNIT_DIR", "installed_man_pages"]

UNITS = ("governor.service", "governor-tasks.service")
# The slice governor-tasks.service names (Slice=): systemd makes it, no file is installed.
SLICE = "governor.slice"
# Every unit that is governor's own: the daemon sets properties on these (and no others) when
# its root lies below them (governor.daemon.unit_protection).
OWN_UNITS = (SLICE, *UNITS)
UNIT_DIR = "etc/systemd/system"
CONFIG = "etc/governor/governor.toml"
# Where the man pages go (below --root), as a local install: in man-db's default search path.
# A package puts them in its own place with `governor man --directory`.
MAN_DIR = "usr/local/share/man"


def installed_man_pages(man_dir) -> list:
    """The man pages of governor's found in ``man_dir`` (those of commands since removed too)."""
    return sorted([*man_dir.glob("man1/governor.1"), *man_dir.glob("man1/governor-*.1"),
                   *man_dir.glob("man5/governor.toml.5")])
