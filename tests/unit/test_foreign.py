"""Foreign tenants (issue 36.1): the ``[foreign]`` config, the pure arithmetic, the reader on a
directory laid out as cgroupfs (its error paths and sums; the kernel's own files are read in
tests/integration/foreign_scenarios.py), and the daemon stage on the in-memory driver."""

from __future__ import annotations

import asyncio
import io
import math
from pathlib import Path

import pytest
from rich.console import Console

from governor.cgroups.foreign_subtrees import ForeignPlaces
from governor.cli.explain_view import explain_renderables
from governor.cli.top_state import TopState
from governor.cli.top_view import top_view
from governor.cgroups.hierarchy import Location
from governor.config.foreign_rules import ForeignRules, manager_of
from governor.config.load import parse_config
from governor.core import foreign_capacity as core
from governor.core.admission import Waiting, admit
from governor.daemon.filling import fill
from governor.errors import ConfigError, RequestError
from governor.wire.metrics import Metrics
from governor.wire.protocol import LaunchRequest, Peer
from support.daemons import CONFIG, GIB, collect, make_daemon, on_loop
from support.rendered import render, samples
from support.sessions import session_daemon
from support.status_sample import NOW, STATUS
from governor.wire.status_json import decode

MIB = 1024**2
GROUPS = '[groups."*"]\n'


# ── config ──────────────────────────────────────────────────────────────────────────────

def test_the_well_known_managers_are_looked_for_unless_detect_is_off():
    rules = parse_config(GROUPS, "x.toml").foreign
    assert rules == ForeignRules(detect=True, paths=())
    assert ("/kubepods.slice", "kubernetes") in rules.patterns()
    off = parse_config(GROUPS + '[foreign]\ndetect = false\npaths = ["batch.slice", "/lab/*.scope"]\n', "x.toml").foreign
    assert off.patterns() == (("/batch.slice", None), ("/lab/*.scope", None))


@pytest.mark.parametrize(("text", "key", "words"), [
    ("detect = 1", "foreign.detect", "must be true or false"),
    ('paths = "/a"', "foreign.paths", "must be an array of cgroup paths"),
    ("paths = [1]", "foreign.paths[0]", "must be a cgroup path"),
    ('paths = ["/a", "/a/../b"]', "foreign.paths[1]", '".."'),
    ('paths = ["/"]', "foreign.paths[0]", "below the root"),
    ('paths = ["/a//b"]', "foreign.paths[0]", "no empty"),
    ("path = []", "foreign.path", "allowed keys: detect, paths"),
    # pathlib's glob raised ValueError at every poll (at the start: the daemon's end); a whole
    # "**" made the cgroup root itself a tenant holding the host
    ('paths = ["/lab/a**"]', "foreign.paths[0]", "**"),
    ('paths = ["/**"]', "foreign.paths[0]", "**"),
])
def test_a_bad_foreign_table_names_the_key_and_why(text, key, words):
    with pytest.raises(ConfigError) as caught:
        parse_config(GROUPS + "[foreign]\n" + text + "\n", "bad.toml")
    assert (caught.value.file, caught.value.key) == ("bad.toml", key)
    assert words in caught.value.reason


@pytest.mark.parametrize(("path", "manager"), [
    ("/system.slice/slurmstepd.scope", "slurm"), ("/system.slice/sysvm_slurmstepd.scope", "slurm"),
    # Slurm's cgroup/v1 scope, and that of a Slurm built with --enable-multiple-slurmd
    # (Debian's): /slurm_<node name>, read as the config's, by its use, until it was known
    ("/slurm", "slurm"), ("/lab/slurm_node7", "slurm"),
    ("/kubepods.slice", "kubernetes"), ("/machine.slice", "machines"), ("/nomad.slice", "nomad"),
    ("/batch.slice", "config"),
])
def test_a_subtrees_manager_is_told_by_its_last_name(path, manager):
    assert manager_of(path) == manager


# ── arithmetic ──────────────────────────────────────────────────────────────────────────

def test_what_a_tenant_holds_is_its_allocation_else_its_use():
    # Slurm: both bounded → allocated; memory unbounded → its use counts, the basis is "used".
    assert core.held({"cpu": 2.0, "memory": 1.0 * GIB}, (0, 9_000_000), 5, 1.0) == ({"cpu": 2.0, "memory": GIB}, "allocated")
    assert core.held({"cpu": 2.0}, None, 300, 1.0) == ({"cpu": 2.0, "memory": 300.0}, "used")
    # used: 3 s of CPU over 2 s = 1.5 cores; one read only: no CPU rate yet.
    assert core.held({}, (1_000_000, 4_000_000), 7, 2.0) == ({"cpu": 1.5, "memory": 7.0}, "used")
    assert core.held({}, None, None, 0.0) == ({}, "used")


def test_the_capacity_left_never_goes_below_zero_and_moves_only_past_noise():
    tenants = [core.Tenant("a", "/a", "slurm", {"cpu": 1.0, "memory": 3 * GIB}, "allocated"),
               core.Tenant("b", "/b", "config", {"cpu": 0.5}, "used")]
    held = core.total(tenants)
    assert held == {"cpu": 1.5, "memory": 3 * GIB}
    left = core.remaining({"cpu": 2.0, "memory": 2 * GIB, "gpu": 1.0}, held)
    assert left == {"cpu": 0.5, "memory": 2 * GIB * core.LEAST_LEFT, "gpu": 1.0}  # a sliver, never zero
    assert not core.moved(held, {"cpu": 1.55, "memory": 3 * GIB + MIB})
    assert core.moved(held, {"cpu": 1.5})  # the memory went


def test_a_capacity_shrunk_below_what_is_admitted_kills_nothing_and_new_tasks_wait():
    # Memory 4G, 3G admitted to A; a foreign job takes 2G: 2G left, below what A holds.
    capacity = core.remaining({"cpu": 2.0, "memory": 4 * GIB}, {"memory": 2 * GIB})
    answer = admit(capacity, {"A": {"memory": 3 * GIB}}, {"A": 1}, {"B": 1.0},
                   [Waiting("t1", "B", {"cpu": 0.1, "memory": 0.5 * GIB})])
    assert answer.admitted == [] and answer.free["memory"] == 0.0
    # And the filling divides what is left, however little: nothing raises.
    left = core.remaining({"cpu": 2.0, "memory": 4 * GIB}, {"cpu": 5.0, "memory": 5 * GIB})
    allocation = fill(parse_config(CONFIG, "t.toml"), left, lambda g: 1.0, {"A": {"cpu": 1.0, "memory": 3 * GIB}})
    assert all(math.isfinite(v) for v in allocation.groups["A"].allocation.values())


# ── the reader, on a directory laid out as cgroupfs ───────────────────────────────────

def _cgroup(root: Path, path: str, **files: str) -> Path:
    directory = root / path.lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("__", ".")).write_text(text + "\n")
    return directory


def _v2(tmp_path: Path) -> ForeignPlaces:
    _cgroup(tmp_path, "/", cpuset__cpus__effective="0-7")
    return ForeignPlaces({"": (tmp_path, "/")}, ("",))


def test_a_slurm_scope_holds_what_its_jobs_were_allocated(tmp_path):
    places = _v2(tmp_path)
    scope = "/system.slice/slurmstepd.scope"
    _cgroup(tmp_path, "/system.slice", cpuset__cpus__effective="0-7")
    _cgroup(tmp_path, scope, cpu__stat="usage_usec 100\nuser_usec 50", memory__current="4096",
            cpuset__cpus__effective="0-7")
    _cgroup(tmp_path, f"{scope}/job_1", cpu__max="200000 100000", memory__max=str(GIB), cpuset__cpus__effective="0-7")
    _cgroup(tmp_path, f"{scope}/job_2", cpu__max="max 100000", memory__max=str(512 * MIB),
            cpuset__cpus__effective="2-3")  # confined to 2 cores
    assert places.find("/system.slice/*slurmstepd.scope") == [scope]
    reading = places.read_allocated(scope)
    assert reading.allocated == {"cpu": 4.0, "memory": 1.5 * GIB} and reading.jobs == 2
    assert (reading.cpu_usage_usec, reading.memory_bytes) == (100, 4096)
    # A job bound by nothing (every CPU of its parent, memory.max "max"): the scope's use counts.
    _cgroup(tmp_path, f"{scope}/job_3", cpu__max="max 100000", memory__max="max", cpuset__cpus__effective="0-7")
    assert places.read_allocated(scope).allocated == {}


def test_another_managers_subtree_holds_what_it_uses_and_a_v1_host_reads_each_hierarchy(tmp_path):
    cpu, memory = tmp_path / "cpu", tmp_path / "memory"
    _cgroup(cpu, "/kubepods.slice", cpuacct__usage="5000000")
    _cgroup(memory, "/kubepods.slice", memory__usage_in_bytes=str(64 * MIB))
    places = ForeignPlaces({"cpu": (cpu, "/"), "cpuacct": (cpu, "/"), "memory": (memory, "/")}, ("cpu", "memory"))
    assert places.find("/kubepods.slice") == ["/kubepods.slice"]
    reading = places.read_used("/kubepods.slice")
    assert (reading.cpu_usage_usec, reading.memory_bytes, reading.allocated) == (5000, 64 * MIB, {})
    assert places.find("/nomad.slice") == []


def test_a_subtree_seen_through_a_namespaced_mount_is_named_as_proc_spells_it(tmp_path):
    places = ForeignPlaces({"": (tmp_path, "/outer")}, ("",))
    _cgroup(tmp_path, "/kubepods.slice")
    assert places.find("/kubepods.slice") == ["/outer/kubepods.slice"]
    assert places.directory("", "/outer/kubepods.slice") == tmp_path / "kubepods.slice"
    assert places.directory("", "/elsewhere") is None


# ── the daemon stage ────────────────────────────────────────────────────────────────────

def test_the_capacity_shrinks_while_a_foreign_tenant_holds_and_comes_back_when_it_goes(tmp_path):
    tree = tmp_path / "cgroupfs"
    daemon = make_daemon(tmp_path, foreign_places=_v2(tree))
    assert daemon.policy.capacity == {"cpu": 2.0, "memory": 4 * GIB}
    pods = _cgroup(tree, "/kubepods.slice", cpu__stat="usage_usec 0", memory__current=str(GIB))
    before = daemon.inbox.generation
    on_loop(daemon, daemon.foreign.poll)
    assert daemon.inbox.generation > before  # one refill for the change
    status = daemon.observation.status()
    assert status["capacity"] == {"cpu": 2.0, "memory": 3 * GIB}
    assert status["host_capacity"] == {"cpu": 2.0, "memory": 4 * GIB}
    assert status["foreign"] == {"kubepods.slice": {"path": "/kubepods.slice", "manager": "kubernetes",
                                                    "held": {"memory": float(GIB)}, "basis": "used"}}
    # A wobble of 20M is noise: no refill; a drift of two such adds up to one.
    (pods / "memory.current").write_text(str(GIB + 20 * MIB))
    before = daemon.inbox.generation
    on_loop(daemon, daemon.foreign.poll)
    assert daemon.inbox.generation == before and daemon.policy.capacity["memory"] == 3 * GIB
    (pods / "memory.current").write_text(str(GIB + 40 * MIB))
    on_loop(daemon, daemon.foreign.poll)
    assert daemon.inbox.generation > before and daemon.policy.capacity["memory"] == 3 * GIB - 40 * MIB
    for name in ("cpu.stat", "memory.current"):
        (pods / name).unlink()
    pods.rmdir()
    on_loop(daemon, daemon.foreign.poll)
    assert daemon.observation.status()["capacity"] == {"cpu": 2.0, "memory": 4 * GIB}
    assert daemon.observation.status()["foreign"] == {}


def test_a_launch_from_inside_a_foreign_subtree_is_refused_and_its_process_stays(tmp_path):
    tree = tmp_path / "cgroupfs"
    daemon = make_daemon(tmp_path, foreign_places=_v2(tree))
    # Its files unreadable (no cpu.stat): what it holds is unknown, its processes stay its own all the same.
    _cgroup(tree, "/system.slice/slurmstepd.scope/job_7/step_0", cpu__stat="usage_usec 0", memory__current="0")
    on_loop(daemon, daemon.foreign.poll)
    located = daemon.hierarchy.locate

    def locate(pid, proc=None):  # pid 4242 is in Slurm's job 7, as /proc/4242/cgroup would say
        if pid == 4242:
            return Location(None, None, {"": "/system.slice/slurmstepd.scope/job_7/step_0"})
        return located(pid)

    daemon.hierarchy.locate = locate
    request = LaunchRequest(pid=4242, group="A", demand={"cpu": 0.5}, command=("work",))
    with pytest.raises(RequestError) as caught:
        asyncio.run(collect(daemon.requests.stream(request, Peer(pid=4242, uid=0, gid=0))))
    assert "/system.slice/slurmstepd.scope, a subtree another manager owns" in caught.value.message
    assert len(daemon.tasks) == 0 and daemon.hierarchy.driver.cgroups == {""}  # refused at the door
    # And every move asks first: a session's or a task's, the process stays where it is.
    daemon.hierarchy.driver.create("A/task-1")
    refused = on_loop(daemon, lambda: daemon.tree.join([("A/task-1", 4242), ("A/task-1", 4343)]))
    assert isinstance(refused[0], RequestError) and refused[1] is None
    assert daemon.hierarchy.driver.procs["A/task-1"] == [4343]


def test_a_governed_users_process_in_a_foreign_subtree_is_never_a_sessions(tmp_path):
    # pam_slurm_adopt puts alice's ssh login into her job: it stays Slurm's, and no session counts it.
    tree = tmp_path / "cgroupfs"
    daemon = session_daemon(tmp_path, foreign_places=_v2(tree))
    _cgroup(tree, "/system.slice/slurmstepd.scope", cpu__stat="usage_usec 0", memory__current="0")
    on_loop(daemon, daemon.foreign.poll)
    located = daemon.hierarchy.locate
    adopted = {"": "/system.slice/slurmstepd.scope/job_3/step_extern"}
    daemon.hierarchy.locate = lambda pid, proc=None: Location(None, None, adopted) if pid == 500 else located(pid)
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(501, 1))  # the same user outside: governed
    assert daemon.hierarchy.driver.procs["A/session-1"] == [501]


# ── the views and the metrics ───────────────────────────────────────────────────────────

HOSTILE = "[bold]pods[/bold]"
FOREIGN = {"slurmstepd.scope": {"path": "/system.slice/slurmstepd.scope", "manager": "slurm",
                                "held": {"cpu": 2.0, "memory": 4.0 * GIB}, "basis": "allocated"},
           HOSTILE: {"path": f"/{HOSTILE}", "manager": "config", "held": {"memory": float(GIB)}, "basis": "used"}}


def _with_foreign(status: dict) -> dict:
    host = dict(status["capacity"])
    capacity = {**host, "cpu": host["cpu"] - 2.0, "memory": host["memory"] - 5 * GIB}
    return {**status, "capacity": capacity, "host_capacity": host, "foreign": FOREIGN}


def test_status_top_and_explain_show_a_foreign_row_and_escape_its_name():
    status = _with_foreign(STATUS)
    text = render(status, 80)
    assert "Foreign" in text and "slurmstepd.scope" in text and "cpu 2 · memory 4.0G" in text
    assert HOSTILE in text  # shown as written, never read as markup
    assert "capacity = the host's cpu 16" in text
    assert "Foreign" not in render(STATUS, 80)  # none: no table
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(top_view(TopState(status=decode(status), received=NOW), width=200, height=40, now=NOW))
    top = console.export_text()
    assert "foreign: slurmstepd.scope (slurm, allocated) cpu 2 · memory 4.0G" in top and HOSTILE in top
    console = Console(record=True, width=200, file=io.StringIO())
    for renderable in explain_renderables({"capacity": status["capacity"], "host_capacity": status["host_capacity"],
                                           "foreign": FOREIGN, "groups": {}, "trace": []}, now=NOW):
        console.print(renderable)
    assert "subtracted from the host's cpu 16" in console.export_text()


def test_the_metrics_sum_what_foreign_tenants_hold_per_manager():
    status = _with_foreign(STATUS)
    found = samples(Metrics(lambda: decode(status)))
    assert found["governor_foreign_held", (("manager", "slurm"), ("resource", "cpu"))] == 2.0
    assert found["governor_foreign_held", (("manager", "config"), ("resource", "memory"))] == GIB
    assert found["governor_host_capacity", (("resource", "cpu"),)] == 16.0
    assert found["governor_capacity", (("resource", "cpu"),)] == 14.0


def test_a_path_holding_or_inside_governors_root_is_never_foreign(tmp_path):
    tree = tmp_path / "cgroupfs"
    daemon = make_daemon(tmp_path, config=CONFIG + '[foreign]\ndetect = false\npaths = ["/system.slice", "/system.slice/gov/*"]\n',
                         foreign_places=_v2(tree))
    daemon.foreign.own_root = "/system.slice/gov"
    for path in ("/system.slice/gov", "/system.slice/gov/inner"):
        _cgroup(tree, path, cpu__stat="usage_usec 0", memory__current=str(GIB))
    on_loop(daemon, daemon.foreign.poll)
    assert daemon.foreign.tenants == {} and daemon.policy.capacity["memory"] == 4 * GIB
