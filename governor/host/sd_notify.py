"""systemd's notification protocol (sd_notify(3)): datagrams to $NOTIFY_SOCKET.

Hand-written on purpose: it is a few lines over a Unix datagram socket, and the Python
packages for it are either unmaintained or need libsystemd to build. Outside systemd
(no NOTIFY_SOCKET) every call does nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger(__name__)


class Notifier:
    """Send ``READY=1``, ``STATUS=…``, ``RELOADING=1``, ``WATCHDOG=1`` to the service manager."""

    def __init__(self, environ: dict[str, str] | None = None):
        environ = os.environ if environ is None else environ
        address = environ.get("NOTIFY_SOCKET", "")
        # An abstract socket is given as "@name"; the kernel wants a leading NUL.
        self._address = "\0" + address[1:] if address.startswith("@") else address
        usec = environ.get("WATCHDOG_USEC", "")
        self.watchdog_interval_s = int(usec) / 2e6 if usec.isdigit() and int(usec) > 0 else None

    def send(self, *fields: str) -> None:
        """Send ``fields`` (``"READY=1"``…) as one message; failures are logged, never raised."""
        if not self._address:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto("\n".join(fields).encode(), self._address)
        except OSError as error:
            log.warning("cannot notify systemd at %s: %s", self._address.lstrip("\0"), error)

    def reloading(self) -> None:
        self.send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")
