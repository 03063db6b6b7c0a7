"""Sessions in the in-memory daemon: a config whose group A is a login user's (:data:`USER`,
uid 1), and :func:`session_daemon`, whose sessions see the made-up pids of :data:`FAKE_UIDS`."""

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
