"""The v1 driver's CFS quotas against a fake kernel that checks what cgroup v1 checks
(``tg_cfs_schedulable_down``: no cgroup's quota above its parent's, a cgroup with none bounded
by its parent's): every plan is taken without a refusal in one application, nothing stays
raised above what its children need, and a quota an earlier daemon left is found."""

import errno
import random
from pathlib import Path

import pytest

import governor.cgroups.v1 as v1_module
import governor.cgroups.v1_quotas as quotas_module
from governor.cgroups.errors import CgroupReadError, CgroupWriteError
from governor.cgroups.limits import CgroupLimits
from governor.cgroups.v1 import CgroupV1Driver

PERIOD = 100_000


class Kernel:
    """The cpu hierarchy's quotas, in cores (None: -1, unlimited), by cgroup."""

    def __init__(self, root: Path):
        self.root = root
        self.cores: dict[str, float | None] = {"": None}

    def rel(self, directory: Path) -> str:
        rel = str(directory.relative_to(self.root))
        return "" if rel == "." else rel

    def bound(self, cores: dict, rel: str) -> float | None:
        own = cores.get(rel)
        return own if own is not None or not rel else self.bound(cores, rel.rpartition("/")[0])

    def write(self, directory: Path, name: str, value: str) -> None:
        if name != "cpu.cfs_quota_us":
            return
        rel = self.rel(directory)
        if rel not in self.cores:
            raise CgroupWriteError(str(directory / name), value, errno.ENOENT)
        new = {**self.cores, rel: None if value == "-1" else int(value) / PERIOD}
        for each, own in new.items():
            parent = self.bound(new, each.rpartition("/")[0]) if each else None
            if own is not None and parent is not None and own > parent + 1e-12:
                raise CgroupWriteError(str(directory / name), value, errno.EINVAL)
        self.cores = new

    def read(self, directory: Path, name: str) -> str:
        rel = self.rel(directory)
        if rel not in self.cores:
            raise CgroupReadError("no such cgroup", path=str(directory / name), errno=errno.ENOENT)
        if name == "cpu.cfs_period_us":
            return f"{PERIOD}\n"
        own = self.cores[rel]
        return "-1\n" if own is None else f"{round(own * PERIOD)}\n"

    def remove(self, driver: CgroupV1Driver, rel: str) -> None:
        driver.forget(rel)
        del self.cores[rel]


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    kernel = Kernel(tmp_path / "cpu")
    for module in (v1_module, quotas_module):
        monkeypatch.setattr(module, "write_file", kernel.write)
    monkeypatch.setattr(quotas_module, "read_file", kernel.read)
    return kernel


def driver(kernel: Kernel) -> CgroupV1Driver:
    return CgroupV1Driver({controller: kernel.root for controller in ("cpu", "cpuacct", "cpuset", "memory")})


def cores(amount: float | None) -> CgroupLimits:
    return CgroupLimits(cpu_quota_usec=None if amount is None else round(amount * PERIOD))


def refused(report) -> list[str]:
    return [str(error) for error in report.errors]


def test_a_root_raised_for_a_task_comes_down_in_the_refill_after_its_exit(kernel):
    kernel.cores.update({"G": None, "G/t1": None, "G/t2": None})
    gov = driver(kernel)
    assert not refused(gov.apply_plan({"": cores(2.0), "G": cores(0.5), "G/t1": cores(1.5), "G/t2": cores(0.2)}))
    assert not refused(gov.apply_plan({"": cores(1.0), "G": cores(0.5)}))  # a reload to 1 core
    assert kernel.cores[""] == kernel.cores["G"] == 1.5  # raised for t1's cap
    kernel.remove(gov, "G/t1")
    assert not refused(gov.apply_plan({"": cores(1.0), "G": cores(0.5)}))
    assert (kernel.cores[""], kernel.cores["G"]) == (1.0, 0.5), kernel.cores


def test_a_restart_below_a_tasks_cap_left_by_an_earlier_daemon_is_taken_without_a_refusal(kernel):
    kernel.cores.update({"": 2.0, "A": None, "A/t": 1.5})
    gov = driver(kernel)
    assert not refused(gov.apply_plan({"": cores(1.0), "A": cores(None), "A/t": cores(1.5)}))
    assert kernel.cores[""] == 1.5


def test_a_group_quota_an_earlier_daemon_left_is_given_up_and_bounds_no_new_task(kernel):
    kernel.cores.update({"": 2.0, "G": 0.5, "G/t": 0.3})  # G was held at the earlier daemon's stop
    gov = driver(kernel)
    assert not refused(gov.apply_plan({"": cores(2.0), "G": cores(None), "G/t": cores(0.3)}))
    assert kernel.cores["G"] is None
    kernel.cores["G/t2"] = None
    gov.apply("G/t2", cores(1.0))  # a launch's caps: refused (EINVAL) under G's old 0.5
    assert kernel.cores["G/t2"] == 1.0


def test_a_department_keeps_its_quota_while_a_lab_below_it_runs(kernel):
    kernel.cores.update({"s": None, "s/physics": None, "s/physics/t1": None, "s/chem": None, "s/chem/t2": None})
    gov = driver(kernel)
    plan = {"": cores(2.0), "s": cores(1.0), "s/physics": cores(0.5), "s/chem": cores(0.5),
            "s/physics/t1": cores(0.5), "s/chem/t2": cores(0.5)}
    assert not refused(gov.apply_plan(plan))
    for rel in ("s/physics/t1", "s/physics", "s"):  # physics' last task ends: tree.remove forgets these
        gov.forget(rel)
    assert kernel.cores["s"] == 1.0  # not removed (chem is below it): still bounding chem
    del kernel.cores["s/physics/t1"], kernel.cores["s/physics"]
    assert not refused(gov.apply_plan({"": cores(2.0), "s": cores(None), "s/chem": cores(0.5)}))
    assert kernel.cores["s"] is None  # its record forgotten, its quota read again and given up


TREE = ["A", "A/B", "C"]
TASKS = ["A/t1", "A/B/t2", "A/B/t3", "C/t4", "A/t5"]


@pytest.mark.parametrize("seed", range(200))
def test_any_sequence_of_plans_is_taken_at_once_and_leaves_nothing_raised_past_need(kernel, seed):
    """Tasks come and go, each refill plans the root and the groups (and at a start the tasks):
    no refusal, and after each plan every cgroup holds what it was asked, or its children's
    largest where that is more."""
    rnd = random.Random(seed)
    gov, alive = driver(kernel), set()
    kernel.cores.update(dict.fromkeys(TREE))
    for _ in range(8):
        for task in TASKS:
            if task in alive and rnd.random() < 0.3:
                kernel.remove(gov, task)
                alive.discard(task)
            elif task not in alive and rnd.random() < 0.4:
                kernel.cores[task] = None
                alive.add(task)
        plan = {"": cores(rnd.choice([1.0, 2.0, 4.0])), **{g: cores(rnd.choice([None, 0.5, 1.0, 1.5, 2.0, 3.0]))
                                                            for g in TREE}}
        full = {**plan, **{t: cores(rnd.choice([0.5, 1.0, 1.5, 2.0, 3.0])) for t in sorted(alive)}}
        assert not refused(gov.apply_plan(full)), kernel.cores
        assert not refused(gov.apply_plan(plan)), kernel.cores
        for rel in plan:
            asked = plan[rel].cpu_quota_usec
            need = _need(kernel.cores, rel)
            expected = None if asked is None else max(asked / PERIOD, need or 0.0)
            assert kernel.cores[rel] == expected, (rel, asked, need, kernel.cores)


def _need(held: dict[str, float | None], rel: str) -> float | None:
    """The largest quota below ``rel`` that bounds it (a child with none passing its own up)."""
    below = [held[child] if held[child] is not None else _need(held, child)
             for child in held if child and child.rpartition("/")[0] == rel]
    return max((amount for amount in below if amount is not None), default=None)
