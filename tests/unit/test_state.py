"""Task records: written atomically, trusted only from the daemon's own directory, and a bad
record set aside with a reason instead of stopping the daemon (issue 12, point 6)."""

import json
import os
from pathlib import Path

import pytest

from governor.errors import GovernorError
from governor.core.state import Task
from governor.host.task_store import MAX_RECORD_BYTES, TaskStore
from governor.core.task_record import record_of

TASK = Task("1", "A", 100, 1000, "alice", ("sleep", "9"), {"cpu": 0.5, "memory": 1024.0}, 1.5)


def store_at(directory: Path) -> TaskStore:
    store = TaskStore(directory)
    store.prepare()
    return store


def test_a_record_written_is_read_back_and_temporary_files_of_a_killed_daemon_are_removed(tmp_path):
    store = store_at(tmp_path / "state")
    store.save(TASK)
    (tmp_path / "state" / ".2.abc.tmp").write_text("")
    again = store_at(tmp_path / "state")
    assert again.load_all() == ([TASK], [])
    assert again.new_id() == "2" and not list((tmp_path / "state").glob(".*.tmp"))


@pytest.mark.parametrize("make", ["symlink", "writable"])
def test_a_state_directory_that_others_could_write_is_refused(tmp_path, make):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    state = tmp_path / "state"
    if make == "symlink":
        state.symlink_to(real)
    else:
        state.mkdir()
        state.chmod(0o777)
    with pytest.raises(GovernorError, match="could be forged") as caught:
        TaskStore(state).prepare()
    assert ("symbolic link" if make == "symlink" else "writable by others") in str(caught.value)


@pytest.mark.parametrize(("name", "content", "reason"), [
    ("2.json", b"{not json", "not JSON"),
    ("3.json", {"group": "../../x"}, "field group"),
    ("4.json", {"group": ""}, "field group"),
    ("5.json", {"pid": 0}, "field pid"),
    ("6.json", {"demand": {"cpu": float("nan")}}, "field demand"),
    ("7.json", {"id": "1"}, "field id"),
    ("8.json", "/dev/zero", "symbolic link"),
    ("9.json", b" " * (MAX_RECORD_BYTES + 1), "larger than"),
    ("login-1001.json", {}, "field id"),  # a login session's id must name its own uid (1000)
    ("session-7.json", {}, "field id"),
    ("10.json", {"time_limit": 0}, "field time_limit"),
    ("11.json", {"name": 3}, "field name"),
    ("12.json", {"owner": "x"}, "not a task record"),
])
def test_a_bad_record_is_set_aside_with_its_reason_and_the_others_still_load(tmp_path, name, content, reason):
    store = store_at(tmp_path / "state")
    store.save(TASK)
    path = tmp_path / "state" / name
    if isinstance(content, dict):
        record = {**record_of(TASK), "command": list(TASK.command), "id": path.stem, **content}
        path.write_text(json.dumps(record))
    elif isinstance(content, str):
        path.symlink_to(content)
    else:
        path.write_bytes(content)
    tasks, problems = store.load_all()
    assert tasks == [TASK]
    [problem] = problems
    assert f"{path} set aside as {name}.bad" in problem and reason in problem, problem
    assert not path.exists() and os.path.lexists(f"{path}.bad")
    assert store.load_all() == ([TASK], [])  # it does not come back


def test_sessions_and_login_sessions_are_kept_under_their_users_ids(tmp_path):
    store = store_at(tmp_path / "state")
    kept = [Task(f"{kind}-1000", "A", 100, 1000, "alice", (), {"cpu": 1.0}, 1.5) for kind in ("login", "session")]
    for task in kept:
        store.save(task)
    tasks, problems = store_at(tmp_path / "state").load_all()
    assert (sorted(t.id for t in tasks), problems) == (["login-1000", "session-1000"], [])
    assert [t.cgroup for t in sorted(tasks, key=lambda t: t.id)] == ["user.slice/user-1000.slice", "A/session-1000"]


def test_a_name_and_time_limit_are_kept_and_a_record_written_before_them_still_loads(tmp_path):
    store = store_at(tmp_path / "state")
    named = Task("2", "A", 200, 1000, "alice", ("make",), {"cpu": 1.0}, 1.5, "nightly", 5400.0)
    store.save(named)
    older = {key: value for key, value in record_of(TASK).items() if key not in ("name", "time_limit")}
    (tmp_path / "state" / "1.json").write_text(json.dumps({**older, "command": list(TASK.command)}))
    assert store.load_all() == ([TASK, named], [])


def test_a_record_that_cannot_be_written_leaves_no_partial_file_and_utf8_is_kept_as_utf8(tmp_path, monkeypatch):
    import errno

    from governor.errors import GovernorError
    from governor.core.state import Task
    from governor.host.task_store import TaskStore

    store = TaskStore(tmp_path / "state")
    store.prepare()
    task = Task("1", "A", 100, 0, "root", ("é" * 1000,), {"cpu": 1.0}, 0.0)
    store.save(task)
    data = (tmp_path / "state" / "1.json").read_bytes()
    assert "é".encode() * 1000 in data and len(data) < 2 * 1000 + 400  # not \\u00e9: 6 bytes each
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("governor.host.state_files.os.replace", full)
    with pytest.raises(GovernorError, match="No space left"):
        store.save(Task("2", "A", 101, 0, "root", ("x",), {"cpu": 1.0}, 0.0))
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["1.json"]


def test_task_ids_continue_after_a_restart_with_no_task_left(tmp_path):
    # Issue 33, point 4: once every task had ended, a restarted daemon numbered from 1 again.
    store = store_at(tmp_path / "state")
    assert [store.new_id() for _ in range(3)] == ["1", "2", "3"]  # every record deleted: none was saved
    assert store_at(tmp_path / "state").new_id() == "4"


@pytest.mark.parametrize("content, reason", [(b"twelve\n", "not a task id: 'twelve'"), (b"", "not a task id: ''")])
def test_a_task_id_file_that_is_not_a_number_stops_the_daemon_naming_it(tmp_path, content, reason):
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "next-id").write_bytes(content)
    with pytest.raises(GovernorError, match=rf"task id file {tmp_path}/state/next-id: {reason}; .* remove it"):
        store_at(tmp_path / "state")


def test_a_task_id_file_that_others_could_write_is_not_trusted(tmp_path):
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "next-id").write_text("99\n")
    (tmp_path / "state" / "next-id").chmod(0o666)
    with pytest.raises(GovernorError, match="next-id: it is writable by others"):
        store_at(tmp_path / "state")


def test_task_ids_written_in_place_continue_exactly_after_a_killed_daemon(tmp_path):
    # Issue 37, point 2: after the first id the file is overwritten in place, not replaced; the
    # numbers grow a digit on the way (9 → 10 → 100), and a daemon killed between ids leaves
    # exactly the next one.
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "next-id").write_text("8\n")
    store = store_at(tmp_path / "state")
    assert [store.new_id() for _ in range(3)] == ["8", "9", "10"]
    inode = os.stat(tmp_path / "state" / "next-id").st_ino
    assert [store.new_id() for _ in range(89)][-1] == "99"
    assert os.stat(tmp_path / "state" / "next-id").st_ino == inode  # no replacement per id
    assert (tmp_path / "state" / "next-id").read_text() == "100\n"
    again = store_at(tmp_path / "state")  # the first daemon killed
    assert [again.new_id(), again.new_id()] == ["100", "101"]
    (tmp_path / "state" / "next-id").unlink()  # removed while a daemon runs: written whole again
    assert again.new_id() == "102" and (tmp_path / "state" / "next-id").read_text() == "103\n"
    assert store_at(tmp_path / "state").new_id() == "103"


def test_task_ids_continue_after_a_record_set_aside_when_next_id_is_lost(tmp_path):
    # Issue 43, point 5: next-id removed, as the refusal of a garbage one advises; the ended
    # records and the task cgroups are counted by the daemon (test_daemon_records.py).
    store = store_at(tmp_path / "state")
    store.save(Task("3", "A", 100, 0, "root", ("x",), {"cpu": 1.0}, 0.0))
    (tmp_path / "state" / "12.json.bad").write_text("{garbage")
    (tmp_path / "state" / "next-id").unlink(missing_ok=True)
    again = store_at(tmp_path / "state")
    assert again.new_id() == "13"
    again.skip_past(40)
    assert again.new_id() == "41"
