"""Slurm's cgroup/v1 layout on this host's real v1 hierarchies (issue 42.3): a job is
``/slurm/uid_<N>/job_<N>/step_<N>`` in cpuset, memory, cpuacct and freezer, never in cpu (as
Slurm's cgroup/v1 plugin makes it), made by the test under a root of its own
(``/governor-slurm-<hex>/slurm``, listed in ``[foreign] paths``), its CPU set and memory limit
written as Slurm writes them. A governed user's process in the job is never moved, by the start's
rescan, by the process events, or by a restart's re-adoption of a session it was adopted out of;
the capacity shrinks by the job's CPU set and memory limit."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from daemon_harness import MIB, Governor, _rmdir_retrying
from session_scenarios import SessionUsers, cgroup_of, wait_for

from governor.cgroups.files import read_file, write_file
from governor.cgroups.foreign_subtrees import ForeignPlaces
from governor.cgroups.hierarchy import V1_CONTROLLERS
from governor.cgroups.parse import parse_proc_cgroup

JOB_MEMORY = 200 * MIB
# Where Slurm's cgroup/v1 plugin makes a job (devices too, not governed here): never cpu.
SLURMS = ("cpuset", "memory", "cpuacct", "freezer")


class SlurmV1Job:
    """``/<root>/slurm/uid_<uid>/job_1/step_0`` in each of :data:`SLURMS`, its CPU set (CPU 0)
    and memory limit (:data:`JOB_MEMORY`) set at the job as Slurm sets them."""

    def __init__(self, uid: int) -> None:
        self.places = ForeignPlaces.of_host("v1", V1_CONTROLLERS)
        self.root = f"/governor-slurm-{uuid.uuid4().hex[:8]}"
        self.scope = f"{self.root}/slurm"
        self.job = f"{self.scope}/uid_{uid}/job_1"
        self.step = f"{self.job}/step_0"
        self.levels = (self.root, self.scope, f"{self.scope}/uid_{uid}", self.job, self.step)
        self.started: list[subprocess.Popen] = []
        self.made: list[Path] = []
        for path in self.levels:
            for key in SLURMS:
                directory = self.places.directory(key, path)
                directory.mkdir()
                self.made.append(directory)
                if key == "cpuset":  # a v1 cpuset starts empty: no process may join it until given both
                    write_file(directory, "cpuset.mems", read_file(directory.parent, "cpuset.mems").strip())
                    cpus = "0" if path.startswith(f"{self.scope}/") else read_file(directory.parent, "cpuset.cpus")
                    write_file(directory, "cpuset.cpus", cpus.strip())
        write_file(self.places.directory("memory", self.job), "memory.limit_in_bytes", str(JOB_MEMORY))

    def join(self, pid: int) -> None:
        """Put ``pid`` into the step in each of :data:`SLURMS` (as slurmstepd, or
        ``pam_slurm_adopt``, does)."""
        for key in SLURMS:
            write_file(self.places.directory(key, self.step), "cgroup.procs", str(pid))

    def start(self, command: list[str]) -> subprocess.Popen:
        """``command`` started in the step (joined before it execs)."""
        procs = [str(self.places.directory(key, self.step) / "cgroup.procs") for key in SLURMS]
        process = subprocess.Popen(["sh", "-c", "".join(f"echo $$ > {p}; " for p in procs) + 'exec "$@"', "sh",
                                    *command], stderr=subprocess.DEVNULL)
        self.started.append(process)
        return process

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` is in the step in each of :data:`SLURMS`."""
        try:
            paths = parse_proc_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
        except OSError:
            return False
        return all(paths.get(key) == self.step for key in SLURMS)

    def remove(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.wait()
        for directory in reversed(self.made):
            _rmdir_retrying(directory)


def _alice_sleeps(uid: int, seconds: int) -> list[int]:
    found = subprocess.run(["pgrep", "-U", str(uid), "-f", f"^sleep {seconds}$"], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def a_slurm_v1_jobs_process_stays_and_the_capacity_shrinks(tmp_path) -> None:
    users = SessionUsers()
    alice = users.uid["gov-alice"]
    job = SlurmV1Job(alice)
    gov = None
    try:
        # Before the daemon: its start's rescan finds it.
        job.start(["runuser", "-u", "gov-alice", "--", "sleep", "600"])
        wait_for(lambda: [p for p in _alice_sleeps(alice, 600) if job.holds(p)], "alice's sleep in the job")
        gov = Governor(tmp_path, '[capacity]\ncpu = 2.0\nmemory = "1G"\n[groups.A]\nusers = ["gov-alice"]\n'
                                 '[sessions]\ncpu = 0.5\nmemory = "128M"\n'
                                 f'[foreign]\ndetect = false\npaths = ["{job.scope}"]\n')
        left = {"cpu": 1.0, "memory": 1024 * MIB - JOB_MEMORY}  # CPU 0 of the host's two, 200M
        gov.wait(lambda: gov.status()["capacity"] == left, f"the capacity less the job's limits, {left}")
        tenant = gov.status()["foreign"]["slurm"]
        assert (tenant["path"], tenant["manager"], tenant["basis"]) == (job.scope, "slurm", "allocated"), tenant
        assert tenant["held"] == {"cpu": 1.0, "memory": JOB_MEMORY}, tenant
        # After the start: the process events find it (the break: moved within 0.3 s).
        job.start(["runuser", "-u", "gov-alice", "--", "sleep", "601"])
        # alice outside the job, started after: once it is in her session, the events before it were read.
        subprocess.Popen(["runuser", "-u", "gov-alice", "--", "sleep", "602"], stderr=subprocess.DEVNULL)
        gov.wait(lambda: any("/A/session-" in (cgroup_of(p) or "") for p in _alice_sleeps(alice, 602)),
                 "alice's process outside the job in her session")
        in_job = _alice_sleeps(alice, 600) + _alice_sleeps(alice, 601)
        assert len(in_job) == 2 and all(job.holds(p) for p in in_job), {p: cgroup_of(p) for p in in_job}
        assert not any("/A/session-" in (cgroup_of(p) or "") for p in in_job), {p: cgroup_of(p) for p in in_job}
        # pam_slurm_adopt takes her session's process into the job (cpu stays the session's);
        # a restart re-adopts the session and leaves it Slurm's.
        [adopted] = _alice_sleeps(alice, 602)
        job.join(adopted)
        gov.daemon.kill()
        gov.daemon.wait()
        gov.restart()
        gov.wait(lambda: gov.task_count("A") == 1, "alice's session re-adopted")
        assert job.holds(adopted), cgroup_of(adopted)
        assert all(job.holds(p) for p in in_job), {p: cgroup_of(p) for p in in_job}
        print(f"\nslurm v1: capacity {left} while the job held CPU 0 and 200M; its processes {in_job} and the "
              f"adopted {adopted} stayed in {job.step}")
    finally:
        users.kill_all()
        if gov is not None:
            gov.close()
        job.remove()
        users.remove()
