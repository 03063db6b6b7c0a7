"""files.py error paths on a temp tree: every OSError becomes a domain error naming path,
value and errno."""

import errno
import logging
import os

import pytest

from governor.cgroups.files import list_children, make_dir, read_file, remove_dir, write_file
from governor.errors import CgroupBusy, CgroupError, CgroupReadError, CgroupWriteError, ProcessGone


def test_read_and_write_round_trip(tmp_path):
    (tmp_path / "memory.max").write_text("max\n")
    write_file(tmp_path, "memory.max", "1048576")
    assert read_file(tmp_path, "memory.max") == "1048576"


def test_write_to_missing_dir_names_path_value_errno(tmp_path):
    directory = tmp_path / "gone"
    with pytest.raises(CgroupWriteError) as info:
        write_file(directory, "cpu.max", "20000 100000")
    e = info.value
    assert e.path == str(directory / "cpu.max")
    assert e.value == "20000 100000"
    assert e.errno == errno.ENOENT
    assert str(e) == (f"failed to write '20000 100000' to {directory / 'cpu.max'}: "
                      "No such file or directory (ENOENT)")


def test_a_vanished_cgroup_is_logged_at_debug_and_still_raised(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="governor.cgroups.files")
    with pytest.raises(CgroupWriteError) as info:
        write_file(tmp_path / "gone", "cpu.max", "max")
    assert info.value.vanished
    assert [(r.levelno, "cgroup vanished" in r.getMessage()) for r in caplog.records] == [(logging.DEBUG, True)]


def test_enodev_is_a_vanished_cgroup_on_a_read_only():
    # A read of a file opened before its cgroup's removal (tests/cgroups/test_v1_kernel.py);
    # a write's ENODEV is io.max naming no device, a fault.
    assert CgroupReadError("failed to read x", path="x", errno=errno.ENODEV).vanished
    assert not CgroupWriteError("x", "8:0 rbps=1", errno.ENODEV).vanished


def test_a_pid_that_names_no_process_is_process_gone_not_an_errno_to_compare(tmp_path, monkeypatch):
    (tmp_path / "cgroup.procs").write_text("")
    real_write = os.write

    def no_such_process(fd, data):
        if data != b"4242":
            return real_write(fd, data)
        raise ProcessLookupError(errno.ESRCH, "No such process")  # what cgroupfs says to a dead pid

    monkeypatch.setattr("governor.cgroups.files.os.write", no_such_process)
    with pytest.raises(ProcessGone) as info:
        write_file(tmp_path, "cgroup.procs", "4242")
    assert isinstance(info.value, CgroupWriteError) and info.value.value == "4242"
    assert str(info.value) == f"failed to write '4242' to {tmp_path / 'cgroup.procs'}: No such process (ESRCH)"


def test_write_never_creates_a_file(tmp_path):
    # On cgroupfs a missing file means "controller not enabled": creating it would hide that.
    with pytest.raises(CgroupWriteError) as info:
        write_file(tmp_path, "io.max", "8:0 wbps=1")
    assert info.value.errno == errno.ENOENT
    assert not (tmp_path / "io.max").exists()


def test_write_to_a_directory_is_eisdir(tmp_path):
    (tmp_path / "cpu.max").mkdir()
    with pytest.raises(CgroupWriteError) as info:
        write_file(tmp_path, "cpu.max", "max 100000")
    assert info.value.errno == errno.EISDIR


def test_read_missing_names_path_and_errno(tmp_path):
    with pytest.raises(CgroupReadError) as info:
        read_file(tmp_path, "memory.current")
    assert info.value.path == str(tmp_path / "memory.current")
    assert info.value.errno == errno.ENOENT
    assert str(tmp_path / "memory.current") in str(info.value)


def test_make_dir_is_idempotent_and_reports_missing_parent(tmp_path):
    assert make_dir(tmp_path / "g") is True
    assert make_dir(tmp_path / "g") is False
    with pytest.raises(CgroupError) as info:
        make_dir(tmp_path / "no" / "such")
    assert info.value.errno == errno.ENOENT
    assert info.value.path == str(tmp_path / "no" / "such")


def test_remove_dir_absent_ok_nonempty_raises(tmp_path):
    assert remove_dir(tmp_path / "absent") is False
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "child").mkdir()
    with pytest.raises(CgroupBusy) as info:
        remove_dir(tmp_path / "busy")
    # cgroupfs says EBUSY for a cgroup with children; a plain fs says ENOTEMPTY: the same fact.
    assert info.value.errno == errno.ENOTEMPTY
    assert remove_dir(tmp_path / "busy" / "child") is True
    assert not (tmp_path / "busy" / "child").exists()


def test_list_children_only_dirs_sorted(tmp_path):
    for name in ("b", "a"):
        (tmp_path / name).mkdir()
    (tmp_path / "cgroup.procs").write_text("")
    os.symlink(tmp_path / "a", tmp_path / "link")
    assert list_children(tmp_path) == ["a", "b"]
    with pytest.raises(CgroupReadError):
        list_children(tmp_path / "missing")
