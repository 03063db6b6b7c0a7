"""Memory protection follows the promise: memory.min = a group's guarantee, memory.low = what it
reserved up to its floor, every level covering the one below (governor.core.protection)."""

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.config.load import parse_config
from governor.core.protection import memory_protection
from governor.wire.protocol import Peer, ReloadRequest, SetWeightRequest
from support.daemons import launch, make_daemon, on_loop
from support.sessions import session_daemon

GIB = 1024**3


def test_the_guarantee_is_min_and_the_reservation_up_to_the_floor_is_low():
    # Capacity 8G. A (floor 1/2, guarantee 2G) reserved 6G: low = min(6G, 4G) = 4G.
    # B (floor 1/2, no guarantee) reserved 1G: low 1G. C (floor 0, guarantee 3G) reserved
    # nothing yet: low = its guarantee, 3G (min ≤ low).
    root, groups = memory_protection(8 * GIB, {"A": 6 * GIB, "B": GIB, "C": 0},
                                     {"A": 2 * GIB, "C": 3 * GIB}, {"A": 0.5, "B": 0.5}, {})
    assert groups == {"A": (2 * GIB, 4 * GIB), "B": (0, GIB), "C": (3 * GIB, 3 * GIB)}
    assert root == (5 * GIB, 8 * GIB)  # the sums (not more than the capacity)


def test_a_parent_carries_at_least_its_childrens_sum():
    # science (no guarantee of its own, floor 1/2 of 8G) → physics (guarantee 3G, reserved
    # 1G, floor 1/4) and chemistry (no guarantee, reserved 3G, floor 1/4: low 2G).
    # science's own low would be min(4G, 4G) = 4G; its children's lows add up to 5G.
    reserved = {"physics": GIB, "chemistry": 3 * GIB, "science": 4 * GIB}
    root, groups = memory_protection(8 * GIB, reserved, {"physics": 3 * GIB},
                                     {"physics": 0.25, "chemistry": 0.25, "science": 0.5},
                                     {"physics": "science", "chemistry": "science"})
    assert groups["physics"] == (3 * GIB, 3 * GIB) and groups["chemistry"] == (0, 2 * GIB)
    assert groups["science"] == (3 * GIB, 5 * GIB)
    assert root == groups["science"]
    assert list(groups) == list(reserved)  # the caller's order


@st.composite
def trees(draw):
    """Up to 6 groups, each nesting under an earlier one or at the top, with reservations,
    guarantees and floors in bytes and fractions of a capacity."""
    capacity = draw(st.integers(1, 64)) * GIB
    count = draw(st.integers(1, 6))
    names = [f"g{i}" for i in range(count)]
    parents = {}
    for i, name in enumerate(names[1:], 1):
        parent = draw(st.integers(-1, i - 1))
        if parent >= 0:
            parents[name] = names[parent]
    amount = st.integers(0, 2 * capacity)
    reserved = {name: draw(amount) for name in names}
    guarantees = {name: draw(amount) for name in names if draw(st.booleans())}
    floors = {name: draw(st.floats(0, 1)) for name in names}
    return capacity, reserved, guarantees, floors, parents


@given(trees())
def test_min_is_at_most_low_parents_cover_children_and_nothing_passes_the_capacity(tree):
    capacity, reserved, guarantees, floors, parents = tree
    root, groups = memory_protection(capacity, reserved, guarantees, floors, parents)
    for group, (least, low) in groups.items():
        assert 0 <= least <= low <= capacity
        assert least >= min(capacity, guarantees.get(group, 0))  # the guarantee is never reclaimed
        children = [groups[c] for c, p in parents.items() if p == group]
        assert least >= min(capacity, sum(c[0] for c in children)) * (1 - 1e-12)
        assert low >= min(capacity, sum(c[1] for c in children)) * (1 - 1e-12)
    top = [groups[g] for g in groups if g not in parents]
    assert root == pytest.approx((min(capacity, sum(t[0] for t in top)), min(capacity, sum(t[1] for t in top))))
    assert 0 <= root[0] <= root[1] <= capacity


TREE_CONFIG = """
[capacity]
cpu = 2
memory = "4G"
[groups.D]
guarantee = { memory = "1G" }
[groups.A]
parent = "D"
users = ["root"]
guarantee = { memory = "512M" }
[groups.B]
users = ["root"]
[sessions]
enabled = false
"""


def test_the_daemon_writes_the_protection_at_every_level_and_a_reload_turns_it_off(tmp_path):
    daemon = make_daemon(tmp_path, TREE_CONFIG)
    launch(daemon, 100, group="A", cpu=0.5, memory=GIB // 4)
    launch(daemon, 200, group="B", cpu=0.5, memory=3 * GIB)
    files = protection_files(daemon)
    # A: min its 512M guarantee, low max(512M, min(256M reserved, 1/2 of 4G)) = 512M; D covers it
    # with its own 1G guarantee. B reserved 3G, its floor 1/2 of 4G: low 2G. The root: the sums.
    assert files["D/A"] == {"memory.min": str(GIB // 2), "memory.low": str(GIB // 2)}
    assert files["D"] == {"memory.min": str(GIB), "memory.low": str(GIB)}
    assert files["B"] == {"memory.low": str(2 * GIB)}
    assert files[""] == {"memory.min": str(GIB), "memory.low": str(3 * GIB)}
    assert files["D/A/task-1"] == {"memory.min": str(GIB // 4), "memory.low": str(GIB // 4)}  # its declaration
    # set-weight B 3: its floor 3/4 of 4G covers its whole 3G reservation (the floors are not kept stale).
    asyncio.run(daemon.requests.handle(SetWeightRequest("B", 3.0), Peer(pid=1, uid=0, gid=0)))
    assert protection_files(daemon)["B"] == {"memory.low": str(3 * GIB)}

    path = tmp_path / "governor.toml"
    path.write_text(TREE_CONFIG.replace("[groups.D]", '[enforcement]\nmemory_protection = false\n[groups.D]'))
    daemon.reloads.load_config = lambda: parse_config(path.read_text(), str(path))
    asyncio.run(daemon.requests.handle(ReloadRequest(), Peer(pid=1, uid=0, gid=0)))
    assert not any(protection_files(daemon).values())  # the toggle: none left anywhere, tasks' included


def protection_files(daemon) -> dict[str, dict[str, str]]:
    driver = daemon.hierarchy.driver
    return {rel: {f: v for f, v in driver.in_force(rel).items() if f in ("memory.min", "memory.low") and v != "0"}
            for rel in ("", "D", "D/A", "B", "D/A/task-1", "B/task-2")}


def test_a_sessions_cap_is_protected_nowhere(tmp_path):
    # Issue 43, break 2: an idle session's 3G cap made its group's memory.low 2G (its floor's
    # share of 4G) and its own memory.min and memory.low 3G. A session was never admitted:
    # what governor protects is the guarantees and the admitted tasks' declarations.
    daemon = session_daemon(tmp_path)
    assert on_loop(daemon, lambda: daemon.sessions.govern_process(500, 1))  # session-1 in A, cap 3G
    launch(daemon, 100, group="B", cpu=0.5, memory=GIB)
    driver = daemon.hierarchy.driver
    protected = {rel: (driver.in_force(rel).get("memory.min"), driver.in_force(rel).get("memory.low"))
                 for rel in ("", "A", "A/session-1", "B", "B/task-1")}
    assert protected == {"": (None, str(GIB)), "A": (None, None), "A/session-1": ("0", "0"), "B": (None, str(GIB)),
                         "B/task-1": (str(GIB), str(GIB))}
