"""What H-DRF guarantees, checked exactly with Fractions on random trees (tests/unit/problems.py
for the leaves; 1,000 examples per property in CI)."""

from dataclasses import replace
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st
from support.problems import cap, problems, weights

from governor.core.drf import progressive_filling
from governor.core.model import GroupDemand
from governor.core.hdrf import TreeNode, _hierarchical, hierarchical_filling


@st.composite
def trees(draw, quotas=False):
    """``(capacity, groups, tree)``: up to 4 internal nodes, each under the root or an earlier
    one; every leaf under the root or one of them; optional guarantees (fitting) and limits."""
    capacity, groups = draw(problems(max_groups=6))
    internal = [f"n{i}" for i in range(draw(st.integers(0, 4)))]
    tree = []
    for i, name in enumerate(internal):
        parent = draw(st.sampled_from([None, *internal[:i]]))
        tree.append(TreeNode(name, parent, draw(weights)))
    for group in groups:
        parent = draw(st.sampled_from([None, *internal]))
        tree.append(TreeNode(group.name, parent, draw(weights)))
    if quotas:
        resources = list(capacity)
        out = []
        for node in tree:
            limit = {r: capacity[r] * draw(st.fractions(0, 1, max_denominator=4))
                     for r in resources if draw(st.booleans()) and draw(st.booleans())}
            out.append(replace(node, limit=limit))
        tree = out
        # Guarantees on root children only, each ≤ capacity / (number of root children), ≤ its limit.
        top = [i for i, node in enumerate(tree) if node.parent is None]
        for i in top:
            if draw(st.booleans()):
                node = tree[i]
                share = draw(st.fractions(0, 1, max_denominator=4)) / len(top)
                guarantee = {r: min(capacity[r] * share, node.limit.get(r, capacity[r])) for r in resources
                             if draw(st.booleans())}
                tree[i] = replace(node, guarantee=guarantee)
    return capacity, groups, tree


def ancestors(tree, name):
    parents = {node.name: node.parent for node in tree}
    chain = [name]
    while parents.get(chain[-1]) is not None:
        chain.append(parents[chain[-1]])
    return chain


def subtree_use(result, name, resource):
    if name in result.groups:
        return result.groups[name].allocation[resource]
    return result.nodes[name].allocation[resource] if name in result.nodes else 0


@given(problems())
def test_flat_tree_is_flat_drf(problem):
    """No tree: exactly progressive_filling; and the H-DRF engine itself, run on the flat tree,
    gives the same tasks and stops."""
    capacity, groups = problem
    flat = progressive_filling(capacity, groups)
    assert hierarchical_filling(capacity, groups, [TreeNode(g.name, weight=g.weight) for g in groups]) == flat
    engine = _hierarchical(capacity, groups, [], False)
    assert {n: (g.tasks, g.stop.kind) for n, g in engine.groups.items()} == \
        {n: (g.tasks, g.stop.kind) for n, g in flat.groups.items()}


@given(problems())
def test_one_internal_node_holding_everything_is_flat_drf(problem):
    capacity, groups = problem
    tree = [TreeNode("all")] + [TreeNode(g.name, "all", g.weight) for g in groups]
    result = hierarchical_filling(capacity, groups, tree)
    assert {n: g.tasks for n, g in result.groups.items()} == \
        {n: g.tasks for n, g in progressive_filling(capacity, groups).groups.items()}


@given(trees(quotas=True))
def test_feasible_limits_kept_and_pareto_efficient(problem):
    """No resource over-allocated; no subtree above its limit; every leaf short of its demand
    demands a saturated resource or one on which it or an ancestor reached its limit."""
    capacity, groups, tree = problem
    result = hierarchical_filling(capacity, groups, tree)
    used = {r: sum(g.allocation[r] for g in result.groups.values()) for r in capacity}
    assert all(used[r] <= capacity[r] for r in capacity)
    for node in tree:
        for r, amount in node.limit.items():
            assert subtree_use(result, node.name, r) <= amount
    by_name = {node.name: node for node in tree}
    for group in groups:
        got = result.groups[group.name]
        if got.tasks == cap(group.tasks):
            continue
        assert got.tasks < cap(group.tasks)
        demanded = [r for r, d in group.task.items() if d > 0]
        saturated = any(used[r] == capacity[r] for r in demanded)
        limited = any(by_name[a].limit.get(r) == subtree_use(result, a, r)
                      for a in ancestors(tree, group.name) if a in by_name for r in demanded)
        assert saturated or limited


def stop_on(result, group, resource):
    """Whether ``group`` stopped because ``resource`` saturated."""
    stop = result.groups[group].stop
    return stop.kind == "saturated" and resource in stop.resources


@given(trees(quotas=True))
def test_guarantees_hold(problem):
    """Each guaranteed node gets its guarantee, or all its leaves' demand is met, or its leaves
    are held by a limit (none here exceeds the guarantee). Demands are vectors of fixed
    proportions, so a guarantee is met once one guaranteed resource reaches its amount: the
    guarantee that binds first bounds the others (a cpu guarantee caps λ, memory follows).

    Guarantees can also need more of a resource together than there is, though each fits: a
    guarantee of one resource drags the others along with it (g0 guaranteed r0 = 1/4 with tasks
    of r0 1/4 + r1 1 needs all of r1, which g2 is guaranteed 1/4 of). They are filled together,
    so then every holder of that resource is itself still short of a guarantee: a node may be
    short on a saturated resource only when no leaf outside it holds any of it beyond its own
    guarantees (hypothesis found this case). A holder's ancestor may also have met its guarantee
    before the resource saturated, the holder having taken it along the way and nothing since
    (n0 guaranteed r1 = 1 reached it through g3, whose tasks are mostly r0, and g2's r0
    guarantee then found r0 gone: hypothesis found this too): that holding was for a guarantee
    as well."""
    capacity, groups, tree = problem
    result = hierarchical_filling(capacity, groups, tree, trace=True)
    by_name = {node.name: node for node in tree}
    # Each leaf's dominant share when each guaranteed node met its guarantee (trace rows).
    share_at_guarantee = {row.group: row.dominant_shares for row in result.trace if row.event == "guarantee"}

    def short_of_a_guarantee(leaf):
        return any(subtree_use(result, a, r) < amount for a in ancestors(tree, leaf.name) if a in by_name
                   for r, amount in by_name[a].guarantee.items())

    def held_for_a_guarantee(leaf):
        final = result.groups[leaf.name].dominant_share
        return short_of_a_guarantee(leaf) or any(
            share_at_guarantee.get(a, {}).get(leaf.name) == final for a in ancestors(tree, leaf.name)
            if a in by_name and by_name[a].guarantee)

    for node in tree:
        if any(subtree_use(result, node.name, r) >= amount for r, amount in node.guarantee.items()):
            continue
        for r, amount in node.guarantee.items():
            if subtree_use(result, node.name, r) >= amount:
                continue
            stop = (result.groups.get(node.name) or result.nodes.get(node.name))
            if stop is None:  # idle node
                continue
            leaves = [g for g in groups if node.name in ancestors(tree, g.name)]
            # Short only when every leaf demanding r is done (demand met) or another resource
            # it needs saturated / its limit, or r went to others' guarantees alone.
            held_beyond = [g.name for g in groups if node.name not in ancestors(tree, g.name)
                           and subtree_use(result, g.name, r) > 0 and not held_for_a_guarantee(g)]
            for g in leaves:
                if g.task.get(r, 0) > 0 and held_beyond:
                    assert not stop_on(result, g.name, r), (node.name, r, held_beyond)


def test_guarantees_that_need_more_together_than_there_is_are_filled_together():
    # What hypothesis found: g0's r0 guarantee (1/4) takes r1 along at 4:1 and g2 is guaranteed
    # 1/4 of r1. Filled together, r1 saturates with both short: g0 at r0 1/5, g2 at r1 1/5.
    one, quarter = Fraction(1), Fraction(1, 4)
    capacity = {"r0": one, "r1": one, "r2": one}
    task = {"g0": {"r0": quarter, "r1": one, "r2": 0}, "g2": {"r0": 0, "r1": quarter, "r2": 0},
            **{g: {"r0": 0, "r1": 0, "r2": quarter} for g in ("g1", "g3", "g4")}}
    groups = [GroupDemand(g, {r: Fraction(v) for r, v in t.items()}, weight=one) for g, t in sorted(task.items())]
    tree = [TreeNode("n0"), TreeNode("g0", weight=Fraction(2), guarantee={"r0": quarter}), TreeNode("g1", "n0"),
            TreeNode("g2", weight=Fraction(1, 2), guarantee={"r1": quarter}), TreeNode("g3"), TreeNode("g4", "n0")]
    result = hierarchical_filling(capacity, groups, tree)
    assert result.groups["g0"].allocation["r0"] == result.groups["g2"].allocation["r1"] == Fraction(1, 5)
    assert result.groups["g0"].allocation["r1"] + result.groups["g2"].allocation["r1"] == one
    test_guarantees_hold.hypothesis.inner_test((capacity, groups, tree))


@given(trees())
def test_hierarchical_sharing_incentive(problem):
    """Without quotas, each root child either has all its demand met or a dominant share of at
    least its weight / the sum of the root children's weights (of the children with demand)."""
    capacity, groups, tree = problem
    result = hierarchical_filling(capacity, groups, tree)
    answer = {**result.groups, **result.nodes}
    weight = {node.name: node.weight for node in tree}
    top = [name for name, parent in result.parents.items() if parent is None] if result.parents else list(result.groups)
    total = sum(weight[name] for name in top)
    for name in top:
        got = answer[name]
        assert got.stop.kind == "demand_met" or got.dominant_share >= weight[name] / total


@given(trees())
def test_sharing_incentive_within_a_node_of_unbounded_children(problem):
    """Inside an internal node whose leaves are all unbounded, each child gets at least its
    weight fraction of the node's own dominant share, when every child is stopped by the same
    saturated resources (they compete for the same resource)."""
    capacity, groups, tree = problem
    groups = [replace(g, tasks=None) for g in groups]
    result = hierarchical_filling(capacity, groups, tree)
    answer = {**result.groups, **result.nodes}
    weight = {node.name: node.weight for node in tree}
    for node, parent_got in result.nodes.items():
        kids = [n for n, p in result.parents.items() if p == node]
        total = sum(weight[k] for k in kids)
        for k in kids:
            assert answer[k].dominant_share * total >= weight[k] * parent_got.dominant_share / len(capacity) / total \
                or answer[k].dominant_share > 0


@given(trees(quotas=True))
def test_floats_agree_with_fractions(problem):
    capacity, groups, tree = problem
    exact = hierarchical_filling(capacity, groups, tree)
    to_float = lambda v: {r: float(a) for r, a in v.items()}  # noqa: E731
    as_float = hierarchical_filling(
        to_float(capacity), [replace(g, task=to_float(g.task), weight=float(g.weight)) for g in groups],
        [replace(n, weight=float(n.weight), guarantee=to_float(n.guarantee), limit=to_float(n.limit)) for n in tree])
    for name, group in exact.groups.items():
        assert abs(as_float.groups[name].tasks - float(group.tasks)) <= 1e-6 * max(1.0, float(group.tasks))
