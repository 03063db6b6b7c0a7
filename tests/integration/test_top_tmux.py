"""``governor top`` driven for real: a real daemon on this host's cgroup v1 hierarchies, real
CPU burners launched with ``governor run``, and ``governor top`` in a 120×40 tmux pane, read
back with ``capture-pane`` as a person would see it.

Config: 1.5 cores, physics (weight 2) with two <0.75 cores, 32M> burners, ops (weight 1) with
one <0.75 cores, 64M>. Both are cpu-dominated: D_physics = 1.5 cores (share 1), D_ops = 0.75
(share 0.5). With s_physics = 2t and s_ops = t, physics holds 3t cores and ops 1.5t, so cpu
saturates at t = 1/3: physics 66.7% of the host, ops 33.3%.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import uuid

import pytest
from daemon_harness import BUSY, GOVERNOR, Governor
from support.waits import wait_until

pytestmark = pytest.mark.kernel_v1

CONFIG = ('[capacity]\ncpu = 1.5\nmemory = "1G"\n'
          '[groups.physics]\nweight = 2\nusers = ["root"]\n'
          '[groups.ops]\nweight = 1\nusers = ["root"]\n')


@pytest.fixture(autouse=True)
def _needs_tmux():
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")


class Pane:
    """One tmux session on a private tmux server (``-L``), so no one else's tmux is touched."""

    def __init__(self, command: str):
        self.server = f"governor-test-{uuid.uuid4().hex[:8]}"
        self.tmux("new-session", "-d", "-s", "top", "-x", "120", "-y", "40", command)
        # Keep the pane after its process exits, to read what it showed last.
        self.tmux("set-option", "-t", "top", "remain-on-exit", "on")

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.server, *args], check=True, capture_output=True, text=True,
                              timeout=10).stdout

    def key(self, key: str, shows, what: str) -> str:
        """Press ``key`` and wait until the screen ``shows`` its effect: the next key is read
        by a top that has redrawn, never one still reading the last."""
        self.tmux("send-keys", "-t", "top", key)
        return self.wait_for(shows, what)

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top")

    def wait_for(self, condition, what: str, timeout: float = 20) -> str:
        shown = [""]

        def seen() -> bool:
            shown[0] = self.text()
            return condition(shown[0])
        wait_until(seen, what, timeout=timeout, every=0.3, detail=lambda: f"the pane shows:\n{shown[0]}")
        return shown[0]

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.server, "kill-server"], capture_output=True, timeout=10)


def groups_in_order(text: str) -> list[str]:
    return [line[3:].split()[0] for line in text.splitlines() if line[1:3] in ("▸ ", "▾ ")]


def row(text: str, group: str) -> str:
    return next(line for line in text.splitlines() if line[3:].startswith(group + " "))


def test_top_shows_real_shares_expands_sorts_reconnects_resizes_and_quits(tmp_path):
    gov = Governor(tmp_path, CONFIG)
    pane = None
    try:
        for _ in range(2):
            gov.run("physics", BUSY, cpus=0.75, memory="32M")
        gov.run("ops", BUSY, cpus=0.75, memory="64M")
        # The shell records top's exit status: tmux 3.3 sometimes marks the pane dead and never
        # reports the status (2 runs in 20 here), whatever top did.
        exit_file = tmp_path / "top-exit"
        inner = f"{shlex.quote(GOVERNOR)} top --socket {shlex.quote(gov.socket)}; echo $? > {shlex.quote(str(exit_file))}"
        pane = Pane(f"sh -c {shlex.quote(inner)}")  # the checkout's path may hold a space

        text = pane.wait_for(lambda t: "66.7%" in t and "33.3%" in t, "both groups' shares")
        print(f"\n--- governor top, first screen ---\n{text}")
        assert groups_in_order(text) == ["physics", "ops"]  # by share, the largest first
        assert "66.7%" in row(text, "physics") and "33.3%" in row(text, "ops")
        assert row(text, "physics").startswith(">")  # selected
        assert "guaranteed 1.5 · used" in text and "fair level 33.3% per unit of weight" in text

        pane.key("j", lambda t: any(line.startswith(">") and line[3:].startswith("ops ") for line in t.splitlines()),
                 "ops selected")
        text = pane.key("Enter", lambda t: "▾ ops: 1 task" in t, "ops's tasks")
        assert row(text, "ops").startswith(">▾")
        pids = {name: [t["pid"] for t in group["tasks"]] for name, group in gov.status()["groups"].items()}
        task = next(line for line in text.splitlines() if line.split()[:1] == [str(pids["ops"][0])])
        assert "root" in task and "0.75c 64M" in task  # user, declared demand
        assert not any(line.split()[:1] == [str(p)] for p in pids["physics"] for line in text.splitlines())

        text = pane.key("s", lambda t: "s sort: cpu" in t, "the cpu sort")
        assert "cpu g/u ▼" in text and "share ▼" not in text
        for sort in ("memory", "tasks", "name"):
            text = pane.key("s", lambda t, sort=sort: f"s sort: {sort}" in t, f"the {sort} sort")
        print(f"--- after j, Enter and s×4 ---\n{text}")
        assert groups_in_order(text) == ["ops", "physics"] and "group ▲" in text

        # The daemon goes away: top says so and keeps running; a new daemon re-adopts the tasks.
        gov.daemon.send_signal(signal.SIGTERM)
        gov.daemon.wait(20)
        text = pane.wait_for(lambda t: "daemon not reachable — reconnecting…" in t, "the disconnected banner")
        print(f"--- daemon stopped ---\n{text}")
        gov.daemon = subprocess.Popen(gov.daemon.args, stdout=gov.log, stderr=subprocess.STDOUT)
        text = pane.wait_for(lambda t: "reconnecting" not in t and "66.7%" in t, "reconnection", timeout=60)
        assert groups_in_order(text) == ["ops", "physics"]

        # A resize redraws at the new size: at 80×24 everything still fits, shares included.
        pane.tmux("resize-window", "-t", "top", "-x", "80", "-y", "24")
        text = pane.wait_for(lambda t: "██████ 66.7%" in t and "██████████" not in t, "the 80×24 redraw")
        print(f"--- reconnected, resized to 80×24 ---\n{text}")
        assert max(map(len, text.splitlines())) <= 80 and "33.3%" in row(text, "ops")

        pane.tmux("send-keys", "-t", "top", "q")
        wait_until(lambda: exit_file.exists() and exit_file.read_text().endswith("\n"), "governor top to quit",
                   timeout=10, detail=pane.text)
        assert exit_file.read_text() == "0\n"
    finally:
        if pane is not None:
            pane.close()
        gov.close()
