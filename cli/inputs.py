"""Reading the files a command is given: the edge where OS errors become ConfigErrors."""

from __future__ import annotations

import os
import stat

from governor.errors import ConfigError
from governor.host.trust import untrusted

# A config with 10,000 groups is about 400 KiB; anything far larger would stall the daemon's
# event loop while it is parsed (a reload runs on it).
MAX_INPUT_BYTES = 4 << 20


def read_input(path: str, *, owner: int | None = None) -> bytes:
    """The bytes of the regular file at ``path``, at most :data:`MAX_INPUT_BYTES`.

    It is opened without blocking, so a FIFO or a device named by mistake is refused, not
    waited on. With ``owner`` (the daemon's uid) the file must also be owned by ``owner`` and
    writable by nobody else: the config decides who gets what.

    Raises:
        ConfigError: naming ``path`` alone: ``cannot read: <strerror>`` for any OSError
            (missing, permission denied...), or what is wrong with the file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise ConfigError(path, None, f"cannot read: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(path, None, "cannot read: not a regular file")
        problem = untrusted(info, owner=owner) if owner is not None else None
        if problem:
            raise ConfigError(path, None, f"not trusted: {problem}")
        data = os.read(fd, MAX_INPUT_BYTES + 1)
    except OSError as error:
        raise ConfigError(path, None, f"cannot read: {error.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_INPUT_BYTES:
        raise ConfigError(path, None, f"larger than {MAX_INPUT_BYTES >> 20} MiB: not a config")
    return data
