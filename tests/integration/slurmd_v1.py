"""A real one-node Slurm natively on this host's cgroup v1 hierarchies (issue 42.3), for
test_slurmd_v1.py: Debian's ``slurmctld``, ``slurmd`` (cgroup/v1 plugin; proctrack/cgroup,
task/cgroup with cores, memory and devices constrained, jobacct_gather/cgroup) and ``munged``,
each started by the test with its config, state, logs and sockets in a directory of its own.

slurmd's cgroup/v1 plugin makes its tree at the top of every hierarchy it uses, and a test on
this host may make cgroups only under a root of its own. ``CgroupMountpoint`` (cgroup.conf) is
where Slurm looks for each hierarchy, as ``<CgroupMountpoint>/<controller>``: there each name
is a link to the test's root in that hierarchy (``/sys/fs/cgroup/cpuset/governor-slurmd-<hex>``),
so Slurm's ``/slurm_<node>`` is ``/governor-slurmd-<hex>/slurm_<node>`` as ``/proc/<pid>/cgroup``
spells it. Nothing is mounted. (Slurm reads ``/proc/<pid>/cgroup`` itself only to tell whether
a pid is in a step, for ``pam_slurm_adopt``, which this node does not use.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

from daemon_harness import _rmdir_retrying
from support.waits import wait_until

from governor.cgroups.files import read_file, write_file
from governor.cgroups.foreign_subtrees import ForeignPlaces
from governor.cgroups.hierarchy import V1_CONTROLLERS
from governor.cgroups.parse import parse_proc_cgroup

# The hierarchies Slurm's cgroup/v1 plugin uses here: task/cgroup's cpuset, memory and
# devices, proctrack/cgroup's freezer, jobacct_gather/cgroup's cpuacct. Never cpu.
SLURMS = ("cpuset", "memory", "devices", "freezer", "cpuacct")
PROGRAMS = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "scancel", "squeue", "sinfo")
JOB_MEMORY_MIB = 200
USER = "gov-slurm"  # the job's user: one no other test governs (a daemon of another test would move it)


def missing() -> str | None:
    """Why a real Slurm cannot run natively here, or None."""
    if os.geteuid() != 0:
        return "needs root (slurmd, and cgroups of its own)"
    absent = [program for program in PROGRAMS if shutil.which(program) is None]
    if absent:
        return (f"Debian's Slurm is not installed (no {', '.join(absent)}): "
                "apt-get install slurmd slurmctld munge (scripts/test installs them)")
    places = ForeignPlaces.of_host("v1", (*V1_CONTROLLERS, *SLURMS))
    unmounted = [key for key in SLURMS if key not in places.mounts]
    if unmounted:
        return f"no cgroup v1 hierarchy for {', '.join(unmounted)} on this host"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class SlurmNode:
    """One node, ``slurmctld`` and ``slurmd`` on it, up when made; :meth:`stop` ends every
    process it started and removes its cgroups, user and directory."""

    def __init__(self) -> None:
        self.places = ForeignPlaces.of_host("v1", (*V1_CONTROLLERS, *SLURMS))
        self.root = f"/governor-slurmd-{uuid.uuid4().hex[:8]}"
        self.node = socket.gethostname().split(".")[0]
        # Debian builds Slurm with --enable-multiple-slurmd: the plugin's tree is /slurm_<node>.
        self.scope = f"{self.root}/slurm_{self.node}"
        self.dir = Path(tempfile.mkdtemp(prefix="governor-slurmd-"))
        self.dir.chmod(0o755)  # the job's user reaches munge's socket and the config
        self.env = {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}
        self.daemons: dict[str, int] = {}
        self.made_user = False
        try:
            self._make_user()
            self._make_root()
            self._configure()
            self._start()
        except BaseException:
            self.stop()
            raise

    def _make_user(self) -> None:
        if subprocess.run(["id", USER], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", USER], check=True)
            self.made_user = True
        self.uid = int(subprocess.run(["id", "-u", USER], capture_output=True, text=True, check=True).stdout)

    def _make_root(self) -> None:
        """The test's root in each of :data:`SLURMS`, linked from ``<dir>/cgroup/<controller>``."""
        (self.dir / "cgroup").mkdir()
        for key in SLURMS:
            directory = self.places.directory(key, self.root)
            directory.mkdir()
            if key == "cpuset":  # a v1 cpuset starts empty: Slurm copies its sets from here
                for name in ("cpuset.cpus", "cpuset.mems"):
                    write_file(directory, name, read_file(directory.parent, name).strip())
            (self.dir / "cgroup" / key).symlink_to(directory)

    def _configure(self) -> None:
        d = self.dir
        (d / "munge.key").write_bytes(os.urandom(1024))
        (d / "munge.key").chmod(0o600)
        for name in ("ctld", "spool"):
            (d / name).mkdir()
        (d / "slurm.conf").write_text(
            f"ClusterName=governor\nSlurmctldHost={self.node}(127.0.0.1)\n"
            f"SlurmctldPort={_free_port()}\nSlurmdPort={_free_port()}\n"
            f"AuthType=auth/munge\nAuthInfo=socket={d}/munge.sock\nCredType=cred/munge\n"
            "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\nJobAcctGatherType=jobacct_gather/cgroup\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\nMpiDefault=none\n"
            "SlurmUser=root\nSlurmdUser=root\nReturnToService=2\n"
            f"StateSaveLocation={d}/ctld\nSlurmdSpoolDir={d}/spool\n"
            f"SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n"
            f"SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n"
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=2048 State=UNKNOWN\n"
            f"PartitionName=main Nodes={self.node} Default=YES MaxTime=INFINITE State=UP\n")
        (d / "cgroup.conf").write_text(
            f"CgroupPlugin=cgroup/v1\nCgroupMountpoint={d}/cgroup\n"
            "ConstrainCores=yes\nConstrainRAMSpace=yes\nConstrainDevices=yes\n")

    def _start(self) -> None:
        d = self.dir
        self._daemon("munged", ["munged", "--force", f"--socket={d}/munge.sock", f"--key-file={d}/munge.key",
                                f"--log-file={d}/munged.log", f"--pid-file={d}/munged.pid", f"--seed-file={d}/munged.seed"])
        self._daemon("slurmctld", ["slurmctld", "-i"])
        self._daemon("slurmd", ["slurmd"])
        self.wait(lambda: self._query(["sinfo", "-h", "-o", "%T"]).strip() == "idle", "the node up (sinfo: idle)")

    def _daemon(self, name: str, argv: list[str]) -> None:
        """Start daemon ``name`` (it forks away) and keep its pid, from its pid file."""
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise AssertionError(f"{name} did not start ({done.returncode}): {done.stderr}{self.logs()}")
        self.wait(lambda: (self.dir / f"{name}.pid").is_file() and (self.dir / f"{name}.pid").read_text().strip(),
                  f"{name}'s pid file")
        self.daemons[name] = int((self.dir / f"{name}.pid").read_text())

    def _query(self, argv: list[str]) -> str:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60).stdout

    def wait(self, condition, what, timeout: float = 60) -> None:
        """Until ``condition()`` holds, or fail saying ``what`` (a string, or a callable
        saying it then) with the daemons' logs."""
        wait_until(condition, "the condition" if callable(what) else what, timeout=timeout, every=0.1,
                   detail=lambda: (what() if callable(what) else "") + self.logs())

    def logs(self) -> str:
        """The end of each daemon's log, for a failure's message."""
        text = ""
        for name in ("slurmctld", "slurmd", "munged"):
            log = self.dir / f"{name}.log"
            if log.is_file():
                text += f"\n--- {name}.log:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        return text

    def as_user(self, argv: list[str]) -> list[str]:
        """``argv`` as the job's user, in /tmp (Slurm runs a job where it was submitted)."""
        return ["runuser", "-u", USER, "--", "env", f"SLURM_CONF={self.dir}/slurm.conf", "sh", "-c",
                'cd /tmp && exec "$@"', "sh", *argv]

    def sbatch(self, command: str, cpus: int = 1, memory_mib: int = JOB_MEMORY_MIB) -> int:
        """Submit ``command`` as a batch job of the user: its id, once it runs."""
        done = subprocess.run(self.as_user(["sbatch", "--parsable", "-c", str(cpus), f"--mem={memory_mib}M",
                                            "-o", "/dev/null", "--wrap", command]),
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise AssertionError(f"sbatch failed ({done.returncode}): {done.stderr}{self.logs()}")
        job = int(done.stdout.strip().split(";")[0])
        self.wait(lambda: self._query(["squeue", "-h", "-j", str(job), "-o", "%T"]).strip() == "RUNNING",
                  f"job {job} to run")
        return job

    def cancel(self, job: int) -> None:
        """Cancel ``job`` and wait until Slurm no longer lists it running or completing."""
        subprocess.run(["scancel", str(job)], env=self.env, check=True, timeout=60)
        self.wait(lambda: not self._query(["squeue", "-h", "-j", str(job), "-t", "running,completing", "-o", "%T"]).strip(),
                  f"job {job} to end")

    def job_path(self, job: int) -> str:
        """Job ``job``'s cgroup as ``/proc/<pid>/cgroup`` spells it."""
        return f"{self.scope}/uid_{self.uid}/job_{job}"

    def cgroups(self, pid: int) -> dict[str, str] | None:
        """``pid``'s cgroup in each v1 hierarchy, by controller; None once it is gone."""
        try:
            return parse_proc_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
        except OSError:
            return None

    def in_job(self, pid: int, job: int) -> bool:
        """Whether ``pid`` is in a step of job ``job`` in each of :data:`SLURMS`."""
        paths = self.cgroups(pid) or {}
        return all(paths.get(key, "").startswith(self.job_path(job) + "/step_") for key in SLURMS)

    def processes(self, job: int) -> list[int]:
        """The user's processes in job ``job`` (the batch script, what it runs, srun's steps)."""
        found = subprocess.run(["pgrep", "-U", str(self.uid)], capture_output=True, text=True).stdout.split()
        return [int(pid) for pid in found if self.in_job(int(pid), job)]

    def stop(self) -> None:
        """Cancel every job, end the daemons (each by its pid), remove the cgroups, the user
        and the directory."""
        if "slurmctld" in self.daemons:
            subprocess.run(["scancel", "-u", USER], env=self.env, capture_output=True, timeout=60)
            with contextlib.suppress(AssertionError):
                self.wait(lambda: not self._query(["squeue", "-h", "-t", "running,completing", "-o", "%i"]).strip(),
                          "the jobs to end", timeout=30)
        for name in ("slurmd", "slurmctld", "munged"):
            if name in self.daemons:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.daemons[name], signal.SIGTERM)
                with contextlib.suppress(AssertionError):
                    self.wait(lambda: not Path(f"/proc/{self.daemons[name]}").exists(), f"{name} to end", timeout=30)
        subprocess.run(["pkill", "-KILL", "-U", USER], check=False)
        for key in SLURMS:
            top = self.places.directory(key, self.root)
            if top is not None and top.is_dir():
                for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                    _rmdir_retrying(directory)
                _rmdir_retrying(top)
        if self.made_user:
            subprocess.run(["userdel", USER], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

