"""``governor replay`` across a reload (issue 47): a reload is journaled with the capacity it put
in force, and a replay divides, at each moment, the capacity then in force."""

import asyncio
import time

import pytest
from support.daemons import GIB, make_daemon
from support.history import Clock, end_later

from governor.config.load import parse_config
from governor.daemon.replay import replay, timeline
from governor.daemon.replay_input import Job, Recorded, recorded
from governor.daemon.replay_report import compare
from governor.host.history_store import read_history
from governor.wire.protocol import LaunchRequest, Peer

CONFIG = """
[capacity]
cpu = 2
memory = "{memory}"
[groups.A]
users = ["root"]
[groups.B]
users = ["root"]
[sessions]
enabled = false
"""
BOUND_S = 0.5  # as tests/unit/test_replay.py's: the daemon's own time between events
STEP_S = 100.0


def _record(tmp_path, monkeypatch):
    """On 8G, A's 6G task runs and B's 6G task queues; a reload to 16G starts B's (waited
    STEP_S); both end. Then, still on 16G, A's and B's 6G tasks run side by side at once."""
    clock = Clock()
    monkeypatch.setattr(time, "time", clock)
    text = {"now": CONFIG.format(memory="8G")}
    daemon = make_daemon(tmp_path, text["now"], load_config=lambda: parse_config(text["now"], "test.toml"))
    daemon.history.start(daemon.policy.host_capacity, "test.toml")  # as the daemon does when it serves

    def request(pid, group):
        return daemon.requests.stream(LaunchRequest(pid=pid, group=group, demand={"cpu": 0.1, "memory": 6 * GIB},
                                                    command=("w",)), Peer(pid=pid, uid=0, gid=0))

    async def end(group, task_id):
        await end_later(daemon, clock, STEP_S, group, task_id)

    async def scenario():
        assert (await request(101, "A").__anext__())["task"] == "1"
        clock.now += 1
        queued = request(102, "B")
        assert "queued" in await queued.__anext__()
        clock.now += STEP_S
        text["now"] = CONFIG.format(memory="16G")
        daemon.reloads.reload("test")
        await daemon.settled()
        assert (await queued.__anext__())["task"] == "2"
        await end("A", "1")
        await end("B", "2")
        for pid, group in ((103, "A"), (104, "B")):
            assert "task" in await request(pid, group).__anext__()
        await end("A", "3")
        await end("B", "4")

    asyncio.run(scenario())
    daemon.history.close()
    monkeypatch.undo()
    return list(read_history(tmp_path / "state" / "history")), clock.now


def test_a_reload_is_journaled_and_the_replay_divides_each_periods_capacity(tmp_path, monkeypatch):
    entries, now = _record(tmp_path, monkeypatch)
    daemons = [entry for entry in entries if entry["kind"] == "daemon"]
    assert [(d["reason"], d["capacity"]["memory"]) for d in daemons] == [("start", 8 * GIB), ("reload", 16 * GIB)]
    period = recorded(entries, now - 3600, now + 1)
    assert [capacity["memory"] for _, capacity in period.capacities] == [8 * GIB, 16 * GIB]
    assert period.capacities[1][0] == daemons[1]["at"]
    own = parse_config(CONFIG.format(memory="16G"), "own.toml")
    was, again = timeline(period, own, period.capacities), replay(period, own, period.capacities)
    assert was.waits["2"] == pytest.approx(STEP_S, abs=BOUND_S)  # B's waited for the reload
    assert was.waits["4"] == pytest.approx(0.0, abs=BOUND_S)  # after it, both fit at once
    for task, wait in was.waits.items():  # both periods, as they were recorded
        assert again.waits[task] == pytest.approx(wait, abs=BOUND_S), task
        assert again.starts[task] == pytest.approx(was.starts[task], abs=BOUND_S), task
    # Divided by the last capacity throughout, as before the reload was journaled, B's first
    # task would not have waited: the replay would not reproduce the first period.
    assert replay(period, own, period.capacity).waits["2"] == pytest.approx(0.0, abs=BOUND_S)
    report = compare(period, was, again, own)
    assert [c["capacity"]["memory"] for c in report["capacities"]] == [8 * GIB, 16 * GIB]
    # A's and B's tasks each held 6G: before the reload 6/8 of the memory, after it 6/16 each.
    assert report["groups"]["B"]["recorded"]["memory_share"] == pytest.approx(
        report["groups"]["B"]["proposed"]["memory_share"], abs=0.01)


def test_a_launch_queued_when_a_reload_shrinks_the_capacity_below_it_is_refused():
    config = parse_config(CONFIG.format(memory="16G"), "p.toml")
    jobs = [Job("1", "A", "root", 0, {"cpu": 0.1, "memory": 10 * GIB}, False, 0.0, 0.0, 100.0),
            Job("2", "B", "root", 0, {"cpu": 0.1, "memory": 10 * GIB}, False, 10.0, 100.0, 200.0)]
    period = Recorded(0.0, 300.0, jobs, capacity={"cpu": 2.0, "memory": 8.0 * GIB},
                      capacities=((0.0, {"cpu": 2.0, "memory": 16.0 * GIB}), (50.0, {"cpu": 2.0, "memory": 8.0 * GIB})))
    again = replay(period, config, period.capacities)
    assert again.refused == {"2": "exceeds_capacity"} and "2" not in again.waits and again.waits["1"] == 0.0
    assert period.capacity_seconds("memory") == pytest.approx((50 * 16 + 250 * 8) * GIB)


def _replay_cli(tmp_path, monkeypatch, *extra, without_matplotlib=False):
    import sys

    from click.testing import CliRunner

    from governor.cli.main import main

    _record(tmp_path, monkeypatch)  # undoes monkeypatch's changes when done
    if without_matplotlib:  # as where the optional extra is not installed: its import fails
        monkeypatch.setitem(sys.modules, "matplotlib", None)
        monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    proposed = tmp_path / "proposed.toml"
    proposed.write_text(CONFIG.format(memory="16G"))
    return CliRunner().invoke(main, ["replay", str(proposed), "--dir", str(tmp_path / "state" / "history"),
                                     "--since", "2000-01-01", "--until", "2100-01-01", *extra])


def test_replay_plot_draws_the_comparison_to_a_png(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="--plot's optional extra (drf-governor[plot]) is not installed")
    done = _replay_cli(tmp_path, monkeypatch, "--plot", str(tmp_path / "replay.png"))
    assert done.exit_code == 0, done.output
    assert (tmp_path / "replay.png").read_bytes().startswith(b"\x89PNG") and "recorded" in done.output


@pytest.mark.parametrize("name", ["noext", ".png", "plot.txt"])
def test_replay_plot_writes_the_file_named_or_says_why_not(tmp_path, monkeypatch, name):
    # Stranger check: matplotlib added ".png" to a name with no suffix (/dev/null.png) and to ".png".
    pytest.importorskip("matplotlib", reason="--plot's optional extra (drf-governor[plot]) is not installed")
    (tmp_path / "plots").mkdir()
    done = _replay_cli(tmp_path, monkeypatch, "--plot", str(tmp_path / "plots" / name))
    assert done.exit_code == 1 and "name the file with the suffix of its format" in done.output, done.output
    assert list((tmp_path / "plots").iterdir()) == []


def test_replay_plot_takes_its_format_from_the_suffix_in_any_case(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="--plot's optional extra (drf-governor[plot]) is not installed")
    (tmp_path / "plots").mkdir()
    done = _replay_cli(tmp_path, monkeypatch, "--plot", str(tmp_path / "plots" / "replay.SVG"))
    assert done.exit_code == 0 and [p.name for p in (tmp_path / "plots").iterdir()] == ["replay.SVG"], done.output
    assert b"<svg" in (tmp_path / "plots" / "replay.SVG").read_bytes()


def test_replay_plot_without_matplotlib_says_how_to_get_it(tmp_path, monkeypatch):
    done = _replay_cli(tmp_path, monkeypatch, "--plot", str(tmp_path / "replay.png"), without_matplotlib=True)
    assert done.exit_code == 1 and "drf-governor[plot]" in done.output and "Traceback" not in done.output
    assert not (tmp_path / "replay.png").exists()
