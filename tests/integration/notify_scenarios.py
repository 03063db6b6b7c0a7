"""``[notify]`` end to end on the real kernel: a task ended at its time limit and a task the
kernel OOM-kills at its cap each make one document, read by the command run as ``nobody``
(not the tasks' user, root)."""

from __future__ import annotations

import json
import pwd
import sys
import tempfile
from pathlib import Path

from daemon_harness import Governor
from scenarios import HOG, SCALE, SLEEPER, config
from support.waits import wait_until


def _notices(out: Path, count: int, gov: Governor, timeout: float = 60) -> list[tuple[int, dict]]:
    """The ``count`` documents the command wrote (each as ``uid`` line, then the document), once
    they are there, and no more; ordered by the time in them."""
    def run() -> bool:
        done = gov.status()["daemon"].get("notify", {})
        return done.get("done", 0) + done.get("failed", 0) >= count
    wait_until(run, f"{count} notifications to run", timeout=timeout, every=0.05, detail=gov.daemon_log)
    found = []
    for path in sorted(out.glob("notice-*")):
        uid, document = path.read_text().split("\n", 1)
        found.append((int(uid), json.loads(document)))
    return sorted(found, key=lambda pair: pair[1]["time"])


def time_limit_and_oom_kill_are_notified(tmp_path) -> None:
    nobody = pwd.getpwnam("nobody")
    with tempfile.TemporaryDirectory() as where:  # tmp_path is root's alone (0700): nobody runs this one
        hook = Path(where)
        hook.chmod(0o755)
        out = hook / "out"
        out.mkdir()
        out.chmod(0o777)
        script = hook / "record"
        script.write_text(f"#!/bin/sh\n{{ id -u; cat; }} > {out}/notice-$$\n")
        script.chmod(0o755)
        notify = f'[notify]\ncommand = "{script}"\nuser = "nobody"\nevents = ["time_limit", "oom_kill"]\n'
        gov = Governor(tmp_path, config(cpu=1.0 * SCALE, enforcement="hard") + notify)
        try:
            limited = gov.run("A", SLEEPER, cpus=0.2 * SCALE, memory="64M", name="limited", time_limit="1s")
            hog = gov.run("C", [sys.executable, "-c", HOG.format(mib=256)], cpus=0.5 * SCALE, memory="64M",
                          name="hog", may_end=True)
            assert limited.wait(timeout=30) == 128 + 9 and hog.wait(timeout=120) == 128 + 9
            notices = _notices(out, 2, gov)
            counts = gov.status()["daemon"]["notify"]
        finally:
            gov.close()
    print(f"\nnotify: {len(notices)} documents, {counts}; " +
          "; ".join(f"{d['kind']} of task {d['task']['id']} ({d['details']})" for _, d in notices))
    assert counts["done"] == 2 and counts["failed"] == counts["dropped"] == counts["refused"] == 0
    assert sorted(d["kind"] for _, d in notices) == ["oom_kill", "time_limit"]
    for uid, document in notices:
        assert uid == nobody.pw_uid  # the command ran as notify.user, not as the tasks' user
        assert document["schema"] == "governor.notify/1" and document["host"]
        assert (document["user"], document["uid"]) == ("root", 0)
    [limit] = [d for _, d in notices if d["kind"] == "time_limit"]
    assert (limit["group"], limit["task"]["name"], limit["details"]["time_limit_s"]) == ("A", "limited", 1.0)
    assert 1.0 <= limit["details"]["wall_s"] < 10 and "time limit of 1s" in limit["message"]
    [oom] = [d for _, d in notices if d["kind"] == "oom_kill"]
    assert (oom["group"], oom["task"]["name"], oom["details"]["memory_cap_bytes"]) == ("C", "hog", 64 << 20)
    assert "OOM-killed at its memory cap 64.0M" in oom["message"]
