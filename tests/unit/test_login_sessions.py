"""Login sessions on systemd hosts: a governed user's logind slice is their session, with limits
set through systemd (cgroups/systemd.py). systemctl is faked here; the real systemd, logind and
kernel are in tests/system/sessions.sh (run-in-systemd-vm --full)."""

import math
import shutil

import pytest

from governor.cgroups.limits import CgroupLimits, IoMax
from governor.cgroups.stats import CgroupStats, Stall
from governor.cgroups.systemd import SliceDriver, unit_properties
from governor.config.load import parse_config
from governor.daemon.inbox import Reload
from governor.errors import CgroupUnsupported, CgroupWriteError, RequestError
from governor.host import access
from governor.core.plan import held_login_limits, inside_root
from governor.core.state import Task
from governor.core.usage import Sample
from governor.wire.protocol import PsRequest
from support.daemons import GIB, launch, on_loop
from support.sessions import CONFIG, USER, make_slice, session_daemon
from support.systemctl import Systemctl

pytestmark = pytest.mark.daemon(make=session_daemon)  # the `daemon` fixture: sessions on


def test_caps_become_systemd_properties():
    limits = CgroupLimits(cpu_quota_usec=37_501, cpu_weight=50, memory_min_bytes=1, memory_low_bytes=1,
                          memory_high_bytes=2, memory_max_bytes=3, io_max=(IoMax("8:16", wbps=5), IoMax("8:0", rbps=7, wbps=9)))
    assert unit_properties(limits) == {
        "CPUQuota": ("38%",), "CPUWeight": ("50",),
        "MemoryMin": ("1",), "MemoryLow": ("1",), "MemoryHigh": ("2",), "MemoryMax": ("3",),
        "IOReadBandwidthMax": ("/dev/block/8:0 7",),
        "IOWriteBandwidthMax": ("/dev/block/8:0 9", "/dev/block/8:16 5"),
    }
    assert unit_properties(CgroupLimits()) == {}
    assert unit_properties(CgroupLimits(cpu_quota_usec=1_000, cpu_period_usec=200_000)) == {
        "CPUQuota": ("1%",), "CPUQuotaPeriodSec": ("200000us",)}  # never 0 %, which systemd refuses
    with pytest.raises(CgroupUnsupported):
        unit_properties(CgroupLimits(cpuset_cpus="0"))


def test_the_slice_driver_sets_only_what_changed_and_resets_what_it_set(tmp_path):
    systemctl = Systemctl()
    driver = SliceDriver(tmp_path, run=systemctl)
    rel = "user.slice/user-1000.slice"
    driver.apply(rel, CgroupLimits(cpu_quota_usec=50_000, memory_max_bytes=GIB))
    assert systemctl.calls == [["systemctl", "set-property", "--runtime", "--", "user-1000.slice",
                                "CPUQuota=50%", f"MemoryMax={GIB}"]]
    assert driver.in_force(rel) == {"CPUQuota": "50%", "MemoryMax": str(GIB)}
    driver.apply(rel, CgroupLimits(cpu_quota_usec=50_000, memory_max_bytes=GIB))
    assert len(systemctl.calls) == 1
    driver.apply(rel, CgroupLimits(cpu_quota_usec=25_000, io_max=(IoMax("8:0", rbps=10),)))
    assert systemctl.calls[-1][5:] == ["CPUQuota=25%", "IOReadBandwidthMax=",
                                       "IOReadBandwidthMax=/dev/block/8:0 10", "MemoryMax=infinity"]
    systemctl.refuse = True
    with pytest.raises(CgroupWriteError, match="Access denied"):
        driver.apply(rel, CgroupLimits(cpu_quota_usec=10_000))
    assert driver.in_force(rel)["CPUQuota"] == "25%"  # what systemd holds, not what was asked
    systemctl.refuse = False
    driver.reset(rel)
    assert sorted(systemctl.calls[-1][5:]) == ["CPUQuota=", "IOReadBandwidthMax="]
    assert driver.in_force(rel) == {}
    # After a restart the record is empty: what the caps would set is reset all the same.
    SliceDriver(tmp_path, run=systemctl).reset(rel, CgroupLimits(memory_high_bytes=GIB))
    assert systemctl.calls[-1][5:] == ["MemoryHigh=infinity"]
    assert not hasattr(driver, "move") and not hasattr(driver, "create")  # the cgroups are systemd's


def test_a_slice_is_alive_while_a_scope_below_it_holds_a_process(tmp_path):
    driver = SliceDriver(tmp_path, run=Systemctl())
    make_slice(tmp_path, 1000, {"session-1.scope": [10, 11], "user@1000.service": [12]})
    assert driver.populated("user.slice/user-1000.slice")  # one read of cgroup.events
    make_slice(tmp_path, 1000, {}, populated=False)
    assert not driver.populated("user.slice/user-1000.slice")
    with pytest.raises(Exception) as gone:
        driver.populated("user.slice/user-1001.slice")
    assert gone.value.vanished


def test_the_part_of_a_group_outside_the_root_leaves_its_cgroup():
    allocations = {"A": {"cpu": 0.75, "memory": 1.5}, "B": {"cpu": 0.5, "memory": 1.0}}
    demands = {"A": {"cpu": 1.5, "memory": 3.0}, "B": {"cpu": 0.5, "memory": 1.0}}
    inside, inside_demands = inside_root(allocations, demands, {"A": 0.5, "B": 1.0},
                                         {"A": {"cpu": 1.0, "memory": 2.0}, "B": {"cpu": 0.5, "memory": 1.0}})
    assert inside == {"A": {"cpu": 0.25, "memory": 0.5}}  # B runs only in its login session
    assert inside_demands == {"A": {"cpu": 0.5, "memory": 1.0}}
    caps = CgroupLimits(cpu_quota_usec=100_000)
    assert held_login_limits(caps, 1.0, 0.3).cpu_quota_usec == 30_000
    assert held_login_limits(caps, 1.0, 0.0).cpu_quota_usec == 1_000  # the kernel's least


@pytest.fixture
def systemd(daemon, tmp_path):  # noqa: F811
    systemctl = Systemctl()
    daemon.hierarchy.slices = SliceDriver(tmp_path / "mount", run=systemctl)
    make_slice(tmp_path / "mount", 1, {"session-3.scope": [700, 701]})
    daemon.hierarchy.locate.logind.update({700: 1, 701: 1, 602: 0})
    return daemon, systemctl


def test_a_process_in_its_users_logind_slice_makes_their_login_session_there(systemd):
    daemon, systemctl = systemd
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))  # not moved: logind keeps tracking it
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(701, 1))
    login = daemon.tasks.get("login-1")
    assert (login.group, login.cgroup, login.is_session) == ("A", "user.slice/user-1.slice", True)
    [call] = systemctl.calls  # once per user, not per process
    assert call[4:] == ["user-1.slice", "CPUQuota=50%", "CPUWeight=50",
                        "MemoryLow=0", f"MemoryMax={3 * GIB}",  # issue 43: an idle shell is promised
                        "MemoryMin=0", "TasksMax=4096"]  # none of its cap; hard caps, as a task's
    assert daemon.hierarchy.driver.procs == {}
    assert "A" not in daemon.hierarchy.driver.cgroups  # nothing of A below governor's root
    assert daemon.store.directory.joinpath("login-1.json").exists()
    [shown] = daemon.observation.status()["groups"]["A"]["tasks"]
    assert (shown["id"], shown["session"], shown["limits"]["CPUQuota"]) == ("login-1", True, "50%")
    daemon.observation.sample()
    assert daemon.observation.usage["A"]["memory"] == 4096  # the group's use is its slice's


def test_a_users_process_in_another_users_slice_joins_their_session_in_the_root(systemd):
    daemon, _ = systemd
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(602, 1))  # alice's process in root's slice (sudo -u, runuser)
    assert daemon.hierarchy.driver.procs["A/session-1"] == [602]


def test_held_groups_hold_a_login_session_to_its_part_of_the_guarantee(systemd):
    daemon, systemctl = systemd
    on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))
    daemon.hierarchy.driver.create("B/task-9")
    daemon.tasks.add(Task("9", "B", 9, 0, "root", ("x",), {"cpu": 2.0, "memory": 3.0 * GIB}, 0.0))
    daemon.enforcement.cpu_saturated = True
    daemon.settle.now(Reload("saturation"))
    fraction = float(daemon.enforcement.allocation.groups["A"].tasks)
    assert 0.7 < fraction < 0.8  # memory is contended: A gets 3/4 of its demand
    assert "A" not in daemon.hierarchy.driver.cgroups  # its quota is its slice's
    assert systemctl.calls[-1][5:] == [f"CPUQuota={math.ceil(fraction * 50)}%"]
    daemon.enforcement.cpu_saturated = False
    daemon.settle.now(Reload("slack"))
    assert systemctl.calls[-1][5:] == ["CPUQuota=50%"]


def test_a_login_session_ends_with_its_slice_and_its_properties_are_reset(systemd, tmp_path):
    daemon, systemctl = systemd
    on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))
    make_slice(tmp_path / "mount", 1, {}, populated=False)
    on_loop(daemon, lambda: daemon.exits.check(["login-1"], "exit"))
    assert daemon.tasks.get("login-1") is None
    assert not daemon.store.directory.joinpath("login-1.json").exists()
    assert sorted(systemctl.calls[-1][5:]) == ["CPUQuota=", "CPUWeight=", "MemoryLow=", "MemoryMax=infinity",
                                                   "MemoryMin=", "TasksMax="]


def test_a_slice_systemd_will_not_limit_is_not_asked_again_at_each_exec(systemd):
    daemon, systemctl = systemd
    systemctl.refuse = True
    for _ in range(5):
        assert not on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))
    assert len(systemctl.calls) == 1 and daemon.tasks.get("login-1") is None
    assert "not tried again until a reload" in daemon.journal.events[-1]["message"]
    systemctl.refuse = False
    daemon.reloads.use(daemon.policy.config)  # a reload
    on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))
    assert daemon.tasks.get("login-1") is not None


def test_a_restart_takes_a_login_session_back_only_where_systemd_writes_limits(systemd):
    daemon, _ = systemd
    on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))
    daemon.tasks.remove("login-1")
    on_loop(daemon, lambda: daemon.recovery.readopt())
    assert daemon.tasks.get("login-1") is not None
    daemon.tasks.remove("login-1")
    daemon.hierarchy.slices = None
    on_loop(daemon, lambda: daemon.recovery.readopt())
    assert daemon.tasks.get("login-1") is None
    assert not daemon.store.directory.joinpath("login-1.json").exists()


def test_sessions_config_is_shared_by_both_kinds(systemd):
    daemon, _ = systemd
    daemon.reloads.use(parse_config(CONFIG.replace("cpu = 0.5", "cpu = 0.25"), "t.toml"))
    on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))
    assert daemon.tasks.get("login-1").demand["cpu"] == 0.25
    assert USER in daemon.requests.explain()["groups"]["A"]["sessions"]


def test_slices_are_governed_only_where_systemd_runs_cgroup_v2(tmp_path):
    from governor.cgroups.systemd import systemd_slices
    assert systemd_slices("v1", tmp_path, booted=tmp_path) is None
    assert systemd_slices("v2", tmp_path, booted=tmp_path / "missing") is None
    found = systemd_slices("v2", tmp_path, booted=tmp_path)
    assert (found is None) == (shutil.which("systemctl") is None)


def test_a_user_in_her_logind_slice_and_in_governors_session_counts_one_session_demand(systemd):
    """Issue 32, break 9: both places of one user's session were two demands (cap 1.0 core)."""
    daemon, _ = systemd
    on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))  # her logind slice: login-1
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(602, 1))  # moved into governor's session cgroup: session-1
    assert {t.id for t in daemon.tasks} == {"login-1", "session-1"}
    assert daemon.tasks.demands()["A"] == {"cpu": 0.5, "memory": 3 * GIB, "pids": 4096}
    assert daemon.observation.status()["groups"]["A"]["demand"]["cpu"] == 0.5
    daemon.settle.now(Reload("test"))
    assert daemon.enforcement.allocation.groups["A"].allocation["cpu"] == 0.5  # all of its one session's demand
    assert "A" in daemon.hierarchy.driver.cgroups  # counted inside, where its session cgroup is


def test_a_groups_stall_beside_its_login_session_is_the_worst_of_them_its_seconds_summed(systemd):
    daemon, _ = systemd
    on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))
    slice_dir = daemon.hierarchy.slices.directory("user.slice/user-1.slice")
    (slice_dir / "cpu.pressure").write_text("some avg10=10.00 avg60=0 avg300=0 total=2000000\n")
    daemon.observation._group_at = {"A": "A"}
    daemon.observation._take({"A": Sample(1.0, CgroupStats(0, 0, 0, 0, psi={"cpu": {"some": Stall(30.0, 5_000_000)}})),
                              "user.slice/user-1.slice": Sample(1.0, daemon.hierarchy.read_stats("user.slice/user-1.slice"))})
    use = daemon.observation.usage["A"]
    # Shares of the same 10 s do not add up (30 % and 10 % is not 40 %); stalled seconds do.
    assert (use["stall.cpu.some.avg10"], use["stall.cpu.some.total"]) == (30.0, 7.0)


def test_properties_are_set_in_the_order_of_their_drop_ins(tmp_path):
    """Issue 44.2: systemd appends each drop-in set-property writes to the unit's list in the order
    given and `systemctl status` compares that list with the sorted one on disk: MemoryMin= before
    MemoryLow= made governor-tasks.service say "changed on disk. Run 'systemctl daemon-reload'"."""
    systemctl = Systemctl()
    driver = SliceDriver(tmp_path, run=systemctl)
    driver.apply("governor.slice", CgroupLimits(memory_min_bytes=1, memory_low_bytes=2, memory_max_bytes=3,
                                                cpu_quota_usec=50_000, cpu_period_usec=50_000))
    names = [assignment.partition("=")[0] for assignment in systemctl.calls[-1][5:]]
    assert names == sorted(names, key=lambda name: f"50-{name}.conf")
    assert names == ["CPUQuota", "CPUQuotaPeriodSec", "MemoryLow", "MemoryMax", "MemoryMin"]


def test_a_users_login_and_runuser_sessions_reserve_their_use_once_and_admit_nothing_past_the_capacity(systemd):
    """Issue 43, break 1: a user's logind slice and governor's session cgroup (``runuser -u``)
    each took their cap off the group's reserved once more than it counted, so two idle places
    freed a cap that was not free, and a task started past the capacity."""
    daemon, _ = systemd
    on_loop(daemon, lambda: daemon.sessions.govern_process(700, 1))  # her login: login-1, cap 3G
    assert launch(daemon, 100, group="B", cpu=0.1, memory=2 * GIB, wait=False)["task"] == "1"
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(602, 1))  # runuser -u her: session-1
    daemon.observation.usage.update({"user.slice/user-1.slice": {"memory": 0.75 * GIB},
                                     "A/session-1": {"memory": 0.5 * GIB}})
    with pytest.raises(RequestError) as refused:  # 2G + 1.25G of 4G reserved: 1.5G does not fit
        launch(daemon, 101, group="B", cpu=0.1, memory=1.5 * GIB, wait=False)
    assert refused.value.code == "would_wait"
    status = daemon.observation.status()
    assert status["groups"]["A"]["reserved"] == {"memory": 1.25 * GIB}  # what both places use, once
    assert {t["id"]: t["reserved"] for t in status["groups"]["A"]["tasks"]} == {
        "login-1": {"memory": 0.75 * GIB}, "session-1": {"memory": 0.5 * GIB}}
    assert status["reserved"] == {"memory": 3.25 * GIB}
    daemon.observation.usage["user.slice/user-1.slice"] = {"memory": 2.9 * GIB}  # together past the one cap
    daemon.journal.changed()  # as a sample does
    status = daemon.observation.status()
    assert status["groups"]["A"]["reserved"] == {"memory": 3 * GIB}
    rows = daemon.requests.ps(PsRequest(all=True), access.identify(0, 0))["tasks"]
    assert [row["reserved"] for row in rows if row["session"]] == [{"memory": 2.5 * GIB}, {"memory": 0.5 * GIB}]
