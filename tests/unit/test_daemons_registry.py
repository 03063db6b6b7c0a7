"""The host-wide registry of governor daemons (governor/host/daemons.py): one daemon holds the
sessions, and each knows the others' cgroup roots. On a temporary directory; two daemons on
the real kernel are in tests/integration (scenarios.two_daemons_*)."""

import asyncio
import json
import os
import time

import pytest

from governor.host.daemons import SETTLED_MTIME_NS, DaemonEntry, Registry
from governor.errors import GovernorError, RequestError
from governor.wire.protocol import LaunchRequest, Peer
from governor.cgroups.hierarchy import Location
from support.daemons import on_loop
from support.sessions import session_daemon

pytestmark = pytest.mark.daemon(make=session_daemon)  # the `daemon` fixture: sessions on


def entry(tmp_path, pid=11, root="gov-a", proc_root="/gov-a"):
    (tmp_path / "roots" / root).mkdir(parents=True, exist_ok=True)
    return DaemonEntry(pid, str(tmp_path / "roots" / root), f"/etc/{root}.toml", f"/run/{root}.sock", "cpu", proc_root)


def test_one_daemon_holds_the_sessions_and_the_second_is_told_who(tmp_path):
    first, second = Registry(tmp_path / "daemons"), Registry(tmp_path / "daemons")
    first.claim_sessions(entry(tmp_path))
    with pytest.raises(GovernorError) as refused:
        second.claim_sessions(entry(tmp_path, 22, "gov-b"))
    message = str(refused.value)
    assert f"pid 11, cgroup root {tmp_path}/roots/gov-a, config /etc/gov-a.toml" in message
    assert "[sessions] enabled = false" in message
    first.claim_sessions(entry(tmp_path, 11, "gov-a2"))  # again: only what it says changes
    with pytest.raises(GovernorError, match="gov-a2"):
        second.claim_sessions(entry(tmp_path, 22, "gov-b"))
    first.release_sessions()
    second.claim_sessions(entry(tmp_path, 22, "gov-b"))
    assert second.holds_sessions and not first.holds_sessions
    second.release_sessions()
    assert not (tmp_path / "locks" / "sessions.lock").exists()  # removed by the last holder
    assert not (tmp_path / "daemons").exists()  # the sessions' lock is not there (tests/unit/test_locks.py)


def test_one_daemon_keeps_its_records_in_a_state_directory_and_the_second_is_told_who(tmp_path):
    # A second daemon given the first's --state-dir took its running tasks for tasks ended
    # while it was down: their records removed, their ends journaled (second-week check).
    first, second = Registry(tmp_path / "daemons"), Registry(tmp_path / "daemons")
    first.claim_state(tmp_path / "state", entry(tmp_path))
    with pytest.raises(GovernorError) as refused:
        second.claim_state(tmp_path / "state" / ".." / "state", entry(tmp_path, 22, "gov-b"))  # the same, spelt so
    assert "keeps its task records in" in str(refused.value) and "pid 11" in str(refused.value)
    second.claim_state(tmp_path / "other", entry(tmp_path, 22, "gov-b"))  # another directory: its own
    first.release_state()
    assert len(list((tmp_path / "locks").glob("state-*.lock"))) == 1  # the first's file went with it
    second.release_state()


def test_a_daemon_knows_the_other_roots_and_not_its_own(tmp_path):
    mine, other = Registry(tmp_path / "daemons"), Registry(tmp_path / "daemons")
    mine.register(entry(tmp_path, 11, "gov-a", "/gov-a"))
    other.register(entry(tmp_path, 22, "gov-b", "/x/gov-b"))
    assert mine.owner({"cpu": "/x/gov-b/A/task-3"}).pid == 22
    assert mine.owner({"cpu": "/x/gov-b"}).pid == 22
    assert mine.owner({"cpu": "/x/gov-bc/A"}) is None  # a name that only starts the same
    assert mine.owner({"cpu": "/gov-a/A/task-1"}) is None  # its own
    assert mine.owner({"memory": "/x/gov-b/A"}) is None  # another hierarchy
    assert other.owner({"cpu": "/gov-a/A/session-1000"}).pid == 11
    other.unregister()
    assert mine.owner({"cpu": "/x/gov-b/A/task-3"}) is None


def test_an_entry_whose_root_is_gone_is_pruned_and_one_of_a_crashed_daemon_kept(tmp_path):
    crashed, mine = Registry(tmp_path / "daemons"), Registry(tmp_path / "daemons")
    crashed.register(entry(tmp_path, 22, "gov-b", "/gov-b"))
    mine.register(entry(tmp_path, 11))
    # A daemon killed -9 never unregisters: its tasks live on in its root.
    assert mine.owner({"cpu": "/gov-b/A/task-1"}).pid == 22
    (tmp_path / "roots" / "gov-b").rmdir()
    os.utime(tmp_path / "daemons")  # (what any change to the directory does)
    (tmp_path / "daemons" / "x").touch()
    assert mine.owner({"cpu": "/gov-b/A/task-1"}) is None
    assert sorted(p.name for p in (tmp_path / "daemons").iterdir() if p.name.startswith("root-")) == \
        [mine._entry.name]


def test_a_daemon_registered_within_the_same_mtime_is_seen(tmp_path):
    # The kernel stamps a directory's mtime from a coarse clock: two changes one tick apart may
    # leave the same mtime, and a daemon registered in between was never seen (in run-in-vm).
    directory = tmp_path / "daemons"
    mine = Registry(directory)
    mine.register(entry(tmp_path, 11))
    now = time.time_ns()
    os.utime(directory, ns=(now, now))
    assert mine.owner({"cpu": "/gov-b/A/task-1"}) is None
    Registry(directory).register(entry(tmp_path, 22, "gov-b", "/gov-b"))
    os.utime(directory, ns=(now, now))  # the same tick
    assert mine.owner({"cpu": "/gov-b/A/task-1"}).pid == 22
    long_ago = now - 10 * SETTLED_MTIME_NS
    os.utime(directory, ns=(long_ago, long_ago))
    assert mine.owner({"cpu": "/gov-b/A/task-1"}).pid == 22  # read again, and kept from now on
    assert mine._seen is not None


def test_forged_entries_and_an_untrusted_directory_count_for_nothing(tmp_path):
    directory = tmp_path / "daemons"
    mine = Registry(directory)
    mine.register(entry(tmp_path))
    forged = directory / "root-0000000000000000.json"
    forged.write_text(json.dumps({**entry(tmp_path, 33, "gov-f", "/user.slice").__dict__}))
    forged.chmod(0o666)  # anyone could have written it: it would hide every user's processes
    assert mine.owner({"cpu": "/user.slice/user-1000.slice/session-1.scope"}) is None
    forged.chmod(0o644)
    os.utime(directory)
    assert mine.owner({"cpu": "/user.slice/user-1000.slice/session-1.scope"}).pid == 33
    directory.chmod(0o777)
    with pytest.raises(GovernorError, match="writable by others"):
        Registry(directory).register(entry(tmp_path, 22, "gov-b"))


def test_the_daemon_leaves_another_daemons_processes_alone(tmp_path):
    other = Registry(tmp_path / "daemons")
    other.register(entry(tmp_path, 22, "gov-b", "/gov-b"))
    daemon = session_daemon(tmp_path, registry=Registry(tmp_path / "daemons"))
    theirs = {500: {"cpu": "/gov-b/B/task-4"}}
    plain = daemon.hierarchy.locate

    def locate(pid):
        found = plain(pid)
        return Location(found.rel, found.login_uid, theirs.get(pid, {"cpu": "/user.slice"}))

    daemon.hierarchy.locate = locate
    # In the other daemon's task: its stop must find it.
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(501, 1))  # anywhere else: into the session
    request = LaunchRequest(pid=500, group="A", demand={"memory": 1 << 30}, command=("x",))
    with pytest.raises(RequestError) as refused:
        asyncio.run(anext(daemon.requests.stream(request, Peer(pid=500, uid=0, gid=0))))
    assert refused.value.code == "forbidden" and "governor run --socket /run/gov-b.sock" in refused.value.message
