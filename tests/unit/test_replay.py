"""``governor replay`` (issue 47): a history the daemon journaled, replayed under its own config,
reproduces the recorded starts and waits; a change of weight moves the right group's waits."""

import asyncio
import time

import pytest
from click.testing import CliRunner
from support.daemons import GIB, make_daemon
from support.history import Clock, end_later

from governor.cli.main import main
from governor.config.load import parse_config
from governor.daemon.replay import replay, timeline
from governor.daemon.replay_input import recorded
from governor.daemon.replay_report import compare, percentile
from governor.host.history_store import read_history
from governor.wire.protocol import LaunchRequest, Peer

CONFIG = """
[capacity]
cpu = 2
memory = "8G"
[groups.A]
users = ["root"]
[groups.B]
users = ["root"]{b_weight}
[groups.C]
users = ["root"]
[sessions]
enabled = false
"""
# The recorded waits come from the daemon's clock around settle; the replay's from the journal's
# arrival and end times. They differ by what the daemon spent between an exit and the start it
# allowed (settle, the cgroup's creation and the move: milliseconds on the in-memory driver; tens
# of milliseconds on a loaded host), and by the journal's times being taken at different points
# of one event (a start is stamped when admitted, its wait when the process is moved in).
BOUND_S = 0.5
STEP_S = 100.0  # the fake clock's step between events: waits of minutes, as on a real host


def _record(tmp_path, monkeypatch):
    """A history journaled by the daemon (in-memory driver): C's 5G task holds the host while
    A's and B's 5G tasks queue; when it ends, discrete DRF starts A's (A holds 1G, B 2G:
    A's share is the lower); when A's ends, B's starts."""
    clock = Clock()
    monkeypatch.setattr(time, "time", clock)
    daemon = make_daemon(tmp_path, CONFIG.format(b_weight=""))
    daemon.history.start(daemon.policy.capacity, "test.toml")  # as the daemon does when it serves

    def request(pid, group, memory):
        return daemon.requests.stream(LaunchRequest(pid=pid, group=group, demand={"cpu": 0.1, "memory": memory},
                                                    command=("w",)), Peer(pid=pid, uid=0, gid=0))

    async def end(group, task_id):
        await end_later(daemon, clock, STEP_S, group, task_id)

    async def scenario():
        for pid, group, memory in ((101, "A", GIB), (102, "B", 2 * GIB), (103, "C", 5 * GIB)):
            assert "task" in await request(pid, group, memory).__anext__()
            clock.now += 1
        queued_a, queued_b = request(104, "A", 5 * GIB), request(105, "B", 5 * GIB)
        assert "queued" in await queued_b.__anext__()  # B's arrives first
        clock.now += 10
        assert "queued" in await queued_a.__anext__()
        await end("C", "3")
        assert (await queued_a.__anext__())["task"] == "5"  # B's is 4: it came first
        await end("A", "5")
        assert (await queued_b.__anext__())["task"] == "4"
        for group, task_id in (("B", "4"), ("A", "1"), ("B", "2")):
            await end(group, task_id)

    asyncio.run(scenario())
    daemon.history.close()
    monkeypatch.undo()
    return list(read_history(daemon.store.directory / "history")), clock.now


@pytest.fixture
def journaled(tmp_path, monkeypatch):
    entries, now = _record(tmp_path, monkeypatch)
    return recorded(entries, now - 3600, now + 1)


def test_replayed_under_its_own_config_the_starts_and_waits_are_the_recorded_ones(journaled):
    config = parse_config(CONFIG.format(b_weight=""), "own.toml")
    assert journaled.capacity["memory"] == 8 * GIB
    was = timeline(journaled, config, journaled.capacity)
    again = replay(journaled, config, journaled.capacity)
    assert sorted(again.starts) == sorted(was.starts) == ["1", "2", "3", "4", "5"]
    for task in was.starts:
        assert abs(again.starts[task] - was.starts[task]) <= BOUND_S, task
        assert abs(again.waits[task] - was.waits[task]) <= BOUND_S, task
    assert was.waits["4"] >= 2 * STEP_S and again.refused == {} and again.still_queued == {}


def test_a_higher_weight_for_b_starts_bs_task_first_and_as_waits_longer(journaled):
    own = parse_config(CONFIG.format(b_weight=""), "own.toml")
    heavier = parse_config(CONFIG.format(b_weight="\nweight = 3"), "proposed.toml")
    report = compare(journaled, timeline(journaled, own, journaled.capacity),
                     replay(journaled, heavier, journaled.capacity), heavier)
    # B holds 2G of 8G: share 0.25 / weight 3 = 0.083 is now below A's 0.125 / 1.
    a, b = report["groups"]["A"], report["groups"]["B"]
    assert b["proposed"]["wait_p95_s"] < b["recorded"]["wait_p95_s"]
    assert a["proposed"]["wait_p95_s"] > a["recorded"]["wait_p95_s"]
    assert report["groups"]["C"]["proposed"]["wait_p95_s"] == report["groups"]["C"]["recorded"]["wait_p95_s"]
    assert a["recorded"]["memory_share"] == pytest.approx(a["proposed"]["memory_share"])  # same work, moved


def test_a_group_the_proposed_config_lacks_is_refused_and_said_so(journaled):
    without_c = parse_config(CONFIG.format(b_weight="").replace('[groups.C]\nusers = ["root"]\n', ""), "p.toml")
    again = replay(journaled, without_c, journaled.capacity)
    assert again.refused == {"3": "not_found"}
    assert again.waits["4"] == 0.0  # nothing holds the host for B's now


def test_percentiles_are_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0 and percentile(list(map(float, range(1, 21))), 0.95) == 19.0


def test_governor_replay_prints_groups_side_by_side_and_json(tmp_path, monkeypatch):
    entries, now = _record(tmp_path, monkeypatch)
    proposed = tmp_path / "proposed.toml"
    proposed.write_text(CONFIG.format(b_weight="\nweight = 3"))
    directory = str(tmp_path / "state" / "history")
    runner = CliRunner()
    args = ["replay", str(proposed), "--dir", directory, "--since", "2000-01-01", "--until", "2100-01-01"]
    done = runner.invoke(main, [*args, "--json"])
    assert done.exit_code == 0, done.output
    import json

    report = json.loads(done.output)
    assert set(report["groups"]) == {"A", "B", "C"} and report["unknown"]
    table = runner.invoke(main, args)
    assert table.exit_code == 0, table.output
    assert "recorded" in table.output and "proposed" in table.output and "cannot be known" in table.output
    broken = tmp_path / "broken.toml"
    broken.write_text("[groups.A]\nusers = [\"root\"]\nweight = -1\n")
    bad = runner.invoke(main, ["replay", str(broken), "--dir", directory])
    assert bad.exit_code != 0 and "weight" in bad.output and "Traceback" not in bad.output


def test_fair_share_standings_and_journaled_refusals_are_reported_per_group(journaled):
    from dataclasses import replace

    fair = parse_config(CONFIG.format(b_weight="") + '[fairshare]\nhalf_life = "1h"\n', "fair.toml")
    refused = replace(journaled, refusals=[{"at": journaled.since + 1, "kind": "refusal", "uid": 0, "group": "C",
                                            "demand": {"memory": 100 * GIB}, "code": "exceeds_capacity"}])
    report = compare(refused, timeline(refused, fair, refused.capacity), replay(refused, fair, refused.capacity), fair)
    c = report["groups"]["C"]
    assert c["recorded"]["refused"] == c["proposed"]["refused"] == 1  # a journaled refusal stays one
    assert report["users"]["root"]["proposed"]["refused"] == 1
    standings = {group: sides["proposed"]["fair_share"] for group, sides in report["groups"].items()}
    assert sum(s["usage_share"] for s in standings.values()) == pytest.approx(1.0)
    # B held the most of the host the longest (2G all along, then 5G): its weight fell the most.
    assert min(standings, key=lambda g: standings[g]["effective_weight"]) == "B"


def test_tasks_holding_gpus_are_admitted_by_the_gpus_free(journaled):
    from dataclasses import replace

    config = parse_config(CONFIG.format(b_weight=""), "own.toml")
    jobs = [replace(job, demand={**job.demand, "gpu": 1.0}) for job in journaled.jobs]
    one_gpu = replace(journaled, jobs=jobs, capacity={**journaled.capacity, "gpu": 1.0})
    again = replay(one_gpu, config, one_gpu.capacity)
    # One GPU, one task at a time, each as long as it ran, the next as the last ends (before,
    # the GPU a task left stayed draining for ever); those it leaves no time for stay queued.
    held = sorted((start, start + journaled.run_s(job)) for job in journaled.jobs
                  for task, start in again.starts.items() if task == job.task)
    assert len(held) >= 2 and all(end <= start for (_, end), (start, _) in zip(held, held[1:]))
    assert len(again.starts) + len(again.still_queued) == 5
