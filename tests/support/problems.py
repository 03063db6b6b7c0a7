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
