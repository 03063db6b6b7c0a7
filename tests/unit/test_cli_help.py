"""Everything readable at 80 columns: every ``--help`` (with an example), ``simulate`` on every
shipped scenario, ``explain`` on a host with many groups; nothing cut with an ellipsis."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from governor.cli.explain_view import explain_renderables
from governor.cli.main import main
from governor.core.drf import progressive_filling
from governor.core.explain import explain as explain_object
from governor.core.model import GroupDemand

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "configs" / "scenarios").glob("*.toml"))
COMMANDS = sorted(main.commands)


def at_80(*args: str) -> str:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def assert_readable(text: str, width: int = 80) -> None:
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text  # nothing cut: a long cell folds onto more lines instead


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)], ids=lambda c: " ".join(c) or "governor")
def test_every_help_fits_80_columns_and_has_an_example(command):
    text = at_80(*command, "--help")
    assert_readable(text)
    examples = text[text.index("Examples:"):].splitlines()[1:]
    assert examples[0].strip().removeprefix("sudo ").startswith(" ".join(["governor", *command]))


def test_help_lists_every_command_without_cutting_its_summary():
    listing = at_80("--help").split("Commands:")[1]
    assert all(f"  {command} " in listing for command in COMMANDS) and "..." not in listing


@pytest.mark.parametrize(("scenario", "mode"), [(s, m) for s in SCENARIOS for m in ("continuous", "discrete")
                                                 if m == "continuous" or "parent" not in s.read_text()],
                         ids=lambda v: getattr(v, "name", v))
def test_simulate_fits_80_columns(scenario, mode):
    text = at_80("simulate", str(scenario), "--mode", mode, "--trace")
    assert_readable(text)
    groups = json.loads(at_80("simulate", str(scenario), "--mode", mode, "--json"))["groups"]
    assert all(re.search(rf"│ +{re.escape(name)} ", text) for name in groups)  # every name whole


def test_the_paper_keeps_a_column_per_resource_at_80():
    text = at_80("simulate", "configs/scenarios/paper.toml", "--mode", "discrete")
    header = next(line for line in text.splitlines() if line.startswith("┃ group"))
    assert [c.strip() for c in header.split("┃")[1:-1]] == ["group", "weight", "tasks", "cpu", "memory", "dominant",
                                                           "share", "stopped by"]


def test_explain_on_a_host_of_many_groups_fits_80_columns():
    capacity = {"cpu": 64.0, "memory": 256.0 * 1024**3, "io.nvme0n1.read": 2.0 * 1024**3}
    demands = {f"group-{i}": {"cpu": 4.0 + i, "memory": (8.0 + i) * 1024**3, "io.nvme0n1.read": 1e8}
               for i in range(8)}
    allocation = progressive_filling(capacity, [GroupDemand(g, d, tasks=1) for g, d in demands.items()], trace=True)
    answer = json.loads(json.dumps(explain_object(allocation, capacity, demands, configured={"idle": {"weight": 2.0, "floor": 0.2}})))
    console = Console(record=True, width=80, file=io.StringIO())
    for group in (None, "group-3", "idle"):
        for renderable in explain_renderables(answer, group, now=0.0):
            console.print(renderable)
    text = console.export_text()
    assert_readable(text)
    assert all(f"│ group-{i} " in text for i in range(8)) and "│ idle " in text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_example_uses_options_its_command_has(command):
    text = at_80(command, "--help")
    block = text[text.index("Examples:"):text.index("Options:")].splitlines()[1:]
    known = {opt for param in main.commands[command].params for opt in param.opts}
    for example in filter(None, (line.strip() for line in block)):
        words = example.split("#")[0].split("&&")[0].split()  # governor's part of the line
        words = words[words.index(command) + 1:]
        used = [w.split("=")[0] for w in words[:words.index("--") if "--" in words else None] if w.startswith("-")]
        assert set(used) <= known, example
