"""governor beside a real slurmd natively on this host's cgroup v1 hierarchies (issue 42.3):
Debian's Slurm with its cgroup/v1 plugin (tests/integration/slurmd_v1.py: one node, its tree
under a root of the test's own) runs a user's job; governor, with that user governed (sessions
on), never moves a process of the job out of any of Slurm's cgroups, by its start's rescan, by
the process events or by a restart, and divides the host less the job's CPU set and memory
limit, as Slurm wrote them. Slurm's own layout here (the fake one: slurm_v1_scenarios.py and
tests/unit/test_foreign_v1.py) is ``/slurm_<node>/uid_<N>/job_<N>/step_batch`` (``task_<N>`` below
it in memory, devices and cpuacct): Debian's slurmd is built with --enable-multiple-slurmd.
"""

import subprocess

import pytest
import slurmd_v1
from daemon_harness import MIB, Governor
from session_scenarios import cgroup_of

pytestmark = pytest.mark.kernel_v1

GIB = 1024 * MIB


@pytest.fixture
def slurm():
    reason = slurmd_v1.missing()
    if reason:
        pytest.skip(reason)
    node = slurmd_v1.SlurmNode()
    try:
        yield node
    finally:
        node.stop()


def _sleeps(slurm: slurmd_v1.SlurmNode, seconds: int) -> list[int]:
    """The user's ``sleep <seconds>`` (srun runs it as ``/usr/bin/sleep``)."""
    found = subprocess.run(["pgrep", "-U", str(slurm.uid), "-f", f"^(/usr/bin/)?sleep {seconds}$"],
                           capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def test_a_real_slurmd_jobs_processes_stay_in_its_cgroups_and_the_capacity_shrinks_by_its_limits(tmp_path, slurm):
    job = slurm.sbatch("sleep 600")  # before the daemon: its start's rescan finds it
    slurm.wait(lambda: any(slurm.in_job(pid, job) for pid in _sleeps(slurm, 600)), "the job's sleep in its step")
    gov = None
    try:
        gov = Governor(tmp_path, '[capacity]\ncpu = 2.0\nmemory = "1G"\n'
                                 f'[groups.A]\nusers = ["{slurmd_v1.USER}"]\n'
                                 '[sessions]\ncpu = 0.5\nmemory = "128M"\n'
                                 f'[foreign]\ndetect = false\npaths = ["{slurm.scope}"]\n')
        left = {"cpu": 1.0, "memory": GIB - slurmd_v1.JOB_MEMORY_MIB * MIB}  # one of the host's CPUs, 200M
        gov.wait(lambda: gov.status()["capacity"] == left, f"the capacity less the job's limits, {left}")
        tenant = gov.status()["foreign"][f"slurm_{slurm.node}"]
        assert tenant == {"path": slurm.scope, "manager": "slurm", "basis": "allocated",
                          "held": {"cpu": 1.0, "memory": slurmd_v1.JOB_MEMORY_MIB * MIB}}, tenant
        # After the start: a step srun starts in the job, which the process events find.
        with open(tmp_path / "srun.log", "w") as log:
            srun = subprocess.Popen(slurm.as_user(["srun", f"--jobid={job}", "--overlap", "sleep", "601"]),
                                    stdout=log, stderr=subprocess.STDOUT)
        slurm.wait(lambda: any(slurm.in_job(pid, job) for pid in _sleeps(slurm, 601)),
                   lambda: f"srun's sleep in its step (now: {[slurm.cgroups(p) for p in _sleeps(slurm, 601)]}; srun "
                           f"{srun.poll()}: {(tmp_path / 'srun.log').read_text()})")
        # The user outside the job, after: once it is in the session, the events before it were read.
        subprocess.Popen(["runuser", "-u", slurmd_v1.USER, "--", "sleep", "602"], stderr=subprocess.DEVNULL)
        gov.wait(lambda: any("/A/session-" in (cgroup_of(p) or "") for p in _sleeps(slurm, 602)),
                 "the user's process outside the job in their session")
        where = {pid: slurm.cgroups(pid) for pid in slurm.processes(job)}
        assert {*_sleeps(slurm, 600), *_sleeps(slurm, 601)} <= set(where), where
        assert not any("/session-" in path for paths in where.values() for path in paths.values()), where
        # A restart re-adopts the session and leaves the job's processes where Slurm put them.
        gov.daemon.kill()
        gov.daemon.wait()
        gov.restart()
        gov.wait(lambda: gov.task_count("A") == 1, "the user's session re-adopted")
        assert {pid: slurm.cgroups(pid) for pid in where} == where
        # Slurm ends what is in the job's cgroups: a process taken out of them would outlive it.
        slurm.cancel(job)
        slurm.wait(lambda: not any(slurm.cgroups(pid) for pid in where), "the job's processes to end")
        srun.wait(timeout=60)
        gov.wait(lambda: gov.status()["capacity"] == {"cpu": 2.0, "memory": GIB}, "the whole capacity back")
        print(f"\nslurmd v1: capacity {left} while job {job} held one CPU and {slurmd_v1.JOB_MEMORY_MIB}M; its "
              f"processes {sorted(where)} stayed in {slurm.job_path(job)}/step_*")
    finally:
        if gov is not None:
            gov.close()
