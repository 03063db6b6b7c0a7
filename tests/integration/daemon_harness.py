"""A real governor daemon and real tasks for the real-kernel tests, and the means to measure
them: CPU from the cgroup's own counter against time.monotonic(), in this one process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from governor.cgroups import detect
from governor.cgroups.files import read_file
from governor.cgroups.v1 import CgroupV1Driver
from governor.cgroups.v2 import CgroupV2Driver
from governor.cgroups.hierarchy import V1_CONTROLLERS, V1_OPTIONAL
from governor.cgroups.locks import LOCKS
from governor.cli.client import call
from governor.errors import GovernorError
from governor.wire.request_types import StatusRequest
from support import forked_daemons
from support.waits import wait_until, within

GOVERNOR = str(Path(sys.executable).with_name("governor"))
BUSY = [sys.executable, "-c", "while True: pass"]
MIB = 1024 * 1024


class Governor:
    """``governor daemon`` started with ``config`` under a fresh cgroup root below this test
    process's own cgroup, and the tasks launched through it with ``governor run``. Sessions
    are off unless ``config`` has a ``[sessions]`` table: a test daemon must not move the
    host's processes, nor take the sessions from the host's daemon; nor are the host's foreign
    tenants looked for unless it has a ``[foreign]`` table."""

    def __init__(self, tmp_path: Path, config: str, *extra_args: str, wrapper: tuple[str, ...] = (),
                 parent: str = ""):
        self.dir = tmp_path
        self.socket = str(tmp_path / "governor.sock")
        # parent: a cgroup the test made below its own, for the root to go in (a limit above it)
        self.root_name = os.path.join(parent, f"governor-test-{uuid.uuid4().hex[:8]}")
        if "[sessions]" not in config:
            config += "\n[sessions]\nenabled = false\n"
        if "[foreign]" not in config:  # the host's own Slurm jobs or VMs must not shrink a test's capacity
            config += "\n[foreign]\ndetect = false\n"
        (tmp_path / "governor.toml").write_text(config + f'\n[daemon]\nstate_dir = "{tmp_path}/state"\n'
                                                         "sample_interval = 1.0\nreconcile_interval = 2.0\n")
        self.log = open(tmp_path / "daemon.log", "w+")
        self.command = [*wrapper, GOVERNOR, "daemon", "--config", str(tmp_path / "governor.toml"), "--socket", self.socket,
                        "--cgroup-root", self.root_name, *extra_args]
        self.daemon = self._start()
        self.tasks: list[subprocess.Popen] = []
        self._wait_ready()
        self.driver = self._reading_driver()

    def restart(self) -> None:
        """Start the daemon again (after it stopped or was killed): same config, root, state."""
        self.daemon = self._start()
        self._wait_ready()

    def _start(self) -> subprocess.Popen | forked_daemons.ForkedDaemon:
        # Forked from an interpreter that loaded governor (support.forked_daemons: a start's
        # imports cost the emulated VM 6-7 s); under a wrapper, the program itself.
        if self.command[0] == GOVERNOR:
            return forked_daemons.start(self.command, self.log)
        return subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT)

    def _wait_ready(self, timeout: float = 60) -> None:
        def serving() -> bool:
            if self.daemon.poll() is not None:
                raise AssertionError(f"daemon exited with {self.daemon.returncode}:\n{self.daemon_log()}")
            try:
                self.status()
                return True
            except GovernorError:
                return False
        wait_until(serving, "the daemon to answer status", timeout=timeout, every=0.2, detail=self.daemon_log)

    def daemon_log(self) -> str:
        self.log.flush()
        return (self.dir / "daemon.log").read_text()

    def status(self) -> dict:
        return call(self.socket, StatusRequest(), timeout=20).status

    def _reading_driver(self):
        status = self.status()
        if status["daemon"]["cgroup_mode"] == "v2":
            return CgroupV2Driver(Path(status["daemon"]["cgroup_root"]))
        own = detect.cgroup_dirs()
        return CgroupV1Driver({c: own[c] / self.root_name for c in (*V1_CONTROLLERS, *V1_OPTIONAL, "devices")
                               if c in own and (own[c] / self.root_name).is_dir()})

    def run(self, group: str, command: list[str], *, may_end: bool = False, **demand) -> subprocess.Popen:
        """Launch ``command`` in ``group`` with ``governor run``, flags from ``demand``
        (``cpus=0.5, memory="32M", io_write="8M"``), and wait until the daemon lists it, or,
        with ``may_end``, until it ended (a task the kernel kills at once)."""
        flags = [f"--{key.replace('_', '-')}={value}" for key, value in demand.items()]
        before = self.task_count(group)
        proc = subprocess.Popen([GOVERNOR, "run", "--socket", self.socket, "--group", group, *flags, "--", *command],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.tasks.append(proc)
        self.wait(lambda: self.task_count(group) > before or proc.poll() is not None, f"task in {group}")
        assert may_end or proc.poll() is None, f"governor run failed: {proc.communicate()}"
        return proc

    def run_queued(self, group: str, command: list[str], **demand) -> subprocess.Popen:
        """Like :meth:`run` for a launch that must wait: returns once the daemon lists it in its
        queue (the command has not started)."""
        flags = [f"--{key.replace('_', '-')}={value}" for key, value in demand.items()]
        before = len(self.status()["queue"])
        proc = subprocess.Popen([GOVERNOR, "run", "--socket", self.socket, "--group", group, *flags, "--", *command],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.tasks.append(proc)
        self.wait(lambda: len(self.status()["queue"]) > before or proc.poll() is not None, f"a queued task of {group}")
        assert proc.poll() is None, f"governor run failed: {proc.communicate()}"
        return proc

    def busy_groups(self) -> set[str]:
        """The groups running a task (status lists the idle configured groups too)."""
        return {name for name, group in self.status()["groups"].items() if group["tasks"]}

    def cpu_weight(self, group: str) -> int:
        """The proportional CPU weight written on ``group`` (v2 ``cpu.weight``, v1 ``cpu.shares``)."""
        if isinstance(self.driver, CgroupV2Driver):
            return int(read_file(self.driver.path(group), "cpu.weight"))
        return int(read_file(self.driver.controller_path("cpu", group), "cpu.shares"))

    def generation(self) -> int:
        """The daemon's settle generation: settle passes finished since it started."""
        return self.status()["daemon"]["settle_generation"]

    def wait_settled(self, after: int, *, passes: int = 1, timeout: float = 60) -> int:
        """Wait until ``passes`` settles have finished since the daemon was at generation
        ``after`` (read with :meth:`generation` before causing the event). The second of two
        passes began after ``after`` was read, so it saw the event; every reconcile pass ends
        in one. Returns the generation reached; raises AssertionError after ``timeout`` s."""
        self.wait(lambda: self.generation() >= after + passes, f"{passes} settle pass(es) after generation {after}",
                  timeout)
        return self.generation()

    def task_count(self, group: str) -> int:
        return len(self.status()["groups"].get(group, {}).get("tasks", []))

    def wait(self, condition, what: str, timeout: float = 60) -> None:
        # Asked every 0.2 s: a condition may ask the daemon, whose CPU a test measures.
        wait_until(condition, what, timeout=timeout, every=0.2, detail=self.daemon_log)

    def measure_cores(self, group: str, seconds: float) -> float:
        """CPU used by ``group``'s cgroup over ``seconds`` of wall time, in cores."""
        usage0, t0 = self.driver.read_stats(group).cpu_usage_usec, time.monotonic()
        time.sleep(seconds)  # the measurement window, not a wait
        usage1, t1 = self.driver.read_stats(group).cpu_usage_usec, time.monotonic()
        return (usage1 - usage0) / 1e6 / (t1 - t0)

    def limit_file(self, group: str, file: str) -> str:
        """The value of a limit file (``memory.high``, ``memory.soft_limit_in_bytes``…) on ``group``."""
        if isinstance(self.driver, CgroupV2Driver):
            return read_file(self.driver.path(group), file)
        return read_file(self.driver.controller_path(file.split(".")[0], group), file)

    def stop_tasks(self, procs: list[subprocess.Popen]) -> None:
        for proc in procs:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """Kill the tasks this test started, stop the daemon, remove its cgroup tree."""
        self.stop_tasks([p for p in self.tasks if p.poll() is None])
        if self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(20)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        self.log.close()
        roots = {self.driver.root} if isinstance(self.driver, CgroupV2Driver) else set(self.driver.roots.values())
        for root in roots:
            _kill_left_in(Path(root))
            for directory, _, _ in os.walk(root, topdown=False):
                _rmdir_retrying(Path(directory))
        _remove_dead_locks(self.root_name)


def _remove_dead_locks(root_name: str) -> None:
    # A daemon the test killed (kill -9) leaves its lock files: they hold nothing (a flock is
    # its process's), but they piled up in /run/governor/locks, a few each CI run, to a reboot.
    for path in LOCKS.glob("*.lock") if LOCKS.is_dir() else ():
        try:
            claim = json.loads(path.read_text())
            if root_name in json.dumps(claim["claim"]) and not _alive(claim["pid"]):
                path.unlink()
        except (OSError, ValueError, KeyError, TypeError):
            continue  # released meanwhile, or not a lock of this harness's daemons


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_left_in(root: Path) -> None:
    # A failed test can leave its task's children behind (the harness killed the command
    # only); every process under this test's own root is one it started.
    for procs in root.rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _rmdir_retrying(directory: Path) -> None:
    # A killed task's cgroup can stay busy (EBUSY) for a moment while the kernel tears it down:
    # past 5 s in the emulated VM for a Python task held to 0.02 of a core by its cpu.max.
    def removed() -> bool:
        try:
            directory.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True
    if not within(removed, 30, every=0.1):
        directory.rmdir()
