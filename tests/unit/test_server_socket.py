"""The control socket server's socket file (governor/wire/server.py): its mode and directory, a
stale one replaced, a live one or a file that is no socket left alone, and removed at close only
while it is still the server's own; close ending idle connections. With a fake handler
(:mod:`support.server_fakes`), each test on its own event loop."""

from __future__ import annotations

import asyncio
import os
import socket
import stat

import pytest

from governor.errors import ControlSocketError
from governor.wire.server import ControlServer
from support.server_fakes import STATUS, FakeHandler, exchange, running


def test_socket_mode_parent_directory_and_cleanup(tmp_path):
    path = tmp_path / "run" / "governor" / "g.sock"

    async def scenario():
        async with running(FakeHandler(), path, mode=0o660):
            assert stat.S_ISSOCK(os.stat(path).st_mode)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
            assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o755
            return await exchange(path, STATUS)

    old_umask = os.umask(0o077)  # the directory and socket modes must not depend on it
    try:
        [reply] = asyncio.run(scenario())
    finally:
        os.umask(old_umask)
    assert reply["ok"] is True
    assert not path.exists()  # close() removed it
    assert not (tmp_path / "run").exists()  # and the directories it made (a mistyped --socket's were left)


def test_close_leaves_a_directory_it_found_and_one_it_made_that_holds_another_file(tmp_path):
    path = tmp_path / "run" / "governor" / "g.sock"

    async def scenario():
        async with running(FakeHandler(), path):
            (tmp_path / "run" / "another daemon's").write_text("")

    asyncio.run(scenario())
    assert not path.parent.exists() and (tmp_path / "run" / "another daemon's").exists() and tmp_path.is_dir()


def test_stale_socket_file_is_replaced(tmp_path):
    path = tmp_path / "g.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens: what a killed daemon leaves behind
    assert stat.S_ISSOCK(os.stat(path).st_mode)

    async def scenario():
        async with running(FakeHandler(), path):
            return await exchange(path, STATUS)

    [reply] = asyncio.run(scenario())
    assert reply["ok"] is True


def test_a_live_socket_is_not_stolen(tmp_path):
    path = tmp_path / "g.sock"

    async def scenario():
        async with running(FakeHandler(), path):
            inode = os.stat(path).st_ino
            with pytest.raises(ControlSocketError, match="another process is serving"):
                await ControlServer(FakeHandler().handlers(), str(path)).start()
            assert os.stat(path).st_ino == inode
            return await exchange(path, STATUS)

    [reply] = asyncio.run(scenario())
    assert reply["ok"] is True


def test_a_file_that_is_not_a_socket_is_left_alone(tmp_path):
    path = tmp_path / "g.sock"
    path.write_text("precious")

    async def scenario():
        await ControlServer(FakeHandler().handlers(), str(path)).start()

    with pytest.raises(ControlSocketError, match="not a socket"):
        asyncio.run(scenario())
    assert path.read_text() == "precious"


def test_close_does_not_remove_a_socket_another_server_bound_since(tmp_path):
    path = tmp_path / "g.sock"

    async def scenario():
        first = ControlServer(FakeHandler().handlers(), str(path))
        await first.start()
        os.unlink(path)  # e.g. an admin removed it and a new daemon took the path
        async with running(FakeHandler(), path):
            await first.close()
            return await exchange(path, STATUS)

    [reply] = asyncio.run(scenario())
    assert reply["ok"] is True


def test_close_ends_idle_connections(tmp_path):
    async def scenario():
        server = ControlServer(FakeHandler().handlers(), str(tmp_path / "g.sock"))
        await server.start()
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "g.sock"))
        writer.write(STATUS)
        await reader.readline()
        await asyncio.wait_for(server.close(), 5)
        rest = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return rest

    assert asyncio.run(scenario()) == b""


def test_a_refused_start_removes_the_directories_it_made(tmp_path):
    # A socket path longer than sun_path (108 bytes) is refused at bind, after its directory was made.
    path = tmp_path / "made" / "here" / ("x" * 120 + ".sock")
    server = ControlServer(FakeHandler().handlers(), str(path))
    with pytest.raises(ControlSocketError, match="cannot bind"):
        asyncio.run(server.start())
    assert not (tmp_path / "made").exists() and tmp_path.is_dir()
