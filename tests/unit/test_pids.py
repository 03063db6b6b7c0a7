"""A pids cap on every cgroup governor writes (issue 42): a count is a cap, like a declaration,
never a DRF resource. The config's keys, the root's cap out of the kernel's limit, the plan's
pids.max on the root, groups, tasks and sessions, their files on v1 and v2, the usage and the
word at a task's end when forks were refused."""

import json

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.daemons import GIB, launch, make_daemon

from governor.cgroups.limits import CgroupLimits, v1_files, v2_files
from governor.cgroups.stats import CgroupStats
from governor.cgroups.systemd import unit_properties
from governor.cli.run import command
from governor.cli.ps_view import ended_why
from governor.cli.summary import ended_line, summary_lines
from governor.config import resources
from governor.config.load import parse_config
from governor.core.group_tree import with_limit
from governor.core.plan import group_limits, root_limits, task_limits
from governor.core.quotas import check_within_quotas
from governor.core.usage import Sample, usage
from governor.daemon.filling import fill
from governor.errors import ConfigError, RequestError
from governor.host.accounting import why_ended
from governor.host.kernel_limits import process_limit
from governor.wire.metrics import Metrics
from governor.wire.ps_types import EndedRecord, decode_rows
from governor.wire.status_json import decode

GROUPS = '[groups.A]\nusers = ["root"]\n[groups.B]\nusers = ["root"]\n'


def _config(text: str = ""):
    return parse_config(text + GROUPS, "t.toml")


def test_the_root_leaves_the_system_a_reserve_of_the_kernels_limit():
    host = resources.Host(8, 16 * GIB, 0, 32_768)
    assert resources.caps(_config(), host) == {"pids": 32_768 - 3_277}  # a tenth, rounded up
    assert resources.caps(_config("[capacity]\nreserve = { pids = 1024 }\n"), host) == {"pids": 31_744}
    assert resources.caps(_config(), resources.Host(8, 16 * GIB)) == {}  # the kernel's limit unknown: no cap
    with pytest.raises(ConfigError, match="t.toml: capacity.reserve.pids: reserving 32,768 processes leaves nothing"):
        resources.caps(_config("[capacity]\nreserve = { pids = 32768 }\n"), host)


def test_a_count_is_declared_like_a_resource_but_never_divided():
    config = _config("[defaults.task]\npids = 512\n")
    assert config.task_demand()["pids"] == 512 and config.task_demand(pids=20)["pids"] == 20
    assert "pids" not in config.capacity(8, 16 * GIB)  # DRF never sees it
    alone = fill(config, config.capacity(8, 16 * GIB), lambda g: 1.0, {"A": {"cpu": 2.0, "memory": GIB}})
    both = fill(config, config.capacity(8, 16 * GIB), lambda g: 1.0, {"A": {"cpu": 2.0, "memory": GIB, "pids": 512}})
    assert both.groups["A"].allocation == alone.groups["A"].allocation
    assert both.groups["A"].dominant_share == alone.groups["A"].dominant_share
    for bad in (0, 1.5, -1, float("nan"), 1e308, 5_000_000):
        with pytest.raises(ValueError, match="pids must be"):
            config.task_demand(pids=bad)


def test_a_group_limit_of_pids_bounds_its_cgroup_not_the_filling_nor_a_tasks_launch():
    config = _config('[groups.C]\nusers = ["root"]\nlimit = { pids = 100 }\n')
    allocation = fill(config, config.capacity(8, 16 * GIB), lambda g: 1.0, {"C": {"cpu": 2.0, "pids": 4096}})
    assert "pids" not in allocation.groups["C"].allocation
    check_within_quotas(config, "C", {"cpu": 1.0, "memory": GIB, "pids": 4096})  # its pids.max holds it: no refusal
    limited = with_limit(CgroupLimits(pids_max=30_000), config.effective_limit("C"))
    assert limited.pids_max == 100
    assert with_limit(CgroupLimits(pids_max=50), {"pids": 100}).pids_max == 50  # the lower


def test_every_cgroup_of_the_plan_has_a_pids_max():
    assert task_limits({"cpu": 1.0, "memory": GIB, "pids": 512}, io_devices={}).pids_max == 512
    assert root_limits({"cpu": 4.0, "memory": GIB}, caps={"pids": 29_491}).pids_max == 29_491
    groups = group_limits({"cpu": 4.0}, {"A": {"cpu": 2.0}, "B": {"cpu": 2.0}}, protection={}, io_devices={},
                          io_sharing={}, pids=29_491)
    assert {g: limits.pids_max for g, limits in groups.items()} == {"A": 29_491, "B": 29_491}
    again = group_limits({"cpu": 4.0}, {"A": {"cpu": 2.0}, "B": {"cpu": 2.0}}, protection={}, io_devices={},
                         io_sharing={}, pids=29_491, previous=groups)
    assert again["A"] is groups["A"]  # unchanged: applying the plan skips it


def test_pids_max_is_written_last_on_v2_and_in_the_pids_hierarchy_on_v1():
    limits = CgroupLimits(cpu_quota_usec=50_000, memory_max_bytes=GIB, pids_max=20)
    assert v2_files(limits)[-1] == ("pids.max", "20")
    assert v1_files(limits)[-1] == ("pids", "pids.max", "20")
    assert unit_properties(limits)["TasksMax"] == ("20",)
    with pytest.raises(ValueError, match="pids_max"):
        CgroupLimits(pids_max=-1)


def test_a_launch_carries_its_pids_cap_and_the_root_and_groups_get_theirs(tmp_path):
    daemon = make_daemon(tmp_path, '[capacity]\nreserve = { pids = 1000 }\n[groups.A]\nusers = ["root"]\n',
                         process_limit=10_000)
    launch(daemon, 100, group="A", cpu=0.5, memory=GIB, pids=20)
    [task] = list(daemon.tasks)
    assert task.demand["pids"] == 20
    hierarchy = daemon.hierarchy
    assert hierarchy.in_force(task.cgroup)["pids.max"] == "20"
    assert hierarchy.in_force("")["pids.max"] == "9000"
    assert hierarchy.in_force("A")["pids.max"] == "9000"
    daemon.observation.usage.update({"A": {"cpu": 0.1, "pids": 7.0}, task.cgroup: {"cpu": 0.1, "pids": 7.0}})
    status = json.loads(json.dumps(daemon.observation.status()))
    assert status["caps"] == {"pids": 9000} and "pids" not in status["capacity"]
    assert status["groups"]["A"]["usage"]["pids"] == 7.0 and "pids" not in status["groups"]["A"]["guarantee"]
    text = generate_latest(Metrics(lambda: decode(status)).registry).decode()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for family in text_string_to_metric_families(text) for s in family.samples}
    assert got[("governor_root_cap", (("resource", "pids"),))] == 9000
    assert got[("governor_group_usage", (("group", "A"), ("leaf", "true"), ("parent", ""), ("resource", "pids")))] == 7


def test_usage_counts_pids_and_the_forks_refused():
    stats = CgroupStats(0, 0, 0, GIB, pids_current=19, pids_refused=41)
    used = usage(None, Sample(0.0, stats), {})
    assert (used["pids"], used["pids.refused"]) == (19.0, 41.0)
    assert "pids" not in usage(None, Sample(0.0, CgroupStats(0, 0, 0, GIB)), {})  # no pids controller


def test_a_task_refused_forks_says_so_at_its_end():
    record = {"id": "7", "reason": "exit", "demand": {"pids": 512}, "forks_refused": 12}
    assert why_ended(_ended(record)) == "its processes exited; it was refused 12 forks at its cap of 512 processes"
    assert ended_line(_ended(record), "7") == "governor: task 7 was refused 12 forks at its cap of 512 processes"
    assert ended_line(_ended({**record, "forks_refused": 0}), "7") is None
    killed = {**record, "reason": "oom_kill", "demand": {"memory": GIB, "pids": 512}, "forks_refused": 1}
    assert why_ended(_ended(killed)) == "OOM-killed at its memory cap 1.0G; it was refused 1 fork at its cap of 512 processes"
    lines = summary_lines(_ended({**record, "wall_s": 1.0}), 256, 1.0, task="7")
    assert "Forks refused: 12 (at its cap of 512 processes)" in lines
    # ps --ended's why column, in the table and piped (stranger check: it said only "exited").
    assert ended_why(_ended(record)).endswith("; 12 forks refused at its pids cap")
    assert ended_why(_ended({**record, "forks_refused": 1})).endswith("; 1 fork refused at its pids cap")
    assert "refused" not in ended_why(_ended({**record, "forks_refused": 0}))


def _ended(record: dict) -> EndedRecord:
    """``record`` as a client decodes it from a ps reply."""
    return decode_rows(EndedRecord, [record], "ended")[0]


@pytest.mark.parametrize("value", ["0", "-3", "1e308", "1.5", "nan"])
def test_run_refuses_a_pids_cap_that_is_no_whole_number_from_one(value):
    result = CliRunner().invoke(command(), ["--pids", value, "--", "true"])
    assert result.exit_code == 2 and "--pids" in result.output


def test_the_kernels_limit_is_the_lower_of_pid_max_and_threads_max(tmp_path):
    kernel = tmp_path / "sys" / "kernel"
    kernel.mkdir(parents=True)
    (kernel / "pid_max").write_text("32768\n")
    (kernel / "threads-max").write_text("15646\n")
    assert process_limit(tmp_path) == 15_646
    (kernel / "threads-max").unlink()
    assert process_limit(tmp_path) == 32_768
    assert process_limit(tmp_path / "none") == 0


def test_a_task_recorded_before_counts_gets_the_default_cap(tmp_path):
    # A task re-adopted after an upgrade has no pids in its record: its cgroup gets one all the same.
    from dataclasses import replace

    daemon = make_daemon(tmp_path, '[defaults.task]\npids = 300\n[groups.A]\nusers = ["root"]\n', process_limit=10_000)
    launch(daemon, 100, group="A", cpu=0.5, memory=GIB)
    [task] = list(daemon.tasks)
    old = replace(task, demand={r: a for r, a in task.demand.items() if r != "pids"})
    assert daemon.policy.caps(old).pids_max == 300 == daemon.policy.caps(task).pids_max


@pytest.mark.parametrize("pids", [0, 5_000_000])
def test_a_launch_asking_for_no_cap_or_one_past_the_kernels_limit_is_refused(tmp_path, pids):
    daemon = make_daemon(tmp_path, process_limit=10_000)
    with pytest.raises(RequestError, match="demand.pids must be a whole number from 1 to 4,194,304") as caught:
        launch(daemon, 100, cpu=0.5, memory=GIB, pids=pids)
    assert caught.value.code == "bad_request"
    assert not list(daemon.tasks)


@pytest.mark.parametrize(("signal", "said"), [
    ("KILL", "its command was killed by SIGKILL"), ("34", "its command was killed by signal 34"),
    ("\x1b]0;x\x07", "its processes exited"), (None, "its processes exited")])
def test_a_command_killed_by_a_signal_says_so_where_it_said_its_processes_exited(signal, said):
    # The log read "ended (exit): its processes exited; … exit status code=killed/status=KILL".
    record = {"id": "7", "group": "A", "user": "alice", "reason": "exit",
              "exit_status": None if signal is None else {"code": "killed", "signal": signal}}
    assert why_ended(_ended(record)) == said


def test_the_log_line_of_a_command_killed_by_a_signal_says_killed_beside_its_exit_status():
    import signal

    from governor.core.state import Task
    from governor.host.accounting import EXIT, Ended

    task = Task("7", "A", 100, 0, "root", ("x",), {"cpu": 1.0}, 0.0)
    line = Ended(task, 1.0, EXIT, None, None, signal.SIGKILL).line("exit")
    assert "ended (exit): its command was killed by SIGKILL;" in line and line.endswith("code=killed/status=KILL")
    assert "ended (exit): its processes exited;" in Ended(task, 1.0, EXIT, None, None, 3 << 8).line("exit")
