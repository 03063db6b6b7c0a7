"""``governor replay``'s comparison: per group and per user, the period as recorded beside the
period replayed under the proposed config (:mod:`governor.daemon.replay`). Pure; the JSON form
is the one ``--json`` prints and the table shows (docs/admin.md, "History and replay")."""

from __future__ import annotations

import math
from collections.abc import Mapping

from governor.config.load import Config
from governor.daemon.replay import Run, configured_weights
from governor.daemon.replay_input import Recorded

__all__ = ["UNKNOWN", "compare", "percentile"]

# What a replay cannot know, said with every answer rather than guessed.
UNKNOWN = (
    "a task runs as long as it ran: one given more CPU might have ended sooner, one given less later",
    "a session holds its recorded memory peak for its whole life (its use over time is not journaled)",
    "launches that never started (their client left, or they would not wait) are left out",
    "launches refused when recorded stay refused (their group and demand were never resolved)",
    "a task runs in its recorded group where the proposed config lets its user in, else in the user's default "
    "group there (a launch that named its group is refused); Unix group membership is today's",
    "CPU share is each group's guarantee from the filling, not its use (recorded use: cpu_used)",
    "foreign subtrees' load is not replayed; the capacity is each moment's (a reload's), the groups and "
    "weights of the recorded side are --config's, even where a reload or set-weight changed them",
)


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile of ``values`` (``fraction`` 0.5: the median), None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def compare(period: Recorded, recorded: Run, proposed: Run, config: Config) -> dict:
    """The comparison's JSON object.

    Returns:
        ``{"since", "until": unix s, "capacity": {resource: amount} (at the end),
        "capacities": [{"at": unix s, "capacity": …}] (in force from then on: the period's
        start, each reload that changed it), "jobs": count, "refusals": the journal's count,
        "groups": {group: {"recorded": side, "proposed": side}}, "users": {user: ...},
        "unknown": [sentence]}``, a side being ``{"tasks", "refused", "still_queued",
        "wait_p50_s", "wait_p95_s", "cpu_share", "memory_share"}`` (shares: fractions of the
        host averaged over the period), a group's also ``"fair_share"``
        (``{"usage_share", "effective_weight"}`` at the end, with ``[fairshare]`` on, else
        None) and, recorded only, ``cpu_used`` (CPU seconds the tasks used / the host's).
    """
    jobs = {job.task: job for job in period.jobs}
    seconds = max(period.until - period.since, 1e-9)
    report = {"since": period.since, "until": period.until, "capacity": period.capacity,
              "capacities": [{"at": max(at, period.since), "capacity": dict(capacity)}
                             for at, capacity in period.capacities],
              "jobs": len(jobs), "refusals": len(period.refusals),
              "groups": {}, "users": {}, "unknown": list(UNKNOWN)}
    for key in ("groups", "users"):
        names = {_of(key, None, job) for job in period.jobs} | {_of(key, proposed, job) for job in period.jobs}
        names |= {name for refusal in period.refusals if isinstance(name := refusal.get(key[:-1]), str)
                  and (key == "users" or refusal.get("code") not in NOT_THEIRS)}
        for name in sorted(names):
            refusals = _refusals(period, key, name)
            report[key][name] = {side: _side(run, jobs, key, name, seconds, config, period.until, refusals)
                                 for side, run in (("recorded", recorded), ("proposed", proposed))}
            if key == "groups":
                used = sum(job.cpu_s or 0.0 for job in period.jobs if job.group == name)
                cpu_s = period.capacity_seconds("cpu")
                report[key][name]["recorded"]["cpu_used"] = used / cpu_s if cpu_s else None
    return report


# A refusal's codes that say the group asked for was not the asker's to ask (another's, or none
# such): counted for the user, not the group. Any user could name another's group in 60 of a
# minute's refusals, and replay counted them as that group's (an attacker's check).
NOT_THEIRS = ("forbidden", "not_found")


def _refusals(period: Recorded, key: str, name: str) -> int:
    """The journal's refusals of ``name`` (a group asked for by name, but for :data:`NOT_THEIRS`;
    a user by name or uid)."""
    if key == "groups":
        return sum(1 for refusal in period.refusals if refusal.get("group") == name
                   and refusal.get("code") not in NOT_THEIRS)
    uids = {job.uid for job in period.jobs if job.user == name}
    return sum(1 for refusal in period.refusals if refusal.get("user") == name or refusal.get("uid") in uids)


def _of(key: str, run: Run | None, job) -> str:
    """Whose ``job`` is in ``run``: its user, or its group there (the recorded one unless the
    proposed config put it in another: :attr:`Run.groups`)."""
    if key == "users":
        return job.user
    return job.group if run is None else run.groups.get(job.task, job.group)


def _side(run: Run, jobs: Mapping, key: str, name: str, seconds: float, config: Config, now: float,
          refusals: int) -> dict:
    group = key == "groups"
    mine = {task for task, job in jobs.items() if _of(key, run, job) == name}
    waits = [wait for task, wait in run.waits.items() if task in mine]
    cpu, memory = (run.cpu_s, run.memory_s) if group else (run.user_cpu_s, run.user_memory_s)
    side = {"tasks": len(waits), "refused": refusals + sum(1 for task in run.refused if task in mine),
            "still_queued": sum(1 for task in run.still_queued if task in mine),
            "wait_p50_s": percentile(waits, 0.5), "wait_p95_s": percentile(waits, 0.95),
            "cpu_share": cpu.get(name, 0.0) / seconds, "memory_share": memory.get(name, 0.0) / seconds}
    if group:
        side["fair_share"] = None
        if run.fair_share is not None:
            weights = configured_weights(config, run.fair_share, name)
            standing = run.fair_share.standings(now, weights, config.parents)[name]
            side["fair_share"] = {"usage_share": standing.usage_share, "effective_weight": standing.effective}
    return side
