"""One user asking for ``history`` again and again must not keep the daemon busy (issue 47): one
read per uid at a time, and one user's reads take at most READ_SHARE of the daemon's time."""

import asyncio

import pytest
from support.history import Clock

from governor.daemon import history as history_module
from governor.daemon.history import READ_SHARE, History
from governor.config.history_rules import HistoryRules
from governor.errors import RequestError
from governor.wire.protocol import HistoryRequest
from governor.wire.visibility import Viewer

READ_S = 2.0  # what each read of the journal takes, on the test's clock


@pytest.fixture
def history(tmp_path, monkeypatch):
    clock = Clock()

    def read_history(directory, since, until, skipped=None):  # a month of journal: READ_S seconds to read
        clock.now += READ_S
        return iter([{"at": 1.0, "kind": "launch", "task": "1", "uid": 1000}])

    monkeypatch.setattr(history_module, "read_history", read_history)
    return History(tmp_path, HistoryRules, monotonic=clock), clock


def _ask(history, uid):
    return history.reply(HistoryRequest(0.0, None), Viewer(uid, False))


def test_a_user_reads_again_only_once_the_pace_allows_and_others_meanwhile(history):
    journal, clock = history
    assert len(asyncio.run(_ask(journal, 1000)).entries) == 1
    read_ended = clock.now
    with pytest.raises(RequestError) as refused:
        asyncio.run(_ask(journal, 1000))
    gap = READ_S * (1 / READ_SHARE - 1)  # 18 s after a 2 s read: 10 % of the time
    assert refused.value.code == "too_many" and f"ask again in {gap:.0f} s" in refused.value.message
    assert asyncio.run(_ask(journal, 1001)).entries  # another user is served meanwhile
    clock.now = read_ended + gap - 0.5
    with pytest.raises(RequestError):
        asyncio.run(_ask(journal, 1000))
    clock.now = read_ended + gap
    assert asyncio.run(_ask(journal, 1000)).entries


def test_root_is_not_paced(history):
    journal, _ = history
    for _ in range(3):
        assert asyncio.run(_ask(journal, 0)).entries


def test_a_users_second_request_while_the_first_is_answered_is_refused(history):
    journal, _ = history

    async def both():
        return await asyncio.gather(_ask(journal, 1000), _ask(journal, 1000), return_exceptions=True)

    first, second = asyncio.run(both())
    assert first.entries and isinstance(second, RequestError) and second.code == "too_many"
    assert "still being answered" in second.message


def test_the_client_says_when_to_ask_again_without_a_tasks_hint():
    from governor.cli.failures import EXIT_WOULD_WAIT, report
    from governor.errors import DaemonError

    text, status = report(DaemonError("too_many", "your history requests held the daemon over 10% of the time: "
                                      "ask again in 18 s", op="history"))
    assert status == EXIT_WOULD_WAIT and text.endswith("ask again in 18 s") and "tasks" not in text
