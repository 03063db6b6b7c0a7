"""From allocation to cgroup limits: a group's allocation is its guarantee (weights), a task's
declaration its cap (written once), the root capped at the capacity."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.core.cpu_saturation import cpu_saturated
from governor.core.cpu_saturation import hold_scale
from governor.core.plan import assign_cores, group_limits, proportional_weights, root_limits, task_limits

GIB = 1024**3
MIB = 1024**2


def test_a_task_is_capped_at_its_declaration_whatever_the_allocation():
    caps = task_limits({"cpu": 0.5, "memory": 800 * MIB, "io.sda.write": 10_000_000},
                       io_devices={"sda": "8:0"})  # hard, the default
    assert (caps.cpu_quota_usec, caps.cpu_period_usec) == (50_000, 100_000)
    assert caps.cpu_weight == 50  # 0.5 core × 100: a fixed scale, siblings never rewritten
    assert caps.memory_max_bytes == caps.memory_min_bytes == caps.memory_low_bytes == 800 * MIB
    assert task_limits({"memory": MIB}, io_devices={}, protect=False).memory_min_bytes is None  # the toggle
    assert caps.memory_high_bytes is None  # at memory.max it could never bind
    assert caps.io_max[0].device == "8:0" and caps.io_max[0].wbps == 10_000_000 and caps.io_max[0].rbps is None


def test_a_session_is_capped_at_its_declaration_and_promised_none_of_it():
    # Issue 43: three idle shells held 6G of memory.min on a 2.9G host. 0 is written, not left
    # out, so that what an earlier daemon set is undone.
    caps = task_limits({"cpu": 0.5, "memory": 2 * GIB}, io_devices={}, session=True)
    assert caps.memory_max_bytes == 2 * GIB and (caps.memory_min_bytes, caps.memory_low_bytes) == (0, 0)
    assert task_limits({"memory": GIB}, io_devices={}, protect=False, session=True).memory_min_bytes is None


def test_soft_memory_sets_no_hard_limit_and_tiny_declarations_stay_limits():
    caps = task_limits({"cpu": 0.001, "memory": 1}, io_devices={}, memory_mode="soft")
    assert caps.memory_max_bytes is None
    assert caps.cpu_quota_usec == 1_000 and caps.cpu_weight == 1  # the kernel minimums
    assert caps.memory_high_bytes == 1  # a positive declaration never becomes "no limit"


def test_group_weights_are_proportional_to_the_cpu_allocation():
    # DRF gave A 0.956 cores and B 0.544 (the integration test's host): weights keep 0.956 : 0.544.
    limits = group_limits({"cpu": 1.5, "memory": GIB}, {"A": {"cpu": 0.956, "memory": 64 * MIB},
                                                        "B": {"cpu": 0.544, "memory": 900 * MIB}},
                          protection={"B": (0, 900 * MIB)}, io_devices={}, io_sharing={})
    # The largest gets 5000: room to grow and shrink without rewriting the others.
    assert limits["A"].cpu_weight == 5_000 and limits["B"].cpu_weight == round(0.544 / 0.956 * 5_000)
    assert limits["A"].cpu_quota_usec is None  # a guarantee, not a fence: no group quota
    assert limits["B"].memory_low_bytes == 900 * MIB  # its protection, as given
    assert limits["B"].memory_min_bytes is None and limits["A"].memory_low_bytes is None  # 0: not written


def test_saturated_groups_are_held_to_their_guarantee():
    allocations = {"A": {"cpu": 0.956}, "B": {"cpu": 0.544}}
    free = group_limits({"cpu": 1.5}, allocations, protection={}, io_devices={}, io_sharing={})
    assert free["A"].cpu_quota_usec is None and free["B"].cpu_quota_usec is None  # guarantees lend
    held = group_limits({"cpu": 1.5}, allocations, protection={}, io_devices={}, io_sharing={}, saturated=True,
                        previous=free)
    # The plan is A_g itself; cgroup v1's "no parent quota below a child's" is the v1 driver's
    # (tests/cgroups/test_v1_kernel.py: a parent quota stays at least its children's).
    assert (held["A"].cpu_quota_usec, held["B"].cpu_quota_usec) == (95_600, 54_400)
    assert held["A"].cpu_weight == free["A"].cpu_weight


def test_held_groups_share_the_reserve_the_system_leaves_idle():
    """Issue 42: the default capacity is the host's 2 cores less a 0.25 reserve; held to 0.875
    each, two busy groups got 1.75 of the 2 cores while nothing else ran, where with no
    governor each had a core. Held now, each has its guarantee's share of the whole host."""
    allocations = {"A": {"cpu": 0.875}, "B": {"cpu": 0.875}}
    scale = hold_scale(1.75, 0.25)
    held = group_limits({"cpu": 1.75}, allocations, protection={}, io_devices={}, io_sharing={}, saturated=True,
                        hold_scale=scale)
    assert (held["A"].cpu_quota_usec, held["B"].cpu_quota_usec) == (100_000, 100_000)
    assert root_limits({"cpu": 1.75}, lent_cpu=0.25).cpu_quota_usec == 200_000
    assert hold_scale(1.5, 0.0) == 1.0 and hold_scale(0.0, 0.25) == 1.0  # nothing lent; nothing divided


GUARANTEES = {"A": 0.5, "B": 0.5, "C": 0.0}


@pytest.mark.parametrize(("use", "saturated"), [
    ({"A": 0.46, "B": 0.46}, True),    # each uses ≥ 90 % of its guarantee
    ({"A": 0.40, "B": 0.60}, True),    # the CPU is busy and weights left A short: hold
    ({"A": 0.40, "B": 0.50}, False),   # A uses 80 %, B no more than its own: nobody is short
    ({"A": 0.20, "B": 0.80}, False),   # A leaves some idle: B may borrow it
    ({"A": 0.95}, False),              # B not sampled yet: idle
])
def test_cpu_is_saturated_when_every_group_wants_its_guarantee(use, saturated):
    assert cpu_saturated(GUARANTEES, use, capacity=1.0, held=False, satisfied={}) == (saturated, {})
    assert cpu_saturated({}, use, capacity=1.0, held=False, satisfied={})[0] is False


def test_a_group_that_used_less_while_held_is_believed_until_it_wants_more():
    # Held, A used 0.35 of its 0.5: it does not want it all; release, and do not hold again
    # while it stays there, busy as the CPU may be with B's borrowing.
    hold, satisfied = cpu_saturated(GUARANTEES, {"A": 0.35, "B": 0.5}, capacity=1.0, held=True, satisfied={})
    assert (hold, satisfied) == (False, {"A": 0.35})
    hold, satisfied = cpu_saturated(GUARANTEES, {"A": 0.36, "B": 0.64}, capacity=1.0, held=False,
                                    satisfied=satisfied)
    assert (hold, satisfied) == (False, {"A": 0.35})
    # Its use rises by 10 % of its guarantee: it wants more again, and weights left it short.
    assert cpu_saturated(GUARANTEES, {"A": 0.41, "B": 0.59}, capacity=1.0, held=False,
                         satisfied=satisfied) == (True, {})


def test_equal_growth_of_every_share_changes_no_weight():
    before = proportional_weights({"A": 0.25, "B": 0.5})
    after = proportional_weights({"A": 0.5, "B": 1.0})
    assert before == after == {"A": 2_500, "B": 5_000}
    assert proportional_weights({"A": 0.0, "B": 0.0}) == {"A": 1, "B": 1}
    assert proportional_weights({"A": 1e-9, "B": 1.0})["A"] == 1


def test_a_new_largest_group_moves_the_scale_not_every_weight():
    before = proportional_weights({f"g{i}": 0.1 for i in range(50)})
    after = proportional_weights({**{f"g{i}": 0.1 for i in range(50)}, "new": 0.15}, previous=before)
    assert {g: w for g, w in after.items() if g != "new"} == before  # 50 groups kept: one file to write
    assert after["new"] / before["g0"] == pytest.approx(1.5, rel=0.005)


def test_a_lower_water_level_rewrites_neither_the_level_groups_nor_the_met_ones():
    # 10 groups at the level (0.1 core each), 10 whose small demand is met (0.02); one more
    # group arrives and the level drops to 0.09: the met ones, written with room, keep theirs.
    level = {f"s{i}": 0.1 for i in range(10)}
    met = {f"m{i}": 0.02 for i in range(10)}
    before = proportional_weights({**level, **met}, met=set(met))
    after = proportional_weights({**{g: 0.09 for g in level}, **met, "new": 0.09}, previous=before, met=set(met))
    assert {g: w for g, w in after.items() if g != "new"} == before
    assert after["new"] == before["s0"]


@given(st.dictionaries(st.sampled_from("ABCDEFGH"), st.floats(0, 4), min_size=1),
       st.dictionaries(st.sampled_from("ABCDEFGH"), st.integers(1, 10_000)),
       st.sets(st.sampled_from("ABCDEFGH")))
def test_kept_weights_stay_in_the_ratios_of_the_amounts(amounts, previous, met):
    weights = proportional_weights(amounts, previous=previous, met=met)
    assert weights.keys() == amounts.keys() and all(1 <= w <= 10_000 for w in weights.values())
    if max(amounts.values()) > 0:
        assert max(weights.values()) >= 2_490  # 2500 less the tolerance of a kept weight
    # Pairs precise enough to compare (weights ≥ 250: rounding ≤ 0.2 %) keep the amounts'
    # ratio within the tolerances (0.2 % each, 0.2 % rounding each); a met group is not below it.
    top = max(amounts.values())
    fractions = {g: a / top for g, a in amounts.items()} if top > 0 else {}
    exact = [g for g, f in fractions.items() if g not in met and weights[g] >= 250 and f > 0]
    for a in exact:
        scale = weights[a] / fractions[a]
        for b, fraction in fractions.items():
            if b not in exact and b not in met or fraction * scale < 250:
                continue
            ratio = weights[b] / (fraction * scale)
            assert ratio >= 1 - 0.009 and (b in met or ratio <= 1 + 0.009), (a, b, weights)
    assert proportional_weights(amounts, previous=weights, met=met) == weights  # stable


def test_io_guarantee_is_a_weight_where_the_device_shares_and_a_hard_limit_where_not():
    capacity = {"cpu": 2, "memory": GIB, "io.sda.read": 100, "io.sda.write": 100,
                "io.sdb.read": 100, "io.sdb.write": 100}
    # A: 60 of sda's reads (share 0.6); B: 20 reads + 20 writes (0.2 + 0.2 = 0.4).
    allocations = {"A": {"cpu": 1, "io.sda.read": 60, "io.sdb.read": 60},
                   "B": {"cpu": 1, "io.sda.read": 20, "io.sda.write": 20, "io.sdb.write": 40}}
    limits = group_limits(capacity, allocations, protection={}, io_devices={"sda": "8:0", "sdb": "8:16"},
                          io_sharing={"sda": "io.weight", "sdb": "io.max"})
    [weight_a], [weight_b] = limits["A"].io_weight, limits["B"].io_weight
    assert (weight_a.device, weight_a.weight, weight_b.weight) == ("8:0", 5_000, round(0.4 / 0.6 * 5_000))
    # sdb has no proportional controller: its guarantee falls back to io.max = A_g.
    assert [(io.device, io.rbps, io.wbps) for io in limits["A"].io_max] == [("8:16", 60, None)]
    assert [(io.device, io.rbps, io.wbps) for io in limits["B"].io_max] == [("8:16", None, 40)]


def test_the_root_is_capped_at_the_capacity_in_cpu_and_memory_not_io():
    root = root_limits({"cpu": 1.75, "memory": 4 * GIB, "io.sda.read": 100, "io.sda.write": 50},
                       protection=(GIB, 3 * GIB))
    assert root.cpu_quota_usec == 175_000 and (root.memory_min_bytes, root.memory_low_bytes) == (GIB, 3 * GIB)
    assert root.memory_max_bytes == 4 * GIB  # bounds soft-mode tasks too (v1 has no memory.high)
    assert root.io_max == ()  # a throttled parent would undo the children's io.weight split


@pytest.mark.parametrize(("cpu", "expected"), [
    ({"a": 2.0, "b": 1.0}, {"a": "0-1", "b": "2"}),
    # 1.6 + 1.4 = 3 cores: a gets 1 + its 0.6 remainder, b 1 (remainder 0.4 loses).
    ({"a": 1.6, "b": 1.4}, {"a": "0-1", "b": "2"}),
    ({"a": 0.4, "b": 2.6}, {"a": None, "b": "0-2"}),
])
def test_cores_mode_hands_out_disjoint_whole_cores_by_largest_remainder(cpu, expected):
    assert assign_cores(cpu, [0, 1, 2, 3]) == expected


def test_cores_mode_writes_cpusets_on_groups_only():
    limits = group_limits({"cpu": 3, "memory": GIB}, {"a": {"cpu": 2.0}}, protection={}, io_devices={},
                          io_sharing={}, cpu_mode="cores", cpus=[0, 1, 4])
    assert limits["a"].cpuset_cpus == "0-1"
    assert task_limits({"cpu": 2.0, "memory": GIB}, io_devices={}).cpuset_cpus is None


def test_the_minimum_weight_stays_while_the_largest_keeps_its_own():
    # Found by the property above: exact weights 5000, 0.25 and 0.25 are written 5000, 1, 1;
    # the next plan kept the ones by moving A to 10000 (B and C exact at 0.5), and the one
    # after moved it back. Both 1s are what any scale below 30,000 gives them.
    amounts = {"A": 2.0, "B": 0.0001, "C": 0.0001}
    first = proportional_weights(amounts)
    assert first == {"A": 5000, "B": 1, "C": 1}
    assert proportional_weights(amounts, previous=first) == first
