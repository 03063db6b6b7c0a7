"""What the quotas count (:func:`governor.core.quotas.quotas`) comes from the group sums
:class:`~governor.core.state.Tasks` keeps, not from every running task at every settle: through
random adds, removes and updates of tasks, sessions and login sessions in a two-level tree with
group limits and a ``user_limit``, it stays what summing every covered task one by one gives."""

import math

from hypothesis import given
from hypothesis import strategies as st

from governor.config import resources
from governor.config.load import load_config
from governor.core.admission import Waiting
from governor.core.quotas import quotas
from governor.core.state import Task, Tasks, one_session_each

G = 1024**3
CONFIG = load_config({"groups": {
    "science": {"limit": {"memory": "4G"}},
    "lab": {"parent": "science", "users": ["alice", "bob"], "user_limit": {"cpu": 2, "memory": "2G"}},
    "lab2": {"parent": "science", "users": ["alice"], "user_limit": {"memory": "1G"}},
    "ops": {"users": ["carol"], "limit": {"memory": "1G"}},
}}, "tree.toml")
USERS = {"alice": 1000, "bob": 1001, "carol": 1002}
GROUPS = ["lab", "lab2", "ops"]
# Every waiting task asks every quota above it: each group's limit and each user's user_limit.
WAITING = [Waiting(f"w{g}{u}", group, {"memory": G}, user) for g, group in enumerate(GROUPS) for u, user in
           enumerate(USERS)]


def _task(kind: str, number: int, group: str, user: str, demand: dict) -> Task:
    uid = USERS[user]
    task_id = {"task": str(number), "session": f"session-{uid}", "login": f"login-{uid}"}[kind]
    return Task(task_id, group, 100 + number, uid, user, ("w",), demand, 0.0)


def _per_task(tasks: Tasks) -> list[tuple[str, dict]]:
    """The quotas' use summed task by task over every running task, as settle did before."""
    found = quotas(CONFIG, tasks, WAITING)
    used = {quota.name: {} for quota in found}
    for task in one_session_each(tasks):
        probe = Waiting(task.id, task.group, task.demand, task.user)
        for quota in found:
            if quota.covers(probe):
                for resource in quota.limit:
                    used[quota.name][resource] = used[quota.name].get(resource, 0.0) + task.demand.get(resource, 0.0)
    return sorted(used.items())


_DEMANDS = st.fixed_dictionaries({}, optional={"cpu": st.sampled_from([0.0, 0.5, 1.5]),
                                               "memory": st.sampled_from([0.0, 0.3 * G, G, 2.5 * G])})
_STEPS = st.lists(st.tuples(st.sampled_from(["add", "remove", "update"]), st.sampled_from(["task", "session", "login"]),
                            st.integers(0, 5), st.sampled_from(GROUPS), st.sampled_from(sorted(USERS)), _DEMANDS),
                  max_size=30)


@given(_STEPS)
def test_the_quotas_count_what_summing_every_covered_task_counts_through_adds_removes_and_updates(steps):
    assert "memory" in {entry.name for entry in resources.admitted()}  # the door holds memory
    tasks = Tasks()
    for action, kind, number, group, user, demand in steps:
        task = _task(kind, number, group, user, demand)
        running = tasks.get(task.id)
        if action == "add" and running is None:
            tasks.add(task)
        elif action == "remove":
            tasks.remove(task.id)
        elif action == "update" and running is not None:
            tasks.update(_task(kind, number, running.group, running.user, demand))
        got = sorted((quota.name, quota.used) for quota in quotas(CONFIG, tasks, WAITING))
        want = _per_task(tasks)
        assert [name for name, _ in got] == [name for name, _ in want]
        for (name, used), (_, expected) in zip(got, want):
            assert used.keys() == expected.keys(), name  # a quota nothing covers counts nothing
            assert all(math.isclose(used[r], expected[r], rel_tol=1e-12, abs_tol=1e-6) for r in used), (name, used)
