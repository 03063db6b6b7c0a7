"""Hypothesis strategies for allocation problems with exact Fraction numbers."""

from fractions import Fraction

from hypothesis import strategies as st

from governor.core.model import GroupDemand

amounts = st.fractions(min_value=Fraction(1, 4), max_value=10, max_denominator=6)
weights = st.sampled_from([Fraction(1), Fraction(1), Fraction(2), Fraction(3), Fraction(1, 2)])
task_counts = st.one_of(st.none(), st.integers(min_value=0, max_value=12))


@st.composite
def demand_vectors(draw, resources, positive=False):
    """A demand vector over ``resources`` with at least one positive entry; zeros are common
    unless ``positive`` asks for every entry > 0 (the paper's own setting)."""
    entry = amounts if positive else st.one_of(st.just(Fraction(0)), amounts)
    vector = {r: draw(entry) for r in resources}
    if not any(vector.values()):
        vector[draw(st.sampled_from(resources))] = draw(amounts)
    return vector


@st.composite
def problems(draw, min_resources=1, max_resources=4, min_groups=1, max_groups=5, positive=False):
    """``(capacity, groups)``: capacities in [1, 40], weights in {1/2, 1, 2, 3}, bounded or
    unbounded tasks; ``positive`` makes every group demand every resource."""
    count = draw(st.integers(min_resources, max_resources))
    resources = [f"r{j}" for j in range(count)]
    capacity = {r: draw(st.fractions(min_value=1, max_value=40, max_denominator=4)) for r in resources}
    groups = [
        GroupDemand(f"g{i}", draw(demand_vectors(resources, positive)), draw(weights), draw(task_counts))
        for i in range(draw(st.integers(min_groups, max_groups)))
    ]
    return capacity, groups


def cap(tasks):
    """A task count as a number to compare with (unbounded is infinite)."""
    return float("inf") if tasks is None else tasks


def tasks_from(allocation, demand):
    """How many tasks of ``demand`` fit in the resource vector ``allocation``."""
    return min(allocation[r] / d for r, d in demand.items() if d > 0)


def two_hundred_leaves_in_twenty_nodes():
    """``(tree, groups)`` of H-DRF at a department's scale, floats: four top nodes, twenty below
    them (weights 1-3), ten leaf groups under each, demanding cpu, memory and io (one task each)."""
    from governor.core.hdrf import TreeNode

    tree = [TreeNode(f"top{i}") for i in range(4)]
    tree += [TreeNode(f"n{i}", parent=f"top{i % 4}", weight=1 + i % 3) for i in range(20)]
    groups = []
    for i in range(200):
        tree.append(TreeNode(f"g{i}", parent=f"n{i % 20}"))
        groups.append(GroupDemand(f"g{i}", {"cpu": 0.5 + i % 7, "memory": 1.0 + (i * 37) % 13, "io": float(i % 3)},
                                  tasks=1))
    return tree, groups
