"""Settle's pure step: a snapshot in, the effects out, with no daemon, loop or cgroup."""

from governor.config.load import parse_config
from governor.core.state import Task, Tasks
from governor.daemon.settle_step import Snapshot, step

GIB = 1024**3
CONFIG = parse_config("""
[capacity]
cpu = 2
memory = "4G"
[groups.A]
users = ["root"]
[groups.B]
users = ["root"]
[sessions]
enabled = false
""", "test.toml")


def task(task_id: str, group: str, memory_gib: float) -> Task:
    return Task(task_id, group, int(task_id) * 100, 0, "root", ("work",), {"cpu": 1.0, "memory": memory_gib * GIB}, 0.0)


def snapshot(running: list[Task], waiting: list[Task], *, saturated: bool = False, refill: bool = False) -> Snapshot:
    tasks = Tasks()
    for each in running:
        tasks.add(each)
    return Snapshot(config=CONFIG, capacity={"cpu": 2.0, "memory": 4.0 * GIB}, devices={}, weight=lambda group: 1.0,
                    tasks=tasks, usage={}, waiting=waiting, cpu_saturated=saturated, refill=refill, now=1234.5)


def test_only_what_fits_beside_the_running_starts_placed_and_stamped_now():
    effects = step(snapshot([task("1", "A", 3)], [task("2", "B", 1), task("3", "B", 1)]))
    assert [(t.id, t.place, t.started, t.devices) for t in effects.starts] == [("2", "B", 1234.5, {})]
    assert list(effects.admission.admitted) == ["2"]
    assert not effects.release and not effects.refill


def test_a_start_releases_the_cpu_hold_and_asks_for_a_refill():
    effects = step(snapshot([], [task("2", "A", 1)], saturated=True))
    assert [t.id for t in effects.starts] == ["2"] and effects.release and effects.refill


def test_nothing_starting_keeps_the_hold_and_refills_only_when_asked():
    effects = step(snapshot([task("1", "A", 4)], [task("2", "B", 1)], saturated=True, refill=True))
    assert effects.starts == () and not effects.release and effects.refill
