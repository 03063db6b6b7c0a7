"""governor beside a real Slurm (issue 36, points 2 and 3): tests/system/slurm.sh in the systemd VM
with Debian's slurmctld, slurmd, munge and slurmdbd on MariaDB (a variant image, built once and
cached). One boot serves the four tests: the export loaded into slurmdbd, the job beside a
governed task and sessions, no Slurm pid moved, and the capacity governor divides while the job
runs. ~5 minutes under emulation, of which installing governor from the wheelhouse is ~2.
"""

import json
import re

import pytest

from governor.config.load import parse_config
from test_systemd_vm import REPO, _run_in_vm, _skip_reason

pytestmark = pytest.mark.systemd_vm

EXTRA = "slurmd slurmctld munge slurmdbd mariadb-server"
# ../shared is a link: the VM shares the directory it names, at that path.
SHARED = (REPO.parent / "shared").resolve()
TREE = REPO / "tests" / "system" / "slurm-tree.toml"
OUT = REPO / "build" / "slurm-vm"
BESIDE = re.compile(r"^slurm beside governor: job after governor restart (\S+), job after slurmd restart (\S+), "
                    r"task after slurmd restart (\S+)$")
PIDS = re.compile(r"^slurm pids: (\d+) seen, (\d+) moved, (\d+) of the job's outside its cgroup$")
ENDED = re.compile(r"^job ended after (\d+)s: processes of its user left (\d+)$")


@pytest.fixture(scope="module")
def lines() -> list[str]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    return _run_in_vm(["./tests/system/slurm.sh"], "--ro", str(SHARED), "-e", f"SLURM_ONE_NODE={SHARED}/vm/slurm-one-node",
                      env={"SYSVM_EXTRA": EXTRA})


def _shares(lines: list[str]) -> tuple[dict[str, str], dict[str, int], dict[str, str]]:
    """From ``sshare -a -P -o Account,User,RawShares``: account → parent (by indentation),
    account → raw shares, user → account."""
    rows = [line.split("|")[1:] for line in lines if line.startswith("sshare|")][1:]  # less the header
    parents, shares, users, path = {}, {}, {}, []
    for account, user, raw in rows:
        name = account.strip()
        if user:
            if user != "root":  # Slurm's own, made with the cluster
                users[user] = name
            continue
        depth = len(account) - len(account.lstrip(" "))
        path[depth:] = [name]
        if depth:
            parents[name] = path[depth - 1]
        if raw:  # (Slurm's root has none)
            shares[name] = int(raw)
    return parents, shares, users


def test_the_export_loaded_into_slurmdbd_is_the_config_tree(lines):
    """`sshare -a` shows every group as an account under its parent (top level: root), raw
    shares in the ratios of the weights, and each member under their group's account; the
    user limit is the association's GrpTRES."""
    config = parse_config(TREE.read_text(), str(TREE))
    parents, shares, users = _shares(lines)
    assert parents == {rule.name: rule.parent or "root" for rule in config.groups}
    unit = shares["ops"] / config.groups[-1].weight
    assert {rule.name: shares[rule.name] / unit for rule in config.groups} == {
        rule.name: pytest.approx(rule.weight) for rule in config.groups}
    assert users == {user: rule.name for rule in config.groups for user in rule.users}
    [alice] = [line for line in lines if line.startswith("assoc|physics-lab|") and "|alice|" in line]
    assert set(alice.split("|")[-1].split(",")) == {"cpu=1", "mem=512M", "gres/gpu=1"}, alice


def test_a_slurm_job_runs_beside_governed_work(lines):
    """A restart of governor leaves the job running, a restart of slurmd leaves governor's task
    running (in its cgroup, listed)."""
    [beside] = [m for m in map(BESIDE.match, lines) if m]
    assert beside.groups() == ("running", "running", "running"), beside[0]


def test_no_slurm_pid_is_moved(lines):
    """Every Slurm pid (slurmctld, slurmd, slurmdbd, slurmstepd, the job's) stays in its cgroup,
    and the job's in the job's, though the job's user is governed (sessions on) and governor
    restarts: Slurm's scope is a foreign tenant, whose processes no session takes (issue 36.2)."""
    [pids] = [m for m in map(PIDS.match, lines) if m]
    [ended] = [m for m in map(ENDED.match, lines) if m]
    seen, moved, outside = map(int, pids.groups())
    left = int(ended[2])  # a process taken out of the job's cgroup outlives the cancelled job
    assert seen >= 5, pids[0]  # slurmctld, slurmd, slurmdbd, a slurmstepd, the job's shell and sleep
    assert (moved, outside, left) == (0, 0, 0), (pids[0], ended[0])


def _status(when: str) -> dict:
    """governor's ``status --json`` the script kept: before the job, during it, after it."""
    return json.loads((OUT / f"status-{when}.json").read_text())


def test_capacity_drops_by_the_job_while_it_runs(lines):
    """Issue 36.2: while the job runs, governor counts its allocation under ``foreign`` and
    divides that much less; after it ends, all again (the scope stays a tenant, holding 0)."""
    before, during, after = map(_status, ("before", "during", "after"))
    held = [tenant["held"] for tenant in during["foreign"].values() if any(tenant["held"].values())]
    assert len(held) == 1, during["foreign"]
    assert held[0]["cpu"] == pytest.approx(1) and held[0]["memory"] == 200 * 1024**2, held[0]
    for resource, amount in held[0].items():
        assert during["capacity"][resource] == pytest.approx(before["capacity"][resource] - amount), resource
    assert after["capacity"] == before["capacity"]
    assert not any(any(t["held"].values()) for t in after["foreign"].values()), after["foreign"]
