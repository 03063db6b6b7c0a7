"""What `governor run` adds to a command's start: `governor run -- true` against plain `true`.

    sudo .venv/bin/python -m pytest tests/benchmarks/test_run_overhead.py --benchmark-only

Needs root and a cgroup hierarchy (it starts a real daemon); skipped otherwise. The overhead
is Python's start-up plus one round trip in which the daemon refills and writes the limits.
"""

import os
import subprocess

import pytest
from daemon_harness import GOVERNOR, Governor

CONFIG = '[capacity]\ncpu = 1\nmemory = "1G"\n[groups.A]\nusers = ["root"]\n'


@pytest.fixture(scope="module")
def governor(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root: starts the governor daemon")
    gov = Governor(tmp_path_factory.mktemp("overhead"), CONFIG)
    yield gov
    gov.close()


def test_plain_true(benchmark):
    benchmark.pedantic(subprocess.run, args=(["true"],), kwargs={"check": True}, rounds=30, warmup_rounds=2)


def test_governor_run_true(benchmark, governor):
    command = [GOVERNOR, "run", "--socket", governor.socket, "--", "true"]
    benchmark.pedantic(subprocess.run, args=(command,), kwargs={"check": True}, rounds=30, warmup_rounds=2)
