"""What ``governor replay`` replays: the history journal's entries (:mod:`governor.daemon.history`)
gathered into one :class:`Job` per task, with what was recorded of it. Pure: entries in."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

__all__ = ["Capacities", "Job", "Recorded", "recorded"]

# What the daemon divided over a period: (unix seconds from which it was in force, capacity in
# cores, bytes, bytes/s, devices), oldest first; the first is in force from the period's start.
Capacities = Sequence[tuple[float, Mapping[str, float]]]


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
        named_group: whether its launch named its group (``--group``), None when not known
            (the period holds no launch entry of it, or one journaled before entries said).
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
    named_group: bool | None = None

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
        capacity: what the daemon divided at the period's end (its last ``daemon`` entry, at
            a start or a reload), or None when the journal holds none before the period's end.
        capacities: what it divided over the period (:data:`Capacities`): the capacity in
            force at its start, then each start's or reload's in it; empty when none is known.
    """

    since: float
    until: float
    jobs: list[Job]
    refusals: list[dict] = field(default_factory=list)
    capacity: dict[str, float] | None = None
    capacities: Capacities = ()

    def capacity_seconds(self, name: str) -> float:
        """``name``'s capacity summed over the period × seconds (cores × s, bytes × s): what
        the host offered, its reloads counted; 0 when no capacity is known."""
        ends = [at for at, _ in self.capacities[1:]] + [self.until]
        return sum(float(capacity.get(name, 0.0)) * max(0.0, end - max(at, self.since))
                   for (at, capacity), end in zip(self.capacities, ends))

    def run_s(self, job: Job) -> float:
        """How long ``job`` ran, seconds: as recorded, or up to :attr:`until` when it still ran."""
        start = job.started if job.started is not None else job.arrived
        return max(0.0, (job.ended if job.ended is not None else self.until) - start)


def recorded(entries: Iterable[Mapping], since: float, until: float) -> Recorded:
    """Gather the journal's ``entries`` (oldest first) of the period ``since``–``until`` (unix
    seconds). The capacity in force at ``since`` is the last ``daemon`` entry's before it, however
    old (a daemon may serve for months), then each ``daemon`` entry's in the period (a start
    or a reload, which may change it); a task whose launch came before the period is taken from its
    start or end entry (an end carries the task's start and demand); an entry of unknown kind
    is ignored."""
    jobs: dict[str, Job] = {}
    refusals, capacity, capacities = [], None, []
    for entry in entries:
        kind, at = entry.get("kind"), float(entry["at"])
        if at >= until:
            continue
        if kind == "daemon":
            capacity = {name: float(amount) for name, amount in entry.get("capacity", {}).items()}
            if at <= since or not capacities:
                capacities = [(min(at, since), capacity)]
            elif capacity != capacities[-1][1]:
                capacities.append((at, capacity))
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
                    refusals, capacity, tuple(capacities))


def _job(entry: Mapping, at: float) -> Job:
    arrived = at
    if entry.get("kind") == "end" and entry.get("started") is not None:
        arrived = float(entry["started"])
    return Job(str(entry["task"]), str(entry["group"]), str(entry.get("user")), int(entry.get("uid", -1)),
               {name: float(amount) for name, amount in (entry.get("demand") or {}).items()},
               bool(entry.get("session")), arrived, named_group=entry.get("group_named"))


def _order(task_id: str) -> tuple:
    """Task ids in the order the daemon gave them out (numbers), others after."""
    return (0, int(task_id), "") if task_id.isdigit() else (1, 0, task_id)
