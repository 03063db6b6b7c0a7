"""Configs at scale (issue 32, point 7): ``check-config --portable`` refuses what the daemon
refuses on any host; a reload parses and checks the file off the event loop; status and the
metrics summarise the idle groups of ``"*"``."""

from __future__ import annotations

import asyncio
import copy
import threading

import pytest
from click.testing import CliRunner
from support.status_sample import STATUS
from support.daemons import GIB, launch, make_daemon
from support.rendered import render, samples

from governor.cli.main import main
from governor.config.load import parse_config
from governor.errors import ConfigError
from governor.core.fairshare import Standing
from governor.wire.metrics import Metrics
from governor.wire.protocol import Peer, ReloadRequest, StatusRequest
from governor.core.state import Tasks
from governor.wire.status import groups_status

CONFIG = '[capacity]\ncpu = 2\nmemory = "4G"\n[groups.A]\nweight = 1\nusers = ["root"]\n[sessions]\nenabled = false\n'

OVER_FIXED = """
[capacity]
cpu = 4
memory = "8G"
[groups.A]
users = ["alice"]
guarantee = { cpu = 3, memory = "2G" }
[groups.B]
users = ["bob"]
guarantee = { cpu = 2, memory = "2G" }
"""


def test_check_config_portable_refuses_top_level_guarantees_over_a_fixed_capacity_as_the_daemon_does(tmp_path):
    path = tmp_path / "over.toml"
    path.write_text(OVER_FIXED)
    result = CliRunner().invoke(main, ["check-config", "--portable", str(path)])
    with pytest.raises(ConfigError) as daemon:  # what Policy.use meets on any host
        parse_config(OVER_FIXED, str(path)).capacity(64.0, 256 << 30)
    assert result.exit_code == 2, result.output
    assert str(daemon.value) in result.output
    assert "groups.A.guarantee.cpu: the top-level groups' guarantees add up to 5 cores, more than the capacity " \
           "here, 4 cores" in str(daemon.value)


def test_check_config_portable_leaves_a_capacity_the_host_decides_to_the_host(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text(OVER_FIXED.replace("cpu = 4\n", ""))  # cpu: the host's, minus the reserve
    result = CliRunner().invoke(main, ["check-config", "--portable", str(path)])
    assert result.exit_code == 0, result.output
    path.write_text(OVER_FIXED.replace("cpu = 4\n", "").replace('memory = "8G"', 'memory = "3G"'))
    result = CliRunner().invoke(main, ["check-config", "--portable", str(path)])
    assert result.exit_code == 2 and "groups.A.guarantee.memory" in result.output


def test_a_reload_parses_the_file_and_looks_members_up_off_the_event_loop_which_serves_meanwhile(tmp_path):
    daemon = make_daemon(tmp_path, CONFIG)
    parsing, release = threading.Event(), threading.Event()
    on = {}

    def load():
        on["load"] = threading.current_thread()
        parsing.set()
        assert release.wait(10), "the test never released the parse"
        return parse_config(CONFIG.replace("weight = 1", "weight = 3"), "test.toml")

    def members(config):
        on["members"] = threading.current_thread()
        return {}

    daemon.reloads.load_config, daemon.policy.find_members = load, members

    async def scenario():
        reload = asyncio.create_task(daemon.requests.handle(ReloadRequest(), Peer(pid=1, uid=0, gid=0)))
        await asyncio.to_thread(parsing.wait, 10)
        # While the file is parsed, the loop answers a status, under the old config.
        served = await daemon.requests.handle(StatusRequest(), Peer(pid=1, uid=0, gid=0))
        assert served["status"]["groups"]["A"]["weight"] == 1 and not reload.done()
        release.set()
        return await reload

    assert asyncio.run(scenario()) == {"reloaded": {"config": "test.toml"}}
    assert on["load"] is not threading.main_thread() and on["members"] is not threading.main_thread()
    assert daemon.observation.status()["groups"]["A"]["weight"] == 3


def test_sighup_starts_the_same_reload_off_the_loop_and_a_bad_file_leaves_the_config_in_force(tmp_path):
    daemon = make_daemon(tmp_path, CONFIG)
    loaded = []

    def load():
        loaded.append(threading.current_thread())
        if len(loaded) == 2:
            return parse_config("[groups.A]\nweight = 0\n", "test.toml")  # raises ConfigError
        return parse_config(CONFIG.replace("weight = 1", "weight = 3"), "test.toml")

    daemon.reloads.load_config = load

    async def signalled():
        daemon._reload_on_signal()
        await asyncio.gather(*daemon._signal_reloads)

    asyncio.run(signalled())
    assert daemon.observation.status()["groups"]["A"]["weight"] == 3 and loaded[0] is not threading.main_thread()
    asyncio.run(signalled())  # the refusal is an event, not an exception out of the handler
    assert daemon.observation.status()["groups"]["A"]["weight"] == 3
    assert "reload refused, the old config stays in force" in daemon.journal.events[-1]["message"]


EVERYONE = '[capacity]\ncpu = 2\nmemory = "4G"\n[groups.A]\nusers = ["root"]\n[groups."*"]\nweight = 2\n' \
           '[sessions]\nenabled = false\n'
ACCOUNTS = 1_000


def accounts(config):
    # Two of this host's users (a launch and set-weight find a group's user), the rest made up.
    made_up = {f"u{i:04d}": [f"u{i:04d}"] for i in range(ACCOUNTS - 2)}
    return {"A": ["root"], "daemon": ["daemon"], "bin": ["bin"], **made_up}


def test_status_and_metrics_sum_up_the_idle_groups_of_everyone_and_list_one_with_tasks(tmp_path):
    metrics = Metrics(lambda: daemon.observation.snapshot())
    daemon = make_daemon(tmp_path, EVERYONE, members=accounts, metrics=metrics)
    launch(daemon, 100, group="daemon", cpu=1.0, memory=GIB // 4)
    daemon.reloads.set_weight("bin", 5.0, "root")  # a weight of its own: listed
    groups = daemon.observation.status()["groups"]
    assert set(groups) == {"A", "daemon", "bin", "*"}
    row = groups["*"]
    assert row["accounts"] == ACCOUNTS - 2 and row["idle"] and row["tasks"] == [] and row["weight"] == 2
    assert row["floor"] == pytest.approx(2 / (1 + 2 * (ACCOUNTS - 1) + 5))  # each account's floor
    assert groups["daemon"]["tasks"] and not groups["daemon"]["idle"] and groups["bin"]["weight"] == 5
    got = samples(metrics)
    shares = {labels for name, labels in got if name == "governor_group_dominant_share"}
    assert shares == {(("group", g), ("leaf", "true"), ("parent", "")) for g in ("A", "daemon", "bin", "*")}
    assert got[("governor_idle_accounts", ())] == ACCOUNTS - 2
    assert len(daemon.observation.status_reply().encoded()) < 10_000  # 1,000 rows were ~400 KB


def test_an_idle_group_of_everyone_with_past_use_is_listed():
    configured = {"u1": {"weight": 1.0, "floor": 0.5, "members": ["u1"], "everyone": True},
                  "u2": {"weight": 1.0, "floor": 0.5, "members": ["u2"], "everyone": True},
                  "u3": {"weight": 1.0, "floor": 0.5, "members": ["u3"], "everyone": True}}
    past = {"u2": Standing(weight=1.0, usage=30.0, usage_share=1.0, weight_share=0.5, factor=0.25, effective=0.25)}
    groups = groups_status(allocation=None, tasks=Tasks(), in_force=lambda rel: {}, usage={}, configured=configured,
                           fairshare=past)
    assert set(groups) == {"u2", "*"} and groups["*"].accounts == 2
    assert groups["u2"].past_use == 30.0


def test_status_view_shows_the_row_of_everyone_with_its_accounts():
    status = copy.deepcopy(STATUS)
    status["groups"]["*"] = {**copy.deepcopy(status["groups"]["idle"]), "accounts": 9_998, "weight": 2.0}
    text = render(status, 120)
    assert "* (9,998 idle accounts, each)" in " ".join(text.split())


def test_the_periodic_rescan_looks_members_up_off_the_loop_and_drops_them_if_a_reload_came_between(tmp_path):
    daemon = make_daemon(tmp_path, CONFIG)
    looked_up = []

    def members(config):
        looked_up.append(threading.current_thread())
        return {"A": ["root", "bin"]}

    daemon.policy.find_members = members
    asyncio.run(daemon._rescan_all())
    assert looked_up[0] is not threading.main_thread() and daemon.policy.members == {"A": ["root", "bin"]}

    def reloaded_meanwhile(config):
        daemon.reloads.use(parse_config(CONFIG, "test.toml"), {"A": ["root"]})  # (the test's stand-in for a reload)
        return {"A": ["stale"]}

    daemon.policy.find_members = reloaded_meanwhile
    asyncio.run(daemon._rescan_all())
    assert daemon.policy.members == {"A": ["root"]}
