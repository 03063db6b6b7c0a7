"""Admin mistakes and faults (issue 12): a config that is a FIFO, huge or not the daemon's; a
metrics port that is taken; a terminal that cannot show non-ASCII; a second daemon on one
cgroup root; cgroups a killed daemon left without records."""

import asyncio
import errno
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from governor.cgroups.hierarchy import hold_root
from governor.cli.inputs import MAX_INPUT_BYTES, read_input
from governor.cli.main import main
from governor.errors import CgroupError, CgroupWriteError, ConfigError, GovernorError, RequestError
from governor.wire.metrics import Metrics
from governor.wire.protocol import Peer, StatusRequest
from governor.core.state import Task
from support.daemons import GIB, on_loop
from governor.wire.status_types import Status

GOVERNOR = str(Path(sys.executable).with_name("governor"))
SCENARIO = Path(__file__).resolve().parents[2] / "configs" / "scenarios" / "paper.toml"


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "governor.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_input(str(fifo))


def test_a_huge_file_is_refused(tmp_path):
    big = tmp_path / "governor.toml"
    big.write_bytes(b"#" * (MAX_INPUT_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than 4 MiB"):
        read_input(str(big))
    big.write_bytes(b"#" * MAX_INPUT_BYTES)
    assert len(read_input(str(big))) == MAX_INPUT_BYTES


def test_the_daemons_config_must_be_its_own_and_not_writable_by_others(tmp_path):
    config = tmp_path / "governor.toml"
    config.write_text('[groups."*"]\n')
    config.chmod(0o644)
    assert read_input(str(config), owner=os.geteuid())
    config.chmod(0o666)
    with pytest.raises(ConfigError, match=r"writable by others and its group \(mode 0666\)"):
        read_input(str(config), owner=os.geteuid())
    with pytest.raises(ConfigError, match=f"owned by uid {os.geteuid()}, not {os.geteuid() + 1}"):
        read_input(str(config), owner=os.geteuid() + 1)


def test_a_taken_metrics_port_is_a_governor_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(GovernorError, match=f"cannot serve metrics on 127.0.0.1:{port}: Address already in use"):
            Metrics(Status).bind("127.0.0.1", port)
    with pytest.raises(GovernorError, match="cannot serve metrics on no-such-host.invalid"):
        Metrics(Status).bind("no-such-host.invalid", 9)


@pytest.mark.skipif(os.geteuid() != 0, reason="governor daemon runs as root only")
def test_the_daemon_stops_on_a_taken_port_before_making_any_cgroup(tmp_path):
    config = tmp_path / "governor.toml"
    # Sessions off: a host whose own governor governs its sessions refused this daemon first.
    config.write_text(f'[groups."*"]\n[sessions]\nenabled = false\n[daemon]\nstate_dir = "{tmp_path}/state"\n')
    root = f"governor-test-{uuid.uuid4().hex[:8]}"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = CliRunner().invoke(main, ["daemon", "--config", str(config), "--socket", str(tmp_path / "s"),
                                           "--cgroup-root", root, "--metrics", str(taken.getsockname()[1])])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("governor: error: cannot serve metrics on 127.0.0.1:")
    assert not list(Path("/sys/fs/cgroup").glob(f"**/{root}"))


def test_a_terminal_that_cannot_show_unicode_gets_no_traceback():
    shown = subprocess.run([GOVERNOR, "simulate", str(SCENARIO)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONIOENCODING": "ascii", "COLUMNS": "100"})
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "DRF" in shown.stdout


def test_one_daemon_per_cgroup_root(tmp_path):
    locks = tmp_path / "locks"
    first = hold_root(tmp_path, locks)
    try:
        with pytest.raises(CgroupError, match=f"another governor daemon \\(pid {os.getpid()}\\) already governs"):
            hold_root(tmp_path, locks)
    finally:
        os.close(first)
    os.close(hold_root(tmp_path, locks))  # released with its descriptor (and so when a daemon dies)


def test_no_daemon_governs_a_root_inside_another_daemons_or_holding_one(tmp_path):
    # A second daemon on --cgroup-root /a/nested was accepted; the first one's pass over its tree
    # then took the second's task as an unrecorded one of its own, stopped it, removed its root.
    locks, outer = tmp_path / "locks", tmp_path / "cg" / "a"
    first = hold_root(outer, locks)
    try:
        with pytest.raises(CgroupError, match=f"another governor daemon \\(pid {os.getpid()}\\) governs {outer}, "
                                              f"which {outer / 'nested'} lies inside"):
            hold_root(outer / "nested", locks)
        with pytest.raises(CgroupError, match=f"which {outer.parent} holds"):
            hold_root(outer.parent, locks)
        os.close(hold_root(tmp_path / "cg" / "ab", locks))  # a sibling, even one its name begins: its own tree
    finally:
        os.close(first)
    os.close(hold_root(outer / "nested", locks))  # the outer one gone: free


def test_cgroups_a_killed_daemon_left_without_records_are_cleaned_at_start(daemon):  # noqa: F811
    store, driver = daemon.store, daemon.hierarchy.driver
    store.save(Task("1", "A", 100, 0, "root", ("work",), {"cpu": 1.0, "memory": GIB}, 0.0))
    for rel in ("A/task-1", "A/task-2", "B/task-9", "C/task-4"):
        driver.create(rel)
    driver.procs["A/task-1"] = [100]
    driver.procs["B/task-9"] = [900]  # a live process without a record: governed unrecorded
    on_loop(daemon, lambda: daemon.recovery.readopt())
    assert "A/task-2" not in driver.cgroups and "C" not in driver.cgroups
    assert {"A/task-1", "B/task-9"} <= driver.cgroups
    assert any("task 9 has no readable record" in e["message"] for e in daemon.journal.events)
    assert int(store.new_id()) > 9  # the id of the unrecorded cgroup is never given out


def test_a_read_only_cgroupfs_refuses_launches_truthfully_and_the_daemon_serves_on(daemon):  # noqa: F811
    from support.daemons import launch
    driver = daemon.hierarchy.driver

    def read_only(rel, *args):
        raise CgroupWriteError(f"/fake/{rel}/cgroup.procs", "x", errno.EROFS)

    driver.create = read_only
    with pytest.raises(RequestError) as refused:
        launch(daemon, 100, memory=GIB)
    assert refused.value.code == "unavailable" and "EROFS" in str(refused.value)
    status = asyncio.run(daemon.requests.handle(StatusRequest(), Peer(pid=1, uid=0, gid=0)))["status"]
    assert not any(g["tasks"] for g in status["groups"].values()) and not daemon.store.load_all()[0]  # none shown


def test_the_daemon_takes_the_hard_descriptor_limit_as_its_soft_one():
    import resource

    from governor.cli.daemon_cmd import raise_descriptor_limit

    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, before[1]), before[1]))
        raise_descriptor_limit()
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (before[1], before[1])
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_a_user_lookup_that_fails_for_want_of_descriptors_is_unavailable_not_no_group(monkeypatch):
    import pwd

    from governor.host import access
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: (_ for _ in ()).throw(KeyError(uid)))
    assert access.identify(4_000_000, 5).user == "4000000"  # a uid the database does not know
    monkeypatch.setattr(os, "open", lambda *args: (_ for _ in ()).throw(OSError(errno.EMFILE, "Too many open files")))
    with pytest.raises(RequestError) as refused:
        access.identify(1000, 1000)
    assert refused.value.code == "unavailable" and "Too many open files" in refused.value.message


@pytest.mark.parametrize("root", ["/governor-x/../governor-y", "a//b", "./governor", "/", "", "//"])
def test_a_cgroup_root_that_names_no_one_cgroup_is_refused_before_anything_is_made(root, tmp_path):
    # /a/../b was taken as given: /a made too, and status showed an empty "cgroup v1 at" (new-user check).
    # A config that cannot be read: were the root taken, the start is refused all the same.
    result = CliRunner().invoke(main, ["daemon", "--config", str(tmp_path / "absent.toml"),
                                       "--socket", str(tmp_path / "s"), "--cgroup-root", root])
    assert result.exit_code == 2 and "--cgroup-root" in result.output and "must name a cgroup" in result.output, \
        result.output


@pytest.mark.parametrize("state_dir", ["relative/dir", "./state", "state"])
def test_a_relative_state_dir_is_refused_as_the_configs_is(state_dir, tmp_path):
    # Taken from the working directory, its records were not found by a restart from another one.
    result = CliRunner().invoke(main, ["daemon", "--config", str(tmp_path / "absent.toml"),
                                       "--socket", str(tmp_path / "s"), "--state-dir", state_dir])
    assert result.exit_code == 2 and "--state-dir" in result.output and "must be an absolute path" in result.output, \
        result.output


@pytest.mark.skipif(os.geteuid() != 0, reason="governor daemon reads its config only as root")
def test_a_relative_config_from_a_working_directory_removed_meanwhile_is_an_error_line(tmp_path, monkeypatch):
    # Named in full from the working directory, which getcwd() cannot give once it is removed:
    # a FileNotFoundError traceback (review). Left as given, the read says what is wrong.
    import signal

    monkeypatch.setattr(signal, "signal", lambda *_: None)  # the daemon's handlers are not this process's
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    result = CliRunner().invoke(main, ["daemon", "--config", "g.toml", "--socket", str(tmp_path / "s"),
                                       "--cgroup-root", f"governor-test-{uuid.uuid4().hex[:8]}"])
    assert result.exit_code == 2 and "g.toml: cannot read" in result.output, result.output
