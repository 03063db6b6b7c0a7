"""Who may do what over the control socket, and what a launch may ask for (DESIGN.md §6).

Authorisation comes from SO_PEERCRED alone: the uid the kernel recorded for the caller, its
name and its Unix groups from the host's user database. Every refusal is a RequestError whose
code the client shows.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from governor.config import resources
from governor.config.load import Config, group_name_problem
from governor.config.resource_values import MIN_CORES, MIN_TASK_MEMORY
from governor.errors import RequestError
from governor.config.resources import format_amount


# Callers kept by Identities at most (distinct uid and gid pairs): one per user in practice.
MAX_IDENTITIES_KEPT = 100_000


@dataclass(frozen=True)
class Identity:
    """A caller: uid, user name and Unix group names (numbers where the host has no name)."""

    uid: int
    user: str
    groups: tuple[str, ...]


def identify(uid: int, gid: int) -> Identity:
    """The caller's identity from the host's user and group databases; a uid they do not know
    is its number, with its gid's.

    Raises:
        RequestError: ``unavailable``, the databases could not be read (the daemon out of file
            descriptors: NSS then says "no such user", which must not read as "no group").
    """
    try:
        user = pwd.getpwuid(uid).pw_name
        gids = os.getgrouplist(user, gid)
    except (KeyError, OSError):
        _check_descriptors()
        return Identity(uid, str(uid), (str(gid),))
    names = []
    for number in gids:
        try:
            names.append(grp.getgrgid(number).gr_name)
        except KeyError:
            names.append(str(number))
    return Identity(uid, user, tuple(names))


class Identities:
    """:func:`identify` with a memory, for the launch path: a lookup reads and parses the user
    and group databases (every group a user is in, one by one), on every launch. A caller is
    looked up again once ``files`` (``/etc/passwd``, ``/etc/group``) change (size, inode or
    modification time), and after :meth:`forget` (a directory service's users change with no
    file: the daemon's periodic rescan forgets). A uid the databases do not know is not kept.

    Args:
        files: the databases whose change means users or groups changed.
    """

    def __init__(self, files: Sequence[Path] = (Path("/etc/passwd"), Path("/etc/group"))) -> None:
        self.files = tuple(files)
        self._known: dict[tuple[int, int], Identity] = {}
        self._seen: tuple = ()  # the files' (size, inode, mtime) when _known was filled

    def identify(self, uid: int, gid: int) -> Identity:
        """:func:`identify`, kept while the databases stay as they were.

        Raises:
            RequestError: ``unavailable``, as :func:`identify`.
        """
        seen = tuple(_signature(path) for path in self.files)
        if seen != self._seen:
            self._known.clear()
            self._seen = seen
        known = self._known.get((uid, gid))
        if known is None:
            known = identify(uid, gid)
            if known.user != str(uid) and len(self._known) < MAX_IDENTITIES_KEPT:
                self._known[uid, gid] = known
        return known

    def forget(self) -> None:
        """Look every caller up again from now on."""
        self._known.clear()


def _signature(path: Path) -> tuple[int, int, int] | None:
    """What tells that file ``path`` changed: its size, inode and mtime (ns); None if it is not there."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_ino, stat.st_mtime_ns


def _check_descriptors() -> None:
    """Raise RequestError ``unavailable`` when this process cannot open a file now."""
    try:
        os.close(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
    except OSError as error:
        raise RequestError("unavailable", f"the daemon cannot read the user database now ({error.strerror}); "
                                          "try again") from None


def members(config: Config, uid_min: int, nobody: int) -> dict[str, list[str]]:
    """Group → the users of this host who may launch into it today, as a launch decides it
    (:meth:`~governor.config.load.Config.allowed_groups`): those its ``users`` name, members of its
    ``unix_groups`` (listed in the group or having it as their primary group), and under
    ``"*"`` every other login user, a group of their own. Login users have a uid of at least
    ``uid_min`` and are not ``nobody``; a system user counts only where a group names them.
    Every explicit group is a key, with no member if it has none here."""
    found: dict[str, list[str]] = {rule.name: [] for rule in config.groups}
    named = {user for rule in config.groups for user in rule.users}
    for entry in sorted(pwd.getpwall(), key=lambda e: e.pw_uid):
        if entry.pw_uid == nobody or (entry.pw_uid < uid_min and entry.pw_name not in named):
            continue
        who = identify(entry.pw_uid, entry.pw_gid)
        for group in config.allowed_groups(who.user, who.groups):
            found.setdefault(group, [])
            if who.user not in found[group]:
                found[group].append(who.user)
    return found


def configured_weights(config: Config, members: Mapping[str, list[str]]) -> dict[str, float]:
    """Every group this host has today → its weight: the explicit groups, and with ``"*"`` one
    group per user it makes one of (``members`` as :func:`members` found them). What floors
    are computed over (:func:`governor.core.vocabulary.floors`)."""
    weights = {rule.name: rule.weight for rule in config.groups}
    if config.everyone_weight is not None:
        weights.update({group: config.everyone_weight for group in members if group not in weights})
    return weights


def is_admin(config: Config, who: Identity) -> bool:
    """Whether ``who`` is root or in the config's admin group."""
    return who.uid == 0 or (config.admin_group is not None and config.admin_group in who.groups)


def require_admin(config: Config, who: Identity, operation: str) -> None:
    """Raises RequestError ``forbidden`` unless ``who`` is root or in the config's admin group."""
    if is_admin(config, who):
        return
    admins = f"root or members of {config.admin_group}" if config.admin_group else "root"
    raise RequestError("forbidden", f"{operation} is for {admins}; user {who.user} is not")


def launch_group(config: Config, who: Identity, requested: str | None, allowed: Sequence[str] | None = None) -> str:
    """The group a launch goes into: the one asked for if ``who`` may use it, else their default.

    Root may name any configured group or any host user's own group. ``allowed``: the groups
    ``who`` may use (``config.allowed_groups``) where the caller knows them already.

    Raises:
        RequestError: ``forbidden`` (not the caller's group, or no group at all), ``not_found``
            (a group the config does not have, for anyone: a typo is bad input, exit 2).
    """
    if allowed is None:
        allowed = config.allowed_groups(who.user, who.groups)
    if requested is None:
        if not allowed:  # (the default is the first: Config.group_for)
            raise RequestError("forbidden", f"user {who.user} belongs to no governed group")
        return allowed[0]
    if requested in allowed or (who.uid == 0 and known_group(config, requested)):
        return requested
    if not known_group(config, requested):
        yours = "" if who.uid == 0 else f" (yours: {', '.join(allowed) or 'none'})"
        raise RequestError("not_found", f"no group {requested!r} in the config{yours}")
    raise RequestError("forbidden", f"user {who.user} may not launch into group {requested!r} "
                                    f"(allowed: {', '.join(allowed) or 'none'})")


def known_group(config: Config, name: str) -> bool:
    """An explicit group, or the per-user group of a user this host knows."""
    if any(rule.name == name for rule in config.groups):
        return True
    if config.everyone_weight is None or group_name_problem(name) is not None:
        return False
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def task_demand(config: Config, capacity: Mapping[str, float], flags: Mapping[str, float]) -> dict[str, float]:
    """A launch's demand vector: its flags over ``[defaults.task]``, checked against the host.

    Raises:
        RequestError: ``bad_request`` (a resource this config governs none of, such as GPUs or
            I/O with no governed device; no CPU or memory),
            ``exceeds_capacity`` (more of a resource than the host divides).
    """
    for entry in resources.RESOURCES:
        if flags.get(entry.wire) and not entry.names(config):
            raise RequestError("bad_request", f"demand.{entry.wire}: {entry.absent}")
    try:
        demand = config.task_demand(**flags)
    except ValueError as error:  # a count of 0 (no cap at all) or past the kernel's limit
        raise RequestError("bad_request", f"demand.{error}") from None
    for resource in ("cpu", "memory"):
        if demand.get(resource, 0) <= 0:
            raise RequestError("bad_request", f"demand.{resource} must be > 0: governor limits every task")
    if demand["cpu"] < MIN_CORES:
        raise RequestError("bad_request", f"demand.cpu must be at least {MIN_CORES:g} cores: the kernel's smallest "
                                          "CPU quota")
    if demand["memory"] < MIN_TASK_MEMORY:
        raise RequestError("bad_request", f"demand.memory must be at least {format_amount('memory', MIN_TASK_MEMORY)}: "
                                          "no process starts in less")
    check_fits(demand, capacity)
    return demand


def check_fits(demand: Mapping[str, float], capacity: Mapping[str, float]) -> None:
    """Refuse a demand that can never fit, even on an empty host.

    Raises:
        RequestError: ``exceeds_capacity`` naming the resource, the demand and the capacity.
    """
    for resource, amount in demand.items():
        if amount > capacity.get(resource, 0) and not resources.count(resource):  # a count's cap is never divided
            asked, has = (format_amount(resource, v, unit=True) for v in (amount, capacity.get(resource, 0)))
            raise RequestError("exceeds_capacity", f"demand {resource} = {asked} exceeds the capacity of {has}")
