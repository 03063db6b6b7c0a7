"""A fork bomb stops at its cap (issue 42): in a task (``governor run --pids``) and in a session
(``[sessions] pids``), forked inside it or outside while the daemon lags; every cgroup governor
makes has a ``pids.max``, and root and another task still fork. Shared by the v1 (native) and
v2 (VM) modules through kernel_cases.

The bomb is small and bounded: a shell starting at most :data:`BOMB_FORKS` sleeps against a cap
of :data:`CAP`, ended by the test whatever happens."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from daemon_harness import GOVERNOR, Governor
from scenarios import GROUPS, SCALE
from session_scenarios import SessionUsers, processes_of, wait_for

from governor.errors import CgroupReadError
from governor.cgroups.files import read_file
from governor.cgroups.v2 import CgroupV2Driver
from governor.cli.client import call
from governor.wire.request_types import PsRequest

CAP = 20
BOMB_FORKS = 60
# At most BOMB_FORKS sleeps, each forked as fast as the shell can: a fork past the cap fails
# with EAGAIN (dash then stops: "Cannot fork"; bash retries a few times, then stops).
BOMB = f"i=0; while [ $i -lt {BOMB_FORKS} ]; do sleep 300 & i=$((i+1)); done; wait"


def _pids_root(gov: Governor) -> Path:
    """Governor's root in the hierarchy that holds ``pids.max``."""
    driver = gov.driver
    return Path(driver.root) if isinstance(driver, CgroupV2Driver) else Path(driver.roots["pids"])


def _pids_file(gov: Governor, rel: str, file: str) -> str:
    return read_file(_pids_root(gov) / rel, file).strip()


def _refused(gov: Governor, rel: str) -> int:
    events = dict(line.split() for line in _pids_file(gov, rel, "pids.events").splitlines())
    return int(events.get("max", 0))


def _unlimited(gov: Governor) -> list[str]:
    """Every cgroup below governor's root (the root too) whose ``pids.max`` is ``max``; one the
    daemon removes during the walk (a group whose last task ended) is left out, not failed on."""
    root = _pids_root(gov)
    found = []
    for directory, _, _ in os.walk(root):
        try:
            limit = read_file(Path(directory), "pids.max").strip()
        except CgroupReadError as e:
            if e.vanished and not os.path.isdir(directory):
                continue
            raise
        if limit == "max":
            found.append(str(Path(directory).relative_to(root)))
    return found


def _can_fork_in_a_task(gov: Governor, group: str) -> None:
    subprocess.run([GOVERNOR, "run", "--socket", gov.socket, "--group", group, f"--cpus={0.2 * SCALE}",
                    "--memory=32M", "--", "sh", "-c", "true & wait"], check=True, timeout=120, capture_output=True)


def task_fork_bomb_stops_at_its_cap(tmp_path) -> None:
    """A task declaring ``--pids 20`` runs a shell forking up to 60 sleeps: the kernel holds it
    at 20, its end says how many forks were refused, every cgroup has a pids.max, and root
    and another task still fork."""
    gov = Governor(tmp_path, f'[capacity]\ncpu = {1.0 * SCALE}\nmemory = "1G"\nreserve = {{ pids = 1024 }}\n'
                             f'{GROUPS}')
    bomb = None
    try:
        bomb = gov.run("A", ["sh", "-c", BOMB], cpus=0.3 * SCALE, memory="64M", pids=CAP, may_end=True)
        [task] = gov.status()["groups"]["A"]["tasks"]
        rel = f"A/task-{task['id']}"
        assert _pids_file(gov, rel, "pids.max") == str(CAP)
        gov.wait(lambda: _refused(gov, rel) > 0, "a fork refused at the task's cap")
        held = int(_pids_file(gov, rel, "pids.current"))
        print(f"\nfork bomb under pids.max {CAP}: {held} held, {_refused(gov, rel)} forks refused")
        assert held <= CAP
        assert task["demand"]["pids"] == CAP
        gov.wait(lambda: gov.status()["groups"]["A"]["tasks"][0]["usage"].get("pids", 0) >= 1, "pids in use shown")
        subprocess.run(["sh", "-c", "true & wait"], check=True, timeout=60)  # root forks
        _can_fork_in_a_task(gov, "B")  # so does another task
        unlimited = _unlimited(gov)
        assert not unlimited, f"cgroups without a pids.max: {unlimited}"
        assert _pids_file(gov, "", "pids.max") != "max"

        subprocess.run([GOVERNOR, "stop", "--socket", gov.socket, str(task["id"])], check=True, timeout=60)
        gov.wait(lambda: _ended(gov, task["id"]) is not None, "the bomb's ended record")
        record = _ended(gov, task["id"])
        print(f"ended: {record['reason']}, forks refused {record['forks_refused']}")
        assert record["forks_refused"] >= 1
    finally:
        if bomb is not None and bomb.poll() is None:
            bomb.kill()
        gov.close()  # kills whatever the bomb left in its cgroup


def _ended(gov: Governor, task: str) -> dict | None:
    ended = call(gov.socket, PsRequest(ended=True), timeout=20).ended or []
    return next((r for r in ended if str(r.get("id")) == str(task)), None)


def session_fork_bomb_stops_at_its_cap(tmp_path) -> None:
    """alice's session (``[sessions] pids = 20``) runs the same bomb once it is in her session:
    the kernel holds the session at 20 and refuses the rest; root still forks."""
    users = SessionUsers()
    gov = Governor(tmp_path, f'[capacity]\ncpu = {1.0 * SCALE}\nmemory = "1G"\n[groups.A]\nusers = ["gov-alice"]\n'
                             f'[sessions]\ncpu = {0.3 * SCALE}\nmemory = "128M"\npids = {CAP}\n')
    alice = users.uid["gov-alice"]
    # It starts outside her session (runuser) and forks only once the daemon moved it in: a
    # move is never refused by pids.max (the kernel checks forks only).
    waits = "until grep -q session- /proc/self/cgroup; do sleep 0.1; done; "
    try:
        subprocess.Popen(["runuser", "-u", "gov-alice", "--", "sh", "-c", waits + BOMB],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rel = f"A/session-{alice}"
        # pids.events, not the directory: a cgroup is made before its controllers are enabled.
        gov.wait(lambda: (_pids_root(gov) / rel / "pids.events").exists() and _refused(gov, rel) > 0,
                 "a fork refused at the session's cap")
        held = int(_pids_file(gov, rel, "pids.current"))
        print(f"\nsession fork bomb under pids.max {CAP}: {held} held, {_refused(gov, rel)} forks refused")
        assert _pids_file(gov, rel, "pids.max") == str(CAP)
        assert held <= CAP
        subprocess.run(["sh", "-c", "true & wait"], check=True, timeout=60)  # root forks
        unlimited = _unlimited(gov)
        assert not unlimited, f"cgroups without a pids.max: {unlimited}"
    finally:
        users.kill_all()
        gov.close()
        users.remove()


def _outside(gov: Governor, rel: str, pids: list[int]) -> list[int]:
    """Those of ``pids`` not in governor's cgroup ``rel`` (gone ones left out)."""
    where = f"{gov.root_name}/{rel}\n"
    found = []
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        if where not in lines:
            found.append(pid)
    return found


def session_fork_bomb_started_outside_stops_at_its_cap(tmp_path) -> None:
    """A bomb that forks outside alice's session while the daemon lags (held stopped here: the
    worst a loaded host does) is held at the session's cap once the daemon runs again: what
    was started after the session's first process is ended rather than moved in, and said so;
    her first process stays. A move is no fork: before, all of them were moved in, past it."""
    users = SessionUsers()
    gov = Governor(tmp_path, f'[capacity]\ncpu = {1.0 * SCALE}\nmemory = "1G"\n[groups.A]\nusers = ["gov-alice"]\n'
                             f'[sessions]\ncpu = {0.3 * SCALE}\nmemory = "128M"\npids = {CAP}\n')
    alice = users.uid["gov-alice"]
    rel = f"A/session-{alice}"
    try:
        subprocess.Popen(["runuser", "-u", "gov-alice", "--", "sleep", "600"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        wait_for(lambda: processes_of(alice) and not _outside(gov, rel, processes_of(alice)), "alice's session")
        [first] = processes_of(alice)
        gov.daemon.send_signal(signal.SIGSTOP)
        try:
            subprocess.Popen(["runuser", "-u", "gov-alice", "--", "sh", "-c", BOMB],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for(lambda: len(processes_of(alice)) >= BOMB_FORKS + 2, "the bomb's sleeps, all outside")
        finally:
            gov.daemon.send_signal(signal.SIGCONT)
        wait_for(lambda: not _outside(gov, rel, processes_of(alice)), "every process of alice in her session or ended",
                 timeout=120)
        held, kept = int(_pids_file(gov, rel, "pids.current")), processes_of(alice)
        ended = [e["message"] for e in gov.status()["events"] if e["kind"] == "session_pids_ended"]
        print(f"\nbomb forked outside, session pids.max {CAP}: {held} held, {len(kept)} of alice's left; {ended}")
        assert held <= CAP and len(kept) <= CAP and first in kept
        gov.wait(lambda: any("were ended" in e["message"] for e in gov.status()["events"]
                             if e["kind"] == "session_pids_ended"), "the count of processes ended")
    finally:
        users.kill_all()
        gov.close()
        users.remove()
