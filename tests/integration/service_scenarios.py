"""The daemon as a service on the real kernel, shared by the v1 (native) and v2 (VM) modules:
metrics a Prometheus parser reads, a reload that refuses a bad config and applies a good one, a
pid left by an exited client not governed, a command line that is not UTF-8 in status, and soft
memory held to the capacity."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from daemon_harness import GOVERNOR, Governor
from scenarios import HOG, SCALE, SLEEPER, config


def metrics_scrape(tmp_path) -> None:
    """``--metrics`` serves Prometheus text that prometheus-client's parser reads, with the
    live groups in it."""
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    with socket.socket() as probe:  # a free loopback port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gov = Governor(tmp_path, config(cpu=1.0 * SCALE), "--metrics", f"127.0.0.1:{port}")
    try:
        gov.run("A", SLEEPER, cpus=0.5 * SCALE, memory="32M")
        gov.wait(lambda: "A" in _scrape(urlopen, port), "the metrics to show group A")
        families = {f.name: f for f in text_string_to_metric_families(_scrape(urlopen, port))}
        shares = {s.labels["group"]: s.value for s in families["governor_group_dominant_share"].samples}
        refills = {s.name: s.value for s in families["governor_refill_duration_seconds"].samples}
        print(f"\n/metrics: dominant shares {shares}, refills {refills['governor_refill_duration_seconds_count']:.0f}")
        assert shares["A"] == gov.status()["groups"]["A"]["dominant_share"]
        assert refills["governor_refill_duration_seconds_count"] >= 2  # start, launch
        events = {s.labels["kind"]: s.value for s in families["governor_events"].samples if s.name.endswith("_total")}
        assert events["task_started"] == 1
    finally:
        gov.close()


def _scrape(urlopen, port: int) -> str:
    with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def reload_refuses_a_bad_config_and_applies_a_good_one(tmp_path) -> None:
    """``governor reload`` with a broken file: refused with file and key, the daemon serves on
    with the old config; with a good file (B's weight 3): applied and refilled. SIGHUP too."""
    gov = Governor(tmp_path, config(cpu=1.0 * SCALE))
    path = tmp_path / "governor.toml"
    good = path.read_text()
    try:
        for group in ("A", "B"):
            gov.run(group, SLEEPER, cpus=1.0 * SCALE, memory="32M")
        before = gov.cpu_weight("B")
        path.write_text(good.replace("[capacity]", "[capacity]\nbogus = 1"))
        refused = subprocess.run([GOVERNOR, "reload", "--socket", gov.socket], capture_output=True, text=True)
        print(f"\nbad reload: exit {refused.returncode}: {refused.stderr.strip()}")
        assert refused.returncode == 2 and f"{path}: capacity.bogus" in refused.stderr
        assert gov.cpu_weight("B") == before and gov.busy_groups() == {"A", "B"}
        path.write_text(good.replace('[groups.B]\n', '[groups.B]\nweight = 3\n'))
        applied = subprocess.run([GOVERNOR, "reload", "--socket", gov.socket], capture_output=True, text=True)
        assert applied.returncode == 0, applied.stderr
        assert abs(gov.status()["groups"]["B"]["allocation"]["cpu"] - 0.75 * SCALE) < 0.001  # 3 : 1 of the CPU
        assert abs(gov.cpu_weight("A") / gov.cpu_weight("B") - 1 / 3) < 0.001
        path.write_text(good)
        gov.daemon.send_signal(signal.SIGHUP)
        # Equal within the 0.2 % a weight may keep of its old value (limits.proportional_weights).
        gov.wait(lambda: abs(gov.cpu_weight("A") / gov.cpu_weight("B") - 1) < 0.005, "SIGHUP to restore equal weights")
    finally:
        gov.close()


def exited_client_pid_is_not_governed(tmp_path) -> None:
    """Pid reuse (issue 12): a client connects as P, forks C, P exits and is reaped, so P may
    be given to another user's process; C, holding P's connection, asks to govern P. The
    daemon's pidfd of P (SO_PEERPIDFD) says P has exited: refused, nothing moved."""
    gov = Governor(tmp_path, config(cpu=1.0))
    answer = tmp_path / "answer"
    go_read, go_write = os.pipe()
    try:
        first = os.fork()
        if first == 0:  # P
            try:
                sock = socket.socket(socket.AF_UNIX)
                sock.connect(gov.socket)
                p = os.getpid()
                if os.fork() == 0:  # C
                    os.read(go_read, 1)
                    sock.sendall(json.dumps({"op": "launch", "pid": p, "demand": {"cpu": 0.5, "memory": 32 << 20},
                                             "command": ["x"]}).encode() + b"\n")
                    answer.write_bytes(sock.makefile("rb").readline())
            finally:
                os._exit(0)
        os.waitpid(first, 0)
        os.write(go_write, b"x")
        gov.wait(lambda: answer.exists() and answer.read_bytes().endswith(b"\n"), "C's answer")
        reply = json.loads(answer.read_bytes())
        print(f"\nlaunch of exited pid {first} from its child: {reply}")
        assert not reply["ok"] and reply["error"]["code"] == "bad_request", reply
        assert "has exited" in reply["error"]["message"]
        assert not gov.busy_groups()
    finally:
        os.close(go_read)
        os.close(go_write)
        gov.close()


def undecodable_command_line_leaves_status_readable(tmp_path) -> None:
    """One byte that is not UTF-8 in a command line (issue 12) must not break `status` for
    everybody: the command still gets its bytes, status shows U+FFFD."""
    gov = Governor(tmp_path, config(cpu=1.0))
    try:
        # Python, whose command line keeps the argument (sh would exec sleep, dropping it).
        proc = gov.run("A", [sys.executable, "-c", "import time; time.sleep(600)", "x\udcffy"], cpus=0.1,
                       memory="32M")
        shown = subprocess.run([GOVERNOR, "status", "--socket", gov.socket], capture_output=True, text=True)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
        [task] = gov.status()["groups"]["A"]["tasks"]
        print(f"\nundecodable argument: status shows {task['command']}")
        assert task["command"][-1] == "x\ufffdy"
        with open(f"/proc/{task['pid']}/cmdline", "rb") as cmdline:  # the command got its own bytes
            assert cmdline.read().split(b"\0")[-2] == b"x\xffy"
        assert proc.poll() is None
    finally:
        gov.close()


def soft_memory_is_bounded_by_the_capacity(tmp_path) -> None:
    """With memory = "soft" cgroup v1 has no throttling limit, so a task could take far more
    than it declared (issue 12: 3 GiB declared 256M); governor's root holds all governed memory
    to the capacity: a task touching more than that is OOM-killed inside the governed tree."""
    gov = Governor(tmp_path, config(cpu=1.0 * SCALE, memory="256M"))
    try:
        hog = gov.run("C", [sys.executable, "-c", HOG.format(mib=400)], cpus=0.5 * SCALE, memory="64M",
                      may_end=True)
        hog.wait(timeout=120)
        print(f"\nsoft 64M declared, capacity 256M, hog touching 400M: exit {hog.returncode}")
        assert hog.returncode == 128 + 9
    finally:
        gov.close()
