"""Foreign tenants on the real kernel (issue 36.1): a subtree laid out as Slurm's cgroup plugin
lays out a job (``slurmstepd.scope/job_1/step_0``, the job's ``memory.max`` and CPU quota set),
made by the test under a root of its own beside governor's, the same path in every hierarchy.
Governor's capacity drops by what the job was allocated, a launch that no longer fits waits
(never refused, nothing squeezed), a process in the job is never moved, and the capacity comes
back once the job ends. Shared by the v1 (native) and v2 (VM) modules through kernel_cases."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

from daemon_harness import GOVERNOR, MIB, Governor
from scenarios import GROUPS, SLEEPER
from support.waits import wait_until, within

from governor.cgroups import detect
from governor.cgroups.files import write_file
from governor.cgroups.foreign_subtrees import ForeignPlaces
from governor.cgroups.hierarchy import V1_CONTROLLERS

JOB_MEMORY = 256 * MIB
JOB_CPU = 0.5  # cores: cpu.max "50000 100000"
# v1: the hierarchies the job is made in (cpuset left out: a v1 cpuset needs cpus and mems
# written before a process may join, and Slurm's quota is what governor reads first).
V1_KEYS = ("cpu", "cpuacct", "memory")


class SlurmJob:
    """``/<root>/slurmstepd.scope/job_1/step_0`` in every hierarchy, its limits set as Slurm
    sets them, and ``sleeper`` in its step; :meth:`end` ends it as slurmstepd does (the
    process killed, the job's cgroups removed), :meth:`remove` the rest."""

    def __init__(self) -> None:
        self.mode = detect.driver_mode()
        self.places = ForeignPlaces.of_host(self.mode, V1_CONTROLLERS)
        self.root = f"/governor-foreign-{uuid.uuid4().hex[:8]}"
        self.scope = f"{self.root}/slurmstepd.scope"
        self.job, self.step = f"{self.scope}/job_1", f"{self.scope}/job_1/step_0"
        self.keys = ("",) if self.mode == "v2" else V1_KEYS
        for path in (self.root, self.scope, self.job, self.step):
            for key in self.keys:
                self.places.directory(key, path).mkdir()
            if self.mode == "v2" and path in (self.root, self.scope):  # the controllers down to the job
                write_file(self.places.directory("", path), "cgroup.subtree_control", "+cpu +memory")
        if self.mode == "v2":
            write_file(self.places.directory("", self.job), "memory.max", str(JOB_MEMORY))
            write_file(self.places.directory("", self.job), "cpu.max", f"{round(JOB_CPU * 100000)} 100000")
        else:
            write_file(self.places.directory("memory", self.job), "memory.limit_in_bytes", str(JOB_MEMORY))
            write_file(self.places.directory("cpu", self.job), "cpu.cfs_period_us", "100000")
            write_file(self.places.directory("cpu", self.job), "cpu.cfs_quota_us", str(round(JOB_CPU * 100000)))
        self.started: list[subprocess.Popen] = []
        self.sleeper = self.start(SLEEPER)

    def start(self, command: list[str], **options) -> subprocess.Popen:
        """``command`` started in the job's step (joined before it execs)."""
        procs = [str(self.places.directory(key, self.step) / "cgroup.procs") for key in self.keys]
        join = "".join(f"echo $$ > {path}; " for path in procs)
        process = subprocess.Popen(["sh", "-c", join + 'exec "$@"', "sh", *command], **options)
        self.started.append(process)
        hierarchies = len({self.places.mounts[key][0] for key in self.keys})  # cpu,cpuacct may be one

        def joined() -> bool:  # in every hierarchy
            assert process.poll() is None, f"{command} exited before it joined {self.step}"
            return self.cgroup(process.pid).count(f":{self.step}\n") >= hierarchies
        wait_until(joined, f"{command} to join {self.step}", timeout=30, every=0.01)
        return process

    def cgroup(self, pid: int) -> str:
        return Path(f"/proc/{pid}/cgroup").read_text()

    def end(self) -> None:
        self._kill()
        for path in (self.step, self.job):
            for key in self.keys:
                _rmdir(self.places.directory(key, path))

    def remove(self) -> None:
        self._kill()
        for path in (self.step, self.job, self.scope, self.root):
            for key in self.keys:
                _rmdir(self.places.directory(key, path))


    def _kill(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()


def _rmdir(directory: Path) -> None:
    def removed() -> bool:
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError:  # EBUSY until the killed process is reaped by the kernel
            return False
        return True
    if not within(removed, 10, every=0.05):
        os.rmdir(directory)


def capacity_follows_a_slurm_job_and_its_processes_stay_slurms(tmp_path) -> None:
    job = SlurmJob()
    config = (f'[capacity]\ncpu = 1.0\nmemory = "1G"\n{GROUPS}'
              f'[foreign]\ndetect = false\npaths = ["{job.root}/*slurmstepd.scope"]\n')
    gov = None
    try:
        before = job.cgroup(job.sleeper.pid)
        gov = Governor(tmp_path, config)
        full = {"cpu": 1.0, "memory": 1024 * MIB}
        left = {"cpu": 1.0 - JOB_CPU, "memory": 1024 * MIB - JOB_MEMORY}
        status = gov.status()
        assert status["host_capacity"] == full, status["host_capacity"]
        gov.wait(lambda: gov.status()["capacity"] == left, f"the capacity less the job's allocation, {left}")
        tenant = gov.status()["foreign"]["slurmstepd.scope"]
        assert (tenant["path"], tenant["manager"], tenant["basis"]) == (job.scope, "slurm", "allocated"), tenant
        assert tenant["held"] == {"cpu": JOB_CPU, "memory": JOB_MEMORY}, tenant
        # governor run from inside the job: the process is Slurm's and is never moved out.
        inside = job.start([GOVERNOR, "run", "--socket", gov.socket, "--group", "B", "--cpus=0.1", "--memory=16M",
                            "--", "sleep", "600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, err = inside.communicate(timeout=60)
        assert inside.returncode != 0 and "a subtree another manager owns" in err, err
        assert gov.task_count("B") == 0
        assert job.cgroup(job.sleeper.pid) == before  # never moved
        # A launch that fits the host but not what the job leaves waits; it is not refused.
        waiting = gov.run_queued("A", SLEEPER, cpus=0.1, memory="900M")
        ended = time.monotonic()
        job.end()
        gov.wait(lambda: gov.status()["capacity"] == full, "the capacity back once the job ended")
        back_s = time.monotonic() - ended
        gov.wait(lambda: gov.task_count("A") == 1, "the waiting task started once the job's memory freed")
        started_s = time.monotonic() - ended
        assert waiting.poll() is None
        print(f"\nforeign: capacity {full} → {left} while the Slurm job ran; back {back_s:.1f} s after it "
              f"ended, the waiting 900M task started {started_s:.1f} s after")
    finally:
        if gov is not None:
            gov.close()
        job.remove()
