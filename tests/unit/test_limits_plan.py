"""From allocation to cgroup limits: group = allocation, task = λ × its own declared demand."""

import pytest

from governor.limits import TaskShare, assign_cores, plan

GIB = 1024**3


def test_groups_get_their_allocation_and_tasks_lambda_of_their_demand():
    # A holds <1.2 cores, 2G> at λ = 0.6 of D_A = <2, 3.33G>; its two tasks declared <1.5, 2G>
    # and <0.5, 1.33G>.
    tasks = [TaskShare("A/task-1", "A", {"cpu": 1.5, "memory": 2 * GIB}),
             TaskShare("A/task-2", "A", {"cpu": 0.5, "memory": GIB, "io.sda.write": 10_000_000})]
    planned = plan({"A": {"cpu": 1.2, "memory": 2 * GIB, "io.sda.write": 6_000_000}}, {"A": 0.6}, {"A": 2.0},
                   tasks, io_devices={"sda": "8:0"}, memory_mode="hard")
    group, first, second = planned["A"], planned["A/task-1"], planned["A/task-2"]
    assert (group.cpu_quota_usec, group.cpu_weight, group.memory_high_bytes) == (120_000, 200, 2 * GIB)
    assert group.memory_max_bytes == 2 * GIB  # hard mode
    assert group.io_max[0].device == "8:0" and group.io_max[0].wbps == 6_000_000 and group.io_max[0].rbps is None
    assert first.cpu_quota_usec == 90_000 and first.memory_high_bytes == int(0.6 * 2 * GIB)
    assert first.io_max == ()  # declared no I/O: the kernel has no "0 bytes/s", so it is not throttled
    assert second.cpu_quota_usec == 30_000 and second.io_max[0].wbps == 6_000_000
    assert first.cpu_weight is None


def test_soft_memory_sets_no_hard_limit_and_tiny_cpu_gets_the_kernel_minimum():
    planned = plan({"A": {"cpu": 0.001, "memory": GIB}}, {"A": 1.0}, {"A": 1.0}, [], io_devices={})
    assert planned["A"].memory_max_bytes is None
    assert planned["A"].cpu_quota_usec == 1_000


@pytest.mark.parametrize(("cpu", "expected"), [
    ({"a": 2.0, "b": 1.0}, {"a": "0-1", "b": "2"}),
    # 1.6 + 1.4 = 3 cores: a gets 1 + its 0.6 remainder, b 1 (remainder 0.4 loses).
    ({"a": 1.6, "b": 1.4}, {"a": "0-1", "b": "2"}),
    ({"a": 0.4, "b": 2.6}, {"a": None, "b": "0-2"}),
])
def test_cores_mode_hands_out_disjoint_whole_cores_by_largest_remainder(cpu, expected):
    assert assign_cores(cpu, [0, 1, 2, 3]) == expected


def test_cores_mode_writes_cpusets_on_groups_only():
    planned = plan({"a": {"cpu": 2.0, "memory": GIB}}, {"a": 1.0}, {"a": 1.0},
                   [TaskShare("a/task-1", "a", {"cpu": 2.0, "memory": GIB})], io_devices={}, cpu_mode="cores",
                   cpus=[0, 1, 4])
    assert planned["a"].cpuset_cpus == "0-1" and planned["a/task-1"].cpuset_cpus is None
