"""``governor replay``: the history's arrivals run again under a proposed config, in simulated
time, through the daemon's own pure steps (issue 47; docs/admin.md, "History and replay"):
admission, the queue, quotas and guarantees by settle's step
(:func:`governor.daemon.settle_step.step`), the groups' shares by the refill's progressive
filling (:func:`governor.daemon.filling.fill`, H-DRF with the tree's quotas), fair share over
time by :class:`governor.core.fairshare.FairShare`. No second implementation: what admits a
task here is what admits it in the daemon. Pure: no I/O, no clock.

What cannot be known is not guessed: a task runs as long as it ran (more CPU would not have
made it faster here); a session holds its recorded memory peak all its life (its use over time
was not journaled); a launch that never started (its client left, or ``wait: false``) is left
out; a launch refused under the recorded config stays refused (its group and demand were never
resolved); a GPU is free again the moment its task ends (how long its device node stayed open
was not journaled); the host's other load (foreign subtrees) is not replayed.
"""

from __future__ import annotations

import heapq
from types import SimpleNamespace
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace as replaced

from governor.config import resources
from governor.config.load import Config
from governor.core.fairshare import FairShare
from governor.core.headroom import check_beside_headroom
from governor.core.quotas import check_within_quotas
from governor.core.state import Task, Tasks
from governor.daemon.filling import fill
from governor.daemon.replay_input import Capacities, Job, Recorded
from governor.daemon.settle_step import Snapshot, step
from governor.errors import FillingDiverged, RequestError

__all__ = ["Run", "configured_weights", "proposed_group", "refusal_under", "replay", "timeline"]

# At one instant: what frees first, then a reload's capacity, then who arrives.
_END, _CAPACITY, _SESSION, _ARRIVAL = 0, 1, 2, 3


@dataclass
class Run:
    """One way the period went, recorded or replayed.

    Attributes:
        waits: task id → seconds it waited in the queue (launched tasks that started).
        refused: task id → the error's code, for recorded launches the config refuses at the
            door (the journal's refusals are counted beside them: :mod:`replay_report`).
        starts: task id → unix seconds it started.
        cpu_s, memory_s: group → its share of the host's CPU (its filling's allocation) and of
            its memory (what it reserved), each × seconds, summed over the period.
        user_cpu_s, user_memory_s: the same per user.
        still_queued: task id → seconds waited so far, for launches still queued at the end.
        fair_share: the decayed usage kept as the daemon keeps it, or None with fair share off.
        groups: task id → the group it ran in, where the config put it in another than the
            recorded one (:func:`proposed_group`).
    """

    waits: dict[str, float] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    starts: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    memory_s: dict[str, float] = field(default_factory=dict)
    user_cpu_s: dict[str, float] = field(default_factory=dict)
    user_memory_s: dict[str, float] = field(default_factory=dict)
    still_queued: dict[str, float] = field(default_factory=dict)
    fair_share: FairShare | None = None
    groups: dict[str, str] = field(default_factory=dict)


def proposed_group(config: Config, job: Job, unix_groups: Collection[str]) -> tuple[str | None, str | None]:
    """The group ``job`` runs in under ``config``, as the daemon's launch decides it
    (:func:`governor.host.access.launch_group`; a session: ``Config.group_for``), given its
    user's ``unix_groups`` (today's: the journal keeps none).

    A launch that named its group (:attr:`Job.named_group`) keeps it where its user may use it
    (root: any group the config has), and is refused there otherwise; one that did not, or
    whose launch entry does not say, keeps its recorded group where its user may still use it,
    else goes to the user's default group under ``config``.

    Returns:
        (group, None); (None, the refusal's code: ``forbidden``, ``not_found``) for a launch
        ``config`` refuses; (None, None) for a session of a user ``config`` does not govern.
    """
    allowed = config.allowed_groups(job.user, unix_groups)
    if job.session:
        return (allowed[0] if allowed else None), None
    if job.group in allowed or (job.uid == 0 and config.weight_of(job.group) is not None):
        return job.group, None
    if job.named_group:
        return None, "not_found" if config.weight_of(job.group) is None else "forbidden"
    return (allowed[0], None) if allowed else (None, "forbidden")


def refusal_under(config: Config, capacity: Mapping[str, float], job: Job) -> str | None:
    """The code a launch of ``job`` gets from ``config`` at the door (before any queue), or
    None when it is let in: a group the config has not (``not_found``), a demand no quota or
    capacity could ever admit (``exceeds_capacity``). The daemon's own checks."""
    if config.weight_of(job.group) is None:
        return "not_found"
    for entry in resources.admitted():
        if job.demand.get(entry.name, 0.0) > capacity.get(entry.name, 0.0):
            return "exceeds_capacity"
    try:
        check_within_quotas(config, job.group, job.demand)
        check_beside_headroom(config, capacity, job.group, job.demand)
    except RequestError as error:
        return error.code
    return None


def configured_weights(config: Config, fair_share: FairShare, group: str) -> dict[str, float]:
    """The configured weight of every group fair share compares ``group`` with: the config's
    groups, those with past usage, and ``group`` (1 for a per-user group)."""
    return {g: config.weight_of(g) or 1.0 for g in {*(rule.name for rule in config.groups), *fair_share.usage, group}}


def _task(job: Job, started: float, config: Config) -> Task:
    return Task(job.task, job.group, 0, job.uid, job.user, (), dict(job.demand), started, job.task, None,
                config.place(job.group))


class _Accounts:
    """The shares over time of one run: fed the running tasks at each instant something changes."""

    def __init__(self, run: Run, config: Config, capacity: Mapping[str, float], peaks: Mapping[str, float]):
        self.run, self.config, self.capacity, self.peaks = run, config, capacity, peaks
        self.at: float | None = None
        self.shares: tuple[dict, dict, dict, dict] = ({}, {}, {}, {})
        # The tasks whose shares are held from ``at`` on, worked out only when they are charged:
        # most calls come at the instant of the last (before and after each change there), and
        # each working-out is a filling (two a change made a replay of 100,000 tasks 44 s).
        self._pending: Tasks | None = None
        half_life = config.fairshare_half_life_s
        run.fair_share = FairShare(half_life) if half_life else None

    def weight(self, group: str) -> float:
        """``group``'s weight as the daemon's refill weighs it: effective under fair share."""
        configured = self.config.weight_of(group) or 1.0
        if self.run.fair_share is None or self.at is None:
            return configured
        weights = configured_weights(self.config, self.run.fair_share, group)
        return self.run.fair_share.effective_weights(self.at, weights, self.config.parents).get(group, configured)

    def advance(self, now: float, tasks: Tasks) -> None:
        """Charge the shares held since the last call up to ``now``, then take ``tasks``'s. Those
        are worked out when next charged, as they are then: the caller changes ``tasks`` (and
        :attr:`capacity`) only at the instant of its last call, before its next."""
        if self.at is not None and now > self.at:
            if self._pending is not None:
                self.shares, self._pending = self._shares(self._pending), None
            seconds = now - self.at
            for totals, shares in zip((self.run.cpu_s, self.run.memory_s, self.run.user_cpu_s,
                                       self.run.user_memory_s), self.shares):
                for key, share in shares.items():
                    totals[key] = totals.get(key, 0.0) + share * seconds
            if self.run.fair_share is not None:
                dominant = {g: max(self.shares[0].get(g, 0.0), self.shares[1].get(g, 0.0))
                            for g in {*self.shares[0], *self.shares[1]}}
                self.run.fair_share.add(now, dominant, seconds)
        self.at = now
        self._pending = tasks

    def _shares(self, tasks: Tasks) -> tuple[dict, dict, dict, dict]:
        cpu_total, memory_total = self.capacity.get("cpu", 0.0), self.capacity.get("memory", 0.0)
        cpu, memory, user_cpu, user_memory = {}, {}, {}, {}
        demands = tasks.demands()
        try:
            allocation = fill(self.config, self.capacity, self.weight, demands) if demands else None
        except FillingDiverged:
            allocation = None  # the daemon keeps its last plan; here the instant counts no CPU
        for group, demand in demands.items():
            given = allocation.groups[group].allocation.get("cpu", 0.0) if allocation else 0.0
            cpu[group] = float(given) / cpu_total if cpu_total else 0.0
        for task in tasks:
            held = self.peaks.get(task.id, 0.0) if task.is_session else task.demand.get("memory", 0.0)
            share = held / memory_total if memory_total else 0.0
            memory[task.group] = memory.get(task.group, 0.0) + share
            user_memory[task.user] = user_memory.get(task.user, 0.0) + share
            # A group's CPU is divided among its tasks by their declared cores.
            group_cpu = demands[task.group].get("cpu", 0.0)
            if group_cpu:
                held_cpu = cpu[task.group] * task.demand.get("cpu", 0.0) / group_cpu
                user_cpu[task.user] = user_cpu.get(task.user, 0.0) + held_cpu
        return cpu, memory, user_cpu, user_memory


def _session_peaks(period: Recorded) -> dict[str, float]:
    return {job.task: float(job.memory_peak or 0.0) for job in period.jobs if job.session}


def _schedule(capacity: Mapping[str, float] | Capacities) -> list[tuple[float, Mapping[str, float]]]:
    """``capacity`` as :data:`~governor.daemon.replay_input.Capacities`: one mapping is in force
    all along."""
    return [(float("-inf"), capacity)] if isinstance(capacity, Mapping) else list(capacity)


def timeline(period: Recorded, config: Config, capacity: Mapping[str, float] | Capacities) -> Run:
    """The period as it was recorded, its shares counted as :func:`replay` counts them (the
    allocation by ``config``'s filling, so that both sides are measured alike), each instant's
    against the capacity then in force (one mapping, or :data:`Capacities`)."""
    run = Run()
    schedule = _schedule(capacity)
    accounts = _Accounts(run, config, schedule[0][1], _session_peaks(period))
    changes: list[tuple[float, int, int, Job | Mapping]] = [(at, _CAPACITY, 0, amounts) for at, amounts in schedule[1:]]
    for job in period.jobs:
        if job.started is None:
            continue
        if not job.session:
            run.waits[job.task] = job.waited_s
        run.starts[job.task] = job.started
        if period.run_s(job) > 0:  # one that ended as it started held nothing (its end sorts first)
            changes.append((job.started, _ARRIVAL, int(job.session), job))
            changes.append((job.started + period.run_s(job), _END, 0, job))
    tasks = Tasks()
    for at, kind, _, job in sorted(changes, key=lambda change: (change[0], change[1])):
        accounts.advance(min(at, period.until), tasks)
        if kind == _CAPACITY:
            accounts.capacity = job
        elif kind == _END:
            tasks.remove(job.task)
        elif config.weight_of(job.group) is not None:
            tasks.add(_task(job, at, config))
        accounts.advance(min(at, period.until), tasks)
    accounts.advance(period.until, tasks)
    return run


def replay(period: Recorded, config: Config, capacity: Mapping[str, float] | Capacities,
           unix_groups: Mapping[str, Collection[str]] | None = None) -> Run:
    """The period again under ``config``: each recorded launch arrives when it arrived, waits
    as settle's step decides and runs as long as it ran; each session starts and ends as it
    did. Refusals recorded stay refusals; a launch ``config`` refuses at the door
    (:func:`refusal_under`) is refused, and so is one queued when a reload's capacity could
    never hold it, as the daemon's reload refuses it.

    Each task runs in the group ``config`` puts it in (:func:`proposed_group`): a change of
    membership moves it, or refuses its launch.

    Args:
        period: the recorded period (:func:`governor.daemon.replay_input.recorded`).
        config: the proposed config; capacity: what it divides (cores, bytes, bytes/s), one
            mapping for the whole period or :data:`Capacities` (a reload's from its time on).
        unix_groups: user name → the Unix groups they are in (None: nobody's are known, only
            the config's ``users`` lists and ``"*"`` place users).
    """
    run = Run()
    schedule = _schedule(capacity)
    capacity = schedule[0][1]
    accounts = _Accounts(run, config, capacity, _session_peaks(period))
    events: list[tuple[float, int, str, Job | Mapping]] = [(at, _CAPACITY, f"~{index}", amounts)
                                                          for index, (at, amounts) in enumerate(schedule[1:])]
    for job in period.jobs:
        if job.started is None:
            continue  # never started: its client left, or it would not wait; when is not known
        if job.session:
            if period.run_s(job) == 0:
                continue  # it held nothing, and its end would sort before its start
            events.append((job.started, _SESSION, job.task, job))
            events.append((job.started + period.run_s(job), _END, job.task, job))
        else:
            events.append((job.arrived, _ARRIVAL, job.task, job))
    heapq.heapify(events)
    tasks, waiting, arrived = Tasks(), [], {}
    unnamed = _unnamed_devices(capacity)
    while events and events[0][0] < period.until:  # what starts after the period is not its
        now = events[0][0]
        accounts.advance(now, tasks)
        while events and events[0][0] == now:
            _, kind, _, job = heapq.heappop(events)
            if kind == _CAPACITY:
                capacity = accounts.capacity = job
                unnamed = _unnamed_devices(capacity)
                refused = {task.id: code for task in waiting
                           if (code := refusal_under(config, capacity, arrived[task.id][1])) is not None}
                run.refused.update(refused)
                waiting = [task for task in waiting if task.id not in refused]
            elif kind == _END:
                ended = tasks.remove(job.task)
                for slot in ended.held() if ended is not None else ():
                    tasks.drained(slot)  # how long its node stayed open is not journaled: at once
            else:
                group, code = proposed_group(config, job, (unix_groups or {}).get(job.user, ()))
                if group is not None and group != job.group:
                    job = replaced(job, group=group)
                    run.groups[job.task] = group
                if kind == _SESSION:
                    if group is not None:
                        tasks.add(_task(job, now, config))
                    continue
                code = code or refusal_under(config, capacity, job)
                if code is not None:
                    run.refused[job.task] = code
                    continue
                waiting.append(_task(job, now, config))
                arrived[job.task] = (now, job)
        if not waiting:
            accounts.advance(now, tasks)
            continue
        usage = {task.cgroup: {"memory": accounts.peaks.get(task.id, 0.0)} for task in tasks.sessions()}
        effects = step(Snapshot(config=config, capacity=capacity, devices=unnamed, weight=accounts.weight, tasks=tasks,
                                usage=usage, waiting=tuple(waiting), cpu_saturated=False, refill=False, now=now))
        started = {task.id for task in effects.starts}
        for task in effects.starts:
            tasks.add(task)
            queued_at, job = arrived.pop(task.id)
            run.waits[task.id] = now - queued_at
            run.starts[task.id] = now
            heapq.heappush(events, (now + period.run_s(job), _END, task.id, job))
        waiting = [task for task in waiting if task.id not in started]
        accounts.advance(now, tasks)
    accounts.advance(period.until, tasks)
    for task in waiting:  # still queued when the period ended: waited at least this long
        run.still_queued[task.id] = period.until - arrived[task.id][0]
    return run


def _unnamed_devices(capacity: Mapping[str, float]) -> dict[str, SimpleNamespace]:
    """The devices ``capacity`` counts of each device class, for settle's step: a task's device
    is replayed by index, as their identities (UUIDs) are not journaled."""
    return {entry.name: SimpleNamespace(devices=[SimpleNamespace(identity=None)] * round(capacity[entry.name]))
            for entry in resources.RESOURCES if entry.kind is resources.ResourceKind.DEVICE and entry.name in capacity}
