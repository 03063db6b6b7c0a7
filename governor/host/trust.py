"""Whether a file could have been forged: the one check, and the one wording, of every "not
trusted" refusal (state files: :mod:`governor.host.state_files`; the daemons' registry; a config
the daemon reads)."""

from __future__ import annotations

import os
import stat


def untrusted(info: os.stat_result, *, directory: bool = False, owner: int | None = None) -> str | None:
    """Why a file whose ``lstat`` (or ``fstat``) is ``info`` could have been made or changed
    by someone other than ``owner`` (default: this process's effective uid), or None.

    Checked, in this order: not a symbolic link (``a symbolic link``); a directory where
    ``directory`` is true, else a regular file (``not a directory``, ``not a regular file``);
    owned by ``owner`` (``owned by uid 1001, not 0``); writable by nobody else
    (:func:`writable_by_others`). A caller says ``"<path> is <why>"``.
    """
    owner = os.geteuid() if owner is None else owner
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if not (stat.S_ISDIR if directory else stat.S_ISREG)(info.st_mode):
        return "not a directory" if directory else "not a regular file"
    if info.st_uid != owner:
        return f"owned by uid {info.st_uid}, not {owner}"
    return writable_by_others(info.st_mode)


def writable_by_others(mode: int) -> str | None:
    """Why a file of ``mode`` (an ``st_mode``) could be changed by someone other than its owner,
    or None: ``writable by its group (mode 0664)``, ``writable by others (mode 0646)``, or
    ``writable by others and its group (mode 0666)``. ("Others" is only who is neither the
    owner nor in its group, as chmod's ``o`` means.)"""
    whom = [who for who, bit in (("others", stat.S_IWOTH), ("its group", stat.S_IWGRP)) if mode & bit]
    if not whom:
        return None
    return f"writable by {' and '.join(whom)} (mode {stat.S_IMODE(mode):04o})"
