"""One visibility rule for every view (issue 43, point 4): a user sees their own tasks in full,
another user's without command line, pid or processes, and an admin sees all. As a plain user
``governor status --json`` listed another user's running task
``['sh', '-c', '… mysql --password=Hunter2-SECRET']`` with its pid, and a queued task's
``['curl', '-H', 'Authorization: Bearer QUEUED-TOKEN-123', …]``."""

from __future__ import annotations

import json
import logging
import re

import pytest
from prometheus_client import generate_latest
from support.daemons import GIB, collect, make_daemon, on_loop

from governor.host.access import Identity
from governor.wire.metrics import Metrics
from governor.wire.protocol import ExplainRequest, LaunchRequest, Peer, PsRequest, StatusRequest, WatchRequest
from governor.wire.visibility import PUBLIC, StatusViews, Viewer, private, status_for
from governor.wire.status_json import decode

CONFIG = """
[capacity]
cpu = 2
memory = "4G"
[daemon]
admin_group = "wheel"
[groups.A]
users = ["root", "alice", "bob", "carol"]
[groups.B]
users = ["root", "alice", "bob", "carol"]
[sessions]
enabled = false
"""
PEOPLE = {0: Identity(0, "root", ("root",)), 1001: Identity(1001, "alice", ("alice",)),
          1002: Identity(1002, "bob", ("bob",)), 1003: Identity(1003, "carol", ("carol", "wheel"))}
SECRET = ("sh", "-c", "sleep 600; mysql --password=Hunter2-SECRET")
TOKEN = ("curl", "-H", "Authorization: Bearer QUEUED-TOKEN-123", "https://example.org")
MINE = ("make", "-j2", "MY-OWN-FLAGS")


@pytest.fixture
def host(tmp_path):
    """A daemon for :func:`seen`."""
    daemon = make_daemon(tmp_path, CONFIG)
    daemon.policy.identities.identify = lambda uid, gid: PEOPLE[uid]
    return daemon


def seen(daemon, *asked: tuple[object, int]) -> list[dict]:
    """Bob runs a task with a secret in its command line and queues another, alice runs one of
    her own; then each ``(request, uid)`` is answered (a WatchRequest: its first status), and
    the metrics are scraped (last), on one event loop (a queued launch leaves the queue when its
    client goes)."""
    def launch(pid, uid, command, memory):
        request = LaunchRequest(pid=pid, group="A", demand={"cpu": 0.5, "memory": memory}, command=command)
        return daemon.requests.stream(request, Peer(pid=pid, uid=uid, gid=uid))

    async def scenario():
        await collect(launch(100, 1002, SECRET, 3 * GIB))
        await collect(launch(200, 1001, MINE, GIB // 2))
        waiting = launch(300, 1002, TOKEN, 2 * GIB)  # 2G beside 3.5G on 4G: queued, no process
        assert "queued" in await anext(waiting)
        answers = []
        for request, uid in asked:
            peer = Peer(pid=1, uid=uid, gid=uid)
            if isinstance(request, WatchRequest):
                stream = daemon.requests.watch(request, peer)
                answers.append((await anext(stream)).status)
                await stream.aclose()
            else:
                answers.append(await daemon.requests.handle(request, peer))
        answers.append(generate_latest(Metrics(lambda: decode(daemon.observation.status(PUBLIC))).registry).decode())
        await waiting.aclose()
        return answers

    return on_loop(daemon, scenario)


def everything(payload) -> str:
    return json.dumps(payload)


def secrets_in(text: str) -> list[str]:
    # A task's name stays public (its --name, by default its program's basename: "curl").
    return [word for word in ("Hunter2-SECRET", "QUEUED-TOKEN-123", "mysql", "Authorization", "example.org")
            if word in text]


def tasks_of(status: dict) -> dict[str, dict]:
    return {t["id"]: t for g in status["groups"].values() for t in g["tasks"]}


def test_a_plain_user_sees_no_other_users_command_line_or_pid_in_any_view(host):
    lists = (PsRequest(all=True), PsRequest(users=("bob",)), PsRequest(groups=("A",)))
    status, explained, *listed, watched, scraped = seen(host, (StatusRequest(), 1001), (ExplainRequest(), 1001),
                                                        *((request, 1001) for request in lists),
                                                        (WatchRequest(0.2), 1001))
    status = status["status"]
    assert secrets_in(everything(status)) == []
    bobs, mine = tasks_of(status)["1"], tasks_of(status)["2"]
    assert (bobs["command"], bobs["pid"], bobs["private"], bobs["user"]) == ([], None, True, "bob")
    assert bobs["demand"] == {"cpu": 0.5, "memory": 3 * GIB, "pids": 4096} and bobs["name"] == "sh"  # the amounts stay
    assert (mine["command"], mine["pid"], "private" in mine) == (list(MINE), 200, False)  # her own, in full
    [queued] = status["queue"]
    assert (queued["task"], queued["user"], queued["command"], queued["private"]) == ("3", "bob", [], True)
    explained = explained["explain"]
    assert secrets_in(everything(explained)) == [] and explained["queue"][0]["private"]
    for request, rows in zip(lists, listed):
        rows = rows["tasks"]
        assert secrets_in(everything(rows)) == [], request
        assert {row["id"]: row["pid"] for row in rows if row["user"] == "bob"} == {"1": None, "3": None}
        assert all(row["processes"] == [] and row["processes_total"] is None for row in rows if row["user"] == "bob")
    assert secrets_in(everything(watched)) == []
    assert "governor_group" in scraped and secrets_in(scraped) == []


def test_status_events_name_no_pid_and_the_log_keeps_them(host, caplog):
    # The recent events are everyone's: "task 1 started: pid 100, user bob" gave bob's pid to
    # any user who asked for the status. The log (the admins') keeps it.
    caplog.set_level(logging.INFO, logger="governor")
    [status, _] = seen(host, (StatusRequest(), 1001))
    messages = [event["message"] for event in status["status"]["events"]]
    assert any(message.startswith("task 1 started: user bob, group A") for message in messages), messages
    assert not [message for message in messages if re.search(r"\b(100|200)\b", message)]
    logged = [record.getMessage() for record in caplog.records]
    assert any(line.startswith("task 1 started: user bob") and line.endswith("(pid 100)") for line in logged)


@pytest.mark.parametrize("uid", [0, 1003])  # root, and carol of the admin group
def test_an_admin_sees_every_task_in_full(host, uid):
    status, listed, _ = seen(host, (StatusRequest(), uid), (PsRequest(all=True), uid))
    status = status["status"]
    assert tasks_of(status)["1"]["command"] == list(SECRET) and tasks_of(status)["1"]["pid"] == 100
    assert status["queue"][0]["command"] == list(TOKEN)
    assert not any(t.get("private") for t in tasks_of(status).values())
    assert listed["tasks"][0]["command"] == list(SECRET)


def test_the_owner_sees_their_tasks_in_full_running_and_queued(host):
    status, listed, _ = seen(host, (StatusRequest(), 1002), (PsRequest(), 1002))
    status = status["status"]
    assert tasks_of(status)["1"]["command"] == list(SECRET) and tasks_of(status)["1"]["pid"] == 100
    assert status["queue"][0]["command"] == list(TOKEN)
    assert tasks_of(status)["2"]["private"]  # alice's, to bob
    assert [(row["id"], row["command"]) for row in listed["tasks"]] == [("1", list(SECRET)), ("3", list(TOKEN))]


def test_ps_u_and_group_filter_whoevers_tasks(host):
    *answers, _ = seen(host, (PsRequest(users=("alice",)), 1002), (PsRequest(users=("1002",)), 1001),
                       (PsRequest(groups=("B",)), 1001), (PsRequest(groups=("A",), users=("bob",)), 0),
                       (PsRequest(), 1003))
    assert [[row["id"] for row in answer["tasks"]] for answer in answers] == [
        ["2"], ["1", "3"], [], ["1", "3"], []]  # a uid names a user too; without a filter, one's own


def test_each_viewer_form_is_built_once_per_status_and_shared():
    # The status cache (issue 43, point 4): redaction per viewer must not cost a build and an
    # encoding per request. Users without a task share the public form; admins the full one.
    made = []

    class Reply:
        def __init__(self, status, checked):
            self.status = status
            made.append(self)

    entry = {"id": "1", "uid": 7, "command": ["secret"], "command_cut": 0, "pid": 9}
    mine = {"id": "2", "uid": 8, "command": ["mine"], "command_cut": 0, "pid": 10}
    full = Reply({"groups": {"A": {"tasks": [entry, mine]}, "B": {"tasks": []}}, "queue": []}, {})
    made.clear()
    views = StatusViews(Reply)
    admin, nobody, other, owner = Viewer(0, True), Viewer(5, False), Viewer(6, False), Viewer(8, False)
    assert views.reply(full, admin) is full
    public = views.reply(full, nobody)
    assert views.reply(full, other) is public and views.reply(full, PUBLIC) is public  # shared
    own = views.reply(full, owner)
    assert own is not public and views.reply(full, owner) is own and len(made) == 2
    assert own.status["groups"]["A"]["tasks"][1] is mine and own.status["groups"]["A"]["tasks"][0]["private"]
    assert public.status["groups"]["B"] is full.status["groups"]["B"]  # nothing to hide: not copied
    # The next status keeps an unchanged task's entry: its private form is kept too.
    later = Reply({"groups": {"A": {"tasks": [entry]}}, "queue": []}, {})
    again = views.reply(later, nobody)
    assert again.status["groups"]["A"]["tasks"][0] is public.status["groups"]["A"]["tasks"][0]


def test_the_rule_is_one_function_on_every_entry():
    entry = {"id": "1", "uid": 7, "command": ["a"], "command_cut": 3, "pid": 9, "processes": [{"pid": 9}],
             "processes_total": 1, "name": "a"}
    assert private(entry) == {**entry, "command": [], "command_cut": 0, "pid": None, "processes": [],
                              "processes_total": None, "private": True}
    queue_item = {"task": "3", "uid": 7, "command": ["b"]}
    assert private(queue_item) == {"task": "3", "uid": 7, "command": [], "private": True}  # no key added
    status = {"groups": {"A": {"tasks": [entry]}}, "queue": [queue_item]}
    assert status_for(status, Viewer(7, False)) == status and status_for(status, Viewer(1, True)) is status
    assert status_for(status, PUBLIC)["queue"] == [private(queue_item)]


def test_status_and_top_show_another_users_task_as_private():
    import copy
    import io

    from rich.console import Console
    from support.rendered import render
    from support.status_sample import NOW, STATUS

    from governor.cli.top_state import TopState, press
    from governor.cli.top_view import top_view

    status = status_for(copy.deepcopy(STATUS), Viewer(1002, False))  # bob's view: alice's tasks private
    text = render(status, 120)
    assert "backup.sh" in text and "train.py" not in text and "4242" not in text
    assert any("t7" in line and "— · alice · (private)" in line for line in text.splitlines()), text
    state = TopState(status=decode(status))
    press(state, "enter")  # physics, alice's group, expanded
    console = Console(record=True, width=120, height=40, file=io.StringIO())
    console.print(top_view(state, width=120, height=40, now=NOW))
    top = console.export_text()
    assert "(private)" in top and "train.py" not in top and "4242" not in top, top
