"""Sessions in the in-memory daemon: a config whose group A is a login user's (:data:`USER`,
uid 1), :func:`session_daemon`, whose sessions see the made-up pids of :data:`FAKE_UIDS`, and
:func:`make_slice`, a logind user slice's files."""

import pwd

from support.daemons import FakeDriver, make_daemon

# uid 1 ("daemon" on Debian) stands for a login user: uid_min is set to 1 below.
USER = pwd.getpwuid(1).pw_name
CONFIG = f"""
[capacity]
cpu = 2
memory = "4G"
[groups.A]
users = ["{USER}"]
[groups.B]
users = ["root"]
[sessions]
cpu = 0.5
memory = "3G"
"""


def session_daemon(tmp_path, **options):
    """A daemon on a fake tree whose sessions see the made-up pids of :data:`FAKE_UIDS`."""
    driver = FakeDriver()
    driver.move = lambda rel, pid: driver.procs.setdefault(rel, []).append(pid)
    server = make_daemon(tmp_path, CONFIG, driver=driver, uid_min=1, host_pids=lambda: list(FAKE_UIDS), **options)
    real, effective = server.sessions.real_uid, server.sessions.effective_uid
    server.sessions.real_uid = lambda pid: FAKE_UIDS[pid] if pid in FAKE_UIDS else real(pid)
    server.sessions.effective_uid = lambda pid: FAKE_UIDS[pid] if pid in FAKE_UIDS else effective(pid)
    return server


# The made-up pids these tests move, and the real uid each has "now".
FAKE_UIDS = {500: 1, 501: 1, 600: 1, 601: 1, 602: 1, 700: 1, 801: 0, 900: 0}


def make_slice(mount, uid: int, pids: dict[str, list[int]], populated: bool = True):
    """A user slice's cgroup files as the kernel shows them, with ``pids`` per scope."""
    slice_dir = mount / "user.slice" / f"user-{uid}.slice"
    slice_dir.mkdir(parents=True, exist_ok=True)
    (slice_dir / "cgroup.events").write_text(f"populated {int(populated)}\nfrozen 0\n")
    (slice_dir / "cgroup.procs").write_text("")
    (slice_dir / "cgroup.controllers").write_text("cpu memory pids\n")
    (slice_dir / "cpu.stat").write_text("usage_usec 1000\nuser_usec 500\nsystem_usec 500\n")
    (slice_dir / "memory.current").write_text("4096\n")
    (slice_dir / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    for scope, members in pids.items():
        (slice_dir / scope).mkdir(exist_ok=True)
        (slice_dir / scope / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in members))
    return slice_dir
