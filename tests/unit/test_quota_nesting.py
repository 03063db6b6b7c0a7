"""cgroup v1's rule for nested CFS quotas as bookkeeping (cgroups/nesting.py): a parent is
written at least its largest child's quota, and a child with no quota of its own passes its
children's up (the kernel bounds it by its parent's)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from governor.cgroups.nesting import QuotaNesting

PERIOD = 100_000


def test_a_parent_is_at_least_its_largest_childs_quota():
    quotas = QuotaNesting()
    quotas.set("g/t", 200_000, PERIOD)
    quotas.set("g/u", 50_000, PERIOD)
    assert quotas.largest_child("g") == 2.0
    assert quotas.at_least_children("g", 100_000, PERIOD) == 200_000
    quotas.set("g", 250_000, PERIOD)
    assert quotas.at_least_children("", 100_000, PERIOD) == 250_000  # g's own quota, not its children's


def test_a_child_without_a_quota_passes_its_childrens_up_until_they_go():
    # A group not held to its guarantee (no quota) with a 1.5-core task: the root may not go
    # below 1.5 cores (v1 would refuse the root's write with EINVAL), and may once the task goes.
    quotas = QuotaNesting()
    quotas.set("", 200_000, PERIOD)
    quotas.set("A/task-1", 150_000, PERIOD)
    assert quotas.at_least_children("", 100_000, PERIOD) == 150_000
    quotas.set("A", 120_000, PERIOD)  # held again: its own quota bounds its task
    assert quotas.largest_child("") == 1.2
    quotas.set("A", None, PERIOD)
    assert quotas.largest_child("") == 1.5
    quotas.set("A/B/task-2", 300_000, PERIOD)  # two levels without a quota
    assert quotas.largest_child("") == 3.0
    quotas.drop("A/B/task-2")
    quotas.drop("A/task-1")
    assert quotas.at_least_children("", 100_000, PERIOD) == 100_000


def test_groups_without_a_quota_pass_a_tasks_cap_up_through_every_level():
    quotas = QuotaNesting()
    quotas.set("science/physics/task-1", 150_000, PERIOD)  # neither science nor physics held
    assert quotas.largest_child("") == quotas.largest_child("science") == 1.5
    quotas.set("science", 120_000, PERIOD)  # held: its own quota bounds what is below it
    assert quotas.largest_child("") == 1.2 and quotas.largest_child("science") == 1.5
    quotas.drop("science")
    quotas.drop("science/physics/task-1")
    assert quotas.largest_child("") == 0.0


_PLACES = ["", "A", "A/task-1", "A/task-2", "A/B", "A/B/task-3", "C", "C/task-4"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_PLACES), st.one_of(st.none(), st.integers(10_000, 400_000))), max_size=25))
def test_the_largest_childs_quota_kept_between_changes_is_what_the_quotas_in_force_give(changes):
    # The largest child's quota is kept until a quota below it changes (the root's, written at
    # every launch, looked at every task's cap): asked between changes, it must equal what a
    # fresh index of the quotas in force gives.
    quotas, in_force = QuotaNesting(), {}
    for rel, quota in changes:
        if quota is None and rel:
            quotas.drop(rel)
        else:
            quotas.set(rel, quota, PERIOD)
        if quota is None:
            in_force.pop(rel, None)
        else:
            in_force[rel] = quota
        quotas.largest_child(_PLACES[len(changes) % len(_PLACES)])  # something is kept meanwhile
        fresh = QuotaNesting()
        for place, kept in in_force.items():
            fresh.set(place, kept, PERIOD)
        assert [quotas.largest_child(p) for p in _PLACES] == [fresh.largest_child(p) for p in _PLACES]


def test_nothing_is_kept_of_a_task_cgroup_once_its_quota_is_dropped():
    # Every task's cgroup is asked its largest child (V1Quotas.nested) before its caps are
    # written: what was kept for it must go with it, or a daemon keeps a little of every task
    # it ever ran (a review measured 12 MB after 100,000 launches).
    quotas = QuotaNesting()
    for i in range(100):
        rel = f"science/physics/task-{i}"
        quotas.at_least_children(rel, 50_000, PERIOD)
        quotas.set(rel, 50_000, PERIOD)
        assert quotas.largest_child("") == 0.5
        quotas.drop(rel)
    assert quotas.largest_child("") == 0.0
    assert not [rel for rel in quotas._largest if "task" in rel]  # (the kept table itself: nothing else shows it)
