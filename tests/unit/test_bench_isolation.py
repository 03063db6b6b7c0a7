"""`scripts/bench --isolation` (issue 42): its options are checked and its table is rendered
from results of the shape it measures. Nothing here runs a workload or times anything."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name: str, path: Path):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    sys.modules[name] = module  # (its dataclasses look their module up there)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scripts():
    """scripts/bench and scripts/isolation.py as modules (they import their neighbours in scripts/)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield _load("bench_script", SCRIPTS / "bench"), _load("isolation_script", SCRIPTS / "isolation.py")
    finally:
        sys.path.remove(str(SCRIPTS))


def test_isolation_options_are_parsed(scripts):
    bench, _ = scripts
    args = bench.parse_arguments(["--isolation", "--seconds", "5", "--json", "out.json", "--execs", "200",
                                  "--only", "fork bomb"])
    assert (args.isolation, args.seconds, args.json, args.execs, args.vm, args.only) == (
        True, 5.0, "out.json", 200, False, "fork bomb")
    assert bench.parse_arguments(["--isolation", "--vm"]).vm
    assert not bench.parse_arguments([]).isolation


@pytest.mark.parametrize("argv, reason", [
    (["--seconds", "5"], "--seconds belongs to --isolation"),
    (["--vm"], "--vm belongs to --isolation"),
    (["--only", "fork"], "--only belongs to --isolation"),
    (["--isolation", "--big"], "--isolation runs alone: leave out --big"),
    (["--isolation", "--storm"], "--isolation runs alone: leave out --storm"),
    (["--storm", "--big"], "--launch, --storm and --big each run one part: name one"),
    (["--isolation", "--quick", "--against", "main"], "leave out --quick, --against"),
    (["--isolation", "--seconds", "1"], "from 2 to 600 seconds, not 1"),
    (["--isolation", "--seconds", "nan"], "not nan"),
    (["--isolation", "--execs", "5"], "from 10 to 100000 execs, not 5"),
    (["--isolation", "--vm", "--json", "/nonexistent dir/out.json"], "its directory does not exist"),
])
def test_bad_isolation_options_are_refused_with_the_reason(scripts, capsys, argv, reason):
    bench, _ = scripts
    with pytest.raises(SystemExit) as exited:
        bench.parse_arguments(argv)
    assert exited.value.code == 2
    assert reason in capsys.readouterr().err


def _results(isolation) -> dict:
    quiet = {"p50": 100.0, "p99": 200.0, "cpu_p50": 80.0, "launches": 20, "failed": 0, "daemon_cpu": 0.4,
             "twin": {"p50": 90.0, "p99": 100.0, "cpu_p50": 80.0, "launches": 20, "failed": 0}}
    twin = {"p50": 180.0, "p99": 210.0, "cpu_p50": 80.0, "launches": 15, "failed": 0}
    governed = {**isolation.ratios([9.0, 10.0, 11.0, 10.0], 10.0), "cpu": 0.9, "guarantee": 0.875, "daemon_cpu": 3.25,
                "launches": {"p50": 150.0, "p99": 500.0, "launches": 18, "failed": 1}, "processes": 3}
    starved = {**isolation.ratios([4.0, 5.0], 10.0), "cpu": 0.45, "guarantee": 0.875, "daemon_cpu": 21.0,
               "launches": {"p50": None, "p99": None, "launches": 0, "failed": 3}, "processes": 101}
    plain = {**isolation.ratios([10.0, 10.0], 10.0), "cpu": 1.0, "launches": twin, "processes": 1001}
    return {"host": {"name": "box", "cpus": 2, "kernel": "6.18", "cgroup": "v1 (hybrid)", "vm": None,
                     "load": [1.0, 0.5, 0.25], "date": "2026-11-29 04:00 UTC"},
            "seconds": 10.0, "quiet": quiet,
            "exec_cost": {"governed": 180.4, "ungoverned": 99.6, "execs": 3000, "idle_cpu": 0.2},
            "neighbours": [
                {"name": "CPU burners", "baseline": 10.0, "vm_only": False, "governed": governed,
                 "ungoverned": {**isolation.ratios([5.0, 6.0], 10.0), "cpu": 0.55, "launches": twin, "processes": 3}},
                {"name": "prctl storm", "baseline": 10.0, "vm_only": False, "governed": starved,
                 "ungoverned": plain},
                {"name": "fork bomb", "baseline": 10.0, "vm_only": False, "governed": {**starved, "guarantee": None},
                 "ungoverned": plain}]}


def test_ratios_are_the_median_and_p10_of_each_sample_over_the_baseline(scripts):
    _, isolation = scripts
    found = isolation.ratios([5.0, 10.0, 20.0, 10.0, 10.0], 10.0)
    assert found["median"] == 1.0 and found["samples"] == 5
    assert 0.5 <= found["p10"] < 1.0


def test_the_table_shows_each_neighbour_side_by_side_with_its_checks(scripts):
    _, isolation = scripts
    table = isolation.render(_results(isolation))
    lines = table.splitlines()
    assert lines[0].startswith("**Host:** box: 2 CPUs, Linux 6.18, cgroup v1 (hybrid); load average 1.00, 0.50, 0.25")
    header = next(line for line in lines if line.startswith("| neighbour"))
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ") and line != header}
    assert {row.count("|") for row in rows.values()} == {header.count("|")}
    assert ("| 1.00 / 0.93 | 0.55 / 0.51 | 0.90 / 0.55 cores | 0.88 cores | yes | yes | "
            "3.2 % of a core (+2.9 over quiet) | 150 / 500 ms (2.5× quiet); 1 failed | "
            "180 / 210 ms (2.1× quiet) |") in rows["CPU burners"]
    assert ("| 0.45 / 0.41 | 1.00 / 1.00 | 0.45 / 1.00 cores | 0.88 cores | no (< 0.79) | no | "
            "21.0 % of a core (+20.6 over quiet) | none finished |") \
        in rows["prctl storm"]
    assert "| 1.00 / 1.00 | 0.45 / 1.00 cores | not counted | not counted | no |" in rows["fork bomb"]  # the filling never counted it
    assert rows["fork bomb"].endswith("| 101 / 1,001 |")  # the neighbour's processes: held at its cap, or not
    assert "0.4 % of a core | 100 / 200 ms | 90 / 100 ms | |" in rows["none (quiet)"]
    assert "spinning until it has used 80 ms of CPU" in table
    assert "a governed user's 180 µs, an ungoverned user's 100 µs" in table


def test_the_vm_adds_its_neighbours(scripts):
    loads = importlib.import_module("isolation_loads")
    here = loads.neighbours("python3", 2, False, None)
    assert len(here) == 6 and not any(n.vm_only for n in here)
    in_vm = loads.neighbours("python3", 2, True, "/dev/vda")
    assert [n.name.split(" (")[0] for n in in_vm[6:]] == ["memory hog", "I/O flood"]
    assert len(loads.neighbours("python3", 2, True, None)) == 7  # no scratch disk: no I/O flood


def test_the_fork_bombs_run_everywhere_one_in_a_task_one_in_a_session_past_their_cap(scripts):
    """Issue 42: B's launches beside a fork bomb in a task and in a session, natively on v1 as
    in the VM; each bomb's bound is past the cap, so it is the cap that stops it governed."""
    loads = importlib.import_module("isolation_loads")
    bombs = [n for n in loads.neighbours("python3", 2, False, None) if n.name.startswith("fork bomb")]
    assert [(n.name.split(" (")[0], n.session) for n in bombs] == [("fork bomb in a task", False),
                                                                    ("fork bomb in a session", True)]
    assert bombs[0].demand[-2:] == ("--pids", str(loads.BOMB_CAP)) and loads.BOMB_BOUND > loads.BOMB_CAP
    assert all(n.argv[-1] == str(loads.BOMB_BOUND) for n in bombs)
