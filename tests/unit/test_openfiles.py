"""Who holds a device node open (issue 31, point 5), on a fake /proc whose descriptors are links
to real character devices (/dev/null 1:3, /dev/zero 1:5): found by device number, whatever the
link's name, and a process that vanishes mid-scan is no error."""

import os

from governor.host.openfiles import node_holders, owner_uid

NULL = (os.major(os.stat("/dev/null").st_rdev), os.minor(os.stat("/dev/null").st_rdev))
ZERO = (os.major(os.stat("/dev/zero").st_rdev), os.minor(os.stat("/dev/zero").st_rdev))


def fake_proc(tmp_path, fds: dict[int, dict[str, str]]):
    for pid, links in fds.items():
        fd_dir = tmp_path / str(pid) / "fd"
        fd_dir.mkdir(parents=True)
        for fd, target in links.items():
            (fd_dir / fd).symlink_to(target)
    return tmp_path


def test_holders_are_found_by_device_number_not_by_name(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("")
    proc = fake_proc(tmp_path / "proc", {
        10: {"0": "/dev/null", "1": str(plain)},       # holds /dev/null
        11: {"3": "/dev/zero", "4": "/dev/null"},      # holds both
        12: {"0": str(plain), "1": "/nonexistent"},    # holds neither (a closed descriptor's dangling link too)
    })
    (proc / "self").mkdir()  # not a pid: skipped
    assert node_holders([NULL], proc) == {10: {NULL}, 11: {NULL}}
    assert node_holders([NULL, ZERO], proc) == {10: {NULL}, 11: {NULL, ZERO}}
    assert node_holders([ZERO], proc, pids=[10, 99]) == {}  # 99 gone: no error
    assert node_holders([], proc) == {}


def test_the_owner_of_a_process_is_its_proc_directorys(tmp_path):
    proc = fake_proc(tmp_path, {20: {}})
    assert owner_uid(20, proc) == os.stat(proc / "20").st_uid
    assert owner_uid(21, proc) is None
