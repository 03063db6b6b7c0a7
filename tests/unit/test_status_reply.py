"""The status reply line, joined from parts encoded apart, says what ``protocol.ok`` says."""

import json

import pytest
from hypothesis import given, strategies as st

from governor.wire.protocol import ok
from governor.wire.status import StatusReply

# Any text, lone surrogates (which ``characters()`` leaves out) and quotes among it.
TEXT = st.text(st.characters() | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, blacklist_categories=()),
               max_size=8)
VALUES = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                      max_leaves=6)
GROUP = st.dictionaries(TEXT.filter(lambda k: k != "tasks"), VALUES, max_size=3).flatmap(
    lambda rest: st.lists(st.dictionaries(TEXT, VALUES, max_size=4), max_size=3).map(lambda t: {**rest, "tasks": t}))
STATUS = st.dictionaries(TEXT.filter(lambda k: k != "groups"), VALUES, max_size=3).flatmap(
    lambda rest: st.dictionaries(TEXT, GROUP, max_size=3).map(lambda g: {**rest, "groups": g}))


@given(STATUS, st.data())
def test_the_joined_line_decodes_to_what_ok_encodes_with_entries_kept_or_not(status, data):
    kept = {}
    for _ in range(2):  # the second time, the entries drawn again are reused from the first
        line = StatusReply(status, kept).encoded()
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert json.loads(line) == json.loads(ok({"status": status}))
        status = {**status, "groups": {name: {**group, "tasks": data.draw(st.lists(
            st.sampled_from(group["tasks"]) | st.dictionaries(TEXT, VALUES, max_size=2), max_size=3))
            if group["tasks"] else []} for name, group in status["groups"].items()}}


def test_a_task_entry_kept_from_the_last_status_is_not_encoded_again():
    kept = {}
    same, changed = {"id": "1"}, {"id": "2"}
    StatusReply({"groups": {"A": {"tasks": [same, changed]}}}, kept).encoded()
    text = kept[id(same)][1]
    again = {"id": "2", "usage": {"cpu": 0.5}}
    line = StatusReply({"groups": {"A": {"tasks": [same, again]}}}, kept).encoded()
    assert kept[id(same)][1] is text and id(changed) not in kept  # what left the status is dropped
    assert json.loads(line)["status"]["groups"]["A"]["tasks"] == [same, again]


def test_nan_is_refused_as_ok_refuses_it():
    with pytest.raises(ValueError):
        StatusReply({"groups": {"A": {"tasks": [{"usage": float("nan")}]}}}, {}).encoded()
