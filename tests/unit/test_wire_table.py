"""The table of operations (governor/wire/protocol.py OPERATIONS): every operation's request and
reply survive to_json → the JSON on the socket → from_json, and the daemon's server serves
every operation of the table and no other."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.config import resources
from governor.config.units import MAX_TIME_LIMIT_S
from governor.wire.protocol import OPERATIONS, parse_request, request_line
from governor.wire.server import ControlServer
from governor.wire.status_json import MalformedStatus, decode
from governor.wire.fields import MAX_INT, MAX_NAME_CHARS, name_problem
from governor.wire.reply_types import (ExplainReply, HistoryReply, PsReply, Queued, ReloadReply, SetWeightReply, Started, StatusReply,
                                   StopReply)
from governor.wire.request_types import (ExplainRequest, HistoryRequest, LaunchRequest, PsRequest, ReloadRequest, SetWeightRequest,
                                    StatusRequest, StopRequest, WatchRequest)

# Text as a request carries it: a lone surrogate is not UTF-8, the daemon shows it as U+FFFD.
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
NAMES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=MAX_NAME_CHARS)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-MAX_INT, MAX_INT) | st.floats(allow_nan=False,
                    allow_infinity=False) | TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=10)
OBJECTS = st.dictionaries(TEXT, JSON, max_size=4)


def _decodes(status: dict) -> bool:
    try:
        decode(status)
    except MalformedStatus:
        return False
    return True


# What a status reply carries: any object the status decoder takes (hypothesis draws the field
# names from the code: {"reserved": None} failed CI once). One it refuses is refused by the
# reply's from_json, naming the field: tests/unit/test_status_types.py.
STATUSES = OBJECTS.filter(_decodes)


def _demand():
    amounts = {entry.wire: st.integers(0, MAX_INT) if entry.whole else st.floats(0, 1e6)
               for entry in resources.RESOURCES}
    return st.fixed_dictionaries({}, optional=amounts)


REQUESTS = {
    "launch": st.builds(LaunchRequest, pid=st.integers(1, MAX_INT), group=st.none() | NAMES, demand=_demand(),
                        command=st.lists(TEXT, max_size=64).map(tuple), wait=st.booleans(),
                        name=st.none() | NAMES.filter(lambda name: name_problem(name) is None),
                        time_limit=st.none() | st.floats(1e-3, MAX_TIME_LIMIT_S)),
    "status": st.just(StatusRequest()),
    "watch": st.builds(WatchRequest, st.floats(0.5, 60.0)),
    "explain": st.just(ExplainRequest()),
    "ps": st.builds(PsRequest, st.booleans(), st.booleans(), st.none() | NAMES),
    "stop": st.builds(StopRequest, st.lists(NAMES, min_size=1, max_size=64, unique=True).map(tuple)),
    "reload": st.just(ReloadRequest()),
    "set-weight": st.builds(SetWeightRequest, NAMES, st.floats(0.001, 1000.0)),
    "history": st.builds(HistoryRequest, st.none() | st.floats(0, 4e9), st.none() | st.floats(0, 4e9)),
}
REPLIES = {
    "launch": st.builds(Queued, OBJECTS) | st.builds(Started, TEXT, TEXT, TEXT, OBJECTS,
                                                      st.none() | st.lists(TEXT).map(tuple), st.booleans()),
    "status": st.builds(StatusReply, STATUSES),
    "watch": st.builds(StatusReply, STATUSES),
    "explain": st.builds(ExplainReply, OBJECTS),
    "ps": st.builds(PsReply, tasks=st.lists(OBJECTS, max_size=3)) | st.builds(PsReply, ended=st.lists(OBJECTS,
                                                                                                      max_size=3)),
    "stop": st.builds(StopReply, st.lists(NAMES, max_size=5).map(tuple)),
    "reload": st.builds(ReloadReply, TEXT),
    "set-weight": st.builds(SetWeightReply, NAMES, st.floats(0.001, 1000.0)),
    "history": st.builds(HistoryReply, st.lists(OBJECTS, max_size=3), st.booleans(), st.integers(0, 10**9)),
}


def test_every_operation_of_the_table_has_its_strategies_here():
    assert set(REQUESTS) == set(REPLIES) == set(OPERATIONS)


@given(st.sampled_from(sorted(OPERATIONS)).flatmap(lambda op: st.tuples(st.just(op), REQUESTS[op], REPLIES[op])))
def test_every_request_and_reply_survives_the_wire(case):
    op, request, reply = case
    operation = OPERATIONS[op]
    assert request.op == op and operation.request is type(request)
    assert parse_request(request_line(request)) == request
    assert operation.reply.from_json(json.loads(json.dumps(reply.to_json()))) == reply


@pytest.mark.parametrize("handlers", [
    {name: None for name in OPERATIONS if name != "stop"},
    {**{name: None for name in OPERATIONS}, "frobnicate": None},
], ids=["an operation without handler", "a handler without operation"])
def test_the_server_wants_one_handler_per_operation(tmp_path, handlers):
    with pytest.raises(ValueError, match="handlers for"):
        ControlServer(handlers, str(tmp_path / "g.sock"))


@pytest.mark.parametrize("skipped", [True, 1.0, float("nan"), -1, None, "3", 2**63])
def test_a_history_reply_with_a_skipped_count_that_is_no_count_is_refused(skipped):
    # (a hostile or broken daemon: the client says the reply is malformed, never a traceback)
    with pytest.raises(ValueError):
        HistoryReply.from_json({"entries": [], "skipped": skipped})
    assert HistoryReply.from_json({"entries": []}).skipped == 0  # an older daemon's
