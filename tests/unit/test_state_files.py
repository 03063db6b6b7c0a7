"""The one state-file module: an atomic write, a trusted read, and a bad file set aside (issue
34, point 5). Its users' behaviour is tested with them (test_state, test_fairshare,
test_daemons_registry); here, the module's own promises."""

import errno
import json
import os
import stat

import pytest

from governor.errors import StateFileError
from governor.host.state_files import load, read_trusted, set_aside, write_atomically
from governor.host.trust import untrusted

LIMIT = 1024
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")


def test_a_write_replaces_the_file_whole_with_exactly_its_mode_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "f.state"
    path.write_bytes(b"old")
    seen = []
    real_replace = os.replace

    def replace(source, target):
        # The moment before the rename: the reader still finds the old file whole, and the
        # new one is complete beside it.
        seen.append((path.read_bytes(), open(source, "rb").read()))
        real_replace(source, target)

    monkeypatch.setattr("governor.host.state_files.os.replace", replace)
    old_umask = os.umask(0o077)
    try:
        write_atomically(path, b"new" * 100, "test file", mode=0o644)
    finally:
        os.umask(old_umask)
    assert seen == [(b"old", b"new" * 100)]
    assert path.read_bytes() == b"new" * 100 and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["f.state"]


def test_a_failed_write_keeps_the_old_file_and_names_what_and_where(tmp_path, monkeypatch):
    path = tmp_path / "f.state"
    path.write_bytes(b"old")

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("governor.host.state_files.os.replace", full)
    with pytest.raises(StateFileError, match=f"^cannot write test file {path}: No space left on device$") as caught:
        write_atomically(path, b"new", "test file")
    assert caught.value.path == str(path) and caught.value.reason == "No space left on device"
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.state"]


def test_a_link_planted_in_the_temporary_files_name_is_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    path = tmp_path / "f.state"
    (tmp_path / f".f.state.{os.getpid()}.tmp").symlink_to(victim)
    write_atomically(path, b"new", "test file")
    assert victim.read_bytes() == b"untouched" and path.read_bytes() == b"new" and not path.is_symlink()


def test_the_daemons_own_file_is_read_back(tmp_path):
    path = tmp_path / "f.state"
    write_atomically(path, b"data", "test file")
    assert read_trusted(path, LIMIT) == b"data"
    with pytest.raises(FileNotFoundError):
        read_trusted(tmp_path / "absent", LIMIT)


@pytest.mark.parametrize(("mode", "reason"), [(0o664, "it is writable by its group (mode 0664)"),
                                              (0o646, "it is writable by others (mode 0646)"),
                                              (0o666, "it is writable by others and its group (mode 0666)")])
def test_a_file_others_could_write_is_refused_saying_who(tmp_path, mode, reason):
    path = tmp_path / "f.state"
    path.write_bytes(b"data")
    path.chmod(mode)
    with pytest.raises(StateFileError) as caught:
        read_trusted(path, LIMIT)
    assert caught.value.reason == reason and str(caught.value) == f"{path}: {reason}"


@needs_root
def test_a_file_of_another_user_is_refused_naming_its_owner(tmp_path):
    path = tmp_path / "f.state"
    path.write_bytes(b"data")
    os.chown(path, 65534, 65534)
    with pytest.raises(StateFileError, match=f"it is owned by uid 65534, not {os.geteuid()}$"):
        read_trusted(path, LIMIT)


def test_the_check_names_a_link_the_wrong_kind_another_owner_and_a_mode(tmp_path):
    (tmp_path / "dir").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    mine = os.geteuid()
    assert untrusted(os.lstat(tmp_path / "dir"), directory=True) is None
    assert untrusted(os.lstat(tmp_path / "link"), directory=True) == "a symbolic link"
    assert untrusted(os.lstat(tmp_path / "dir")) == "not a regular file"
    assert untrusted(os.lstat(tmp_path / "dir"), directory=True, owner=mine + 1) == f"owned by uid {mine}, not {mine + 1}"
    (tmp_path / "dir").chmod(0o770)
    assert untrusted(os.lstat(tmp_path / "dir"), directory=True) == "writable by its group (mode 0770)"


@pytest.mark.parametrize(("make", "reason"), [("link", "Too many levels of symbolic links"),
                                              ("fifo", "it is not a regular file"),
                                              ("large", f"it is larger than {LIMIT} bytes")])
def test_a_link_a_fifo_or_a_file_too_large_is_refused_without_waiting(tmp_path, make, reason):
    path = tmp_path / "f.state"
    if make == "link":
        (tmp_path / "elsewhere").write_bytes(b"data")
        path.symlink_to(tmp_path / "elsewhere")
    elif make == "fifo":
        os.mkfifo(path, 0o600)  # opened without blocking: no writer is waited for
    else:
        path.write_bytes(b" " * (LIMIT + 1))
    with pytest.raises(StateFileError) as caught:
        read_trusted(path, LIMIT)
    assert caught.value.reason == reason


def test_a_bad_file_is_set_aside_named_and_not_read_again(tmp_path):
    path = tmp_path / "f.state"
    path.write_bytes(b"{not json")
    value, problem = load(path, "test file", json.loads, LIMIT)
    assert value is None and problem.startswith(f"test file {path} set aside as f.state.bad: ")
    assert (tmp_path / "f.state.bad").read_bytes() == b"{not json" and not path.exists()
    assert load(path, "test file", json.loads, LIMIT) == (None, None)  # gone: a fresh start, no problem


def test_an_untrusted_file_is_set_aside_with_the_checks_reason_and_a_link_is_moved_itself(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"{}")
    path = tmp_path / "f.state"
    path.symlink_to(target)
    assert load(path, "test file", json.loads, LIMIT) == (
        None, f"test file {path} set aside as f.state.bad: Too many levels of symbolic links")
    assert (tmp_path / "f.state.bad").is_symlink() and target.read_bytes() == b"{}"
    path.write_bytes(b"{}")
    path.chmod(0o606)
    assert load(path, "test file", json.loads, LIMIT)[1].endswith("it is writable by others (mode 0606)")


def test_a_good_file_is_parsed_and_a_set_aside_replaces_an_older_bad_one(tmp_path):
    path = tmp_path / "f.state"
    write_atomically(path, b'{"a": 1}', "test file")
    assert load(path, "test file", json.loads, LIMIT) == ({"a": 1}, None)
    (tmp_path / "f.state.bad").write_bytes(b"older")
    assert set_aside(path, "test file", "why") == f"test file {path} set aside as f.state.bad: why"
    assert (tmp_path / "f.state.bad").read_bytes() == b'{"a": 1}'
