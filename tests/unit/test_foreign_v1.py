"""Foreign tenants on a v1 host (issue 42.3): Slurm's cgroup/v1 plugin puts a job in
``/slurm/uid_<N>/job_<N>/step_<N>`` of the cpuset, memory, cpuacct, devices and freezer
hierarchies and never in cpu. On a tree laid out as those hierarchies (tmp dirs, a fake
``/proc``: the root is a parameter), the built-in pattern finds ``/slurm`` though cpu lacks it,
the capacity shrinks by the job's CPU set and memory limit, and a process in the job is never
moved: not into a session, not by a move, not by a re-adoption. The kernel's own files:
tests/integration/foreign_scenarios.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import governor.cgroups.v1
from governor.cgroups.foreign_subtrees import ForeignPlaces
from governor.cgroups.hierarchy import V1_CONTROLLERS, Hierarchy
from governor.cgroups.v1 import CgroupV1Driver
from governor.errors import RequestError
from governor.wire.protocol import LaunchRequest, Peer
from support.daemons import CONFIG, GIB, FakeDriver, collect, launch, make_daemon, on_loop
from support.sessions import session_daemon

MIB = 1024**2
UID, JOB = 1013, 77
STEP = f"/slurm/uid_{UID}/job_{JOB}/step_0"
# The hierarchies Slurm's cgroup/v1 plugin makes a job in: every one but cpu.
SLURMS = ("cpuset", "memory", "cpuacct", "devices", "freezer")
MOUNTED = ("cpu", "cpuacct", "cpuset", "memory", "blkio", "devices", "freezer", "pids")
IN_JOB, OUTSIDE = 500, 501  # made-up pids of support.sessions' login user (uid 1)


def slurm_v1_host(root: Path, *, cpus: str = "0", memory: int = 200 * MIB, scope: str = "/slurm") -> Path:
    """Under ``root``: one directory per v1 hierarchy (``root/<controller>``), Slurm's job
    ``JOB`` of ``UID`` in each of :data:`SLURMS` (CPU set ``cpus`` of the host's 0-1, memory
    limit ``memory``), and ``root/proc``: its ``self/mountinfo`` listing them, and the
    ``/proc/<pid>/cgroup`` of :data:`IN_JOB` (in the step) and :data:`OUTSIDE` (at the top).
    Slurm's ``scope``: ``/slurm``, or a Slurm built with --enable-multiple-slurmd's
    ``/slurm_<node name>``. Returns that ``proc``."""
    step = scope + STEP.removeprefix("/slurm")
    levels = ("", scope, f"{scope}/uid_{UID}", f"{scope}/uid_{UID}/job_{JOB}", step)
    unlimited, used = str(2**63 - 4096), str(150 * MIB)
    # file → its value at each level; uid_N's CPU set is the union of that user's jobs': the job's own.
    files = {"cpuset": {"cpuset.effective_cpus": ("0-1", "0-1", cpus, cpus, cpus)},
             "memory": {"memory.limit_in_bytes": (unlimited, unlimited, unlimited, str(memory), str(memory)),
                        "memory.usage_in_bytes": ("0", used, used, used, used)},
             "cpuacct": {"cpuacct.usage": ("0", "7000000", "7000000", "7000000", "7000000")}}
    for controller in MOUNTED:
        for depth, level in enumerate(levels if controller in SLURMS else levels[:1]):
            directory = root / controller / level.lstrip("/")
            directory.mkdir(parents=True, exist_ok=True)
            for name, values in files.get(controller, {}).items():
                (directory / name).write_text(values[depth] + "\n")
    proc = root / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text("".join(
        f"{30 + i} 20 0:{40 + i} / {root / c} rw,relatime - cgroup cgroup rw,{c}\n" for i, c in enumerate(MOUNTED)))
    for pid, where in ((IN_JOB, step), (OUTSIDE, "/")):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "cgroup").write_text("".join(
            f"{i + 1}:{c}:{where if c in SLURMS else '/'}\n" for i, c in enumerate(MOUNTED)) + "0::/\n")
    return proc


def located_in(daemon, proc: Path) -> None:
    """Make ``daemon`` read where :data:`IN_JOB` and :data:`OUTSIDE` are from ``proc``, as a v1
    host's daemon reads it (its root ``/governor`` in the cpu hierarchy), the rest as before."""
    reading = Hierarchy(daemon.hierarchy.driver, "/fake", (), proc_key="cpu", proc_root="/governor")
    before = daemon.hierarchy.locate

    def locate(pid, proc_dir=None):
        if pid in (IN_JOB, OUTSIDE):
            return reading.locate(pid, proc)
        return before(pid)

    daemon.hierarchy.locate = locate


@pytest.fixture
def host(tmp_path) -> tuple[Path, ForeignPlaces]:
    proc = slurm_v1_host(tmp_path / "cgroupfs")
    return proc, ForeignPlaces.of_host("v1", V1_CONTROLLERS, proc=proc)


def test_foreign_subtrees_are_found_in_every_hierarchy_governor_uses_and_freezer(host):
    proc, places = host
    # blkio is the driver's, freezer where Slurm tracks a job; pids is not the driver's here.
    assert set(places.mounts) == {"cpu", "cpuacct", "cpuset", "memory", "blkio", "freezer"}
    assert places.find("/slurm") == ["/slurm"]  # cpu lacks it: found all the same
    assert places.exists("/slurm") and not places.exists("/nomad.slice")
    with_pids = ForeignPlaces.of_host("v1", (*V1_CONTROLLERS, "pids", "devices"), proc=proc)
    assert {"pids", "devices"} <= set(with_pids.mounts)


def test_a_slurm_v1_job_is_read_from_its_cpuset_and_memory_hierarchies(host):
    _, places = host
    reading = places.read_allocated("/slurm")
    # One core of the host's two (uid_N's set is the job's own: the scope's tells), 200M.
    assert reading.allocated == {"cpu": 1.0, "memory": 200.0 * MIB} and reading.jobs == 1
    assert (reading.cpu_usage_usec, reading.memory_bytes) == (7000, 150 * MIB)


def test_a_slurm_v1_job_bound_by_no_cpu_set_counts_the_scopes_use(tmp_path):
    proc = slurm_v1_host(tmp_path / "cgroupfs", cpus="0-1")
    reading = ForeignPlaces.of_host("v1", V1_CONTROLLERS, proc=proc).read_allocated("/slurm")
    assert reading.allocated == {"memory": 200.0 * MIB}


def test_the_capacity_shrinks_by_the_jobs_limits_and_its_process_is_never_moved(tmp_path, host):
    proc, places = host
    daemon = session_daemon(tmp_path, foreign_places=places)  # detect: the built-in /slurm
    located_in(daemon, proc)
    on_loop(daemon, daemon.foreign.poll)
    status = daemon.observation.status()
    assert status["capacity"] == {"cpu": 1.0, "memory": 4 * GIB - 200 * MIB}
    assert status["foreign"] == {"slurm": {"path": "/slurm", "manager": "slurm",
                                           "held": {"cpu": 1.0, "memory": 200.0 * MIB}, "basis": "allocated"}}
    # The break: in the cpu hierarchy it is at the top, in a session's reach; in cpuset and
    # memory it is Slurm's. It stays; the same user's process outside the job is governed.
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(IN_JOB, 1))
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(OUTSIDE, 1))
    assert daemon.hierarchy.driver.procs["A/session-1"] == [OUTSIDE]
    # Every move asks, whatever asks it; a launch from inside is refused at the door.
    refused = on_loop(daemon, lambda: daemon.tree.join([("A/session-1", IN_JOB)]))
    assert isinstance(refused[0], RequestError) and "/slurm, a subtree another manager owns" in refused[0].message
    request = LaunchRequest(pid=IN_JOB, group="A", demand={"cpu": 0.5}, command=("work",))
    with pytest.raises(RequestError, match="/slurm, a subtree another manager owns"):
        asyncio.run(collect(daemon.requests.stream(request, Peer(pid=IN_JOB, uid=0, gid=0))))
    assert daemon.hierarchy.driver.procs["A/session-1"] == [OUTSIDE]


def test_a_debian_slurmds_v1_scope_is_found_and_read_as_slurms(tmp_path):
    """Debian's slurmd (built with --enable-multiple-slurmd) makes ``/slurm_<node name>``, not
    ``/slurm`` (seen natively here: tests/integration/test_slurmd_v1.py): the built-in pattern
    finds it, its jobs count what they were allocated, and its process is never moved."""
    proc = slurm_v1_host(tmp_path / "cgroupfs", scope="/slurm_node7")
    daemon = session_daemon(tmp_path, foreign_places=ForeignPlaces.of_host("v1", V1_CONTROLLERS, proc=proc))
    located_in(daemon, proc)
    on_loop(daemon, daemon.foreign.poll)
    status = daemon.observation.status()
    assert status["foreign"] == {"slurm_node7": {"path": "/slurm_node7", "manager": "slurm",
                                                 "held": {"cpu": 1.0, "memory": 200.0 * MIB}, "basis": "allocated"}}
    assert status["capacity"] == {"cpu": 1.0, "memory": 4 * GIB - 200 * MIB}
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(IN_JOB, 1))


def test_a_path_listed_with_its_children_is_one_tenant_counted_once(tmp_path, host):
    # The issue's [foreign] paths = ["/slurm", "/slurm/*"]: /slurm/uid_N is part of /slurm.
    proc, places = host
    daemon = make_daemon(tmp_path, config=CONFIG + '[foreign]\ndetect = false\npaths = ["/slurm", "/slurm/*"]\n',
                         foreign_places=places)
    on_loop(daemon, daemon.foreign.poll)
    assert list(daemon.foreign.tenants) == ["slurm"] and daemon.policy.capacity["memory"] == 4 * GIB - 200 * MIB


class AdoptedDriver(FakeDriver):
    """A v1 host where a task's process is in its cgroup in cpu, and in Slurm's job elsewhere
    (``pam_slurm_adopt`` took it since): :meth:`rejoin` would put it back in the rest."""

    def __init__(self):
        super().__init__()
        self.rejoined: list[int] = []

    def rejoin(self, rel, leave=None):
        moved = [pid for pid in self.procs.get(rel, []) if leave is None or not leave(pid)]
        self.rejoined += moved
        return moved


def test_a_restart_leaves_a_process_slurm_adopted_in_slurms_cgroups(tmp_path, host):
    proc, places = host
    driver = AdoptedDriver()
    first = make_daemon(tmp_path, driver=driver)
    launch(first, IN_JOB, group="A", cpu=0.1, memory=GIB // 8)
    again = make_daemon(tmp_path, driver=driver, foreign_places=places)
    located_in(again, proc)
    on_loop(again, lambda: (again.foreign.poll_now(), again.recovery.readopt()))  # serve()'s order
    assert [t.id for t in again.tasks] == ["1"] and driver.rejoined == []



def test_the_v1_driver_rejoins_no_process_it_is_told_to_leave(tmp_path, monkeypatch):
    # A task's cgroup in four hierarchies; 500 is there in cpu only (Slurm took it elsewhere).
    roots = {c: tmp_path / c / "governor" for c in ("cpu", "cpuacct", "cpuset", "memory")}
    for controller, root in roots.items():
        (root / "A" / "task-1").mkdir(parents=True)
        (root / "A" / "task-1" / "cgroup.procs").write_text("500\n501\n" if controller == "cpu" else "501\n")
    writes = []
    monkeypatch.setattr(governor.cgroups.v1, "write_file", lambda d, f, v: writes.append((d.relative_to(tmp_path), v)))
    driver = CgroupV1Driver(roots)
    assert driver.rejoin("A/task-1", leave=lambda pid: pid == 500) == [] and writes == []
    assert driver.rejoin("A/task-1") == [500] and len(writes) == 3  # without: into the three that lack it
