"""What the history and replay tests share (issue 47): a clock they move by hand, which the
daemon and its journal read, and a task ended at a later time on it."""

import time


class Clock:
    """Unix seconds, moved by the test (``clock.now += …``); starts at the real time, by which
    the journal's writer keeps its files."""

    def __init__(self):
        self.now = time.time()

    def __call__(self):
        return self.now


async def end_later(daemon, clock: Clock, seconds: float, group: str, task_id: str) -> None:
    """``seconds`` later on ``clock``, task ``task_id`` of ``group`` (in-memory driver) exits and
    the daemon settles what that allows."""
    clock.now += seconds
    daemon.hierarchy.driver.procs[f"{group}/task-{task_id}"] = []
    daemon.exits.check([task_id], "exit")
    await daemon.settled()
