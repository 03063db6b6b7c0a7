"""The config in force, and what follows from it on this host: the capacity DRF divides, the
governed devices and GPUs, the weights (``set-weight``'s until the next reload), who owns a
session, each group's members today, and each task's caps and the device nodes it may not open."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace

from governor.host import access

from governor.core import vocabulary
from governor.cgroups.hierarchy import Hierarchy
from governor.cgroups.limits import CgroupLimits
from governor.config import resources
from governor.config.load import Config
from governor.daemon import device_places
from governor.host import devices as device_providers
from governor.host.daemons import DaemonEntry, Registry
from governor.host.nvml import PROVIDER as NVIDIA
from governor.errors import GovernorError
from governor.core.devices import Inventory
from governor.core.gpus import GpuInventory
from governor.core.foreign_capacity import remaining
from governor.core.headroom import check_guarantees_held
from governor.core.plan import task_limits
from governor.host.session_rules import NOBODY_UID, SessionOwners
from governor.core.state import Task

__all__ = ["Policy"]

log = logging.getLogger("governor.daemon")
# Distinct (demand, devices held) whose caps are kept (tasks that declare the same and hold the
# same devices share one object).
TASK_CAPS_KEPT = 1024
# Distinct callers (user, Unix groups) whose allowed groups are kept.
ALLOWED_KEPT = 4096


class Policy:
    """The config in force (:meth:`use`) and the host facts it is read against.

    Args:
        config: the config to put in force at once; ``source`` is its file (or
            ``"<embedded default>"``).
        hierarchy: governor's cgroups (a governed device's sharing, the memory mode).
        host_cpus: CPU numbers this host offers; host_memory: bytes of memory on the host.
        resolve_device: block device path → whole-disk ``MAJ:MIN`` (raises GovernorError).
        uid_min: the first login uid; lower uids never have a session.
        members: a config → its groups' users on this host (default
            :func:`governor.host.access.members`).
        registry: this host's daemons, where sessions turned on are claimed (None: no other
            daemon is known).
        entry: this daemon as the registry shows it (its pid, root, socket).
        discover: a device entry's name → the discovery its provider uses in place of its own
            (:class:`governor.core.devices.Provider`; tests pass fakes of
            :func:`governor.host.nvml.discover`); none: each provider's own.
        process_limit: the most processes and threads the host holds (0: unknown).

    Attributes:
        devices: each governed device class's entry name → its inventory on this host, in
            registry order (:func:`governor.host.devices.providers`); a class the config
            governs none of is left out.
        gpus: the GPUs governor hands out (None: no GPU is governed): NVIDIA's provider's class
            in :attr:`devices`.
        host_capacity: what the config gives of this host (the host's less the reserve);
            capacity: that less what foreign tenants hold (:meth:`hold_foreign`): what DRF divides.
        root_caps: the root's cap on each count (``pids``: processes and threads,
            :func:`governor.config.resources.caps`), which every group's cgroup has too.
        lent_cpu: the reserved cores governed tasks may use while the system leaves them idle
            (:func:`governor.config.resources.lent_cpu`).

    Raises:
        GovernorError: (:meth:`use`, and so the constructor) a config that cannot be put in
            force here: a capacity beyond the host, a device that is not there, GPUs not found
            or whose device nodes this host's cgroups cannot guard, sessions another daemon holds.
    """

    def __init__(self, config: Config, source: str, *, hierarchy: Hierarchy, host_cpus: list[int], host_memory: int,
                 resolve_device: Callable[[str], str], uid_min: int,
                 members: Callable[[Config], dict[str, list[str]]] | None, registry: Registry | None,
                 entry: Callable[[], DaemonEntry],
                 discover: Mapping[str, Callable[..., Inventory]] | None = None,
                 process_limit: int = 0):
        self.source = source
        self.hierarchy = hierarchy
        self.cpus = host_cpus
        self.host_memory = host_memory
        self.resolve_device = resolve_device
        self.uid_min = uid_min
        self.find_members = members or (lambda config: access.members(config, self.uid_min, NOBODY_UID))
        self.registry = registry
        self.entry = entry
        self.discover = dict(discover or {})
        self.process_limit = process_limit
        self.devices: dict[str, Inventory] = {}
        self.effective: dict[str, float] = {}  # group → effective weight, with [fairshare] (kept across reloads)
        self.foreign_held: dict[str, float] = {}  # what foreign tenants hold (kept across reloads)
        self._floors: tuple | None = None  # (config, members, configured groups, key, floors): see floors()
        self.use(config)

    def use(self, config: Config, held: Iterable[Task] = (), members: dict[str, list[str]] | None = None) -> list[Task]:
        """Put ``config`` in force (capacity, devices, GPUs, weights); raises before changing
        anything. Sessions turned on claim them for this daemon (refused while another holds
        them).

        Args:
            held: the running tasks holding devices: each device is found again in its class's
                new inventory by identity (:func:`governor.core.device_identity.locate`),
                wherever the config lists it.
            members: ``config``'s groups → their users on this host, as ``members`` (the
                constructor's) finds them, looked up by the caller off the event loop (2 s at
                10,000 groups); None: looked up here.

        Returns:
            The tasks of ``held`` whose devices the new inventories number (or know) otherwise,
            re-mapped to it: the caller puts them in place of the old ones.

        Raises:
            GovernorError: as the class says; or a new inventory lacks a held device (or cannot
                tell it from another), naming the task.
        """
        devices = {}
        for provider in device_providers.providers():
            inventory = provider.find(config, self.discover.get(provider.entry))
            if inventory is None:
                continue
            unguarded = self.hierarchy.device_guard_problem()
            if unguarded:
                raise GovernorError(f"{config.file}: {provider.key}: {unguarded}")
            devices[provider.entry] = inventory
        gpus = devices.get(NVIDIA.entry)
        remapped = device_places.remap_held(config, self.devices, devices, held)
        capacity = config.capacity(float(len(self.cpus)), self.host_memory, len(gpus.gpus) if gpus else 0)
        root_caps = resources.caps(config, resources.Host(len(self.cpus), self.host_memory, 0, self.process_limit))
        check_guarantees_held(config, capacity)  # as check-config does: headroom that cannot all be kept
        io_devices = {device.name: self.resolve_device(device.device) for device in config.io_devices}
        io_sharing = {name: self.hierarchy.io_sharing(disk) for name, disk in io_devices.items()}
        if self.registry is not None:
            if config.sessions.enabled:
                self.registry.claim_sessions(self.entry())
            else:
                self.registry.release_sessions()
        self.config, self.host_capacity, self.io_devices, self.io_sharing = config, capacity, io_devices, io_sharing
        self.root_caps = root_caps
        self.lent_cpu = resources.lent_cpu(config)
        self.capacity = remaining(capacity, self.foreign_held)
        self.devices = devices
        self.weights: dict[str, float] = {}
        self.owners = SessionOwners(config, self.uid_min)
        self.identities = access.Identities()  # the callers, as the user database names them
        self.members = self.find_members(config) if members is None else members  # group → its users today
        self._explicit = {rule.name for rule in config.groups}
        memory_mode = config.memory_mode()
        # Caps follow from the demand and the devices held (under this config and inventories):
        # tasks that declare the same and hold the same share one object.

        def caps(demand: tuple[tuple[str, float], ...], held: tuple[tuple[str, tuple[int, ...]], ...] | None,
                 session: bool = False) -> CgroupLimits:
            limits = task_limits(dict(demand), io_devices=io_devices, memory_mode=memory_mode,
                                 protect=config.memory_protection, session=session)
            denied = () if held is None else device_places.denied_devices(self.devices, dict(held))
            return replace(limits, devices_denied=denied) if denied else limits

        self._task_caps = functools.lru_cache(maxsize=TASK_CAPS_KEPT)(caps)
        # A launch asks for its caller's groups: a scan of every group of the config (twice a
        # launch, 10,000 groups on a large host), the same answer while this config is in force.
        self._allowed = functools.lru_cache(maxsize=ALLOWED_KEPT)(
            lambda user, groups: tuple(config.allowed_groups(user, groups)))
        for warning in (config.soft_memory_warning(self.hierarchy.memory_high_throttles),
                        config.unprotected_memory_warning(self.hierarchy.mode)):
            if warning:
                log.warning("%s: %s", config.file, warning)
        return remapped

    @property
    def gpus(self) -> GpuInventory | None:
        """The GPUs governor hands out (None: no GPU is governed)."""
        return self.devices.get(NVIDIA.entry)  # type: ignore[return-value]

    @gpus.setter
    def gpus(self, inventory: GpuInventory | None) -> None:
        devices = {name: found for name, found in self.devices.items() if name != NVIDIA.entry}
        self.devices = {**({NVIDIA.entry: inventory} if inventory is not None else {}), **devices}

    @property
    def find_gpus(self) -> Callable[..., Inventory] | None:
        """The GPUs' discovery in place of the NVIDIA provider's (in :attr:`discover`; tests
        put a fake in before a reload)."""
        return self.discover.get(NVIDIA.entry)

    @find_gpus.setter
    def find_gpus(self, discover: Callable[..., Inventory]) -> None:
        self.discover[NVIDIA.entry] = discover

    def hold_foreign(self, held: Mapping[str, float]) -> None:
        """What foreign tenants hold now (resource → cores, bytes): :attr:`capacity`, what DRF
        divides and admission counts, is :attr:`host_capacity` less it, never below zero
        (:func:`governor.core.foreign_capacity.remaining`); what is admitted already stays."""
        self.foreign_held = dict(held)
        self.capacity = remaining(self.host_capacity, self.foreign_held)

    def refresh_members(self, members: dict[str, list[str]] | None = None) -> None:
        """Look users and groups up again (they change while the daemon runs).

        Args:
            members: the config in force's groups → their users, as ``members`` (the
                constructor's) finds them, looked up by the caller off the event loop; None:
                looked up here.
        """
        self.owners.forget()
        self.identities.forget()
        self.members = self.find_members(self.config) if members is None else members

    def caps(self, task: Task) -> CgroupLimits:
        """``task``'s caps: its declaration, and the device nodes it may not open
        (:func:`~governor.daemon.device_places.denied_devices` of its devices), one object per
        distinct demand and devices held. A login session's carry no device rules: its slice is
        systemd's, which has no deny list; the guard on the login slices' parent denies them
        (DESIGN.md §3). A session's (either kind) protect none of its memory
        (:func:`~governor.core.plan.task_limits`). A task recorded before counts were declared
        (no ``pids``: re-adopted after an upgrade) gets the config's default, so that its cgroup
        has a ``pids.max`` too."""
        demand = task.demand
        if not any(resources.count(r) for r in demand):
            defaults = self.config.sessions.demand if task.is_session else self.config.task_defaults
            demand = {**demand, **{entry.name: defaults[entry.config] for entry in resources.RESOURCES
                                   if entry.kind is resources.ResourceKind.COUNT and entry.config}}
        held = None if task.is_login else tuple(task.devices.items())
        return self._task_caps(tuple(demand.items()), held, task.is_session)

    def allowed_groups(self, who: access.Identity) -> tuple[str, ...]:
        """The groups ``who`` may launch into under the config in force, the default one first
        (:meth:`Config.allowed_groups <governor.config.load.Config.allowed_groups>`)."""
        return self._allowed(who.user, who.groups)

    def weight(self, group: str) -> float:
        """``group``'s weight: set-weight's, else the config's, else 1."""
        weight = self.weights.get(group, self.config.weight_of(group))
        return 1.0 if weight is None else float(weight)

    def fair_weight(self, group: str) -> float:
        """What progressive filling (:func:`governor.daemon.filling.fill`) and admission weigh
        ``group`` with: its effective weight under fair share over time (``[fairshare]``), else
        :meth:`weight`."""
        return self.effective.get(group) or self.weight(group)

    def configured(self, running: Collection[str]) -> dict[str, dict]:
        """Every group of this host (the config's, one per ``"*"`` user, and the ``running``
        ones) → its ``weight``, ``floor`` over all of them (:func:`governor.core.vocabulary.floors`, clipped
        to its limit),
        ``members`` as this host resolves them, and ``everyone``: a user's own group of
        ``[groups."*"]`` at that rule's weight (no ``set-weight`` of its own), one of many alike
        that status sums up while idle."""
        weights = self._weights(running)
        floor = self.floors(running)
        everyone = self.config.everyone_weight
        return {g: {"weight": w, "floor": floor[g],
                    "members": self.members.get(g, [g] if g not in self._explicit else []),
                    "everyone": everyone is not None and g not in self._explicit and w == everyone}
                for g, w in weights.items()}

    def floors(self, running: Collection[str]) -> dict[str, float]:
        """Every group of this host and the ``running`` ones → its floor
        (:func:`governor.core.vocabulary.floors`, clipped to its limit), a fraction. Kept until
        the config, the members, a ``set-weight``, the running groups outside the configured
        ones or the capacity (foreign tenants) change: every refill asks, and at 10,000 groups
        it takes 40 ms."""
        if self._floors is None or self._floors[0] is not self.config or self._floors[1] is not self.members:
            configured = frozenset(access.configured_weights(self.config, self.members))
            self._floors = (self.config, self.members, configured, None, {})
        config, members, configured, key, floor = self._floors
        # The capacity too: a floor is clipped to the limit's fraction of it, and foreign
        # tenants move it between reloads.
        now = (tuple(self.weights.items()), frozenset(g for g in running if g not in configured),
               tuple(self.capacity.items()))
        if now != key:
            weights = self._weights(running)
            floor = vocabulary.floors(weights, config.parents, capacity=self.capacity,
                                      limits={g: config.effective_limit(g) for g in weights})
            self._floors = (config, members, configured, now, floor)
        return floor

    def _weights(self, running: Collection[str]) -> dict[str, float]:
        weights = {g: self.weight(g) for g in access.configured_weights(self.config, self.members)}
        for group in running:
            weights.setdefault(group, self.weight(group))
        return weights
