"""The control socket's file (:class:`~governor.wire.server.ControlServer`'s): its directory made
where missing, a stale file of a dead daemon replaced and a live one or a file that is no socket
left alone, its mode set before anyone may connect, and at the end the file removed while it is
still the one bound here, with the directories made for it where nothing else came to be."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat

from governor.errors import ControlSocketError

__all__ = ["SocketFile"]

logger = logging.getLogger("governor.wire.server")

# How long bind() waits for an existing socket to answer before deciding it is stale.
_PROBE_TIMEOUT_S = 1.0


class SocketFile:
    """The file of a Unix stream socket at ``path``, ``mode`` once bound (octal, e.g. 0o666)."""

    def __init__(self, path: str, mode: int):
        self.path = path
        self.mode = mode
        self._inode: tuple[int, int] | None = None
        self._made: list[str] = []  # the directories made for it, deepest first

    async def bind(self) -> socket.socket:
        """A bound, not yet listening, non-blocking socket at ``path`` with its ``mode`` (the
        directory made where missing, a stale socket file replaced).

        Raises:
            ControlSocketError: another process serves on ``path``, ``path`` is no socket, or
                the directory or the socket cannot be made (what was made removed again).
        """
        try:
            sock = await self._bound()
        except ControlSocketError:
            self._remove_made()  # a refused start leaves nothing it made
            raise
        try:
            # Not reachable with umask-derived bits before chmod: listen() comes later, and
            # until then a connect() is refused anyway.
            os.chmod(self.path, self.mode)
            info = os.stat(self.path)
        except OSError as exc:
            sock.close()
            self.abandon(bound=True)
            raise ControlSocketError(self.path, f"cannot set its mode: {exc.strerror or exc}") from exc
        self._inode = (info.st_dev, info.st_ino)
        return sock

    def abandon(self, *, bound: bool) -> None:
        """Undo a start that failed after :meth:`bind` (``bound``: the file is this one's)."""
        if bound:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self._remove_made()

    def remove(self) -> None:
        """Remove the file while it is still the one bound here (another daemon may have bound
        the path since), and the directories made for it where nothing else came to be (a
        mistyped ``--socket``'s were left behind)."""
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(self.path)
            if (info.st_dev, info.st_ino) == self._inode:
                os.unlink(self.path)
        self._remove_made()

    def _remove_made(self) -> None:
        for directory in self._made:
            with contextlib.suppress(OSError):
                os.rmdir(directory)

    async def _bound(self) -> socket.socket:
        parent = os.path.dirname(os.path.abspath(self.path))
        try:
            if not os.path.isdir(parent):
                self._made, missing = [], parent
                while not os.path.isdir(missing):
                    self._made.append(missing)
                    missing = os.path.dirname(missing)
                os.makedirs(parent)
                os.chmod(parent, 0o755)  # makedirs' mode is masked by the umask
        except OSError as exc:
            raise ControlSocketError(self.path, f"cannot create {parent}: {exc.strerror}") from exc
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            try:
                sock.bind(self.path)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                # bind() refuses any existing file; remove it only when it is a dead socket.
                await self._check_stale()
                os.unlink(self.path)
                sock.bind(self.path)
        except OSError as exc:
            sock.close()
            raise ControlSocketError(self.path, f"cannot bind: {exc.strerror or exc}") from exc
        except ControlSocketError:
            sock.close()
            raise
        return sock

    async def _check_stale(self) -> None:
        """Return if ``path`` is a socket nobody answers on; raise ControlSocketError otherwise."""
        if not stat.S_ISSOCK(os.lstat(self.path).st_mode):
            raise ControlSocketError(self.path, "exists and is not a socket; not replacing it")
        try:
            _, writer = await asyncio.wait_for(asyncio.open_unix_connection(self.path), _PROBE_TIMEOUT_S)
        except (ConnectionRefusedError, FileNotFoundError):
            logger.info("replacing stale control socket %s", self.path)
            return
        except (OSError, asyncio.TimeoutError) as exc:
            raise ControlSocketError(self.path, f"cannot tell whether the socket is in use: {exc}") from exc
        writer.close()
        raise ControlSocketError(self.path, "another process is serving on this socket (is governor already running?)")
