"""governor as a sysadmin installs it: a wheel of this checkout in a fresh venv outside it, whose
`install-systemd --dry-run` finds the units it ships (issue 11, points 11 and 13)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def venv():
    # Outside /tmp: governor.service's PrivateTmp= would hide it, and install-systemd refuses that.
    where = Path(tempfile.mkdtemp(dir="/run" if os.access("/run", os.W_OK) else Path.home(), prefix="gov-wheel-"))
    yield where
    shutil.rmtree(where)


def test_a_wheel_in_a_fresh_venv_passes_the_install_systemd_dry_run(venv):
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    # From a copy without build/: setuptools packs whatever an earlier build left in
    # build/lib (a checkout built before cli/ became governor.cli shipped a top-level cli).
    source = venv / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", ".hypothesis"))
    built = subprocess.run([*pip, "wheel", "--no-deps", "-w", str(venv / "wheels"),
                            str(source)], capture_output=True, text=True)
    if built.returncode != 0 and "matching distribution" in built.stderr:  # no index to fetch setuptools from
        pytest.skip(f"cannot build a wheel here: {built.stderr.strip()[-300:]}")
    assert built.returncode == 0, f"the checkout does not build: {built.stderr.strip()[-600:]}"
    subprocess.run([sys.executable, "-m", "venv", str(venv / "env")], check=True)
    [wheel] = (venv / "wheels").glob("*.whl")
    installed = subprocess.run([str(venv / "env" / "bin" / "python"), "-m", "pip", "--disable-pip-version-check",
                                "--quiet", "install", str(wheel)], capture_output=True, text=True)
    if installed.returncode != 0:
        pytest.skip(f"cannot install the wheel's dependencies (no package index?): {installed.stderr.strip()[-300:]}")
    governor = venv / "env" / "bin" / "governor"
    result = subprocess.run([str(governor), "install-systemd", "--dry-run", "--root", str(venv / "root")],
                            cwd="/", capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"ExecStart={governor} daemon" in result.stdout
    shipped = "site-packages/governor/configs/governor.toml"
    assert shipped in result.stdout and str(REPO) not in result.stdout  # from the wheel, not the checkout
    assert not (venv / "root").exists()
    # Installed under its own names only: the distribution drf-governor, the package governor.
    assert wheel.name.startswith("drf_governor-")
    python = str(venv / "env" / "bin" / "python")
    for generic in ("cli", "cgroups", "configs"):
        probe = subprocess.run([python, "-c", f"import {generic}"], cwd="/", capture_output=True, text=True)
        assert probe.returncode != 0, f"the wheel claims the top-level name {generic}"
    subprocess.run([python, "-c", "import governor.cli.main, governor.cgroups.v2"], cwd="/", check=True)
