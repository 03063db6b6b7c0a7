"""Reading the files a command is given: the edge where OS errors become ConfigErrors."""

from __future__ import annotations

from governor.errors import ConfigError


def read_input(path: str) -> bytes:
    """The bytes of the file at ``path``.

    Raises:
        ConfigError: naming ``path`` alone, ``cannot read: <strerror>``, for any OSError
            (missing, a directory, permission denied...).
    """
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except OSError as error:
        raise ConfigError(path, None, f"cannot read: {error.strerror}") from None
