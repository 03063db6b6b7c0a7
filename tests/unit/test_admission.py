"""The admission queue: memory must fit; waiting tasks are served in discrete-DRF order
(lowest weighted dominant share first; ties: fewer running tasks, then the group name)."""

from hypothesis import given
from hypothesis import strategies as st

from governor.core.admission import Quota, Waiting, admit
from governor.config.resources import admitted as admitted_resources

GIB = 1024**3
MIB = 1024**2
CAPACITY = {"cpu": 4.0, "memory": 1.0 * GIB}


def waiting(task, group, cpu, memory):
    return Waiting(task, group, {"cpu": cpu, "memory": memory})


def test_a_task_whose_memory_fits_starts_and_one_that_does_not_waits():
    # A runs 800M; C's 100M fits beside it (1G) and starts.
    running = {"A": {"cpu": 0.5, "memory": 800 * MIB}}
    result = admit(CAPACITY, running, {"A": 1}, {}, [waiting("3", "C", 0.5, 100 * MIB)])
    assert result.admitted == ["3"] and result.waiting == [] and result.reserved_for is None
    assert result.free["memory"] == GIB - 900 * MIB
    assert result.holders["memory"] == [("A", 800 * MIB), ("C", 100 * MIB)]


def test_the_lowest_share_that_does_not_fit_holds_a_reservation_nothing_overtakes():
    # A runs 800M (share 800/1024). B (share 0) asks 800M: it does not fit, so it holds what
    # frees; C (share 0 too, after B by name) asks 100M, which fits now but not beside B's
    # reservation: it waits, else every 100M that frees would go to small tasks and B's never.
    running = {"A": {"cpu": 0.5, "memory": 800 * MIB}}
    result = admit(CAPACITY, running, {"A": 1}, {}, [waiting("2", "B", 0.5, 800 * MIB),
                                                    waiting("3", "C", 0.5, 100 * MIB)])
    assert result.admitted == [] and result.waiting == ["2", "3"]
    assert (result.reserved_for, result.reserved) == ("2", {"memory": 800 * MIB})
    # A task that needs none of the exhausted resource still starts beside it (paper §4.1).
    cpu_only = Waiting("4", "D", {"cpu": 0.5})
    assert admit(CAPACITY, running, {"A": 1}, {}, [waiting("2", "B", 0.5, 800 * MIB), cpu_only]).admitted == ["4"]


def test_a_large_task_of_an_idle_group_starts_within_one_task_lifetime_of_a_busy_group():
    # Issue 22, point 2: A launches 100M tasks back to back and holds nearly all memory; B (no
    # task) asks 512M. Each round one of A's tasks ends and A queues another; before
    # reservations A's always fitted first and B waited for ever.
    capacity = {"cpu": 4.0, "memory": 1000 * MIB}
    a_running = 10  # 1000M
    queue = [waiting("b", "B", 0.5, 512 * MIB)]
    for round_ in range(1, 20):
        a_running -= 1  # one of A's ends
        queue.append(waiting(f"a{round_}", "A", 0.1, 100 * MIB))
        running = {"A": {"cpu": 0.1 * a_running, "memory": 100 * MIB * a_running}}
        result = admit(capacity, running, {"A": a_running}, {}, queue)
        if "b" in result.admitted:
            break
        a_running += sum(1 for task in result.admitted if task.startswith("a"))
        queue = [w for w in queue if w.task not in result.admitted]
    assert round_ == 6  # 512M: six of A's 100M tasks freed, none started meanwhile


def test_the_group_with_the_lower_dominant_share_starts_first():
    # Shares: B runs <1 core, 100M> → 1/4 (cpu); C runs <0.5, 200M> → max(1/8, 200/1024) = 0.195.
    # 600M free fits only one 500M task: C's, whose share is lower.
    running = {"A": {"cpu": 0.1, "memory": 124 * MIB}, "B": {"cpu": 1.0, "memory": 100 * MIB},
               "C": {"cpu": 0.5, "memory": 200 * MIB}}
    queue = [waiting("7", "B", 0.5, 500 * MIB), waiting("8", "C", 0.5, 500 * MIB)]
    result = admit(CAPACITY, running, {"A": 1, "B": 1, "C": 1}, {}, queue)
    assert result.admitted == ["8"] and result.waiting == ["7"]


def test_weights_divide_the_share_and_ties_go_to_fewer_tasks_then_the_name():
    # Same share 1/4 for B and C, but B weighs 2: B's weighted share 1/8 is lower.
    running = {"B": {"cpu": 1.0, "memory": 0}, "C": {"cpu": 1.0, "memory": 0}}
    queue = [waiting("1", "C", 0.1, 600 * MIB), waiting("2", "B", 0.1, 600 * MIB)]
    assert admit(CAPACITY, running, {"B": 1, "C": 1}, {"B": 2.0}, queue).admitted == ["2"]
    # Equal weights and shares: fewer running tasks first (C runs 1, B runs 3).
    assert admit(CAPACITY, running, {"B": 3, "C": 1}, {}, queue).admitted == ["1"]
    # All equal: by name.
    assert admit(CAPACITY, running, {"B": 1, "C": 1}, {}, queue).admitted == ["2"]


def test_a_groups_first_task_blocks_its_later_ones():
    running = {"A": {"cpu": 0.5, "memory": 600 * MIB}}
    queue = [waiting("2", "B", 0.5, 600 * MIB), waiting("3", "B", 0.1, 10 * MIB)]
    result = admit(CAPACITY, running, {"A": 1}, {}, queue)
    assert result.admitted == [] and result.waiting == ["2", "3"]


def test_several_start_at_once_when_memory_frees():
    queue = [waiting(str(i), g, 0.5, 300 * MIB) for i, g in enumerate("ABAB")]
    result = admit(CAPACITY, {}, {}, {}, queue)
    # Alternating by share: A, B, A (900M); the fourth does not fit.
    assert result.admitted == ["0", "1", "2"] and result.waiting == ["3"]


tasks = st.lists(st.tuples(st.sampled_from("ABCD"), st.integers(1, 1024)), max_size=12)


@given(running=tasks, queued=tasks)
def test_admission_never_overcommits_memory_and_loses_no_task(running, queued):
    demands: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for group, mib in running:
        demands.setdefault(group, {"memory": 0.0})["memory"] += mib * MIB
        counts[group] = counts.get(group, 0) + 1
    queue = [waiting(str(i), g, 0.25, mib * MIB) for i, (g, mib) in enumerate(queued)]
    result = admit(CAPACITY, demands, counts, {}, queue)
    assert sorted(result.admitted + result.waiting, key=int) == [w.task for w in queue]
    used = sum(d["memory"] for d in demands.values())
    admitted = sum(w.demand["memory"] for w in queue if w.task in result.admitted)
    if admitted:
        assert used + admitted <= CAPACITY["memory"] * (1 + 1e-9)
    # Nothing that waits fits now: the reservation's holder is too large, and the head of every
    # other group that still waits does not fit beside the reservation.
    heads = {}
    for w in queue:
        if w.task in result.waiting:
            heads.setdefault(w.group, w)
    assert (result.reserved_for is None) == (not heads)
    assert [r.name for r in admitted_resources()] == ["memory", "gpu"] and result.reserved == ({"memory": next(
        w.demand["memory"] for w in queue if w.task == result.reserved_for)} if heads else {})
    for head in heads.values():
        kept = 0 if head.task == result.reserved_for else result.reserved["memory"]
        assert used + admitted + kept + head.demand["memory"] > CAPACITY["memory"] or used > CAPACITY["memory"]
    if heads:
        assert result.waiting[0] == result.reserved_for  # position 1


def test_a_task_past_its_groups_limit_waits_without_a_reservation():
    # L's subtree may declare 300M; it runs 250M. Its 100M task fits the host, not the limit:
    # it waits, told why, and holds nothing back, so M's 500M task starts.
    limit = Quota("group D's limit", {"memory": 300 * MIB}, {"memory": 250 * MIB}, frozenset({"L", "L2"}))
    running = {"L": {"cpu": 0.5, "memory": 250 * MIB}}
    queue = [waiting("2", "L", 0.5, 100 * MIB), waiting("3", "M", 0.5, 500 * MIB)]
    result = admit(CAPACITY, running, {"L": 1}, {}, queue, [limit])
    assert result.admitted == ["3"] and result.waiting == ["2"] and result.reserved_for is None
    assert result.limited == {"2": "group D's limit: memory 250.0M of 300.0M declared by running tasks, this one "
                                    "wants 100.0M"}
    # the limit counts the tasks it admits: two 40M tasks of L, only the first fits under 300M
    two = [waiting("4", "L2", 0.1, 40 * MIB), waiting("5", "L", 0.1, 40 * MIB)]
    assert admit(CAPACITY, running, {"L": 1}, {}, two, [limit]).admitted == ["4"]


def test_a_member_past_the_user_limit_waits_and_the_groups_other_members_go_on():
    alice = Quota("alice's user_limit in group L", {"cpu": 1.0}, {"cpu": 0.75}, frozenset({"L"}), "alice")
    queue = [Waiting("2", "L", {"cpu": 0.5, "memory": MIB}, "alice"), Waiting("3", "L", {"cpu": 0.1, "memory": MIB},
                                                                               "alice"),
             Waiting("4", "L", {"cpu": 0.5, "memory": MIB}, "bob")]
    result = admit(CAPACITY, {"L": {"cpu": 0.75, "memory": MIB}}, {"L": 1}, {}, queue, [alice])
    # alice's small late task does not overtake her large early one; bob's starts
    assert result.admitted == ["4"] and result.waiting == ["2", "3"] and list(result.limited) == ["2", "3"]
    # Her later task says what holds it, not "its turn" (issue 32, point 5).
    assert result.limited["3"] == f"behind task 2, held by {result.limited['2']}"
