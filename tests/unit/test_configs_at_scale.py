"""Configs at scale (issue 32, point 7): ``check-config --portable`` refuses what the daemon
refuses on any host; a reload parses and checks the file off the event loop; status and the
metrics summarise the idle groups of ``"*"``."""

from __future__ import annotations

import asyncio
import threading

import pytest
from click.testing import CliRunner
from test_daemon import make_daemon

from governor.cli.main import main
from governor.config import parse_config
from governor.errors import ConfigError
from governor.protocol import Peer, ReloadRequest, StatusRequest

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

    daemon.load_config, daemon.policy.find_members = load, members

    async def scenario():
        reload = asyncio.create_task(daemon.handle(ReloadRequest(), Peer(pid=1, uid=0, gid=0)))
        await asyncio.to_thread(parsing.wait, 10)
        # While the file is parsed, the loop answers a status, under the old config.
        served = await daemon.handle(StatusRequest(), Peer(pid=1, uid=0, gid=0))
        assert served["status"]["groups"]["A"]["weight"] == 1 and not reload.done()
        release.set()
        return await reload

    assert asyncio.run(scenario()) == {"reloaded": {"config": "test.toml"}}
    assert on["load"] is not threading.main_thread() and on["members"] is not threading.main_thread()
    assert daemon.status()["groups"]["A"]["weight"] == 3


def test_sighup_starts_the_same_reload_off_the_loop_and_a_bad_file_leaves_the_config_in_force(tmp_path):
    daemon = make_daemon(tmp_path, CONFIG)
    loaded = []

    def load():
        loaded.append(threading.current_thread())
        if len(loaded) == 2:
            return parse_config("[groups.A]\nweight = 0\n", "test.toml")  # raises ConfigError
        return parse_config(CONFIG.replace("weight = 1", "weight = 3"), "test.toml")

    daemon.load_config = load

    async def signalled():
        daemon._reload_on_signal()
        await asyncio.gather(*daemon._signal_reloads)

    asyncio.run(signalled())
    assert daemon.status()["groups"]["A"]["weight"] == 3 and loaded[0] is not threading.main_thread()
    asyncio.run(signalled())  # the refusal is an event, not an exception out of the handler
    assert daemon.status()["groups"]["A"]["weight"] == 3
    assert "reload refused, the old config stays in force" in daemon.events[-1]["message"]
