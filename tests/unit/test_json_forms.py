"""One JSON form of an allocation: ``simulate --json``, ``explain --json`` and ``status --json``
render the same group allocation identically (``GroupAllocation.to_json``), and a trace row as
``TraceRow.to_json``.

The daemon (support.daemons', with a dict for cgroupfs) runs A and B, each one task of <2 cores,
1G> on 2 cores and 4G; the scenario file says the same. Both groups are stopped by cpu at λ = 1/2:
1 core and 512M each, dominant share 1/2, numbers exact in binary, so the daemon's floats and
simulate's Fractions print the same.
"""

from __future__ import annotations

import json

from click.testing import CliRunner
from support.fake_socket import FakeSocket
from support.daemons import launch

from governor.cli.main import main
from governor.core.model import DEMAND_MET, GroupAllocation

GIB = 1024**3
SCENARIO = """[capacity]
cpu = 2
memory = "4G"
[groups.A]
task = { cpu = 2, memory = "1G" }
tasks = 1
[groups.B]
task = { cpu = 2, memory = "1G" }
tasks = 1
"""
COMMON = ("weight", "allocation", "dominant_resources", "dominant_share", "stop")


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_simulate_explain_and_status_render_an_allocation_identically(daemon, tmp_path):  # noqa: F811
    launch(daemon, 100, group="A", cpu=2.0, memory=GIB)
    launch(daemon, 200, group="B", cpu=2.0, memory=GIB)
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    simulated = cli_json("simulate", str(scenario), "--trace", "--json")
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "explain": daemon.requests.explain(),
                                                    "status": daemon.observation.status()}])
    explained = cli_json("explain", "--json", "--socket", server.path)
    status = cli_json("status", "--json", "--socket", server.path)
    server.close()
    expected = {"weight": 1.0, "allocation": {"cpu": 1.0, "memory": 0.5 * GIB}, "dominant_resources": ["cpu"],
                "dominant_share": 0.5, "stop": "cpu saturated"}
    for group in ("A", "B"):
        views = [{key: view["groups"][group][key] for key in COMMON} for view in (simulated, explained, status)]
        assert views == [expected] * 3
        # Not only equal: the same JSON text, floats everywhere (simulate's exact 1 is 1.0).
        assert len({json.dumps(view) for view in views}) == 1
    assert simulated["trace"] == explained["trace"] == [
        {"step": 1, "event": "saturated", "group": None, "resource": "cpu", "frozen": ["A", "B"],
         "dominant_shares": {"A": 0.5, "B": 0.5}, "allocated": {"cpu": 2.0, "memory": 1.0 * GIB}}]
    assert json.dumps(simulated["trace"]) == json.dumps(explained["trace"])


def test_a_group_allocation_has_one_json_form():
    got = GroupAllocation("A", 2, None, 1, {"cpu": 1, "memory": 3}, ("cpu",), 1, DEMAND_MET)
    assert json.dumps(got.to_json()) == ('{"weight": 2.0, "allocation": {"cpu": 1.0, "memory": 3.0}, '
                                         '"dominant_resources": ["cpu"], "dominant_share": 1.0, "stop": "demand met"}')
