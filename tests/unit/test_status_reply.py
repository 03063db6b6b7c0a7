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


# The same values without floats: orjson spells a float such as 1e-05 as 0.00001 (the same
# number), and nothing else otherwise.
NO_FLOAT = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | TEXT,
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                        max_leaves=6)


@given(st.dictionaries(TEXT.filter(lambda k: k != "groups"), NO_FLOAT, max_size=3),
       st.dictionaries(TEXT, st.dictionaries(TEXT.filter(lambda k: k != "tasks"), NO_FLOAT, max_size=3).flatmap(
           lambda rest: st.lists(st.dictionaries(TEXT, NO_FLOAT, max_size=4), max_size=3).map(
               lambda t: {**rest, "tasks": t})), max_size=3))
def test_without_floats_the_line_is_what_ok_writes_byte_for_byte(rest, groups):
    status = {**rest, "groups": groups}  # integers beyond 64 bits and lone surrogates among them
    assert StatusReply(status, {}).encoded() == ok({"status": status})


@given(STATUS)
def test_the_line_decodes_to_the_same_types_and_order_as_what_ok_writes(status):
    # What `governor status --json` prints (json.dumps of the decoded reply) is then the same.
    assert json.dumps(json.loads(StatusReply(status, {}).encoded())) == json.dumps(json.loads(ok({"status": status})))


def test_an_entry_checked_for_a_status_is_kept_with_its_text_and_what_no_status_holds_is_dropped():
    checked = {}

    def held() -> dict:
        return {key: kept[0] for key, kept in checked.items()}

    same, changed = {"id": "1"}, {"id": "2"}
    first = {"tasks": [same, changed]}
    StatusReply({"groups": {"A": first}}, checked).encoded()
    assert held() == {id(first): first, id(same): same, id(changed): changed}
    encoded_once = checked[id(same)][1]
    again = {"id": "2", "usage": {"cpu": 0.5}}
    group = {"tasks": [same, again]}
    line = StatusReply({"groups": {"A": group}}, checked).encoded()
    assert held().items() >= {id(group): group, id(same): same, id(again): again}.items()
    assert checked[id(same)][1] is encoded_once  # an unchanged entry is not encoded again
    assert json.loads(line)["status"]["groups"]["A"]["tasks"] == [same, again]
    before = dict(checked)
    refused = {"id": "3", "usage": {"cpu": float("inf")}}
    with pytest.raises(ValueError):  # a new entry is looked at, beside those kept
        StatusReply({"groups": {"A": {"tasks": [same, refused]}}}, checked).encoded()
    assert checked == before  # a refused status keeps nothing
    for n in range(200):  # entries that come and go: those no status holds are dropped
        StatusReply({"groups": {"A": {"tasks": [same, {"id": str(n)}]}}}, checked).encoded()
    assert len(checked) <= 3 + 64 and checked[id(same)][1] is encoded_once


@pytest.mark.parametrize("status", [
    {"fair_level": float("nan"), "groups": {}},
    {"groups": {"A": {"usage": {"cpu": float("-inf")}, "tasks": []}}},
    {"groups": {"A": {"tasks": [{"demand": [1.0, (float("nan"),)]}]}}},
])
def test_nan_and_infinity_anywhere_are_refused_as_ok_refuses_them(status):
    with pytest.raises(ValueError):
        ok({"status": status})
    with pytest.raises(ValueError):
        StatusReply(status, {}).encoded()


def test_nan_is_refused_as_ok_refuses_it():
    with pytest.raises(ValueError):
        StatusReply({"groups": {"A": {"tasks": [{"usage": float("nan")}]}}}, {}).encoded()


@given(STATUS)
def test_without_orjson_the_line_is_what_ok_writes(status):
    # A host whose Python has no orjson wheel (the GPU check's image: CPython 3.12, offline).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("governor.wire.status.orjson", None)
        assert StatusReply(status, {}).encoded() == ok({"status": status})
