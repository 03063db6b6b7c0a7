"""Request parsing and reply encoding (governor/wire/protocol.py): every validation path."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.errors import RequestError
from governor.wire.protocol import (
    MAX_LINE_BYTES,
    LaunchRequest,
    ExplainRequest,
    PsRequest,
    ReloadRequest,
    SetWeightRequest,
    StatusRequest,
    StopRequest,
    WatchRequest,
    error,
    ok,
    parse_request,
)
from governor.wire.fields import default_name


def line(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def refused(raw: bytes) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse_request(raw)
    return info.value


def test_status_parses():
    assert parse_request(b'{"op": "status"}\n') == StatusRequest()
    assert parse_request(b'{"op": "status"}') == StatusRequest()  # the newline is optional


def test_the_operations_beyond_launch_parse():
    assert parse_request(line({"op": "watch"})) == WatchRequest(1.0)
    assert parse_request(line({"op": "watch", "interval": 0.5})) == WatchRequest(0.5)
    assert parse_request(line({"op": "explain"})) == ExplainRequest()
    assert parse_request(line({"op": "reload"})) == ReloadRequest()
    assert parse_request(line({"op": "set-weight", "group": "A", "weight": 2})) == SetWeightRequest("A", 2.0)
    assert parse_request(line({"op": "ps"})) == PsRequest(all=False, ended=False)
    assert parse_request(line({"op": "ps", "all": True, "ended": True})) == PsRequest(all=True, ended=True)
    assert parse_request(line({"op": "ps", "ended": True, "task": "7"})) == PsRequest(ended=True, task="7")
    assert parse_request(line({"op": "ps", "users": ["bob", "1002", "bob"], "groups": ["A"]})) == PsRequest(
        users=("bob", "1002"), groups=("A",))
    assert PsRequest.from_json(PsRequest(users=("bob",)).to_json()) == PsRequest(users=("bob",))
    assert parse_request(line({"op": "stop", "tasks": ["7", "8", "7"]})) == StopRequest(("7", "8"))


def test_a_launch_may_name_its_task_and_limit_its_time():
    request = parse_request(line({"op": "launch", "pid": 1, "name": "nightly build ☾", "time_limit": 5400}))
    assert (request.name, request.time_limit) == ("nightly build ☾", 5400.0)


@pytest.mark.parametrize(("command", "name"), [(("/usr/bin/make", "-j4"), "make"), ((), "task"),
                                               (("x" * 100,), "x" * 64), (("./a\tb",), "a?b")])
def test_a_task_without_a_name_is_named_after_its_command(command, name):
    assert default_name(command) == name


def test_minimal_launch_has_empty_defaults():
    assert parse_request(line({"op": "launch", "pid": 42})) == LaunchRequest(pid=42, group=None, demand={}, command=())


def test_full_launch():
    request = parse_request(line({
        "op": "launch", "pid": 4242, "group": "physics",
        "demand": {"cpu": 2, "memory": 4 << 30, "io_read": 0, "io_write": 100 << 20},
        "command": ["python", "train.py", "ünïcode"],
    }))
    assert request == LaunchRequest(pid=4242, group="physics",
                                    demand={"cpu": 2.0, "memory": 4 << 30, "io_read": 0, "io_write": 100 << 20},
                                    command=("python", "train.py", "ünïcode"))
    # cpu is normalised to float so the daemon sees one type; byte counts stay exact ints.
    assert type(request.demand["cpu"]) is float and type(request.demand["memory"]) is int


def test_launch_accepts_fractional_cpu_and_subset_of_demand():
    assert parse_request(line({"op": "launch", "pid": 1, "demand": {"cpu": 0.5}})).demand == {"cpu": 0.5}


@pytest.mark.parametrize("command", [["x"] * 64, ["x" * 4096]], ids=["64 items", "4096 characters"])
def test_launch_accepts_limits_of_command(command):
    assert parse_request(line({"op": "launch", "pid": 1, "command": command})).command == tuple(command)


# (request line, expected code, text the message must contain: the field, or the problem)
BAD = [
    (b"not json\n", "bad_request", "not JSON"),
    (b"\n", "bad_request", "not JSON"),
    (b'{"op": "status"\n', "bad_request", "not JSON"),
    (b'\xff\xfe{"op": "status"}\n', "bad_request", "UTF-8"),
    (b'{"op": "launch", "pid": 1, "demand": {"cpu": NaN}}\n', "bad_request", "NaN"),
    (b'{"op": "launch", "pid": 1, "demand": {"cpu": Infinity}}\n', "bad_request", "Infinity"),
    (b"[" * 100_000 + b"]" * 100_000, "too_large", "longer than"),
    (b"[" * 30_000 + b"]" * 30_000, "bad_request", "nested too deeply"),
    (line([{"op": "status"}]), "bad_request", "JSON object, got an array"),
    (line("status"), "bad_request", "JSON object, got a string"),
    (line(None), "bad_request", "JSON object, got null"),
    (line({}), "bad_request", "op: missing"),
    (line({"pid": 1}), "bad_request", "op: missing"),
    (line({"op": 1}), "bad_request", "op: must be a string"),
    (line({"op": None}), "bad_request", "op: must be a string"),
    (line({"op": "frobnicate"}), "unknown_op", "'frobnicate'"),
    (line({"op": "watch", "interval": 0.2}), "bad_request", "interval: must be between 0.5 and 60"),
    (line({"op": "watch", "interval": "1"}), "bad_request", "interval: must be a finite number"),
    (line({"op": "watch", "every": 1}), "bad_request", "every: unknown field"),
    (line({"op": "explain", "group": "A"}), "bad_request", "group: unknown field"),
    (line({"op": "reload", "file": "/etc/x"}), "bad_request", "file: unknown field"),
    (line({"op": "set-weight", "group": "A"}), "bad_request", "weight: missing"),
    (line({"op": "set-weight", "weight": 2}), "bad_request", "group: missing"),
    (line({"op": "set-weight", "group": "A", "weight": 0}), "bad_request", "weight: must be between 0.001 and 1000"),
    (line({"op": "set-weight", "group": "A", "weight": True}), "bad_request", "weight: must be a finite number"),
    (line({"op": "set-weight", "group": "", "weight": 1}), "bad_request",
     "group: must be a non-empty string, got an empty string"),  # it said "got a string"
    (line({"op": "STATUS"}), "unknown_op", "'STATUS'"),
    (line({"op": "status", "verbose": True}), "bad_request", "verbose: unknown field"),
    (line({"op": "launch"}), "bad_request", "pid: missing"),
    (line({"op": "launch", "pid": "1"}), "bad_request", "pid: must be an integer, got a string"),
    (line({"op": "launch", "pid": 1.0}), "bad_request", "pid: must be an integer, got a number"),
    (line({"op": "launch", "pid": True}), "bad_request", "pid: must be an integer, got a boolean"),
    (line({"op": "launch", "pid": 0}), "bad_request", "pid: must be between 1"),
    (line({"op": "launch", "pid": -5}), "bad_request", "pid: must be between 1"),
    (line({"op": "launch", "pid": 2**63}), "bad_request", "pid: must be between 1"),
    (line({"op": "launch", "pid": 1, "uid": 0}), "bad_request", "uid: unknown field"),
    (line({"op": "launch", "pid": 1, "group": 3}), "bad_request", "group: must be a non-empty string"),
    (line({"op": "launch", "pid": 1, "group": ""}), "bad_request", "group: must be a non-empty string"),
    (line({"op": "launch", "pid": 1, "group": ["a"]}), "bad_request", "group: must be a non-empty string"),
    (line({"op": "launch", "pid": 1, "demand": [1, 2]}), "bad_request", "demand: must be an object"),
    (line({"op": "launch", "pid": 1, "demand": None}), "bad_request", "demand: must be an object"),
    (line({"op": "launch", "pid": 1, "demand": {"tpu": 1}}), "bad_request", "demand.tpu: unknown field"),
    (line({"op": "launch", "pid": 1, "demand": {"cpu": "2"}}), "bad_request", "demand.cpu: must be a number"),
    (line({"op": "launch", "pid": 1, "demand": {"cpu": True}}), "bad_request", "demand.cpu: must be a number"),
    (line({"op": "launch", "pid": 1, "demand": {"cpu": -0.5}}), "bad_request", "demand.cpu: must be a finite number ≥ 0"),
    # 1e400 is valid JSON that Python reads as inf.
    (b'{"op": "launch", "pid": 1, "demand": {"cpu": 1e400}}', "bad_request", "demand.cpu: must be a finite"),
    (b'{"op": "launch", "pid": 1, "demand": {"cpu": 1' + b"0" * 400 + b'}}', "bad_request",
     "demand.cpu: must be a finite number ≥ 0, got a 401-digit number"),
    (line({"op": "launch", "pid": 1, "demand": {"memory": "4G"}}), "bad_request", "demand.memory: must be an integer"),
    (line({"op": "launch", "pid": 1, "demand": {"memory": 1.5}}), "bad_request", "demand.memory: must be an integer"),
    (line({"op": "launch", "pid": 1, "demand": {"memory": -1}}), "bad_request", "demand.memory: must be between 0"),
    (line({"op": "launch", "pid": 1, "demand": {"io_read": False}}), "bad_request", "demand.io_read: must be an integer"),
    (line({"op": "launch", "pid": 1, "demand": {"io_write": 2**64}}), "bad_request", "demand.io_write: must be between 0"),
    (line({"op": "launch", "pid": 1, "command": "ls -l"}), "bad_request", "command: must be a list"),
    (line({"op": "launch", "pid": 1, "command": ["ls", 1]}), "bad_request", "command[1]: must be a string"),
    (line({"op": "launch", "pid": 1, "command": ["ls", None]}), "bad_request", "command[1]: must be a string, got null"),
    (line({"op": "launch", "pid": 1, "command": ["x"] * 65}), "bad_request", "command: at most 64 items"),
    (line({"op": "launch", "pid": 1, "command": ["ok", "x" * 4097]}), "bad_request", "command[1]: at most 4096"),
    (line({"op": "launch", "pid": 1, "name": ""}), "bad_request", "name: must not be empty"),
    (line({"op": "launch", "pid": 1, "name": "x" * 65}), "bad_request", "name: at most 64 characters"),
    (line({"op": "launch", "pid": 1, "name": "a\nb"}), "bad_request", "name: must be printable"),
    (line({"op": "launch", "pid": 1, "name": 7}), "bad_request", "name: must be a string or null"),
    (line({"op": "launch", "pid": 1, "time_limit": 0}), "bad_request", "time_limit: must be a number of seconds above 0"),
    (line({"op": "launch", "pid": 1, "time_limit": 1e300}), "bad_request", "at most 315,360,000 (ten years), got 1e+300"),
    (line({"op": "launch", "pid": 1, "demand": {"memory": 10**300}}), "bad_request",
     "demand.memory: must be between 0 and 2^63-1, got a 301-digit number"),
    (line({"op": "launch", "pid": 1, "time_limit": "1h"}), "bad_request", "time_limit: must be a finite number"),
    (b'{"op": "launch", "pid": 1, "time_limit": 1e400}', "bad_request", "time_limit: must be a finite number"),
    (line({"op": "ps", "all": "yes"}), "bad_request", "all: must be true or false"),
    (line({"op": "ps", "user": "bob"}), "bad_request", "user: unknown field"),
    (line({"op": "ps", "task": 7}), "bad_request", "task: must be a task id"),
    (line({"op": "ps", "users": "bob"}), "bad_request", "users: must be a list of at most 64 names"),
    (line({"op": "ps", "groups": ["A", ""]}), "bad_request", "groups[1]: must be a name of 1 to 64 characters"),
    (b'{"op": "launch", "pid": 1, "time_limit": 1' + b"0" * 400 + b'}', "bad_request", "time_limit: must be a finite"),
    (line({"op": "stop"}), "bad_request", "tasks: missing field"),
    (line({"op": "stop", "tasks": []}), "bad_request", "tasks: must be a list of 1 to 64 task ids"),
    (line({"op": "stop", "tasks": ["9" * 300]}), "bad_request", "tasks[0]: must be a task id (a non-empty string of at "
                                                              "most 64 characters), got a string of 300 characters"),
    (line({"op": "stop", "tasks": "7"}), "bad_request", "tasks: must be a list"),
    (line({"op": "stop", "tasks": ["7", 8]}), "bad_request", "tasks[1]: must be a task id"),
    (line({"op": "stop", "tasks": ["7"] * 65}), "bad_request", "tasks: must be a list of 1 to 64"),
]


@pytest.mark.parametrize(("raw", "code", "text"), BAD, ids=[f"{code}:{text}" for _, code, text in BAD])
def test_bad_requests(raw, code, text):
    problem = refused(raw)
    assert problem.code == code
    assert text in problem.message
    assert str(problem) == problem.message


def test_line_of_exactly_the_limit_is_not_too_large():
    padding = MAX_LINE_BYTES - len(b'{"op": "status", "x": ""}')
    raw = b'{"op": "status", "x": "' + b"a" * padding + b'"}'
    assert len(raw) == MAX_LINE_BYTES
    assert refused(raw + b"\n").code == "bad_request"  # judged on content: the unknown field x
    assert refused(raw + b" \n").code == "too_large"


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_the_parser(raw):
    try:
        parse_request(raw)
    except RequestError as problem:
        assert problem.code in {"bad_request", "unknown_op"}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(st.fixed_dictionaries({"op": st.sampled_from(["launch", "status"])},
                             optional={"pid": JSON, "group": JSON, "demand": JSON, "command": JSON, "x": JSON}))
def test_arbitrary_fields_are_accepted_or_refused_as_bad_request(message):
    try:
        request = parse_request(line(message))
    except RequestError as problem:
        assert problem.code == "bad_request"
        # The message starts with the field it is about (pid may be the one that is missing).
        assert problem.message.split(":")[0].split(".")[0].split("[")[0] in {*message, "pid"}
    else:
        assert isinstance(request, (LaunchRequest, StatusRequest))


def test_ok_encodes_one_line_with_ok_first():
    reply = ok({"task": "t1", "limits": {"cpu.max": "100000 100000"}, "name": "ü"})
    assert reply.endswith(b"\n") and reply.count(b"\n") == 1
    assert json.loads(reply) == {"ok": True, "task": "t1", "limits": {"cpu.max": "100000 100000"}, "name": "ü"}
    assert reply.startswith(b'{"ok":true,')


def test_ok_refuses_what_json_cannot_carry():
    with pytest.raises(ValueError):
        ok({"ok": False})
    with pytest.raises(ValueError):
        ok({"share": float("nan")})
    with pytest.raises(TypeError):
        ok({"when": object()})


def test_error_encodes_code_and_message():
    reply = error("forbidden", "uid 1000 may not launch into group physics")
    assert reply.endswith(b"\n") and reply.count(b"\n") == 1
    assert json.loads(reply) == {"ok": False, "error": {"code": "forbidden",
                                                        "message": "uid 1000 may not launch into group physics"}}


def test_error_refuses_unknown_codes():
    with pytest.raises(ValueError, match="oops"):
        error("oops", "x")


def test_a_lone_surrogate_in_a_command_or_a_key_becomes_a_replacement_character():
    # `governor run -- sh -c 'sleep 25' $'\xff'` sends "\udcff": once in a task's command it
    # must not break the status every user reads.
    request = parse_request(b'{"op": "launch", "pid": 5, "command": ["sh", "a\\udcffb"]}')
    assert request.command == ("sh", "a\ufffdb")
    assert ok({"status": {"command": list(request.command)}}).decode() == \
        '{"ok":true,"status":{"command":["sh","a\ufffdb"]}}\n'
    with pytest.raises(RequestError) as caught:
        parse_request(b'{"op": "status", "\\udcff": 1}')
    assert caught.value.message.startswith("\ufffd: unknown field")
    assert error(caught.value.code, caught.value.message).endswith(b"\n")
    assert ok({"name": "a\udcffb"}) == '{"ok":true,"name":"a\ufffdb"}\n'.encode()  # read with surrogateescape


def test_an_integer_too_long_to_convert_is_a_bad_request():
    with pytest.raises(RequestError) as caught:
        parse_request(b'{"op": "launch", "pid": ' + b"9" * 5000 + b"}")
    assert caught.value.code == "bad_request" and "more than 4,300 digits" in caught.value.message
    assert "set_int_max_str_digits" not in caught.value.message  # Python's advice, not the client's business


@pytest.mark.parametrize("weight", [1e307, 0.0001])
def test_a_weight_outside_its_range_is_refused_where_it_enters(weight):
    assert "between 0.001 and 1000" in refused(line({"op": "set-weight", "group": "A", "weight": weight})).message
