"""The daemon's GPU guard (issue 31, point 4) on a fake v2 mount, the kernel calls recorded:
put on the login parents when sessions are on, taken off at a clean stop; with sessions off
nothing is put and status says processes outside governor are not kept from GPUs; where no
parent exists, session processes are swept for GPU nodes instead."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from governor.cgroups.hierarchy import Hierarchy
from governor.config.gpu_rules import GpuGuardRules
from governor.daemon import effector
from governor.daemon import gpu_guard as stage
from governor.daemon.journal import Journal
from governor.core.gpus import Gpu, GpuInventory

INVENTORY = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", 195, 0, None),), control=(("/dev/nvidiactl", 195, 255),),
                         source="listed")


@pytest.fixture
def calls(monkeypatch):
    done = []
    monkeypatch.setattr(effector, "put_guard", lambda plan, denied: done.append(("put", plan.places, denied)) or [])
    monkeypatch.setattr(effector, "take_guard", lambda plan, denied: done.append(("take", plan.places, denied)) or [])
    return done


def guard(tmp_path: Path, *, sessions: bool, parents=("user.slice",), kind="sessions"):
    hierarchy = Hierarchy(SimpleNamespace(mode="v2"), str(tmp_path / "governor"), (), cgroup_mount=tmp_path)
    policy = SimpleNamespace(devices={"gpu": INVENTORY}, gpus=INVENTORY, owners=SimpleNamespace(enabled=sessions),
                             config=SimpleNamespace(gpu_guard=GpuGuardRules(kind, parents)))
    return stage.GpuGuard(hierarchy=hierarchy, policy=policy, journal=Journal(None))


def test_sessions_on_put_the_guard_on_the_login_parent_and_a_clean_stop_takes_it_off(tmp_path, calls):
    (tmp_path / "user.slice").mkdir()
    on = guard(tmp_path, sessions=True)
    on.start()
    denied = [("c", 195, 0), ("c", 195, 255)]  # every GPU node and control node
    assert calls == [("put", (tmp_path / "user.slice",), denied)]
    assert on.describe() == {"kind": "sessions", "guarded": [str(tmp_path / "user.slice")], "notes": []}
    assert not on.sweeps
    assert on.journal.events[-1]["message"] == f"GPU guard (sessions): GPU nodes denied on {tmp_path / 'user.slice'}"
    on.stop()
    assert calls[-1] == ("take", (tmp_path / "user.slice",), denied) and on.plan is None


def test_sessions_off_guard_nothing_and_say_so(tmp_path, calls):
    (tmp_path / "user.slice").mkdir()
    off = guard(tmp_path, sessions=False)
    off.start()
    assert calls == [("put", (), [("c", 195, 0), ("c", 195, 255)])]
    assert off.describe()["kind"] == "tasks" and not off.sweeps
    assert "not kept from GPUs" in off.describe()["notes"][0]


def test_where_no_login_parent_exists_sessions_are_swept(tmp_path, calls):
    missing = guard(tmp_path, sessions=True)
    missing.start()
    assert missing.sweeps and missing.describe()["kind"] == "tasks"
    assert missing.describe()["notes"] == [f"{tmp_path / 'user.slice'} does not exist here: not guarded"]


def test_a_reload_puts_the_guard_the_new_config_asks_for_and_takes_it_off_places_left(tmp_path, calls):
    for parent in ("user.slice", "other.slice"):
        (tmp_path / parent).mkdir()
    reloaded = guard(tmp_path, sessions=True)
    reloaded.start()
    reloaded.policy.config = SimpleNamespace(gpu_guard=GpuGuardRules("sessions", ("other.slice",)))
    reloaded.reapply()
    denied = [("c", 195, 0), ("c", 195, 255)]
    assert calls[1:] == [("put", (tmp_path / "other.slice",), denied), ("take", (tmp_path / "user.slice",), denied)]
    assert reloaded.describe()["guarded"] == [str(tmp_path / "other.slice")]


def test_a_reload_that_governs_no_gpu_takes_the_guard_off(tmp_path, calls):
    (tmp_path / "user.slice").mkdir()
    reloaded = guard(tmp_path, sessions=True)
    reloaded.start()
    reloaded.policy.devices, reloaded.policy.gpus = {}, None
    reloaded.reapply()
    assert calls[-1] == ("take", (tmp_path / "user.slice",), [("c", 195, 0), ("c", 195, 255)])
    assert reloaded.plan is None


def test_a_reload_on_v1_allows_again_the_nodes_no_longer_denied_where_the_guard_stays(tmp_path, calls):
    (tmp_path / "user.slice").mkdir()
    reloaded = guard(tmp_path, sessions=True)
    reloaded.hierarchy.guard_plan = lambda kind, parents: stage.GuardPlan("v1", (tmp_path / "user.slice",), ())
    reloaded.start()
    reloaded.policy.gpus = GpuInventory(gpus=(), control=INVENTORY.control, source="listed")
    reloaded.policy.devices = {"gpu": reloaded.policy.gpus}
    reloaded.reapply()
    assert calls[1:] == [("put", (tmp_path / "user.slice",), [("c", 195, 255)]),
                         ("take", (tmp_path / "user.slice",), [("c", 195, 0)])]
