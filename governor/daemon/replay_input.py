"""What ``governor replay`` replays: the history journal's entries (:mod:`governor.daemon.history`)
gathered into one :class:`Job` per task, with what was recorded of it. Pure: entries in."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

__all__ = ["Job", "Recorded", "recorded"]


@dataclass(frozen=True)
class Job:
    """One task of the history as it was recorded.

    Attributes:
        task: its id; group, user, uid: where and whose; demand: its declared demand (cores,
            bytes, bytes/s, devices); session: a user's session (never queued).
        arrived: unix seconds its launch was queued (a session's: its start).
        started, ended: unix seconds it started and ended, None when the journal of the period
            has no such entry (it never started; it still ran when the period ended).
        memory_peak: its memory peak, bytes (the end's counters), or None.
        cpu_s: the CPU seconds it used (the end's counters), or None.
    """

    task: str
    group: str
    user: str
    uid: int
    demand: Mapping[str, float]
    session: bool
    arrived: float
    started: float | None = None
    ended: float | None = None
    memory_peak: float | None = None
    cpu_s: float | None = None

    @property
    def waited_s(self) -> float | None:
        """Seconds it waited in the queue as recorded, None if it never started."""
        return None if self.started is None else max(0.0, self.started - self.arrived)


@dataclass(frozen=True)
class Recorded:
    """A period of the history.

    Attributes:
        since, until: the period, unix seconds.
        jobs: the tasks launched, started or ended in it, by arrival.
        refusals: the refused launches' entries (group asked, demand asked, code).
        capacity: what the daemon divided (its last ``daemon`` entry), or None when the
            period holds none.
    """

    since: float
    until: float
    jobs: list[Job]
    refusals: list[dict] = field(default_factory=list)
    capacity: dict[str, float] | None = None

    def run_s(self, job: Job) -> float:
        """How long ``job`` ran, seconds: as recorded, or up to :attr:`until` when it still ran."""
        start = job.started if job.started is not None else job.arrived
        return max(0.0, (job.ended if job.ended is not None else self.until) - start)


def recorded(entries: Iterable[Mapping], since: float, until: float) -> Recorded:
    """Gather the journal's ``entries`` (oldest first) of the period ``since``–``until`` (unix
    seconds). The capacity is the last ``daemon`` entry's before ``until``, however old (a
    daemon may serve for months); a task whose launch came before the period is taken from its
    start or end entry (an end carries the task's start and demand); an entry of unknown kind
    is ignored."""
    jobs: dict[str, Job] = {}
    refusals, capacity = [], None
    for entry in entries:
        kind, at = entry.get("kind"), float(entry["at"])
        if at >= until:
            continue
        if kind == "daemon":
            capacity = {name: float(amount) for name, amount in entry.get("capacity", {}).items()}
            continue
        if at < since:
            continue
        if kind == "refusal":
            refusals.append(dict(entry))
            continue
        if kind not in ("launch", "start", "session", "end"):
            continue
        job = jobs.get(entry["task"]) or _job(entry, at)
        if kind in ("start", "session"):
            job = replace(job, started=at, arrived=at - float(entry.get("waited_s") or 0.0)
                          if job.arrived >= at else job.arrived)
        elif kind == "end":
            job = replace(job, ended=at, started=job.started if job.started is not None else entry.get("started"),
                          memory_peak=entry.get("memory_peak"), cpu_s=entry.get("cpu_s"))
        jobs[entry["task"]] = job
    return Recorded(since, until, sorted(jobs.values(), key=lambda job: (job.arrived, _order(job.task))),
                    refusals, capacity)


def _job(entry: Mapping, at: float) -> Job:
    arrived = at
    if entry.get("kind") == "end" and entry.get("started") is not None:
        arrived = float(entry["started"])
    return Job(str(entry["task"]), str(entry["group"]), str(entry.get("user")), int(entry.get("uid", -1)),
               {name: float(amount) for name, amount in entry.get("demand", {}).items()},
               bool(entry.get("session")), arrived)


def _order(task_id: str) -> tuple:
    """Task ids in the order the daemon gave them out (numbers), others after."""
    return (0, int(task_id), "") if task_id.isdigit() else (1, 0, task_id)
