"""The checked config as the daemon uses it: :class:`Config` and its parts, and group-name rules.

Pure data and lookups; :mod:`governor.config.load` builds these from a file.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from governor.config import resources
from governor.cgroups.names import interface_name_problem
from governor.cgroups.versions import version
from governor.config.foreign_rules import ForeignRules
from governor.config.gpu_rules import GpuGuardRules
from governor.config.history_rules import HistoryRules
from governor.config.notify_rules import NotifyRules
from governor.errors import ConfigError
from governor.config.kinds import SESSION_PREFIX, TASK_PREFIX
from governor.config.tomlcheck import join_key
from governor.config.resources import format_amount

# A group's weight as a config (``[groups.X] weight``), ``set-weight`` and a scenario give it:
# governor's scale, not the kernel's (cgroups.limits.CGROUP_WEIGHT_RANGE, what weights are written as).
# The amounts' bounds are in resource_values.
GROUP_WEIGHT_RANGE = (0.001, 1000.0)

_GROUP_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def group_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a group (a cgroup directory under governor's root), or ``None``.

    A group name is 1–64 letters, digits, ``_ . -``, starts with a letter, digit or ``_``, does
    not start with ``task-`` (task cgroups, :mod:`governor.config.kinds`), and is no name of the
    kernel's interface files (:func:`governor.cgroups.names.interface_name_problem`).
    """
    if not _GROUP_NAME.fullmatch(name):
        return "not a usable group name: 1-64 letters, digits, _ . -, starting with a letter, digit or _"
    session_like = name.startswith(SESSION_PREFIX) and name.removeprefix(SESSION_PREFIX).isdigit()
    if name.startswith(TASK_PREFIX) or session_like:
        return f"names starting with {TASK_PREFIX} (or like session-1000) are kept for task cgroups"
    return interface_name_problem(name)


@dataclass(frozen=True)
class IoDevice:
    """A governed block device.

    Attributes:
        device: the path as configured, under ``/dev/`` (resolved to MAJ:MIN by ``cgroups/devices.py``).
        name: the path's basename (``nvme0n1``), used in resource names ``io.<name>.read/write``.
        read_bps, write_bps: bandwidth to divide, bytes/s, > 0.
    """

    device: str
    name: str
    read_bps: int
    write_bps: int

    @property
    def read_resource(self) -> str:
        """The resource name of this device's read bandwidth, ``io.<name>.read``."""
        return f"io.{self.name}.read"

    @property
    def write_resource(self) -> str:
        """The resource name of this device's write bandwidth, ``io.<name>.write``."""
        return f"io.{self.name}.write"


@dataclass(frozen=True)
class GroupRule:
    """An explicit ``[groups.<name>]`` table (:mod:`governor.config.groups`).

    Attributes:
        name: the group's name; weight: its DRF weight among its siblings (> 0).
        users, unix_groups: who may launch into it (empty for a group with child groups).
        parent: the group it nests under, or None for a child of governor's root.
        guarantee, limit: resource (``cpu`` cores, ``memory`` bytes, ``gpu`` whole devices:
            :func:`governor.config.resources.quota_keys`) → what the group's subtree is given before
            fair sharing divides the rest / never exceeds.
        user_limit: resource → what one member's tasks and session in the group may declare
            together.
    """

    name: str
    weight: float
    users: tuple[str, ...]
    unix_groups: tuple[str, ...]
    parent: str | None = None
    guarantee: dict[str, float] = field(default_factory=dict)
    limit: dict[str, float] = field(default_factory=dict)
    user_limit: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionRules:
    """``[sessions]``: how the processes a governed user starts outside ``governor run`` (a
    login shell, cron, ``su -``) are governed: together, as that user's session task.

    Attributes:
        enabled: whether sessions are governed at all.
        demand: the session task's demand, its cap and what DRF guarantees: config key
            (:data:`governor.config.resources.RESOURCES`: ``cpu`` cores, ``memory`` bytes,
            ``io_read``/``io_write`` bytes/s on each governed device) → amount, every key there.
        exempt: user names never governed, besides root and system users.
    """

    enabled: bool
    demand: dict[str, float]
    exempt: tuple[str, ...]


@dataclass(frozen=True)
class Config:
    """A checked config. Units are in the names: cores, bytes, bytes/s, seconds.

    Attributes:
        cpu_cores, memory_bytes: explicit ``capacity.cpu`` / ``capacity.memory``, or ``None`` to
            take the host's value minus the reserve.
        reserve_cpu_cores, reserve_memory_bytes: ``capacity.reserve``.
        reserve_pids: ``capacity.reserve.pids``, processes and threads kept from the root's cap
            (:func:`governor.config.resources.caps`), or None: a tenth of the kernel's limit.
        io_devices: ``[[capacity.io]]``, in file order.
        task_defaults: ``[defaults.task]``: config key (:data:`governor.config.resources.RESOURCES`)
            → amount, every key there; the I/O rates apply to each governed device.
        cpu_enforcement: ``"quota"`` or ``"cores"``; memory_enforcement: ``"soft"``, ``"hard"``
            or None (left out: :meth:`memory_mode` gives the default, ``hard``).
        memory_protection: ``[enforcement] memory_protection``: cgroup v2 ``memory.min``/``memory.low``
            follow the groups' guarantees and reservations (:mod:`governor.core.protection`).
        groups: the explicit groups, in file order.
        everyone_weight: the weight of ``[groups."*"]``, or ``None`` when there is no such table.
        everyone_user_limit: its ``user_limit``: resource → what each of its users (each a group
            of her own) may declare together; empty: none.
        admin_group: the Unix group allowed admin operations besides root, or ``None``.
        sample_interval_s, reconcile_interval_s: ``[daemon]`` periods, 0.1 to 86,400 seconds.
        state_dir: absolute path of the per-task metadata directory.
        max_tasks_per_user: tasks (running and queued, sessions not counted) one uid other
            than root may have; max_connections_per_user: its open control connections.
        sessions: ``[sessions]``.
        fairshare_half_life_s: ``[fairshare] half_life`` in seconds, or None (fair share over
            time is off): past use lowers a group's effective weight, halving in that time.
        gpus: ``capacity.gpus``: ``"auto"`` (NVML discovers them), the GPUs' device node paths,
            or None (no GPU is governed); :func:`governor.host.nvml.discover` reads it on the host.
        gpu_control: ``capacity.gpu_control``: the control nodes a task holding GPUs may open
            (None: NVIDIA's, :data:`governor.host.nvml.CONTROL_NODES`).
        gpu_guard: ``capacity.gpu_guard`` and ``gpu_guard_parents``: where the GPU nodes are
            denied outside governor's tasks (:mod:`governor.config.gpu_rules`).
        file: the file the config came from, for errors raised later (not compared).
        notify: ``[notify]``: the command run on events an admin should hear about
            (:mod:`governor.config.notify_rules`); off by default.
        metrics_listen: ``[metrics] listen``: (address, port) the Prometheus metrics are served
            on; None: off (``governor daemon --metrics`` overrides it).
        foreign: ``[foreign]``: the subtrees other managers own (:mod:`governor.config.foreign_rules`).
        history: ``[history]``: the journal of what happened (:mod:`governor.config.history_rules`).
    """

    cpu_cores: float | None
    memory_bytes: int | None
    reserve_cpu_cores: float
    reserve_memory_bytes: int
    reserve_pids: int | None
    io_devices: tuple[IoDevice, ...]
    task_defaults: dict[str, float]
    cpu_enforcement: str
    memory_enforcement: str | None
    groups: tuple[GroupRule, ...]
    everyone_weight: float | None
    everyone_user_limit: dict[str, float]
    admin_group: str | None
    sample_interval_s: float
    reconcile_interval_s: float
    state_dir: str
    max_tasks_per_user: int
    max_connections_per_user: int
    sessions: SessionRules
    fairshare_half_life_s: float | None
    gpus: str | tuple[str, ...] | None
    gpu_control: tuple[str, ...] | None
    gpu_guard: GpuGuardRules
    memory_protection: bool
    file: str = field(compare=False)
    notify: NotifyRules = NotifyRules()
    foreign: ForeignRules = ForeignRules()
    history: HistoryRules = HistoryRules()
    metrics_listen: tuple[str, int] | None = None

    def memory_mode(self) -> str:
        """How task memory is capped: as configured, else ``hard`` (``memory.max``: a task
        never holds more than it declared; beyond it the kernel reclaims, then OOM-kills it),
        as ``systemd-run -p MemoryMax=`` and ``srun --mem`` do. ``soft`` (v2's ``memory.high``)
        only throttles: a task declared 50M peaked at 125M and succeeded (DESIGN.md §3)."""
        return self.memory_enforcement or "hard"

    def soft_memory_warning(self, soft_throttles: bool) -> str | None:
        """Why ``memory = "soft"`` breaks admission on this host (its soft limit does not
        throttle), or None."""
        if self.memory_enforcement == "soft" and not soft_throttles:
            return ('enforcement.memory = "soft" on cgroup v1: its soft limit binds only under memory '
                    "pressure, so a task past its declaration takes memory admitted to others, whose tasks "
                    'are then OOM-killed; use "hard" (the default)')
        return None

    def unprotected_memory_warning(self, mode: str) -> str | None:
        """Which memory guarantees the kernel cannot protect from reclaim under cgroup ``mode``
        (``"v1"``: there is no ``memory.min``/``memory.low``), or None."""
        guaranteed = [f"{rule.name} {format_amount('memory', rule.guarantee['memory'])}"
                      for rule in self.groups if rule.guarantee.get("memory")]
        if version(mode).memory_floor or not self.memory_protection or not guaranteed:
            return None
        return ("cgroup v1 cannot protect memory from reclaim (no memory.min or memory.low; its "
                "memory.soft_limit_in_bytes is no floor): the memory guarantees of " + ", ".join(guaranteed) +
                " are kept at admission only, and another group's pressure may reclaim or swap them out")

    @property
    def resources(self) -> tuple[str, ...]:
        """Resource names in a fixed order (:func:`governor.config.resources.governed`): ``cpu``,
        ``memory``, ``gpu`` (when GPUs are governed), then each device's read and write."""
        return resources.governed(self)

    def capacity(self, host_cpus: float, host_memory_bytes: int, gpus: int = 0) -> dict[str, float]:
        """What governor divides on this host, by resource (in :attr:`resources` order).

        Args:
            host_cpus: CPUs the host (or the daemon's cgroup) has, cores.
            host_memory_bytes: memory the host has, bytes.
            gpus: the GPUs found for :attr:`gpus` (counted only when GPUs are governed).

        Returns:
            cores for ``cpu``, bytes for ``memory``, whole devices for ``gpu``, bytes/s for
            ``io.<name>.read/write`` (each resource's entry in :mod:`governor.config.resources` says).

        Raises:
            ConfigError: at ``capacity.reserve.cpu`` / ``capacity.reserve.memory`` when the
                reserve leaves nothing of the host's value; top-level guarantees over it
                (:meth:`check_guarantees_fit`).
        """
        capacity = resources.capacity(self, resources.Host(host_cpus, host_memory_bytes, gpus))
        self.check_guarantees_fit(capacity)
        return capacity

    def check_guarantees_fit(self, capacity: Mapping[str, float]) -> None:
        """Refuse top-level guarantees that together exceed the capacity; deeper levels are
        checked at parse time. The daemon checks what it divides on its host (:meth:`capacity`),
        ``check-config --portable`` the capacity the file fixes (``capacity.cpu``/``memory``).

        Args:
            capacity: resource → amount (cores, bytes); a resource it lacks is not checked.

        Raises:
            ConfigError: at the first such group's ``guarantee.<resource>``, with the sum and
                the capacity.
        """
        for entry in resources.quota_keys().values():
            resource = entry.name
            top = [rule for rule in self.groups if rule.parent is None and resource in rule.guarantee]
            total = sum(rule.guarantee[resource] for rule in top)
            if top and resource in capacity and total > capacity[resource] * (1 + 1e-9):
                asked, has = (format_amount(resource, v, unit=True) for v in (total, capacity[resource]))
                raise ConfigError(self.file, f"{join_key('groups', top[0].name)}.guarantee.{entry.quota}",
                                  f"the top-level groups' guarantees add up to {asked}, more than the capacity "
                                  f"here, {has}")

    def task_demand(self, **given: float | None) -> dict[str, float]:
        """The demand vector of one task: the given values, ``[defaults.task]`` for the rest.

        Args:
            given: by wire key (:data:`governor.config.resources.RESOURCES`): ``cpu`` cores, ``memory``
                bytes, ``gpu`` whole GPUs, ``io_read``/``io_write`` bytes/s on each governed
                device; one left out or None takes its default (none for GPUs).

        Returns:
            resource → amount, in :attr:`resources` order, leaving out resources demanded at 0.

        Raises:
            ValueError: for a given value that is negative, not finite, or a boolean.
        """
        return resources.demand(given, self.task_defaults, self)

    def session_demand(self) -> dict[str, float]:
        """The demand vector of a session task (``[sessions]``), shaped as :meth:`task_demand`'s."""
        return resources.demand({}, self.sessions.demand, self)

    def allowed_groups(self, user: str, unix_groups: Collection[str]) -> list[str]:
        """Every group ``user`` may launch into, the default one first.

        First the explicit groups listing the user in ``users``, then those listing one of
        ``unix_groups``, each in file order. A user in no explicit group gets their own
        per-user group when ``[groups."*"]`` exists and the user name is a usable group name
        that no explicit group has taken. "Everyone else" means just that: a member of an
        explicit group cannot also run in a group of their own, which would add a second share.
        A uid the user database does not know is named by its number
        (:func:`governor.host.access.identify`) and gets none: a user's subordinate uids (a user
        namespace's, ``/etc/subuid``: 65,536 each on Debian) would each be a share of its own,
        as its sessions are never governed (:mod:`governor.host.session_rules`).
        """
        by_user = [rule.name for rule in self.groups if user in rule.users]
        by_unix = [rule.name for rule in self.groups
                   if rule.name not in by_user and not set(rule.unix_groups).isdisjoint(unix_groups)]
        if by_user or by_unix:
            return by_user + by_unix
        if (self.everyone_weight is not None and not user.isdigit() and group_name_problem(user) is None
                and self._explicit(user) is None):
            return [user]
        return []

    def group_for(self, user: str, unix_groups: Collection[str]) -> str | None:
        """The group a task of ``user`` goes to when no group is asked for (see :meth:`allowed_groups`),
        or ``None`` when the user may use no group."""
        allowed = self.allowed_groups(user, unix_groups)
        return allowed[0] if allowed else None

    def weight_of(self, group: str) -> float | None:
        """The weight of an explicit group, or of a per-user group (any other usable name) when
        ``[groups."*"]`` exists; ``None`` for a name that can be neither, for the caller to refuse."""
        rule = self._explicit(group)
        if rule is not None:
            return rule.weight
        if self.everyone_weight is not None and group_name_problem(group) is None:
            return self.everyone_weight
        return None

    def user_limit(self, group: str) -> dict[str, float]:
        """What each member of ``group`` may declare together (resource → amount): its
        ``user_limit``, or for a per-user group of ``[groups."*"]`` that table's; empty: none."""
        rule = self._by_name.get(group)
        if rule is not None:
            return rule.user_limit
        return self.everyone_user_limit if self.weight_of(group) is not None else {}

    def rule(self, group: str) -> GroupRule | None:
        """The ``[groups.<group>]`` table, or None for a per-user group (or no group)."""
        return self._by_name.get(group)

    def place(self, group: str) -> str:
        """The cgroup of ``group`` relative to governor's root: its ancestors' names and its
        own, joined by ``/`` (``science/physics-lab``); a top-level or per-user group's is its name."""
        return self._places.get(group, group)

    def effective_limit(self, group: str) -> dict[str, float]:
        """What bounds ``group``'s cgroup: the lowest ``limit`` of it and its ancestors, per
        resource (a lab cannot be let run past its department; cgroup v1 refuses a child's
        CPU quota above its parent's)."""
        bound: dict[str, float] = {}
        for name in (group, *self.ancestors(group)):
            rule = self._by_name.get(name)
            for resource, amount in (rule.limit.items() if rule else ()):
                bound[resource] = min(amount, bound.get(resource, amount))
        return bound

    @cached_property
    def parents(self) -> dict[str, str]:
        """Group → the group it nests under, for the groups that have a parent."""
        return {rule.name: rule.parent for rule in self.groups if rule.parent is not None}

    @cached_property
    def nested(self) -> bool:
        """Whether any group has a parent or a quota (the allocation is then H-DRF); asked at
        every refill, worked out once (a scan of every group)."""
        return any(rule.parent or rule.guarantee or rule.limit for rule in self.groups)

    def ancestors(self, group: str) -> list[str]:
        """``group``'s parent, its parent's parent… up to a top-level group (nearest first)."""
        found = []
        rule = self._by_name.get(group)
        while rule is not None and rule.parent is not None:
            found.append(rule.parent)
            rule = self._by_name.get(rule.parent)
        return found

    def _explicit(self, name: str) -> GroupRule | None:
        return self._by_name.get(name)

    @cached_property
    def _by_name(self) -> dict[str, GroupRule]:
        # Every refill asks each group's weight: a dict, not a scan of the rules.
        return {rule.name: rule for rule in self.groups}

    @cached_property
    def _places(self) -> dict[str, str]:
        return {rule.name: "/".join([*reversed(self.ancestors(rule.name)), rule.name])
                for rule in self.groups if rule.parent is not None}
