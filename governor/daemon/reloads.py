"""Reloads: the config file read again and put in force (``governor reload``, SIGHUP), and a
group's weight changed until the next one (``governor set-weight``). The file is read, parsed
and checked off the event loop; what changes the daemon's state is changed on it, and a bad
config leaves the one in force (DESIGN.md §6)."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

from governor.host import access
from governor.config.groups import EVERYONE
from governor.config.load import Config
from governor.config.tomlcheck import join_key
from governor.config.units import format_size
from governor.core.headroom import check_beside_headroom
from governor.core.quotas import check_within_quotas
from governor.core.state import Tasks
from governor.daemon import device_places
from governor.daemon.exits import Exits
from governor.daemon.gpu_guard import GpuGuard
from governor.daemon.history import daemon_entry, refusal_entry
from governor.daemon.inbox import Reload
from governor.daemon.journal import Journal
from governor.daemon.policy import Policy
from governor.daemon.records import Records
from governor.daemon.sessions import Sessions
from governor.daemon.settle import Settle
from governor.errors import ConfigError, GovernorError, RequestError
from governor.host.sd_notify import Notifier

__all__ = ["Reloads"]


class Reloads:
    """``reload`` and ``set-weight`` (the control socket's, and SIGHUP's reload).

    Args:
        policy: the config in force; tasks: the running tasks (their GPUs re-mapped, their
            places checked); records: their records (written again where a GPU's identity
            moved); settle: refills under the new config, and its queue is checked against it;
            exits: whether the daemon serves yet; sessions: looked at afresh; journal: events,
            the history's daemon entry, the metrics sink; notifier: systemd's RELOADING/READY;
            gpu_guard: put again under the new config.
        load_config: reads the config file again (raises ConfigError); None: the daemon runs
            on the embedded default.
    """

    def __init__(self, *, policy: Policy, tasks: Tasks, records: Records, settle: Settle, exits: Exits,
                 sessions: Sessions, journal: Journal, notifier: Notifier, gpu_guard: GpuGuard,
                 load_config: Callable[[], Config] | None):
        self.policy, self.tasks, self.records, self.settle, self.queue = policy, tasks, records, settle, settle.queue
        self.exits, self.sessions, self.journal, self.notifier = exits, sessions, journal, notifier
        self.gpu_guard, self.load_config = gpu_guard, load_config
        # The journal's metrics sink follows [metrics] listen at a reload (governor.wire.metrics.Metrics).
        self.metrics = journal.metrics

    def use(self, config: Config, members: dict[str, list[str]] | None = None) -> None:
        """Put ``config`` in force (:meth:`Policy.use <governor.daemon.policy.Policy.use>`;
        raises before changing anything; ``members`` as it takes them), the running tasks'
        devices re-mapped by identity to its inventories (a record whose identities changed is
        written again), the devices still draining re-mapped so too, a device newly governed
        drained before it is handed out, and look at every process afresh under it."""
        inventories = self.policy.devices
        known = {(entry, device.identity) for entry, inventory in inventories.items() for device in inventory.devices}
        for task in self.policy.use(config, held=[task for task in self.tasks if task.devices], members=members):
            before = self.tasks.get(task.id)
            self.tasks.update(task)
            if task.device_identities != before.device_identities:
                self.records.save_or_retry(task)
        self.tasks.redrain(device_places.renumbered(inventories, self.policy.devices, self.tasks.draining()))
        # A device governed from now on drains before it is handed out, as every free one does
        # when the daemon starts: ungoverned, any process could open it.
        for entry, inventory in self.policy.devices.items():
            for device in inventory.devices:
                if (entry, device.identity) not in known:
                    self.tasks.drain((entry, device.index))
        self.sessions.reset()

    def reload(self, trigger: str) -> str:
        """Re-read the config file and put it in force (the GPU guard put again under it); the
        old one stays if the new one is bad. Waiting tasks that can never fit the new capacity
        are refused. Everything runs here:
        :meth:`reload_off_loop` is the daemon's (the control socket's, SIGHUP's).

        Raises:
            RequestError: ``invalid_config`` with the file, key and reason.
        """
        self.notifier.reloading()
        try:
            return self._put_in_force(trigger, self._read())
        finally:
            self.notifier.send("READY=1", f"STATUS={self.settle.summary()}")

    async def reload_off_loop(self, trigger: str) -> str:
        """:meth:`reload`, with the file read, parsed and checked and its groups' members looked
        up on a thread (:meth:`_read`): at 10,000 groups that held the event loop for seconds.
        What then changes the daemon's state runs on the loop.

        Raises:
            RequestError: ``invalid_config`` with the file, key and reason.
        """
        self.notifier.reloading()
        try:
            return self._put_in_force(trigger, await asyncio.to_thread(self._read_without_collecting))
        finally:
            self.notifier.send("READY=1", f"STATUS={self.settle.summary()}")

    def _read_without_collecting(self) -> tuple[Config, dict[str, list[str]]] | GovernorError:
        """:meth:`_read`, the garbage collector paused meanwhile and what it made frozen after:
        the parse's allocations set off collections that ran on this thread holding the GIL,
        220-300 ms each at 10,000 groups (tests/benchmarks/test_reload_bench.py), and the new
        config would be scanned again and again. It lives until the next reload, as what the
        daemon loaded at start, which it freezes too (:meth:`Daemon.serve
        <governor.daemon.root.Daemon.serve>`)."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._read()
        finally:
            gc.freeze()
            if collecting:
                gc.enable()

    def _read(self) -> tuple[Config, dict[str, list[str]]] | GovernorError:
        """The config file read, parsed and checked, with its groups' members on this host; or
        why it cannot be used. Reads the file and the user database only (safe on a thread)."""
        try:
            if self.load_config is None:
                raise RequestError("invalid_config", "the daemon runs on the embedded default: no file to reload")
            config = self.load_config()
            return config, self.policy.find_members(config)
        except GovernorError as error:
            return error

    def _put_in_force(self, trigger: str, read: tuple[Config, dict[str, list[str]]] | GovernorError) -> str:
        """Put what :meth:`_read` gave in force, or refuse it (an error event; the old config
        stays). Returns the config's source."""
        try:
            if isinstance(read, GovernorError):
                raise read
            config, members = read
            self._check_places(config)
            self._check_memory(config)
            self.use(config, members)
            self.gpu_guard.reapply()  # a changed inventory or guard config is in force now, not at restart
        except RequestError:
            raise
        except GovernorError as error:
            self.journal.event("error", f"reload refused, the old config stays in force: {error}", logging.ERROR)
            raise RequestError("invalid_config", str(error)) from error
        self.journal.event("reload", f"config {self.policy.source} reloaded ({trigger})")
        self.journal.record(daemon_entry(time.time(), self.policy.host_capacity, self.policy.source, "reload"))
        if self.metrics is not None:
            try:
                self.metrics.follow(config.metrics_listen)
            except GovernorError as error:
                self.journal.event("error", f"{error}; the metrics stay where they were", logging.ERROR)
        for entry in list(self.queue.values()):
            try:
                if not access.known_group(self.policy.config, entry.task.group):  # it started in the group removed
                    raise RequestError("not_found", f"group {entry.task.group} is no longer in the config "
                                                    f"({self.policy.source}): task {entry.task.id} is not started")
                access.check_fits(entry.task.demand, self.policy.host_capacity)
                check_within_quotas(self.policy.config, entry.task.group, entry.task.demand)
                check_beside_headroom(self.policy.config, self.policy.host_capacity, entry.task.group, entry.task.demand)
            except RequestError as refused:  # said as a refused launch is: in the log and the history
                del self.queue[entry.task.id]
                entry.decide(error=refused)
                task = entry.task
                self.journal.event("task_stopped",
                                   f"task {task.id} ({task.name}) refused at the reload: {refused.message}")
                self.journal.record(refusal_entry(time.time(), uid=task.uid, user=task.user, group=task.group,
                                                  demand=task.demand, code=refused.code))
        self.sessions.caps.follow("reload")
        if not self.policy.owners.enabled and self.tasks.sessions():
            self.journal.event("session", f"sessions are off ([sessions] enabled = false): the {len(self.tasks.sessions())} "
                                          "running keep their caps until their processes end; no process joins them")
        self.settle.now(Reload("reload", full=True))  # running tasks' caps follow it: devices of a new inventory
        if self.exits.watcher is not None:  # serving: sessions turned on follow the kernel's events
            self.sessions.follow_processes()
        self.sessions.ask_rescan("reload")
        return self.policy.source

    def _check_places(self, config: Config) -> None:
        """Refuse a config that moves a group with running tasks elsewhere in the tree: their
        cgroups are where the group was (ConfigError naming the group's ``parent``)."""
        for task in self.tasks:
            if not task.is_login and config.place(task.group) != (task.place or task.group):
                raise ConfigError(config.file, f"{join_key('groups', task.group)}.parent",
                                  f"would move group {task.group} from {task.place or task.group} to "
                                  f"{config.place(task.group)} while its {task.label} runs; change it once the "
                                  "group's tasks have ended")

    def _check_memory(self, config: Config) -> None:
        """Refuse a config whose memory capacity is below what the running tasks declared:
        memory is admitted, never taken back, and governor's root capped below it would have
        the kernel OOM-kill admitted work (ConfigError naming the capacity's key)."""
        declared = sum(task.demand.get("memory", 0.0) for task in self.tasks if not task.is_session)
        memory = config.capacity(float(len(self.policy.cpus)), self.policy.host_memory).get("memory", 0.0)
        if memory < declared:
            key = "capacity.memory" if config.memory_bytes is not None else "capacity.reserve.memory"
            raise ConfigError(config.file, key, f"leaves {format_size(memory)} to divide, below the "
                                                f"{format_size(declared)} the running tasks declared: the kernel "
                                                "would OOM-kill admitted work; lower it once they end")

    def set_weight(self, group: str, weight: float, user: str) -> dict:
        """``governor set-weight``: ``group``'s weight until the next reload (refilled now).

        Raises:
            RequestError: ``not_found``, no such group in the config; ``bad_request``, ``"*"``
                (the template of each user's own group).
        """
        if group == EVERYONE:  # a template: it names no group (set-weight '*' said there was none)
            raise RequestError("bad_request", '[groups."*"] is the template of each user\'s own group, not a group: '
                                              "give one user's group its weight (governor set-weight alice 2), or "
                                              "everyone's in the config's [groups.\"*\"] weight and reload")
        if not access.known_group(self.policy.config, group):
            raise RequestError("not_found", f"no group {group!r} in the config")
        self.policy.weights[group] = weight
        self.journal.event("weight", f"{user} set the weight of {group} to {weight:g} (until the next reload)")
        self.settle.now(Reload(f"weight of {group}"))
        return {"group": group, "weight": weight}
