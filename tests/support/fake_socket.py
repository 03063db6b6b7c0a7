"""A fake daemon socket for client tests: a thread that accepts connections, records each
request line and answers with scripted reply lines, without the real server or handler."""

from __future__ import annotations

import json
import socket
import threading
import time


class FakeSocket:
    """Serve ``path`` from a thread until :meth:`close`.

    Each connection: read one request line (recorded in ``requests``), then send ``replies``
    (JSON-ready objects, or raw ``bytes`` sent as they are), waiting ``pause`` seconds between
    them, then hang up, or with ``hold`` keep the connection open until the client closes it
    (``closed`` is set when it does).
    """

    def __init__(self, path: str, replies: list, *, pause: float = 0.0, hold: bool = False):
        self.path, self.replies, self.pause, self.hold = path, replies, pause, hold
        self.requests: list[dict] = []
        self.connections = 0
        self.closed = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            self.connections += 1
            with conn:
                request = b""
                while not request.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    request += chunk
                self.requests.append(json.loads(request))
                try:
                    for reply in self.replies:
                        conn.sendall(reply if isinstance(reply, bytes) else json.dumps(reply).encode() + b"\n")
                        time.sleep(self.pause)
                    if self.hold:
                        conn.settimeout(10)
                        conn.recv(1)  # returns b"" when the client closes its end
                except OSError:
                    pass
                self.closed.set()

    def close(self) -> None:
        # shutdown() wakes the accept() blocked in the thread; close() alone does not.
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._thread.join(5)
