"""The daemon on an in-memory cgroup driver, for the unit tests of its requests and events:
:class:`FakeDriver` (cgroups as a dict), :func:`make_daemon`, :func:`launch_request`,
:func:`launch`, :func:`collect` and :func:`wait_settled` to drive it, and
:func:`guarantee_cores` to read its last filling."""

import asyncio
import errno
import inspect
from pathlib import Path

from governor.cgroups.base import DriverBase
from governor.cgroups.hierarchy import Hierarchy, Location
from governor.cgroups.limits import v2_files
from governor.cgroups.stats import CgroupStats
from governor.config.load import parse_config
from governor.daemon import Daemon
from governor.errors import CgroupBusy, CgroupReadError, CgroupWriteError, ProcessGone
from governor.wire.protocol import LaunchRequest, Peer
from governor.host.task_store import TaskStore
from support.waits import until

GONE_PID = 999_999
CONFIG = """
[capacity]
cpu = 2
memory = "4G"
[groups.A]
users = ["root"]
[groups.B]
users = ["root"]
[groups."*"]
[sessions]
enabled = false
"""
GIB = 1024**3
# A group tree: D1 and D2 at the top, L1 and L2 below D2.
TREE = """
[capacity]
cpu = 2
memory = "4G"
[groups.D1]
users = ["root"]
[groups.D2]
limit = { cpu = 1.5, memory = "3G" }
[groups.L1]
parent = "D2"
users = ["root"]
user_limit = { cpu = 1, memory = "2G" }
[groups.L2]
parent = "D2"
users = ["root"]
[sessions]
enabled = false
"""


class FakeDriver(DriverBase):
    """cgroups as a dict: enough for the daemon's bookkeeping, nothing for enforcement."""

    mode = "v2"

    def __init__(self):
        super().__init__()
        self.cgroups = {""}
        self.procs: dict[str, list[int]] = {}
        self.writes: list[tuple[str, object]] = []
        self.refuse: set[str] = set()  # cgroups whose writes the "kernel" refuses (EBUSY)
        self.unreadable: set[str] = set()  # cgroups whose cgroup.procs cannot be read (EMFILE)
        self.killed: list[str] = []  # cgroups killed, in order
        self.survivors: dict[str, list[int]] = {}  # cgroup → pids a kill leaves (forked past it)
        self.stats: dict[str, CgroupStats] = {}  # cgroup → its counters (default: all zero)
        self.memory_caps: dict[str, int] = {}  # cgroup → the memory cap "the kernel" holds (default: as written)

    def directory(self, rel):
        return Path("/fake") / rel

    def events_path(self, rel):
        return self.directory(rel) / "cgroup.events"

    def create(self, rel):
        parts = rel.split("/")
        self.cgroups.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))

    def enable_controllers(self, rel, controllers):
        pass

    def _apply_one(self, rel, limits):
        if rel not in self.cgroups:
            return [], [CgroupWriteError(f"/fake/{rel}/cpu.max", "x", errno.ENOENT)]
        if rel in self.refuse:
            return [], [CgroupWriteError(f"/fake/{rel}/cpu.weight", "x", errno.EBUSY)]
        record = self._record(rel)
        desired = {(f, ""): v for f, v in v2_files(limits)}
        changed = [(f, v) for (f, _), v in desired.items() if record.get((f, "")) != v]
        changed += [(f, None) for (f, _) in record.keys() - desired.keys()]  # reset: "max"
        record.clear()
        record.update(desired)
        if changed:
            self.writes.append((rel, limits))
        return [f for f, _ in changed], []

    def move(self, rel, pid):
        if pid == GONE_PID:
            raise ProcessGone(f"/fake/{rel}/cgroup.procs", str(pid))
        self.procs[rel] = [pid]

    def pids(self, rel):
        if rel not in self.cgroups:
            raise CgroupReadError("no such cgroup", path=rel, errno=errno.ENOENT)
        if rel in self.unreadable:
            raise CgroupReadError("cannot read cgroup.procs", path=rel, errno=errno.EMFILE)
        return self.procs.get(rel, [])

    def kill(self, rel):
        # Never os.kill: the pids here are made up, and the tests run as root.
        if rel not in self.cgroups:
            raise CgroupReadError("no such cgroup", path=rel, errno=errno.ENOENT)
        self.killed.append(rel)
        self.procs[rel] = self.survivors.pop(rel, [])
        return 1

    def _read_stats(self, rel, peak):
        if rel not in self.cgroups:
            raise CgroupReadError("no such cgroup", path=rel, errno=errno.ENOENT)
        return self.stats.get(rel, CgroupStats(0, 0, 0, 0, populated=bool(self.procs.get(rel))))

    def memory_cap_bytes(self, rel):
        if rel not in self.cgroups:
            raise CgroupReadError("no such cgroup", path=rel, errno=errno.ENOENT)
        written = self._record(rel).get(("memory.max", ""), "max")
        return self.memory_caps.get(rel, None if written == "max" else int(written))

    def children(self, rel):
        depth = rel.count("/") + 1 if rel else 0
        return sorted(c.split("/")[depth] for c in self.cgroups
                      if c and c.count("/") == depth and (not rel or c.startswith(rel + "/")))

    def remove(self, rel):
        if self.procs.get(rel) or any(c.startswith(rel + "/") for c in self.cgroups):  # as the kernel: EBUSY
            raise CgroupBusy(f"failed to remove cgroup /fake/{rel}", path=rel, errno=errno.EBUSY)
        self.cgroups.discard(rel)
        self.procs.pop(rel, None)


class Where:
    """Where each pid is, as Hierarchy.locate would tell, following the fake driver's moves."""

    def __init__(self, driver: FakeDriver):
        self.driver = driver
        self.logind: dict[int, int] = {}  # pid → the uid whose logind slice it is in

    def __call__(self, pid):
        for rel, pids in self.driver.procs.items():
            if pid in pids:
                return Location(rel, None)
        return Location(None, self.logind.get(pid))


class FakeWatcher:
    def __init__(self):
        self.watched = set()

    def watch(self, key, path, pid):
        self.watched.add(key)

    def unwatch(self, key):
        self.watched.discard(key)


def make_daemon(tmp_path, config: str = CONFIG, *, driver: FakeDriver | None = None, **options) -> Daemon:
    """A daemon on the in-memory driver: 2 CPUs, 8G, processes located where the driver moved
    them, no user of this host in any group (none of these tests' business) unless ``members``
    says otherwise."""
    store = TaskStore(tmp_path / "state")
    store.prepare()
    driver = driver or FakeDriver()
    hierarchy = Hierarchy(driver, "/fake", ())
    hierarchy.locate = Where(driver)
    options.setdefault("members", lambda config: {})
    options.setdefault("history_dir", tmp_path / "state" / "history")  # not the host's /var/lib/governor
    server = Daemon(parse_config(config, "test.toml"), "test.toml", hierarchy, store, host_cpus=[0, 1],
                    host_memory=8 * GIB, resolve_device=lambda path: "8:0", **options)
    server.exits.watcher = FakeWatcher()
    return server


async def collect(stream):
    return [payload async for payload in stream]


def on_loop(daemon, work):
    """Run ``work()`` on an event loop, as the daemon runs it, and return what it returned (or
    what it returned awaited) once what it asked for is done (:meth:`Daemon.settled`)."""
    async def run():
        done = work()
        if inspect.isawaitable(done):
            done = await done
        await daemon.settled()
        return done

    return asyncio.run(run())


def launch_request(pid, group, *, wait=True, **demand):
    """The launch request of pid ``pid`` into ``group`` with ``demand`` (resource → amount), command ``work``."""
    return LaunchRequest(pid=pid, group=group, demand=demand, command=("work",), wait=wait)


def launch(daemon, pid, *, group=None, uid=0, wait=True, **demand):
    """Launch and return the final reply (the started task)."""
    request = launch_request(pid, group, wait=wait, **demand)
    return on_loop(daemon, lambda: collect(daemon.requests.stream(request, Peer(pid=pid, uid=uid, gid=0))))[-1]


async def wait_settled(daemon, after: int, *, timeout: float = 5.0) -> int:
    """Wait on the running event loop until ``daemon`` finished a settle pass after generation
    ``after`` (``daemon.inbox.generation``, read before causing the event); returns the
    generation reached. Raises AssertionError after ``timeout`` seconds."""
    await until(lambda: daemon.inbox.generation > after, f"a settle pass after generation {after}", timeout=timeout)
    return daemon.inbox.generation


def guarantee_cores(daemon, group):
    """``group``'s CPU guarantee (cores) in the daemon's last filling."""
    return daemon.enforcement.allocation.groups[group].allocation["cpu"]
