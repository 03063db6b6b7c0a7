"""What the benchmarks in scripts/ share: a wheel of this checkout in a fresh venv, a daemon
started from it at its unit's priority, percentiles, and a table of figures beside targets."""

from __future__ import annotations

import hashlib
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The daemon runs at the priority its systemd unit gives it (configs/governor.service, Nice=).
DAEMON_NICE = -5


def tmpfs() -> str:
    """Where records go in a benchmark: ``/run`` when it is a tmpfs (as on a systemd host, whose
    default state_dir is /run/governor/state), else ``/dev/shm``: on the README's host /run is on
    ext4, where replacing a record cost ~1 ms, a tenth of the daemon's time in the storm."""
    mounts = dict(line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines())
    for directory in ("/run", "/dev/shm"):
        if mounts.get(directory) == "tmpfs":
            return directory
    sys.exit("neither /run nor /dev/shm is a tmpfs: the records would not be where a real host keeps them")


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def venv_with_wheel(where: Path, revision: str | None = None) -> Path:
    """A fresh venv at ``where`` with governor installed from a wheel of this checkout, or of
    its git ``revision`` (a commit, a branch: ``git archive``)."""
    wheels, source = where / "wheels", where / "source"
    if revision is None:
        # From a copy without build/, whose leftovers setuptools would pack (test_wheel_install).
        shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", ".hypothesis"))
    else:
        source.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(source)],
                   check=True)
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True)
    python = where / "venv" / "bin" / "python"
    [wheel] = wheels.glob("*.whl")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
                   check=True)
    return python


def governor_from(work: Path, keep_venv: str | None) -> str:
    """The ``governor`` of a wheel install: in ``keep_venv`` (reused while it was built from
    these very sources, else made again there) or in ``work``."""
    base = Path(keep_venv) if keep_venv else work
    python = base / "venv" / "bin" / "python"
    stamp, sources = base / "sources.sha256", _sources_digest()
    if not python.exists() or not stamp.exists() or stamp.read_text() != sources:
        # A kept venv of older sources measured the old code (a stale one once showed a
        # memory "regression" of 22 MiB).
        print(f"building a wheel and a venv in {base} …", flush=True)
        for old in ("venv", "wheels", "source"):
            shutil.rmtree(base / old, ignore_errors=True)
        python = venv_with_wheel(base)
        stamp.write_text(sources)
    return str(python.with_name("governor"))


def governor_at(revision: str, work: Path) -> str:
    """The ``governor`` of a wheel of git ``revision`` of this repository, in a fresh venv in
    ``work``: the baseline a figure is measured beside, on the same host at the same time."""
    print(f"building a wheel of {revision} and a venv in {work} …", flush=True)
    return str(venv_with_wheel(work, revision).with_name("governor"))


def _sources_digest() -> str:
    """A digest of what a wheel of this checkout is built from."""
    digest = hashlib.sha256()
    files = [REPO / "pyproject.toml"] + sorted(path for part in ("governor", "cgroups", "cli", "configs")
                                               for path in (REPO / part).rglob("*")
                                               if path.is_file() and "__pycache__" not in path.parts)
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def wait_for_socket(path: str, daemon: subprocess.Popen, log: Path) -> None:
    for _ in range(300):
        if daemon.poll() is not None:
            sys.exit(f"daemon exited: {log.read_text()}")
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(path)
                return
        except OSError:
            time.sleep(0.1)
    sys.exit("daemon did not start")


def remove_cgroup_root(name: str) -> None:
    """Remove governor's root ``name`` (empty by now; ``/name``: at the top) from every hierarchy."""
    name = name.lstrip("/")
    base = Path("/sys/fs/cgroup")
    for directory in [*base.glob(name), *base.glob(f"*/**/{name}")]:  # v2's top, or below
        for leftover in sorted(directory.rglob("*"), reverse=True):
            if leftover.is_dir():
                leftover.rmdir()
        directory.rmdir()


def print_table(rows: list[tuple[str, str, str]]) -> None:
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'measured':<28}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:<28}  {target}")
