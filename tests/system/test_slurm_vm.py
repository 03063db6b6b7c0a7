"""governor beside a real Slurm (issue 36, points 2 and 3): tests/system/slurm.sh in the systemd VM
with Debian's slurmctld, slurmd, munge and slurmdbd on MariaDB (a variant image, built once and
cached). One boot serves the three tests: the export loaded into slurmdbd, the job beside a
governed task, and the capacity governor divides while the job runs.
"""

import json
import re
from pathlib import Path

import pytest

from governor.config.load import parse_config
from test_systemd_vm import REPO, _run_in_vm, _skip_reason

pytestmark = pytest.mark.systemd_vm

EXTRA = "slurmd slurmctld munge slurmdbd mariadb-server"
TREE = REPO / "tests" / "system" / "slurm-tree.toml"
OUT = REPO / "build" / "slurm-vm"
BESIDE = re.compile(r"^slurm beside governor: job after governor restart (\S+), job after slurmd restart (\S+), "
                    r"task after slurmd restart (\S+), slurm pids (\d+) moved (\d+)$")


@pytest.fixture(scope="module")
def lines() -> list[str]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    return _run_in_vm("./tests/system/slurm.sh", "--ro", str(REPO.parent / "shared"), env={"SYSVM_EXTRA": EXTRA})


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
    """No Slurm pid is moved by governor; a restart of governor leaves the job running, a
    restart of slurmd leaves governor's task running."""
    [beside] = [m for m in map(BESIDE.match, lines) if m]
    assert beside.groups()[:3] == ("running", "running", "running"), beside[0]
    assert int(beside[4]) >= 4 and beside[5] == "0", beside[0]  # the daemons, slurmstepd, the job


def test_capacity_drops_by_the_job_while_it_runs(lines):
    """Issue 36.2 (foreign tenants, built apart): while the job runs, governor counts it under
    ``foreign`` and divides that much less; after it ends, all again. Skipped until ``status
    --json`` has ``foreign``."""
    before, during, after = (json.loads((OUT / f"status-{when}.json").read_text())
                             for when in ("before", "during", "after"))
    if "foreign" not in during:
        pytest.skip('needs foreign tenants (issue 36.2): status --json has no "foreign"')
    held = [tenant["held"] for tenant in during["foreign"].values() if tenant["held"]]
    assert len(held) == 1, during["foreign"]
    assert held[0]["cpu"] == pytest.approx(1) and held[0]["memory"] == 200 * 1024**2, held[0]
    for resource, amount in held[0].items():
        assert during["capacity"][resource] == pytest.approx(before["capacity"][resource] - amount), resource
    assert after["capacity"] == before["capacity"] and not any(t["held"] for t in after["foreign"].values())
