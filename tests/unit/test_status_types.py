"""The typed status (issue 45, point 4): one encoder and one decoder between the dataclasses of
governor/wire/status_types.py and the JSON the socket carries; a malformed status names its
field; the views in cli/ read attributes, not keys."""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from governor.wire import status_types
from governor.wire.status_json import MalformedStatus, decode, encode
from governor.wire.status_types import Status
from support.status_sample import STATUS, with_gpus

REPO = Path(__file__).resolve().parents[2]
TEXT = st.text(max_size=6)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
                    | TEXT, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(TEXT, inner, max_size=2),
                    max_leaves=4)
# A queue item's waits: the keys each admitted resource adds (governor.core.queue.queue_view).
WAITS = st.dictionaries(st.sampled_from(["waiting_for", "held_by", "gpus_waiting_for", "gpus_held_by"]), JSON,
                        max_size=4)


def values(hint) -> st.SearchStrategy:
    """Every value of type ``hint`` the daemon may send, numbers finite (JSON has no NaN), a
    float field an int or a float as JSON numbers are."""
    scalars = {str: TEXT, bool: st.booleans(), int: st.integers(-(2**63), 2**63 - 1), object: JSON,
               float: st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)}
    if hint in scalars:
        return scalars[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return st.none() | values(next(arg for arg in args if arg is not type(None)))
    if origin is tuple:
        return st.lists(values(args[0]), max_size=2).map(tuple)
    if origin in (Mapping, dict):
        return st.dictionaries(TEXT, values(args[1]), max_size=2)
    hints = typing.get_type_hints(hint)
    fields = {f.name: WAITS if f.metadata.get("spread") else values(hints[f.name]) for f in dataclasses.fields(hint)}
    return st.fixed_dictionaries(fields).map(lambda kw: hint(**kw))


@settings(max_examples=30, deadline=None)
@given(values(Status))
def test_a_status_decodes_to_itself_from_its_json_and_encodes_to_the_same_json(status):
    sent = json.loads(json.dumps(encode(status)))  # what crosses the socket
    assert decode(sent) == status
    assert encode(decode(sent)) == sent


def test_the_sample_status_round_trips_and_keys_left_out_take_their_defaults():
    status = decode(with_gpus(STATUS))
    assert status.groups["physics"].tasks[0].gpus == (0, 1) and status.groups["physics"].lambda_ == 0.8
    assert status.queue[0].waiting_for("") == 4 * 1024**3 and status.gpus[3].mig_parent == 3
    assert status.psi.available is None and status.events == () and status.caps == {}
    assert decode(encode(status)) == status
    assert decode({"groups": {}}) == Status()


def test_an_int_stays_an_int_and_optional_keys_are_written_only_when_present():
    sent = encode(decode(with_gpus(STATUS)))
    assert sent["capacity"]["cpu"] == 16 and type(sent["capacity"]["cpu"]) is int
    assert "mig_parent" in sent["gpus"][3] and "mig_parent" not in sent["gpus"][0]
    assert "accounts" not in sent["groups"]["physics"] and "private" not in sent["groups"]["physics"]["tasks"][0]
    assert sent["groups"]["physics"]["lambda"] == 0.8 and "lambda_" not in sent["groups"]["physics"]
    assert "gpus" not in encode(decode(STATUS))


def test_an_unchanged_task_or_group_entry_keeps_its_json_object_between_encodings():
    status, kept = decode(STATUS), {}
    first = encode(status, kept)
    again = encode(status, kept)
    assert again["groups"]["physics"] is first["groups"]["physics"]
    assert again["groups"]["physics"]["tasks"][0] is first["groups"]["physics"]["tasks"][0]
    tasks = [entry for group in status.groups.values() for entry in group.tasks]
    assert len(kept) == len(status.groups) + len(tasks) and len(tasks) == 3
    # A group that changed is encoded again; its unchanged task entries keep their JSON.
    physics = status.groups["physics"]
    changed = dataclasses.replace(status, groups={**status.groups, "physics": dataclasses.replace(physics, weight=3.0)})
    third = encode(changed, kept)
    assert third["groups"]["physics"] is not again["groups"]["physics"] and third["groups"]["physics"]["weight"] == 3.0
    assert third["groups"]["physics"]["tasks"][0] is first["groups"]["physics"]["tasks"][0]


@pytest.mark.parametrize("status, message", [
    ({"groups": {"A": {"weight": "heavy"}}}, "has a malformed status.groups.A.weight: must be a number, got a string"),
    ({"groups": {"A": {"tasks": [{"id": "7", "pid": 1.5}]}}},
     "has a malformed status.groups.A.tasks[0].pid: must be an integer, got a number"),
    ({"groups": {"A": {"tasks": [{"pid": 1}]}}}, "has no status.groups.A.tasks[0].id"),
    ({"groups": {"A": {"idle": 1}}}, "has a malformed status.groups.A.idle: must be true or false, got an integer"),
    ({"groups": []}, "has a malformed status.groups: must be an object, got an array"),
    ({"queue": [{"task": "t1", "command": "rm -rf /"}]},
     "has a malformed status.queue[0].command: must be an array, got a string"),
    ({"daemon": {"gpu_guard": {"guarded": [1]}}},
     "has a malformed status.daemon.gpu_guard.guarded[0]: must be a string, got an integer"),
    # Past 64 bits: a view's float() of 10**400 raised OverflowError; a 300-digit pid is no cell.
    ({"capacity": {"cpu": 10**400}}, "has a malformed status.capacity.cpu: must be a number of 64 bits at most, "
                                     "got a larger integer"),
    ({"daemon": {"pid": 2**63}}, "has a malformed status.daemon.pid: must be an integer of 64 bits at most, "
                                 "got a larger integer"),
])
def test_a_malformed_status_names_the_field(status, message):
    with pytest.raises(MalformedStatus) as error:
        decode(status)
    assert str(error.value) == message


def test_governor_status_says_which_field_a_daemon_sent_malformed(tmp_path):
    from click.testing import CliRunner

    from governor.cli.main import main
    from support.fake_socket import FakeSocket

    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "status": {"groups": {"A": {"weight": "heavy"}}}}])
    try:
        result = CliRunner().invoke(main, ["status", "--socket", server.path])
    finally:
        server.close()
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "the daemon's status reply has a malformed status.groups.A.weight: must be a number" in result.output


# The modules of cli/ that read the status; no key of the status is read as a string there.
STATUS_READERS = ("status.py", "status_view.py", "top.py", "top_batch.py", "top_state.py", "top_terminal.py",
                  "top_view.py", "view_common.py", "stall_view.py")


def _status_keys() -> set[str]:
    kinds = [kind for kind in vars(status_types).values() if dataclasses.is_dataclass(kind)]
    return {f.name.rstrip("_") for kind in kinds for f in dataclasses.fields(kind)}


def test_the_views_read_the_status_by_attribute_not_by_key():
    keys = _status_keys()
    found = [f"{name}: .get({key!r})" for name in STATUS_READERS
             for key in re.findall(r"""\.get\(["']([^"']+)["']""", (REPO / "cli" / name).read_text())
             if key in keys]
    assert found == []
