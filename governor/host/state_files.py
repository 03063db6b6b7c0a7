"""The files governor keeps between runs (task records, the next task id and the ended tasks'
records: :mod:`governor.host.task_store`; the fair-share history: :mod:`governor.daemon.fairshare_history`;
the daemons' registry: :mod:`governor.host.daemons`): written atomically, read back only when nobody
else could have forged them, and a bad one set aside so that the daemon starts.

Such a file decides which cgroup the daemon writes, which process it governs or what each group
weighs, so it is read only as what the daemon made (:func:`read_trusted`): a regular file, not
a symbolic link, owned by the daemon's user and writable by nobody else
(:func:`governor.host.trust.untrusted`), of a bounded size. One that is not, or that does not parse,
is renamed ``<name>.bad`` (:func:`set_aside`): it neither stops the daemon nor comes back, and
stays there for a person to look at.

Files are not synced to disk: they must outlive the daemon (a kill mid-write leaves the old
file or the new one), not the host, whose reboot ends every task they describe.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from governor.errors import StateFileError
from governor.host.trust import untrusted

__all__ = ["BAD_SUFFIX", "load", "read_trusted", "set_aside", "write_atomically"]

BAD_SUFFIX = ".bad"
T = TypeVar("T")


def write_atomically(path: Path, data: bytes, what: str, *, mode: int = 0o600) -> None:
    """Replace the file ``path`` with ``data``: a reader sees the old file or the new one,
    never a part.

    ``data`` goes into a temporary file beside it, ``.<name>.<pid>.tmp`` (the pid: several
    daemons write the registry's directory), made anew (``O_EXCL | O_NOFOLLOW``: a link planted
    in its name is not written through) with exactly ``mode`` whatever the umask, then renamed
    over ``path``. :class:`~governor.host.task_store.TaskStore` removes the ones a killed daemon left.

    Raises:
        StateFileError: it cannot be written (a missing directory, a full disk), saying
            ``cannot write <what> <path>: <reason>``; no temporary file is left behind.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)  # an earlier daemon of the same pid was killed mid-write
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "wb") as stream:
            os.fchmod(fd, mode)
            stream.write(data)
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)  # a full disk leaves no partial file
        reason = error.strerror or str(error)
        raise StateFileError(f"cannot write {what} {path}: {reason}", path=str(path), reason=reason) from None


def read_trusted(path: Path, limit: int) -> bytes:
    """The bytes of the file ``path`` if it is what the daemon made: a regular file, not a
    link (opened ``O_NOFOLLOW``), owned by this process's user, writable by nobody else
    (:func:`governor.host.trust.untrusted`), of at most ``limit`` bytes. Opened without blocking:
    a FIFO in its place is refused, not waited on.

    Raises:
        FileNotFoundError: there is no such file (for a file not written yet: no error).
        StateFileError: ``<path>: <reason>``: it cannot be opened or read (the OS's words:
            ``Too many levels of symbolic links`` for a link), cannot be trusted (``it is
            owned by uid 1001, not 0``, ``it is writable by its group (mode 0664)``, ``it is
            not a regular file``) or is too large (``it is larger than <limit> bytes``).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as stream:
            problem = untrusted(os.fstat(fd))
            if problem:
                raise _refused(path, f"it is {problem}")
            data = stream.read(limit + 1)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise _refused(path, error.strerror or str(error)) from None
    if len(data) > limit:
        raise _refused(path, f"it is larger than {limit} bytes")
    return data


def _refused(path: Path, reason: str) -> StateFileError:
    return StateFileError(f"{path}: {reason}", path=str(path), reason=reason)


def set_aside(path: Path, what: str, reason: str) -> str:
    """Rename the bad file ``path`` to ``<name>.bad`` (replacing an older one), so that it
    neither stops the daemon nor is read again, and say so: ``<what> <path> set aside as
    <name>.bad: <reason>``. A link is renamed itself, never what it points to. A rename that
    fails is not raised: the file is then refused again at the next read."""
    bad = path.with_name(path.name + BAD_SUFFIX)
    with contextlib.suppress(OSError):
        os.replace(path, bad)
    return f"{what} {path} set aside as {bad.name}: {reason}"


def load(path: Path, what: str, parse: Callable[[bytes], T], limit: int) -> tuple[T | None, str | None]:
    """``parse`` of the file ``path`` read as :func:`read_trusted` reads it, and what was wrong.

    Args:
        path: the file; what: what it is, in words (``fair-share history``);
        parse: its bytes → what they hold; raises ValueError (``json.loads``'s errors are
            ones) or RecursionError (JSON nested too deep) for what is not that;
        limit: the most bytes it may hold.

    Returns:
        ``(value, None)``; ``(None, None)`` where there is no file yet; ``(None, problem)``
        where it cannot be read, trusted or parsed: it is then set aside (:func:`set_aside`)
        and ``problem`` says so and why. Never raises but what ``parse`` raises otherwise.
    """
    try:
        return parse(read_trusted(path, limit)), None
    except FileNotFoundError:
        return None, None
    except StateFileError as error:
        reason = error.reason
    except (ValueError, RecursionError) as error:
        reason = str(error)
    return None, set_aside(path, what, reason)
