"""Issue 32, points 1 and 2: the queue's head reserves only the resources it lacks, and every
group's unused guarantee of an admitted resource is kept as headroom (DESIGN.md §2)."""

from hypothesis import given
from hypothesis import strategies as st

from governor.core.admission import Guarantee, Waiting, admit
from governor.core.queue import Entry, queue_view, reason
from governor.core.state import Task

GIB = 1024**3
MIB = 1024**2
# The measured host of issue 32: 1.6 cores, 8G, three GPUs.
HOST = {"cpu": 1.6, "memory": 8.0 * GIB, "gpu": 3.0}


def test_a_task_waiting_for_gpus_reserves_no_memory_and_cpu_only_work_starts_beside_it():
    # Break 1: alice holds 2 GPUs and 64M; bob's 2-GPU, 7G task lacks GPUs only. Carol's 1G,
    # no GPU, fits beside that reservation: before, bob reserved his 7G too and carol waited
    # "for 64.0M to free" as long as alice's GPU job ran.
    running = {"lab-a": {"cpu": 0.1, "memory": 64 * MIB, "gpu": 2.0}}
    bob = Waiting("179", "lab-b", {"cpu": 0.1, "memory": 7 * GIB, "gpu": 2.0}, "bob")
    carol = Waiting("180", "lab-a", {"cpu": 0.1, "memory": 1 * GIB}, "carol")
    result = admit(HOST, running, {"lab-a": 1}, {}, [bob, carol])
    assert result.admitted == ["180"]
    assert (result.reserved_for, result.reserved) == ("179", {"gpu": 2.0})
    # Carol took memory bob could get: he lacks it only while she runs, and reserves it then.
    assert result.short["179"] == {"gpu": 1.0, "memory": 64 * MIB} and result.beside == ["180"]
    # A GPU task of another group takes none of what bob waits for.
    dave = Waiting("181", "lab-c", {"cpu": 0.1, "memory": 64 * MIB, "gpu": 1.0}, "dave")
    assert admit(HOST, running, {"lab-a": 1}, {}, [bob, dave]).admitted == []


def test_an_idle_groups_memory_guarantee_is_kept_free_of_other_groups():
    # Break 2: lab-b (bob) is guaranteed 1G and idle; lab-a's tasks may take 7G, not 7.5G, so
    # bob's 1G starts at once. Before, lab-a took 7.5G and bob waited.
    guarantee = [Guarantee("lab-b", {"memory": 1 * GIB}, frozenset({"lab-b"}))]
    running = {"lab-a": {"memory": 6.5 * GIB}}
    big = Waiting("1", "lab-a", {"memory": 1 * GIB})
    result = admit(HOST, running, {"lab-a": 1}, {}, [big], guarantees=guarantee)
    assert result.admitted == [] and result.short["1"] == {"memory": 0.5 * GIB}
    assert result.headroom["memory"] == [("lab-b", 1 * GIB)]
    assert reason("1", "lab-a", big.demand, result) == ("memory: waits for 512.0M to free (held by lab-a 6.5G); "
                                                        "kept free for group lab-b's guarantee")
    half = Waiting("2", "lab-a", {"memory": 0.5 * GIB})
    assert admit(HOST, running, {"lab-a": 1}, {}, [half], guarantees=guarantee).admitted == ["2"]
    bob = Waiting("3", "lab-b", {"memory": 1 * GIB})
    after = {"lab-a": {"memory": 7 * GIB}}
    assert admit(HOST, after, {"lab-a": 2}, {}, [big, bob], guarantees=guarantee).admitted == ["3"]


def test_a_child_guarantee_is_kept_inside_its_parents():
    # dept is guaranteed 2G, lab-a (inside it) 1G. lab-x, dept's other child, may use dept's
    # other 1G but not lab-a's.
    guarantees = [Guarantee("dept", {"memory": 2 * GIB}, frozenset({"dept", "lab-a", "lab-x"})),
                  Guarantee("lab-a", {"memory": 1 * GIB}, frozenset({"lab-a"}))]
    running = {"other": {"memory": 6 * GIB}}
    one = Waiting("1", "lab-x", {"memory": 1 * GIB})
    two = Waiting("2", "lab-x", {"memory": 1 * GIB})
    result = admit(HOST, running, {"other": 1}, {}, [one, two], guarantees=guarantees)
    assert result.admitted == ["1"] and result.short["2"] == {"memory": 1 * GIB}


groups = st.sampled_from(["a", "b", "c"])
tasks = st.lists(st.tuples(groups, st.integers(1, 8), st.integers(0, 2)), min_size=1, max_size=14)


def _shares(running, capacity):
    return {g: max(d.get(r, 0) / capacity[r] for r in capacity if capacity[r]) for g, d in running.items()}


@given(held=tasks, queued=tasks)
def test_the_head_is_never_delayed_by_a_task_admitted_beside_it(held, queued):
    # Memory in G and GPUs on an 8G, 3-GPU host. The tasks started beside the reservation take
    # none of a resource the head reserved, and of the others the head lacks at most what they
    # took: once they end, it lacks nothing but what it reserved (paper §4.1: a task that needs
    # none of the exhausted resource starts; DESIGN.md §2).
    capacity = {"memory": 8.0, "gpu": 3.0}
    running: dict[str, dict[str, float]] = {}
    for group, memory, gpus in held:
        if sum(d["memory"] for d in running.values()) + memory <= 8 and \
                sum(d["gpu"] for d in running.values()) + gpus <= 3:
            d = running.setdefault(group, {"memory": 0.0, "gpu": 0.0})
            d["memory"] += memory
            d["gpu"] += gpus
    queue = [Waiting(str(i), "q" + g, {"memory": float(m), "gpu": float(n)}) for i, (g, m, n) in enumerate(queued)]
    result = admit(capacity, running, {}, {}, queue)
    assert (result.reserved_for is None) == (not result.beside and not result.reserved)
    if result.reserved_for is None:
        return
    beside = [w for w in queue if w.task in result.beside]
    lacks = result.short[result.reserved_for]
    assert set(result.reserved) <= set(lacks)
    for r in capacity:
        took = sum(w.demand[r] for w in beside)
        if r in result.reserved:
            assert took == 0
        else:
            assert lacks.get(r, 0.0) <= took


@given(events=st.lists(st.tuples(st.sampled_from(["g", "h", "x", "y", "end"]), st.integers(1, 4)), max_size=30),
       g_has=st.integers(1, 4), h_has=st.integers(0, 4))
def test_a_task_within_its_groups_guarantee_never_waits_on_another_group(events, g_has, h_has):
    # g and h are guaranteed g_has and h_has G of an 8G host; x and y have none. Tasks arrive
    # in any order and some end ("end" n: the n-th running task, cyclically). Whenever a task of
    # g or h is its group's first waiting task and fits in what its guarantee leaves unused, it
    # starts in that pass, whatever the others queued or hold.
    capacity, has = {"memory": 8.0}, {"g": float(g_has), "h": float(h_has)}
    kept = [Guarantee(group, {"memory": amount}, frozenset({group})) for group, amount in has.items() if amount]
    running: list[Waiting] = []
    queue: list[Waiting] = []
    for i, (group, size) in enumerate(events):
        if group == "end":
            if running:
                running.pop(size % len(running))
        else:
            queue.append(Waiting(str(i), group, {"memory": float(size)}))
        demands: dict[str, dict[str, float]] = {}
        for task in running:
            demands.setdefault(task.group, {"memory": 0.0})["memory"] += task.demand["memory"]
        result = admit(capacity, demands, {}, {}, queue, guarantees=kept)
        for group_name, amount in has.items():
            head = next((w for w in queue if w.group == group_name), None)
            own = demands.get(group_name, {}).get("memory", 0.0)
            if head is not None and own + head.demand["memory"] <= amount:
                assert head.task in result.admitted, f"{group_name}'s {head.demand}G waits, {own}G of {amount}G used"
        running += [w for w in queue if w.task in result.admitted]
        queue = [w for w in queue if w.task not in result.admitted]


def test_on_a_one_gpu_host_a_task_behind_the_reservation_waits_for_one_gpu_not_two():
    # Issue 32, point 5: the reservation was added to what must free ("gpu: waits for 2 GPUs to
    # free" on a 1-GPU host). What must free is what the task lacks; the reason says who is first.

    host = {"cpu": 4.0, "memory": 8.0 * GIB, "gpu": 1.0}
    running = {"A": {"memory": GIB, "gpu": 1.0}}
    queue = [Waiting("2", "B", {"memory": GIB, "gpu": 1.0}), Waiting("3", "C", {"memory": GIB, "gpu": 1.0})]
    result = admit(host, running, {"A": 1}, {}, queue)
    assert result.reserved_for == "2" and result.short["3"] == {"gpu": 1.0}
    assert reason("3", "C", queue[1].demand, result) == (
        "gpu: waits for 1 GPU to free (held by A 1); what frees goes first to task 2, of a group with a lower "
        "dominant share for its weight")
    assert reason("2", "B", queue[0].demand, result) == "gpu: waits for 1 GPU to free (held by A 1)"


def test_a_task_behind_one_of_its_own_group_is_told_that_one_is_ahead_of_it_in_its_group():
    # An attacker's finding: two tasks of one group read "task 2, of a group with a lower
    # dominant share, is served first": the holder was of the same group, ahead of it in its line.
    host = {"cpu": 4.0, "memory": 8.0 * GIB, "gpu": 1.0}
    queue = [Waiting("2", "B", {"memory": GIB, "gpu": 1.0}), Waiting("3", "B", {"memory": GIB, "gpu": 1.0})]
    result = admit(host, {"A": {"memory": GIB, "gpu": 1.0}}, {"A": 1}, {}, queue)
    assert result.reserved_for == "2"
    entries = {w.task: Entry(Task(w.task, w.group, 1, 0, "root", ("x",), w.demand, 0.0), 0.0) for w in queue}
    [first, second] = queue_view(entries, result)
    assert second["reason"] == ("gpu: waits for 1 GPU to free (held by A 1); what frees goes first to task 2, "
                                "ahead of it in its group")
    assert first["reason"] == "gpu: waits for 1 GPU to free (held by A 1)"
    other = admit(host, {"A": {"memory": GIB, "gpu": 1.0}}, {"A": 1}, {}, [queue[0], Waiting("3", "C", queue[1].demand)])
    assert reason("3", "C", queue[1].demand, other, "B").endswith(
        "task 2, of a group with a lower dominant share for its weight")
