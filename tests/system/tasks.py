"""Snapshots of governed tasks for tests/system/run.sh (inside the systemd VM).

    governor status --json | tasks.py snap > before.json   # exit 1 if a limit is not in its file
    tasks.py alive before.json                             # how many of those tasks still run
    tasks.py same before.json after.json                   # exit 1 unless same ids, pids, limits

A snapshot maps each task id to its pid, its cgroup (from /proc/<pid>/cgroup, the kernel's
word, not the daemon's) and the values read back from the limit files the daemon reports.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")
PAGE = 4096


def _cgroup(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except FileNotFoundError:
        return None
    return next(line[3:] for line in text.splitlines() if line.startswith("0::"))


def _ours(pid: int) -> bool:
    """Whether ``pid`` is still one of the test's tasks, ``sleep 3600`` or the ``governor run``
    about to exec it (a reused pid would be neither)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        return command == b"sleep\x003600\x00" or command.endswith(b"\x00--\x00sleep\x003600\x00")
    except FileNotFoundError:
        return False


def _matches(file: str, written: str, read: str) -> bool:
    # The kernel keeps memory limits in pages: a byte count reads back rounded down to one.
    if file.startswith("memory.") and written.isdigit() and read.isdigit():
        return int(read) == int(written) // PAGE * PAGE
    return read == written


def snap(status: dict) -> tuple[dict, list[str]]:
    root = status["daemon"]["cgroup_root"]
    tasks, problems = {}, []
    for group, entry in status["groups"].items():
        for task in entry["tasks"]:
            cgroup = _cgroup(task["pid"])
            if cgroup is None or str(CGROUP_MOUNT) + cgroup != f"{root}/{group}/task-{task['id']}":
                problems.append(f"task {task['id']} (pid {task['pid']}): in cgroup {cgroup}, "
                                f"not {root}/{group}/task-{task['id']}")
                continue
            files = {}
            for file, written in task["limits"].items():
                read = (CGROUP_MOUNT / cgroup.lstrip("/") / file).read_text().strip()
                if not _matches(file, written, read):
                    problems.append(f"task {task['id']}: {file} reads {read!r}, status says {written!r}")
                files[file] = read
            tasks[task["id"]] = {"pid": task["pid"], "group": group, "cgroup": cgroup, "files": files}
    weights = {group: entry["weight"] for group, entry in status["groups"].items()}
    return {"tasks": tasks, "weights": weights}, problems


def same(before: dict, after: dict) -> list[str]:
    problems = []
    if set(before["tasks"]) != set(after["tasks"]):
        problems.append(f"task ids were {sorted(before['tasks'])}, now {sorted(after['tasks'])}")
    for task_id in set(before["tasks"]) & set(after["tasks"]):
        for key in ("pid", "cgroup", "files"):
            if before["tasks"][task_id][key] != after["tasks"][task_id][key]:
                problems.append(f"task {task_id}: {key} was {before['tasks'][task_id][key]}, "
                                f"now {after['tasks'][task_id][key]}")
    if before["weights"] != after["weights"]:
        problems.append(f"weights were {before['weights']}, now {after['weights']}")
    return problems


def main(argv: list[str]) -> int:
    command, *paths = argv
    load = [json.loads(Path(path).read_text()) for path in paths]
    if command == "snap":
        snapshot, problems = snap(json.load(sys.stdin))
        print(json.dumps(snapshot))
    elif command == "alive":
        print(sum(_ours(task["pid"]) for task in load[0]["tasks"].values()))
        problems = []
    elif command == "same":
        problems = same(*load)
    else:
        problems = [f"unknown command {command}"]
    for problem in problems:
        print(f"tasks.py {command}: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
