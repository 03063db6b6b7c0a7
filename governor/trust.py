"""Whom a file's mode lets change it: the one wording of every "not trusted" refusal."""

from __future__ import annotations

import stat


def writable_by_others(mode: int) -> str | None:
    """Why a file of ``mode`` (an ``st_mode``) could be changed by someone other than its owner,
    or None: ``writable by its group (mode 0664)``, ``writable by others (mode 0646)``, or
    ``writable by others and its group (mode 0666)``. ("Others" is only who is neither the
    owner nor in its group, as chmod's ``o`` means.)"""
    whom = [who for who, bit in (("others", stat.S_IWOTH), ("its group", stat.S_IWGRP)) if mode & bit]
    if not whom:
        return None
    return f"writable by {' and '.join(whom)} (mode {stat.S_IMODE(mode):04o})"
