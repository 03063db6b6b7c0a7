"""A running session takes the [sessions] of a reload, and of a restart under another config
(issue 42, an attacker's finding: sessions kept the caps they started with, even across a
restart), its memory never lowered below what it uses."""

import json

import pytest
from hypothesis import given, strategies as st
from support.daemons import GIB, make_daemon, on_loop
from support.sessions import CONFIG, FAKE_UIDS, session_daemon

from governor.cgroups.stats import CgroupStats
from governor.config.load import parse_config
from governor.daemon.session_caps import followed

pytestmark = pytest.mark.daemon(make=session_daemon)  # the `daemon` fixture: sessions on

SMALLER = CONFIG.replace('cpu = 0.5\nmemory = "3G"', 'cpu = 0.25\nmemory = "512M"\npids = 100')

amounts = st.floats(min_value=0, max_value=2.0**60, allow_nan=False)


@given(old=amounts, asked=amounts, in_use=st.none() | amounts, cpu=amounts)
def test_memory_is_never_lowered_below_use_and_the_rest_is_as_asked(old, asked, in_use, cpu):
    new = followed({"cpu": 9.0, "memory": old}, {"cpu": cpu, "memory": asked}, in_use)
    assert new["cpu"] == cpu
    assert new["memory"] >= asked
    assert new["memory"] >= (old if in_use is None else min(in_use, old))  # what it uses, which its old cap bounds
    assert new["memory"] <= max(asked, old)  # never more than it had or is asked


def started(daemon):
    on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))
    session = daemon.tasks.get("session-1")
    assert session.demand == {"cpu": 0.5, "memory": 3 * GIB, "pids": 4096}
    return session


def in_use(daemon, rel, memory):
    daemon.hierarchy.driver.stats[rel] = CgroupStats(0, 0, 0, memory, populated=True)


def reload(daemon, text):
    daemon.reloads.load_config = lambda: parse_config(text, "t.toml")
    on_loop(daemon, lambda: daemon.reloads.reload("test"))


def in_force(daemon, rel):
    return daemon.hierarchy.in_force(rel)


def test_a_reload_gives_a_running_session_the_new_caps_but_keeps_the_memory_it_uses(daemon):
    session = started(daemon)
    in_use(daemon, session.cgroup, GIB)
    reload(daemon, SMALLER)
    now = daemon.tasks.get("session-1")
    assert now.demand == {"cpu": 0.25, "memory": GIB, "pids": 100}  # 512M asked, 1G used
    caps = in_force(daemon, session.cgroup)
    assert (caps["cpu.max"], caps["memory.max"], caps["pids.max"]) == ("25000 100000", str(GIB), "100")
    record = json.loads(daemon.store.directory.joinpath("session-1.json").read_text())
    assert record["demand"]["memory"] == GIB and record["demand"]["pids"] == 100
    [event] = [e["message"] for e in daemon.journal.events if "caps of [sessions] now" in e["message"]]
    assert "(reload)" in event and "memory kept at the 1.0G it uses, above the 512.0M asked" in event
    in_use(daemon, session.cgroup, 100 * 2**20)  # it freed some: the next reload lowers it to what was asked
    reload(daemon, SMALLER)
    assert daemon.tasks.get("session-1").demand["memory"] == 512 * 2**20


def test_a_reload_that_raises_them_raises_them_and_one_that_changes_nothing_says_nothing(daemon):
    session = started(daemon)
    reload(daemon, CONFIG)
    assert not [e for e in daemon.journal.events if "caps of [sessions]" in e["message"]]
    reload(daemon, CONFIG.replace('cpu = 0.5', 'cpu = 1.5'))
    assert daemon.tasks.get("session-1").demand["cpu"] == 1.5
    assert in_force(daemon, session.cgroup)["cpu.max"] == "150000 100000"


def test_sessions_turned_off_keep_the_running_ones_and_say_so(daemon):
    started(daemon)
    reload(daemon, CONFIG.replace("[sessions]", "[sessions]\nenabled = false"))
    assert daemon.tasks.get("session-1") is not None
    assert any(e["message"].startswith("sessions are off ([sessions] enabled = false): the 1 running keep")
               for e in daemon.journal.events)
    assert not on_loop(daemon, lambda: daemon.sessions.govern_process(501, 1))  # none joins


def test_a_restart_under_smaller_sessions_gives_them_the_new_caps(daemon, tmp_path):
    session = started(daemon)
    in_use(daemon, session.cgroup, 0)
    driver = daemon.hierarchy.driver
    again = make_daemon(tmp_path, SMALLER, driver=driver, uid_min=1, host_pids=lambda: list(FAKE_UIDS))
    on_loop(again, lambda: again.recovery.readopt(again.recovery.load()))
    assert again.tasks.get("session-1").demand == {"cpu": 0.25, "memory": 512 * 2**20, "pids": 100}
    assert in_force(again, session.cgroup)["pids.max"] == "100"
    assert any("caps of [sessions] now (restart)" in e["message"] for e in again.journal.events)
