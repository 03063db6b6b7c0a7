"""The isolation benchmark's measurements (scripts/isolation.py): a daemon of its own, started
and stopped between the governed and the ungoverned runs, and each phase: the victim alone,
beside a neighbour governed and ungoverned, user B's launches, the daemon's CPU per exec."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from benchlib import DAEMON_NICE, percentile, remove_cgroup_root, tmpfs
from isolation_loads import (BOMB_CAP, B_USER, LAUNCH, NEIGHBOUR_USER, PROBER, TWIN, VICTIM, Neighbour, Processes,
                             ensure_user)

VICTIM_DEMAND = ("--cpus", "1", "--memory", "64M")  # one busy thread: 1 core is all it can use


def cpu_seconds(pid: int) -> float:
    """CPU time (user + sys, all threads) of process ``pid`` so far, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Daemon:
    """`governor daemon` of the wheel install, sessions on, in a cgroup root of its own, with
    three groups: ``victim`` (root), ``hostile`` (the neighbour's user) and ``b`` (user B)."""

    def __init__(self, governor: str, work: Path):
        self.governor, self.process = governor, None
        self.state = Path(tempfile.mkdtemp(dir=tmpfs(), prefix="governor-isolation-"))
        self.config, self.socket, self.log = work / "governor.toml", str(work / "governor.sock"), work / "daemon.log"
        self.root = f"governor-isolation-{uuid.uuid4().hex[:8]}"
        # Sessions small enough for the VM's 2 GiB: each counts its memory against the capacity;
        # and the session fork bomb's cap.
        self.config.write_text(f'[daemon]\nstate_dir = "{self.state / "state"}"\n\n'
                               f'[sessions]\nmemory = "64M"\npids = {BOMB_CAP}\n\n'
                               '[groups.victim]\nusers = ["root"]\n\n'
                               f'[groups.hostile]\nusers = ["{NEIGHBOUR_USER}"]\n\n'
                               f'[groups.b]\nusers = ["{B_USER}"]\n')

    def running(self, wanted: bool) -> None:
        """Start the daemon (``wanted``) or stop it, if it is not so already."""
        if wanted and self.process is None:
            self.process = subprocess.Popen(
                [self.governor, "daemon", "--config", str(self.config), "--socket", self.socket,
                 "--cgroup-root", self.root], stdout=open(self.log, "a"), stderr=subprocess.STDOUT,
                preexec_fn=lambda: os.nice(DAEMON_NICE))
            self.wait_for_socket()
        elif not wanted and self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(120)
            self.process = None

    def wait_for_socket(self, timeout: float = 300) -> None:
        """Until the daemon answers a connection: in the emulated VM, a start while the host is
        busy took longer than benchlib's 30 s."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            with socket.socket(socket.AF_UNIX) as probe:
                if probe.connect_ex(self.socket) == 0:
                    return
            time.sleep(0.2)
        raise SystemExit(f"the daemon did not start in {timeout:.0f} s (exit code {self.process.poll()}): "
                         f"{self.log.read_text()[-3000:]}")

    def cpu(self) -> float:
        """The daemon's CPU so far, seconds (0 while it is not running)."""
        return cpu_seconds(self.process.pid) if self.process else 0.0

    def close(self) -> None:
        """Stop the daemon if it runs; remove its cgroup root and state directory."""
        if self.process is not None and self.process.poll() is None:
            self.running(False)
        remove_cgroup_root(self.root)
        shutil.rmtree(self.state, ignore_errors=True)


class Phases:
    """The benchmark's phases, each ``seconds`` long, with the processes it started ended at
    its end (a failure or Ctrl-C ends them in :meth:`close`)."""

    def __init__(self, governor: str, work: Path, seconds: float):
        for name in (NEIGHBOUR_USER, B_USER):
            ensure_user(name)
        self.governor, self.python, self.seconds = governor, str(Path(governor).with_name("python")), seconds
        self.daemon = Daemon(governor, work)
        self.processes = Processes(work, self.daemon.socket)
        self.twin_cpu_ms = 0.0  # B's CPU twin: what a launch used, quiet (:meth:`quiet`)
        (work / "victim.py").write_text(VICTIM)

    def close(self) -> None:
        """End every process the phases started, then the daemon and its cgroup root."""
        self.processes.stop_all()
        self.daemon.close()

    def governed(self, argv: list[str], group: str, demand: tuple[str, ...]) -> list[str]:
        """``argv`` as a task of ``group`` declaring ``demand`` (`governor run` flags)."""
        return [self.governor, "run", "--group", group, *demand, "--", *argv]

    def victim(self, governed: bool) -> tuple[list[float], list[float], float | None]:
        """The victim's iterations a second and the CPU it had (cores), each 0.5 s, and
        (``governed``) its group's CPU guarantee in cores (None: never counted while it ran),
        read from the daemon's status (:meth:`guarantee`) halfway through its samples (a launch
        that waited starts its samples late, not its guarantee)."""
        argv = [self.python, "victim.py", str(self.seconds)]
        victim = self.processes.start(self.governed(argv, "victim", VICTIM_DEMAND) if governed else argv,
                                      stdout=subprocess.PIPE)
        # A victim that never starts (its launch refused or waiting) is ended, not waited for.
        watchdog = threading.Timer(self.seconds + 120, os.killpg, (victim.pid, signal.SIGKILL))
        watchdog.start()
        samples, cpus, guarantee = [], [], None
        try:
            for line in victim.stdout:
                rate, cpu = map(float, line.split())
                samples.append(rate)
                cpus.append(cpu)
                # Halfway (two samples a second), and again at each sample until the filling
                # counts the victim: in the emulated VM it lagged the launch by seconds.
                if governed and not guarantee and len(samples) >= self.seconds:
                    guarantee = self.guarantee()
        finally:
            watchdog.cancel()
            self.processes.stop(victim)
        if len(samples) < 2:
            raise SystemExit(f"the victim reported {len(samples)} samples (governed: {governed}); what the "
                             f"processes said: {self.processes.log.read_text()[-2000:]}")
        return samples, cpus, guarantee

    def guarantee(self) -> float | None:
        """The victim's group's CPU guarantee (cores; None: not counted) from the daemon's
        status, asked over its socket from this process: a `governor status` is a new
        interpreter, a load only the governed phases would carry (seconds of CPU in the
        emulated VM, where the victim had lost up to 0.2 of a core to it)."""
        try:
            with socket.socket(socket.AF_UNIX) as client:
                client.settimeout(120)
                client.connect(self.daemon.socket)
                client.sendall(b'{"op": "status"}\n')
                reply = json.loads(client.makefile("rb").readline())
        except (OSError, ValueError) as error:  # a timeout is an OSError; a cut reply, a ValueError
            raise SystemExit(f"the daemon did not answer the benchmark's status request: {error}") from None
        if not reply.get("ok"):
            raise SystemExit(f"the daemon refused the benchmark's status request: {reply}")
        return reply["status"]["groups"].get("victim", {}).get("guarantee", {}).get("cpu")

    def prober(self, governed: bool) -> subprocess.Popen:
        """User B's loop for one phase, its results by :meth:`launches`: ``governed``, its
        launches; else its CPU twin (:data:`TWIN`) of the CPU a launch used, quiet."""
        command = ([self.governor, *LAUNCH] if governed
                   else [self.python, "-c", TWIN, f"{self.twin_cpu_ms:.1f}"])
        return self.processes.start([self.python, "-c", PROBER, str(self.seconds), *command], B_USER,
                                    stdout=subprocess.PIPE)

    def launches(self, prober: subprocess.Popen) -> dict:
        """User B's runs: wall time p50 and p99 (ms), CPU time p50 (ms), how many, how many failed."""
        output, _ = prober.communicate(timeout=self.seconds + 120)
        self.processes.stop(prober)
        lines = output.decode().splitlines()
        runs = [tuple(map(float, line.split())) for line in lines if line != "failed"]
        walls, cpus = sorted(run[0] for run in runs), sorted(run[1] for run in runs)
        return {"p50": percentile(walls, 50) if runs else None, "p99": percentile(walls, 99) if runs else None,
                "cpu_p50": percentile(cpus, 50) if runs else None, "launches": len(runs),
                "failed": len(lines) - len(runs)}

    def alone(self) -> list[float]:
        """The victim alone, plain (root's: no session takes it in, daemon or not)."""
        return self.victim(False)[0]

    def quiet(self) -> dict:
        """B's launches with nothing else running, and the daemon's CPU meanwhile (% of a core);
        then, with no daemon, B's CPU twin of what a launch used (``twin``)."""
        self.daemon.running(True)
        began, cpu = time.monotonic(), self.daemon.cpu()
        found = self.launches(self.prober(True))
        if not found["launches"]:
            raise SystemExit(f"none of B's quiet launches finished: {self.processes.log.read_text()[-2000:]}")
        found["daemon_cpu"] = 100 * (self.daemon.cpu() - cpu) / (time.monotonic() - began)
        self.daemon.running(False)
        self.twin_cpu_ms = found["cpu_p50"]
        return {**found, "twin": self.launches(self.prober(False))}

    def beside(self, neighbour: Neighbour, governed: bool) -> dict:
        """The victim beside ``neighbour``, both under the daemon (``governed``: each launched
        by `governor run` into its group, or the neighbour plain into its user's session, B
        launching meanwhile) or with no daemon at all (B running its CPU twin meanwhile); how many
        processes the neighbour's user held at the victim's end."""
        self.daemon.running(governed)
        argv = list(neighbour.argv)
        by_run = governed and not neighbour.session
        hostile = self.processes.start(self.governed(argv, "hostile", neighbour.demand) if by_run else argv,
                                       NEIGHBOUR_USER, env=dict(neighbour.env))
        try:
            time.sleep(1)  # the storm under way before the victim starts
            began, cpu = time.monotonic(), self.daemon.cpu()
            prober = self.prober(governed)
            samples, cpus, guarantee = self.victim(governed)
            daemon_cpu = 100 * (self.daemon.cpu() - cpu) / (time.monotonic() - began) if governed else None
            held = self.processes.count(NEIGHBOUR_USER)
            launches = self.launches(prober)
        finally:
            self.processes.stop(hostile)
        return {"samples": samples, "cpu": statistics.median(cpus), "guarantee": guarantee, "daemon_cpu": daemon_cpu, "launches": launches,
                "processes": held}

    def exec_cost(self, count: int) -> dict:
        """The daemon's CPU per exec (µs): ``count`` × /bin/true run by a governed user (the
        neighbour's, its session made beforehand) and by an ungoverned one (nobody), less the
        daemon's idle CPU over the same time."""
        self.daemon.running(True)
        holder = self.processes.start(["sleep", "3600"], NEIGHBOUR_USER)  # the session, made before timing
        deadline = time.monotonic() + 60
        while "session" not in Path(f"/proc/{holder.pid}/cgroup").read_text():
            if time.monotonic() > deadline:
                raise SystemExit(f"{NEIGHBOUR_USER}'s process was not moved into a session in 60 s")
            time.sleep(0.05)
        began, cpu = time.monotonic(), self.daemon.cpu()
        time.sleep(2)
        idle = (self.daemon.cpu() - cpu) / (time.monotonic() - began)
        loop = f"i=0; while [ $i -lt {count} ]; do /bin/true; i=$((i+1)); done"
        costs = {}
        for kind, user in (("governed", NEIGHBOUR_USER), ("ungoverned", "nobody")):
            began, cpu = time.monotonic(), self.daemon.cpu()
            shell = self.processes.start(["/bin/sh", "-c", loop], user)
            shell.wait()
            self.processes.stop(shell)
            time.sleep(1)  # the daemon reads the last events
            spent = self.daemon.cpu() - cpu - idle * (time.monotonic() - began)
            costs[kind] = 1e6 * spent / count
        self.processes.stop(holder)
        return {**costs, "execs": count, "idle_cpu": 100 * idle}
