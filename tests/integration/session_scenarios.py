"""Sessions on the real kernel (issue 9): processes a governed user starts without
``governor run`` are governed, whichever way they start, and share the host by DRF with tasks.
Shared by the v1 (native) and v2 (VM) modules through kernel_cases."""

from __future__ import annotations

import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from daemon_harness import BUSY, GOVERNOR, Governor
from scenarios import CONTENTION_TOLERANCE, SCALE, measure
from support.waits import wait_until

USERS = ("gov-alice", "gov-bob")
# Each way a process of alice may start outside governor (issue 9, point 2), as root runs it.
ESCAPES = {
    "runuser": ["runuser", "-u", "gov-alice", "--", "sleep", "600"],
    "su": ["su", "-s", "/bin/sh", "gov-alice", "-c", "exec sleep 601"],
    "su -l": ["su", "-l", "-s", "/bin/sh", "gov-alice", "-c", "exec sleep 605"],
    "setsid": ["runuser", "-u", "gov-alice", "--", "setsid", "sleep", "602"],
    "nohup": ["runuser", "-u", "gov-alice", "--", "nohup", "sleep", "603"],
    "double fork": ["runuser", "-u", "gov-alice", "--", "sh", "-c", "(sleep 604 &)"],
}


class SessionUsers:
    """gov-alice and gov-bob, created for the test if the host lacks them and removed after."""

    def __init__(self) -> None:
        self.created: list[str] = []
        for name in USERS:
            try:
                pwd.getpwnam(name)
            except KeyError:
                subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
                self.created.append(name)
        self.uid = {name: pwd.getpwnam(name).pw_uid for name in USERS}

    def kill_all(self) -> None:
        for uid in self.uid.values():
            subprocess.run(["pkill", "-KILL", "-U", str(uid)], check=False)

    def remove(self) -> None:
        self.kill_all()
        wait_for(lambda: not any(processes_of(uid) for uid in self.uid.values()), "the test users' processes to end")
        for name in self.created:
            subprocess.run(["userdel", name], check=False)


def missing() -> str | None:
    """Why the session scenarios cannot run here, or None: a tool they need, or a checkout
    another user cannot run governor from (a clone in a private directory)."""
    tools = [tool for tool in ("useradd", "userdel", "runuser", "su", "pkill", "pgrep", "setsid", "nohup")
             if shutil.which(tool) is None]
    if tools:
        return f"missing {', '.join(tools)}"
    probe = subprocess.run(["runuser", "-u", "nobody", "--", GOVERNOR, "--version"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"another user cannot run {GOVERNOR}: {probe.stderr.strip()[:200]}"


def cgroup_of(pid: int) -> str | None:
    """The cgroup of ``pid`` in the cpu hierarchy (v1) or v2, as /proc spells it; None if gone."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" or "cpu" in controllers.split(","):
            return path
    return None


def _cgroup_procs(gov: Governor, task: dict) -> list[str]:
    """The command lines of the processes in a status task's cgroup (for the log)."""
    rel = f"B/{task['id']}"
    try:
        pids = gov.driver.pids(rel)
    except Exception as error:  # noqa: BLE001 (only printed)
        return [f"unreadable: {error}"]
    shown = []
    for pid in pids:
        try:
            shown.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            shown.append(f"{pid}: gone")
    return shown


def wait_for(condition, what: str, timeout: float = 30) -> None:
    wait_until(condition, what, timeout=timeout, every=0.05)


def _pids(user: str, pattern: str) -> list[int]:
    """The pids of ``user``'s processes whose command line matches ``pattern`` (pgrep -f)."""
    found = subprocess.run(["pgrep", "-U", user, "-f", pattern], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def _kill_pending(pid: int) -> bool:
    """Whether ``pid`` has a SIGKILL or SIGTERM pending (sent, not yet acted on); False if gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return False
    masks = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(mask & (1 << (signal.SIGKILL - 1) | 1 << (signal.SIGTERM - 1)) for mask in masks)


def processes_of(uid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-U", str(uid)], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def plain_processes_are_governed_and_share_by_drf(tmp_path) -> None:
    """alice's processes started without governor run (one before the daemon, one by each
    escape) all land in her session; her plain-shell burner and bob's `governor run` burner
    then get their DRF shares under contention; a kill -9 of the daemon kills none of them."""
    users = SessionUsers()
    shared = Path(tempfile.mkdtemp(prefix="gov-sessions-"))
    shared.chmod(0o755)  # bob's governor run must reach the socket
    alice = users.uid["gov-alice"]
    before = subprocess.Popen(["runuser", "-u", "gov-alice", "--", "sleep", "599"], stderr=subprocess.DEVNULL)
    wait_for(lambda: processes_of(alice), "alice's process started before the daemon")
    cpu = 1.5 * SCALE
    gov = Governor(shared, f'[capacity]\ncpu = {cpu}\nmemory = "1G"\n'
                           '[groups.A]\nusers = ["gov-alice"]\n[groups.B]\nusers = ["gov-bob"]\n'
                           f'[sessions]\ncpu = {1.0 * SCALE}\nmemory = "128M"\n')
    try:
        session = f"/A/session-{alice}"
        [early] = processes_of(alice)
        assert (cgroup_of(early) or "").endswith(session), f"running before the start: {cgroup_of(early)}"
        for way, command in ESCAPES.items():
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        gov.wait(lambda: len(processes_of(alice)) >= 1 + len(ESCAPES), "alice's escapes")
        gov.wait(lambda: all((cgroup_of(pid) or session).endswith(session) for pid in processes_of(alice)),
                 "alice's escapes to be moved into her session")
        where = {pid: cgroup_of(pid) for pid in processes_of(alice)}
        print(f"\nalice's processes: {where}")
        assert all(path is None or path.endswith(session) for path in where.values()), where
        [shown] = gov.status()["groups"]["A"]["tasks"]
        assert (shown["session"], shown["user"]) == (True, "gov-alice")

        subprocess.Popen(["runuser", "-u", "gov-alice", "--", *BUSY], stderr=subprocess.DEVNULL)
        bob_task = subprocess.Popen(["runuser", "-u", "gov-bob", "--", GOVERNOR, "run", "--socket", gov.socket,
                                     f"--cpus={1.0 * SCALE}", "--memory=64M", "--", *BUSY], stderr=subprocess.DEVNULL)
        gov.wait(lambda: any(not t["session"] for t in gov.status()["groups"].get("B", {}).get("tasks", [])),
                 "bob's task")
        # bob's runuser made him a session before his governor run moved into its task; it ends
        # when no process of his is left in it. Either way both groups demand more than the
        # 0.75·s cores DRF gives each of the 1.5·s. Two settle passes: the second began after
        # bob's task was listed (a reconcile pass ends in one).
        gov.wait_settled(gov.generation(), passes=2)
        left = [t for t in gov.status()["groups"]["B"]["tasks"] if t["session"]]
        print(f"bob's session: {'still holds ' + str(_cgroup_procs(gov, left[0])) if left else 'ended'}")
        got = measure(gov, ["A", "B"], 6)
        print(f"plain-shell burner A {got['A']:.3f}, governor run burner B {got['B']:.3f} cores "
              f"(DRF: {cpu / 2:.3f} each)")
        for group in ("A", "B"):
            assert abs(got[group] - cpu / 2) <= CONTENTION_TOLERANCE * cpu / 2 + 0.01, got
        assert bob_task.poll() is None

        gov.daemon.kill()
        gov.daemon.wait()
        # Gone and reaped: whatever its death sent is pending now (a kill not yet acted on too).
        alive = [pid for pid in processes_of(alice) if not _kill_pending(pid)]
        assert early in alive and len(alive) >= 2 + len(ESCAPES), f"kill -9 of the daemon killed: {alive}"
    finally:
        users.kill_all()
        gov.close()
        users.remove()
        before.wait()
        shutil.rmtree(shared, ignore_errors=True)


def session_ends_when_its_user_has_no_process(tmp_path) -> None:
    """The session lasts while alice has a process, and goes (cgroup and all) with her last."""
    users = SessionUsers()
    gov = Governor(tmp_path, '[capacity]\ncpu = 1.0\nmemory = "1G"\n[groups.A]\nusers = ["gov-alice"]\n[sessions]\n')
    try:
        # runuser forks: the sleeps are its children, killed by their own command lines.
        first = subprocess.Popen(["runuser", "-u", "gov-alice", "--", "sleep", "600"], stderr=subprocess.DEVNULL)
        gov.wait(lambda: gov.task_count("A") == 1, "alice's session")
        second = subprocess.Popen(["runuser", "-u", "gov-alice", "--", "sleep", "601"], stderr=subprocess.DEVNULL)
        gov.wait(lambda: any("/A/session-" in (cgroup_of(pid) or "") for pid in _pids("gov-alice", "^sleep 601$")),
                 "alice's second process in her session")
        subprocess.run(["pkill", "-KILL", "-U", "gov-alice", "-f", "^sleep 600$"], check=True)
        first.wait()
        gov.wait_settled(gov.generation(), passes=2)  # the exit, and a reconcile pass (each ends in a settle)
        assert gov.task_count("A") == 1, "the session ended while alice still had a process"
        subprocess.run(["pkill", "-KILL", "-U", "gov-alice", "-f", "^sleep 601$"], check=True)
        second.wait()
        gov.wait(lambda: gov.task_count("A") == 0, "the session to end")
        group = Path(gov.status()["daemon"]["cgroup_root"]) / "A"
        gov.wait(lambda: not group.exists(), "A's cgroup to go (removed off the event loop)", 5)
    finally:
        gov.close()
        users.remove()
