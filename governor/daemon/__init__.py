"""The daemon: the one place that ties events, allocation and enforcement together (DESIGN.md §4),
one stage a module, wired by :mod:`governor.daemon.root` and built on the host by
:func:`governor.daemon.build.build` (the composition root ``governor daemon`` calls)::

    requests ─► launches ─┐
    exits ────────────────┤
    sessions ─────────────┼─► settle: admit ─► create ─► plan + apply ─► move ─► reply
    observation (hold) ───┤            (tree: mkdir/rmdir/moves on a thread of their own)
    reloads ──────────────┘                  │
                                             └─► enforcement: filling ─► limits ─► hierarchy

    observation ─► status snapshot ─► status / watch / top / metrics
    recovery: re-adoption at start;  journal: events and the log, for every stage

* :mod:`~governor.daemon.requests`: the control socket's operations, checked against the caller.
* :mod:`~governor.daemon.reloads`: ``reload`` (and SIGHUP's) and ``set-weight``: a new config, or
  weight, put in force.
* :mod:`~governor.daemon.launches`: ``launch``: check, queue, wait, reply.
* :mod:`~governor.daemon.inbox`: the typed events, and the inbox that coalesces them for settle.
* :mod:`~governor.daemon.settle`: the one pipeline; the only caller of a refill. Its decision is a
  pure step over a snapshot (:mod:`~governor.daemon.settle_step`); the starts it decides are
  carried out by :mod:`~governor.daemon.starts` (cgroups made and joined, clients answered).
* :mod:`~governor.daemon.waiting`: the launches waiting, and what admission counts as held.
* :mod:`~governor.daemon.enforcement`: the refill: the plan applied, what the kernel accepted.
* :mod:`~governor.daemon.desired`: the plan: the running tasks in, every governed cgroup's
  limits out (pure).
* :mod:`~governor.daemon.filling`: progressive filling under the config in force (pure).
* :mod:`~governor.daemon.tree`: ``mkdir``, ``rmdir`` and moves off the event loop.
* :mod:`~governor.daemon.exits`: exit watching, ``stop``, time limits, ended records.
* :mod:`~governor.daemon.sessions`: users' processes outside ``governor run``.
* :mod:`~governor.daemon.recovery`: re-adoption of the tasks a restart finds.
* :mod:`~governor.daemon.observation`: sampling, the CPU hold, the status snapshot.
* :mod:`~governor.daemon.policy`, :mod:`~governor.daemon.records`, :mod:`~governor.daemon.journal`:
  the config in force, the task records, the events.
"""

from governor.daemon.root import Daemon

__all__ = ["Daemon"]
