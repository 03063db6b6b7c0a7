"""``governor simulate`` through click's CliRunner, and the pure renderers."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from governor.cli.main import main
from governor.cli.render import allocation_table, format_share, trace_table
from governor.cli.simulate import POLICY_NAMES, SCENARIO_NAMES
from governor.core import policies
from governor.core.drf import discrete_filling, progressive_filling
from governor.errors import AllocationInputError, GovernorError
from governor.core.model import GroupDemand

SCENARIOS = Path(__file__).resolve().parents[2] / "configs" / "scenarios"
PAPER = str(SCENARIOS / "paper.toml")
G = 1024**3
MODES_AND_POLICIES = [("continuous", "drf"), ("continuous", "asset"), ("continuous", "ceei"),
                      ("discrete", "drf"), ("discrete", "asset")]


def run(*args: str):
    # Wide, so rich never wraps a cell the assertions look for.
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, ["simulate", *args])


def run_json(*args: str) -> dict:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rows(text: str) -> dict[str, list[str]]:
    """Table body rows of rendered text, keyed by their first cell."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]
    return {row[0]: row[1:] for row in cells}


@pytest.mark.parametrize("mode", ["continuous", "discrete"])
def test_paper_human_output(mode):
    result = run(PAPER, "--mode", mode)
    assert result.exit_code == 0, result.output
    assert f"DRF allocation ({mode}) — capacity: cpu 9, memory 18.0G" in result.stdout
    body = rows(result.stdout)
    # weight, tasks, cpu, memory, dominant, share, stopped by
    assert body["A"][:6] == ["1", "3", "3", "12.0G", "memory", "2/3 (66.7%)"]
    assert body["B"][:6] == ["1", "2", "6", "2.0G", "cpu", "2/3 (66.7%)"]


@pytest.mark.parametrize(("mode", "tasks_type"), [("continuous", float), ("discrete", int)])
def test_paper_json(mode, tasks_type):
    out = run_json(PAPER, "--mode", mode)
    assert (out["mode"], out["policy"], out["trace"]) == (mode, "drf", [])
    assert out["capacity"] == {"cpu": 9, "memory": 18 * G}
    a, b = out["groups"]["A"], out["groups"]["B"]
    assert type(a["tasks"]) is tasks_type and a["tasks"] == 3
    assert type(b["tasks"]) is tasks_type and b["tasks"] == 2
    assert a["allocation"] == {"cpu": 3, "memory": 12 * G}
    assert b["allocation"] == {"cpu": 6, "memory": 2 * G}
    assert a["dominant_resources"] == ["memory"] and b["dominant_resources"] == ["cpu"]
    assert a["dominant_share"] == pytest.approx(2 / 3, abs=1e-12)
    assert b["dominant_share"] == pytest.approx(2 / 3, abs=1e-12)
    assert a["demanded_tasks"] is None and a["weight"] == 1
    assert a["stop"] in ("cpu saturated", "next task does not fit: cpu")


def test_paper_discrete_trace_matches_table_1():
    out = run_json(PAPER, "--mode", "discrete", "--trace")
    placed = [row for row in out["trace"] if row["event"] == "placed"]
    # Paper Table 1 (B first there; A first here, the name breaks the 0–0 tie):
    # shares (A, B) after each placement, and total CPUs of 9 / memory GB of 18.
    expected = [
        ("A", 2 / 9, 0, 1, 4),
        ("B", 2 / 9, 1 / 3, 4, 5),
        ("A", 4 / 9, 1 / 3, 5, 9),
        ("B", 4 / 9, 2 / 3, 8, 10),
        ("A", 2 / 3, 2 / 3, 9, 14),
    ]
    assert len(placed) == 5
    for row, (group, share_a, share_b, cpu, memory_gb) in zip(placed, expected):
        assert row["group"] == group
        assert row["dominant_shares"]["A"] == pytest.approx(share_a, abs=1e-12)
        assert row["dominant_shares"]["B"] == pytest.approx(share_b, abs=1e-12)
        assert row["allocated"] == {"cpu": cpu, "memory": memory_gb * G}
    assert [row["step"] for row in out["trace"]] == list(range(1, len(out["trace"]) + 1))
    assert all(row["event"] == "skipped" and row["resource"] == "cpu" for row in out["trace"][5:])


def test_human_trace_shows_paper_fractions():
    result = run(PAPER, "--mode", "discrete", "--trace")
    assert result.exit_code == 0, result.output
    body = rows(result.stdout)
    # step → event, group, frozen, A share, B share, cpu alloc., memory alloc.
    assert body["2"] == ["placed", "B", "", "2/9", "1/3", "4/9", "5/18"]
    assert body["5"] == ["placed", "A", "", "2/3", "2/3", "9/9", "14/18"]
    assert body["6"][:3] == ["skipped: cpu full", "B", "B"]


def test_asset_policy_gives_the_paper_numbers():
    # Paper §5.1: asset fairness gives A 2.52 and B 2.16 tasks.
    groups = run_json(PAPER, "--policy", "asset")["groups"]
    assert groups["A"]["tasks"] == pytest.approx(2.52, abs=1e-12)
    assert groups["B"]["tasks"] == pytest.approx(2.16, abs=1e-12)


def test_bad_scenario_exits_2_naming_file_and_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[capacity]\ncpu = 9\n[groups.A]\ntask = { cpu = "one" }\n')
    result = run(str(bad))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"governor: error: {bad}: groups.A.task.cpu: ")


def test_bad_toml_exits_2_with_line_and_column(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[capacity]\ncpu = \n")
    result = run(str(bad))
    assert result.exit_code == 2
    assert f"governor: error: {bad}: not valid TOML" in result.stderr
    assert "line 2" in result.stderr


@pytest.mark.parametrize("name", ["missing.toml", "."])
def test_unreadable_file_exits_2(tmp_path, name):
    path = tmp_path / name
    result = run(str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"governor: error: {path}: cannot read: ")


@pytest.mark.parametrize(
    ("group", "resource", "key"),
    [("A", None, "groups.A"), ("B", "cpu", "groups.B.task.cpu"), (None, "memory", "capacity.memory")],
)
def test_allocator_error_is_reported_against_the_scenario_key(monkeypatch, group, resource, key):
    # Stands in for an allocator refusal the scenario check cannot foresee (e.g. discrete
    # filling's cap on the number of placements).
    def refuse(*args, **kwargs):
        raise AllocationInputError("refused", group=group, resource=resource)

    monkeypatch.setattr(policies, "allocate", refuse)
    result = run(PAPER)
    assert result.exit_code == 2
    assert result.stderr == f"governor: error: {PAPER}: {key}: refused\n"


def test_other_library_failures_exit_1_on_one_line(monkeypatch):
    def fail(*args, **kwargs):
        raise GovernorError("CEEI solver did not converge: iteration limit")

    monkeypatch.setattr(policies, "allocate", fail)
    result = run(PAPER)
    assert result.exit_code == 1
    assert result.stderr == "governor: error: CEEI solver did not converge: iteration limit\n"


def test_ceei_in_discrete_mode_is_a_usage_error():
    result = run(PAPER, "--policy", "ceei", "--mode", "discrete")
    assert result.exit_code == 2
    assert "--policy ceei needs --mode continuous" in result.stderr


# A group tree is divided by H-DRF alone (test_a_group_tree_is_refused_outside_continuous_drf).
SHIPPED = [(scenario, mode, policy) for scenario in sorted(SCENARIOS.glob("*.toml"))
           for mode, policy in MODES_AND_POLICIES
           if "parent" not in scenario.read_text() or (mode, policy) == ("continuous", "drf")]


@pytest.mark.parametrize(("scenario", "mode", "policy"), SHIPPED, ids=lambda v: getattr(v, "name", v))
def test_every_shipped_scenario_runs(scenario, mode, policy):
    out = run_json(str(scenario), "--mode", mode, "--policy", policy, "--trace")
    assert out["groups"]
    for resource, capacity in out["capacity"].items():
        used = sum(g["allocation"][resource] for g in out["groups"].values())
        assert used <= capacity * (1 + 1e-6)
    human = run(str(scenario), "--mode", mode, "--policy", policy, "--trace")
    assert human.exit_code == 0, human.output


def test_the_bundled_names_are_the_shipped_scenarios():
    assert sorted(SCENARIO_NAMES) == sorted(p.stem for p in SCENARIOS.glob("*.toml"))


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_a_bundled_scenario_runs_by_name(name, tmp_path, monkeypatch):
    by_path = run_json(str(SCENARIOS / f"{name}.toml"))
    monkeypatch.chdir(tmp_path)  # no file of that name here
    assert run_json(name) == by_path
    assert run(name).exit_code == 0


def test_a_file_named_like_a_bundled_scenario_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "paper").write_text('[capacity]\ncpu = 4\n[groups.mine]\ntask = { cpu = 1 }\n')
    assert list(run_json("paper")["groups"]) == ["mine"]
    assert run("./quotas").stderr.startswith("governor: error: ./quotas: cannot read: ")  # a path is a path


def test_an_unknown_name_lists_the_bundled_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("papr")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == ("governor: error: papr: no such file, nor a bundled scenario "
                             f"(bundled: {', '.join(SCENARIO_NAMES)})\n")


def test_help_documents_the_format_and_the_names():
    text = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["simulate", "--help"]).output
    assert all(name in text for name in SCENARIO_NAMES)
    format_block = text.split("Scenario format:")[1].split("Examples:")[0]
    for line in ("[capacity]", "cpu = 9", 'memory = "18G"', "[groups.A]", 'task = { cpu = 1, memory = "4G" }',
                 "weight = 2", "tasks = 3"):
        assert re.search(rf"^    {re.escape(line)}( |$)", format_block, re.MULTILINE), line
    for key in ('parent = "NAME"', "guarantee = { cpu = 2 }", "limit = { cpu = 6 }"):
        assert key in " ".join(format_block.split()), key


def test_the_help_example_is_a_valid_scenario(tmp_path):
    """The format block of --help, its comments dropped, is a scenario simulate accepts."""
    text = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["simulate", "--help"]).output
    block = text.split("Scenario format:\n")[1].split("\n\n")[0]
    example = tmp_path / "example.toml"
    example.write_text("\n".join(line.split("#")[0].strip() for line in block.splitlines()) + "\n")
    out = run_json(str(example))
    assert out["capacity"] == {"cpu": 9, "memory": 18 * G} and out["groups"]["A"]["tasks"] == 3


def test_policy_choices_match_the_library():
    assert set(POLICY_NAMES) == set(policies.POLICIES)


def test_importing_the_cli_loads_no_heavy_module():
    # `governor run` must start fast: the command group may not pull in rich, SciPy or the allocator.
    code = (
        "import sys, governor.cli.main; print(sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('rich', 'scipy', 'numpy') or m in ('governor.core.policies', 'governor.core.drf')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=SCENARIOS.parents[1])
    assert loaded.stdout.strip() == "[]"


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "governor, version" in result.stdout


# --- renderers, without the CLI -------------------------------------------------------------

PAPER_CAPACITY = {"cpu": 9, "memory": 18 * G}
PAPER_GROUPS = [GroupDemand("A", {"cpu": 1, "memory": 4 * G}), GroupDemand("B", {"cpu": 3, "memory": G})]


def render(renderable) -> str:
    console = Console(record=True, width=120, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_allocation_table_renders_rows():
    text = render(allocation_table(progressive_filling(PAPER_CAPACITY, PAPER_GROUPS)))
    assert "DRF allocation (continuous) — capacity: cpu 9, memory 18.0G" in text
    assert rows(text)["A"] == ["1", "3", "3", "12.0G", "memory", "2/3 (66.7%)", "cpu saturated"]
    assert rows(text)["B"] == ["1", "2", "6", "2.0G", "cpu", "2/3 (66.7%)", "cpu saturated"]


def test_allocation_table_shows_bounded_demand_and_fractional_tasks():
    groups = [GroupDemand("A", {"cpu": 1}, tasks=2), GroupDemand("B", {"cpu": 3})]
    text = render(allocation_table(progressive_filling({"cpu": 10}, groups)))
    # A's 2 tasks are met (2 cores); B gets the other 8 cores: 8/3 tasks.
    assert rows(text)["A"][1] == "2 of 2"
    assert rows(text)["B"][1:3] == ["2.67", "8"]
    assert rows(text)["B"][-2:] == ["4/5 (80.0%)", "cpu saturated"]


def test_trace_table_uses_capacity_units_per_column():
    text = render(trace_table(discrete_filling(PAPER_CAPACITY, PAPER_GROUPS, trace=True)))
    assert rows(text)["1"] == ["placed", "A", "", "2/9", "0", "1/9", "4/18"]


def test_trace_table_without_steps_says_so():
    allocation = progressive_filling(PAPER_CAPACITY, PAPER_GROUPS)
    assert "no steps" in render(trace_table(allocation))


def test_allocation_json_numbers():
    out = progressive_filling({"cpu": 2}, [GroupDemand("A", {"cpu": Fraction(3, 2)}, tasks=1)]).to_json()
    assert out["capacity"] == {"cpu": 2.0} and type(out["capacity"]["cpu"]) is float  # floats, even when whole
    assert out["groups"]["A"]["allocation"] == {"cpu": 1.5}
    assert out["groups"]["A"]["dominant_share"] == 0.75
    assert out["groups"]["A"]["demanded_tasks"] == 1
    json.dumps(out)


@pytest.mark.parametrize(
    ("value", "text"),
    [(Fraction(2, 3), "2/3 (66.7%)"), (Fraction(1), "1"), (0, "0"),
     (Fraction(1, 1001), "0.1%"), (2 / 3, "66.7%")],
)
def test_format_share(value, text):
    assert format_share(value) == text


def test_ceei_without_scipy_says_what_to_install(monkeypatch):
    # SciPy is an extra (216 MB with numpy): a host without it gets one line, not a traceback.
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    result = run(PAPER, "--policy", "ceei")
    assert result.exit_code == 1
    assert result.stderr.startswith("governor: error: the CEEI policy needs SciPy")
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("scenario", "expected"), [
    # H-DRF's two examples (SoCC 2013): allocation per leaf, and the internal node's sum
    ("hdrf-starvation.toml", {"n1": {"cpu": 0, "gpu": 5}, "n2,1": {"cpu": 10, "gpu": 0},
                              "n2,2": {"cpu": 0, "gpu": 5}, "n2": {"cpu": 10, "gpu": 5}}),
    ("hdrf-blocking.toml", {"n1": {"cpu": 10 / 3, "gpu": 0}, "n2": {"cpu": 10 / 3, "gpu": 0},
                            "n3,1": {"cpu": 10 / 3, "gpu": 0}, "n3,2": {"cpu": 0, "gpu": 5}, "n4": {"cpu": 0, "gpu": 5},
                            "n3": {"cpu": 10 / 3, "gpu": 5}}),
    ("quotas.toml", {"physics": {"cpu": 3, "memory": 3 * G}, "biology": {"cpu": 3, "memory": 3 * G},
                     "ops": {"cpu": 10, "memory": 10 * G}, "science": {"cpu": 6, "memory": 6 * G}}),
])
def test_simulate_answers_the_hierarchical_examples(scenario, expected):
    answer = run_json(str(SCENARIOS / scenario))
    got = {**answer["groups"], **answer["nodes"]}
    for group, allocation in expected.items():
        assert got[group]["allocation"] == pytest.approx(allocation), group
    assert set(answer["nodes"]) == {name for name in expected if name in answer["parents"].values()}
    text = run(str(SCENARIOS / scenario)).stdout
    child = next(name for name, parent in answer["parents"].items() if parent)
    assert "H-DRF allocation (continuous)" in text and f"│   {child} " in text  # under its parent


def test_a_group_tree_is_refused_outside_continuous_drf():
    result = run(str(SCENARIOS / "quotas.toml"), "--mode", "discrete")
    assert result.exit_code == 2 and "H-DRF divides it, with --policy drf --mode continuous" in result.output
