"""A filling that diverges (issue 32, point 4): no fallback division. The last good allocation
and plan stay in force, status's ``filling`` and its events show the error, the metrics count
it, ``explain`` and the status view say so, and the next filling that succeeds clears it and plans in full."""

import copy

import pytest
from support.status_sample import NOW, STATUS
from support.daemons import GIB, TREE, launch, make_daemon
from support.rendered import render, samples

from governor.daemon import filling
from governor.errors import RequestError
from governor.core.hdrf import hierarchical_filling
from governor.wire.metrics import Metrics


@pytest.fixture
def tree(tmp_path):
    metrics = Metrics(lambda: daemon.observation.snapshot())
    daemon = make_daemon(tmp_path, TREE, metrics=metrics)
    return daemon


def diverging(*args, **kwargs):
    raise AssertionError("no event ahead while leaves still grow")


def test_a_diverging_filling_keeps_the_plan_in_force_and_is_an_error_everywhere(tree, monkeypatch):
    launch(tree, 100, group="D1", cpu=2.0, memory=GIB // 4)
    launch(tree, 200, group="L1", cpu=1.0, memory=GIB // 4)
    driver = tree.hierarchy.driver
    before = {cgroup: dict(driver.in_force(cgroup)) for cgroup in ("D1", "D2", "D2/L1")}
    allocation = tree.enforcement.allocation
    assert samples(tree.metrics)[("governor_allocation_failures_total", ())] == 0  # a series from the start

    monkeypatch.setattr(filling, "hierarchical_filling", diverging)
    # L2's task starts (its own caps), but no refill divides the host otherwise: before this
    # issue, flat DRF gave D1, L1 and L2 a third each and dropped D2's limit and its labs' split.
    launch(tree, 300, group="L2", cpu=1.0, memory=GIB // 4)
    assert tree.enforcement.allocation is allocation
    assert {cgroup: dict(driver.in_force(cgroup)) for cgroup in before} == before
    assert "D2/L2" not in driver.cgroups or "cpu.weight" not in driver.in_force("D2/L2")
    status = tree.observation.status()
    error = status["filling"]["error"]
    assert status["filling"]["failures"] == 1 and error["message"] == "H-DRF: no event ahead while leaves still grow"
    assert error["trigger"].startswith("launch")
    errors = [event["message"] for event in status["events"] if event["kind"] == "error"]
    assert errors == ["refill after launch of task 3: the allocation failed (H-DRF: no event ahead while leaves "
                      "still grow); the last good plan stays in force"]
    got = samples(tree.metrics)
    assert got[("governor_allocation_failures_total", ())] == 1
    assert got[("governor_events_total", (("kind", "error"),))] == 1
    with pytest.raises(RequestError) as refused:
        tree.requests.explain()
    assert refused.value.code == "unavailable" and "the allocation failed" in refused.value.message

    monkeypatch.setattr(filling, "hierarchical_filling", hierarchical_filling)
    tree.reloads.set_weight("D1", 2.0, "root")
    status = tree.observation.status()
    assert status["filling"]["error"] is None and status["filling"]["failures"] == 1
    assert "cpu.weight" in driver.in_force("D2/L2")  # the plan follows all three groups again
    assert tree.enforcement.allocation.groups["L2"].allocation["cpu"] > 0


def test_a_full_refill_that_diverges_leaves_the_caps_to_the_next_one_that_succeeds(tree, monkeypatch):
    launch(tree, 100, group="D1", cpu=1.0, memory=GIB // 4)
    enforcement, hierarchy = tree.enforcement, tree.hierarchy
    planned = []
    apply_plan = hierarchy.apply_plan
    monkeypatch.setattr(hierarchy, "apply_plan", lambda plan: planned.append(set(plan)) or apply_plan(plan))
    monkeypatch.setattr(filling, "hierarchical_filling", diverging)
    enforcement.refill("reload", full=True)
    assert tree.observation.status()["filling"]["error"]["trigger"] == "reload" and planned == []
    monkeypatch.setattr(filling, "hierarchical_filling", hierarchical_filling)
    enforcement.refill("weight of D1")
    enforcement.refill("weight of D1")
    # The first success plans the task's caps the reload's refill did not; the next does not.
    assert "D1/task-1" in planned[0] and "D1/task-1" not in planned[1]


def test_status_says_the_allocation_failed_and_that_the_last_good_plan_stays():
    status = copy.deepcopy(STATUS)
    status["filling"].update(failures=1, error={"at": NOW - 5, "trigger": "launch of task 9",
                                                "message": "H-DRF: no event ahead while leaves still grow"})
    text = " ".join(render(status, 200).split())
    assert ("ALLOCATION FAILED 5s ago (launch of task 9): H-DRF: no event ahead while leaves still grow; "
            "the last good plan stays in force") in text
    assert "ALLOCATION FAILED" not in render(STATUS, 200)


def test_a_filling_whose_arithmetic_fails_is_a_diverged_one_and_the_launch_still_starts(tree, monkeypatch):
    # A capacity of 1e-310 cores once passed the config and made the filling divide by zero: the
    # launch got "internal error", its task stayed counted with no process, and every later
    # settle failed. A filling's arithmetic error is its failure, as a broken invariant is.
    launch(tree, 100, group="D1", cpu=1.0, memory=GIB // 4)

    def dividing(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(filling, "hierarchical_filling", dividing)
    started = launch(tree, 200, group="L1", cpu=1.0, memory=GIB // 4)
    assert started["task"] == "2" and tree.tasks.get("2") is not None
    assert tree.observation.status()["filling"]["error"]["message"] == "H-DRF: float division by zero"
