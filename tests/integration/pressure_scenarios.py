"""Stalls (PSI) end to end on the real kernel: a task held to a small CPU cap stalls on CPU, and
``status --json``, ``explain`` and the metrics say so (v2, in the VM); on a host without PSI
(this v1 host) each of them says so once, with no zeros and no series."""

from __future__ import annotations

import socket
import subprocess
from urllib.request import urlopen

from daemon_harness import BUSY, GOVERNOR, Governor
from prometheus_client.parser import text_string_to_metric_families
from scenarios import SCALE, config


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _pressure_series(port: int) -> dict[tuple[str, str, str], float]:
    with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.labels["group"], s.labels["resource"], s.labels["kind"]): s.value
            for family in text_string_to_metric_families(text) if family.name == "governor_group_pressure_seconds"
            for s in family.samples if s.name.endswith("_total")}


def _governor(gov: Governor, *args: str) -> str:
    done = subprocess.run([GOVERNOR, *args, "--socket", gov.socket], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def a_cpu_cap_shows_as_cpu_stall(tmp_path) -> None:
    """A burner declared at a tenth of a core (its cpu.max) is runnable all the time and runs a
    tenth of it: its task and group stall on CPU (``some`` avg10 well above 0), ``explain A``
    says "stalled … on cpu", and the metrics count the stalled seconds."""
    port = _free_port()
    gov = Governor(tmp_path, config(cpu=1.0 * SCALE), "--metrics", f"127.0.0.1:{port}")
    try:
        gov.run("A", BUSY, cpus=0.1 * SCALE, memory="32M")

        def stalled() -> float:
            group = gov.status()["groups"]["A"]
            return group.get("stall", {}).get("cpu", {}).get("some", {}).get("avg10", 0.0)

        # avg10 is updated every 2 s by the kernel, and the daemon samples every second.
        gov.wait(lambda: stalled() > 5.0, "group A's cpu stall over 5 % of the last 10 s", timeout=120)
        status = gov.status()
        group = status["groups"]["A"]
        task = group["tasks"][0]
        explained = _governor(gov, "explain", "A")
        series = _pressure_series(port)
        print(f"\ncpu.max {task['limits'].get('cpu.max')}: group A cpu some avg10 {group['stall']['cpu']['some']['avg10']}"
              f" %, task {task['stall']['cpu']['some']['avg10']} %; metric {series.get(('A', 'cpu', 'some'))} s;"
              f" explain: {[line for line in explained.splitlines() if 'stalled' in line]}")
        assert status["psi"] == {"available": True, "why": None}
        assert task["stall"]["cpu"]["some"]["avg10"] > 5.0
        assert set(group["stall"]) == {"cpu", "memory", "io"}
        assert "A: stalled" in explained and "on cpu over the last 10 s" in explained
        assert f"task {task['id']}: stalled" in explained  # GROUP: each of its tasks too
        assert series[("A", "cpu", "some")] > 0.5
    finally:
        gov.close()


def no_psi_is_said_once(tmp_path) -> None:
    """On a host without PSI (cgroup v1) status says why at its top and nowhere else: no
    group or task carries a stall; ``status``, ``explain`` and ``top``'s view say it in one line;
    the metrics have no pressure series."""
    port = _free_port()
    gov = Governor(tmp_path, config(cpu=1.0 * SCALE), "--metrics", f"127.0.0.1:{port}")
    try:
        gov.run("A", BUSY, cpus=0.1 * SCALE, memory="32M")
        gov.wait(lambda: gov.status()["groups"]["A"]["usage"].get("cpu", 0.0) > 0, "a sample of A's use")
        status = gov.status()
        shown, explained = _governor(gov, "status"), _governor(gov, "explain")
        print(f"\npsi: {status['psi']}")
        assert status["psi"]["available"] is False and "v1" in status["psi"]["why"]
        assert all(g["stall"] == {} and all(t["stall"] == {} for t in g["tasks"]) for g in status["groups"].values())
        assert shown.count("stalls: not measured") == 1 and "stalled" not in shown
        assert explained.count("stalls: not measured") == 1 and "stalled" not in explained
        assert _pressure_series(port) == {}
    finally:
        gov.close()
