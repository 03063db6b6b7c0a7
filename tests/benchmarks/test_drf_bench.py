"""Allocator speed on this host's scale and beyond (pytest-benchmark; floats, as in production).

    .venv/bin/python -m pytest tests/benchmarks --benchmark-only

Targets (median, 2-core host): continuous ≤ 1 ms at 100 groups, ≤ 10 ms at 1,000,
≤ 100 ms at 10,000 (4 resources); discrete ≤ 100 ms placing 10,000 tasks across 1,000 groups;
H-DRF of 200 leaf groups in 20 nodes (two capacities) about 0.3 s.
The test suite runs each once with --benchmark-disable, to prove it still works.
"""

import random

import pytest

from governor.core.drf import discrete_filling, progressive_filling
from governor.core.hdrf import hierarchical_filling
from governor.core.model import GroupDemand
from support.problems import two_hundred_leaves_in_twenty_nodes

GIB = 1024**3
CAPACITY = {"cpu": 64.0, "memory": 256.0 * GIB, "io.nvme0n1.read": 2.0 * GIB, "io.nvme0n1.write": 1.0 * GIB}


def workload(groups: int, *, seed: int, tasks: int | None = None) -> list[GroupDemand]:
    """Mixed demands: CPU-, memory- and I/O-heavy groups, some needing no I/O, weights 1–4."""
    rng = random.Random(seed)
    result = []
    for g in range(groups):
        task = {
            "cpu": rng.choice([0.25, 0.5, 1.0, 2.0, 4.0]),
            "memory": rng.choice([0.5, 1.0, 2.0, 8.0]) * GIB,
            "io.nvme0n1.read": rng.choice([0.0, 0.0, 10e6, 100e6]),
            "io.nvme0n1.write": rng.choice([0.0, 0.0, 5e6, 50e6]),
        }
        count = tasks if tasks is not None else rng.choice([None, 1, 2, 4, 16])
        result.append(GroupDemand(f"group-{g:05d}", task, weight=float(rng.randint(1, 4)), tasks=count))
    return result


@pytest.mark.parametrize("groups", [10, 100, 1_000, 10_000])
def test_continuous_filling(benchmark, groups):
    problem = workload(groups, seed=groups)
    result = benchmark(progressive_filling, CAPACITY, problem)
    assert len(result.groups) == groups


def test_discrete_filling_10000_tasks_across_1000_groups(benchmark):
    problem = workload(1_000, seed=7, tasks=10)
    # Room for every task (plus 1 %), so all 10,000 are placed one decision at a time.
    capacity = {r: sum(g.task[r] * 10 for g in problem) * 1.01 for r in CAPACITY}
    result = benchmark(discrete_filling, capacity, problem)
    assert sum(g.tasks for g in result.groups.values()) == 10_000


def test_hierarchical_filling_200_leaves_in_20_nodes(benchmark):
    tree, groups = two_hundred_leaves_in_twenty_nodes()

    def both():
        return [hierarchical_filling(capacity, groups, tree) for capacity in (
            {"cpu": 64.0, "memory": 256.0, "io": 100.0}, {"cpu": 800.0, "memory": 1600.0, "io": 800.0})]
    tight, roomy = benchmark(both)
    assert len(tight.groups) == len(roomy.groups) == 200
