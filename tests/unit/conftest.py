"""The unit tests' shared fixtures, built from the test-support package (tests/support)."""

import asyncio
import sys
import threading

import pytest

from governor.wire.server import ControlServer
from support.client import FakeDaemon
from support.nvml import fake_nvml, two_gpus
from support.wire_fakes import handlers_of
from support.daemons import make_daemon


@pytest.fixture
def daemon(request, tmp_path):
    """The daemon on the in-memory cgroup driver (:func:`support.daemons.make_daemon`); in a
    module or test marked ``@pytest.mark.daemon(make=f)``, ``f(tmp_path)`` (sessions on, GPUs…)."""
    marker = request.node.get_closest_marker("daemon")
    return (marker.kwargs["make"] if marker else make_daemon)(tmp_path)


@pytest.fixture
def fake_daemon(tmp_path):
    """A FakeDaemon served on ``tmp_path/g.sock`` from a background thread; ``.path`` is the socket."""
    fake = FakeDaemon()
    fake.path = str(tmp_path / "g.sock")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = ControlServer(handlers_of(fake), fake.path)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(5)
    yield fake
    asyncio.run_coroutine_threadsafe(server.close(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


@pytest.fixture
def nvml(monkeypatch):
    """The fake NVML of :mod:`support.nvml` as ``pynvml``, on the host of :func:`support.nvml.two_gpus`."""
    fake = fake_nvml(two_gpus())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


@pytest.fixture
def no_nvml(monkeypatch):
    """No ``pynvml`` to import: nvidia-ml-py not installed."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
