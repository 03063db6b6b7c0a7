"""Admission end to end on the real kernel (a real daemon): guarantees of memory kept as
headroom (issue 32). Shared by the v1 (native) and v2 (VM) test modules."""

from __future__ import annotations

import subprocess

from daemon_harness import GOVERNOR, Governor
from scenarios import GROUPS, SLEEPER


def guaranteed_memory_is_kept_as_headroom(tmp_path) -> None:
    """Issue 32, break 2: B is guaranteed 256M of 1G and idle. A's 768M runs; A's next 128M is
    refused by ``--no-wait`` (exit 75: it would take B's headroom), and B's 256M starts at once."""
    groups = GROUPS.replace('[groups.B]\nusers = ["root"]\n', '[groups.B]\nusers = ["root"]\nguarantee = { memory = "256M" }\n')
    gov = Governor(tmp_path, f'[capacity]\ncpu = 1.0\nmemory = "1G"\n{groups}')
    try:
        gov.run("A", SLEEPER, cpus=0.1, memory="768M")
        more = subprocess.run([GOVERNOR, "run", "--socket", gov.socket, "--group", "A", "--no-wait", "--cpus=0.1",
                               "--memory=128M", "--", "true"], capture_output=True, text=True, timeout=30)
        assert more.returncode == 75 and "kept free for group B's guarantee" in more.stderr, more.stderr
        mine = subprocess.run([GOVERNOR, "run", "--socket", gov.socket, "--group", "B", "--no-wait", "--cpus=0.1",
                               "--memory=256M", "--", "true"], capture_output=True, text=True, timeout=30)
        print(f"\nheadroom: A's 128M beside B's unused 256M: exit {more.returncode}; B's 256M: exit {mine.returncode}")
        assert mine.returncode == 0, mine.stderr
    finally:
        gov.close()
