"""A config's group tree as Slurm accounting: the ``sacctmgr`` commands that make the same tree
of accounts, and what of the config Slurm has no equivalent for (``governor export slurm``,
docs/admin.md "Moving to a cluster"). Pure: who is in a Unix group is given, found by the caller.

==================================  ==============================================================
governor                            Slurm (``sacctmgr``)
==================================  ==============================================================
``[groups.<name>]``                 an account of the same name
``parent``                          the account's ``parent`` (top-level groups: ``root``)
``weight``                          ``fairshare``: every weight times one factor, whole numbers
``limit`` cpu / memory / gpus       the account's ``GrpTRES``: ``cpu``, ``mem`` (MiB), ``gres/gpu``
``users``, ``unix_groups``' members  a user association under the account
``user_limit``                      ``GrpTRES`` of each member's association (a per-user cap on
                                    what their jobs in the account hold together)
==================================  ==============================================================

Everything else (guarantees, ``[groups."*"]``, sessions, I/O, soft memory) is said as a
``# no Slurm equivalent:`` line. Slurm's ``MaxTRESPerUser`` is a QOS limit, not an
association's: the user association's own ``GrpTRES`` caps the same sum without a QOS.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from governor.config.load import EVERYONE, Config, GroupRule
from governor.config.resources import format_amount
from governor.errors import ConfigError

MIB = 1024**2
# The most shares a group is given: weights whose exact ratios need more (0.0013 beside 999.9)
# are rounded, as finer ratios change no decision (Slurm's fairshare is a 32-bit count).
MAX_FAIRSHARE = 1_000_000
# Slurm's own top account: a group of that name would be the cluster's root.
SLURM_ROOT = "root"
# A name Slurm keeps as given and that needs no quoting in its own parser: sacctmgr folds
# upper case to lower and splits its options on "," "=" and blanks.
_SLURM_NAME = re.compile(r"[a-z0-9_][a-z0-9_.-]*")
_USER_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?")


@dataclass(frozen=True)
class Tres:
    """How a quota's resource is written as a Slurm TRES: its TRES name and the size of one of
    Slurm's units in governor's (``mem`` counts MiB)."""

    name: str
    unit: str
    per: int = 1

    def count(self, amount: float) -> int:
        """The whole count Slurm keeps of ``amount``: rounded down, so that an exported limit
        gives no more, but at least 1 of a positive amount (0 would let nothing run)."""
        count = math.floor(amount / self.per)
        return 1 if amount > 0 and count == 0 else count


# The quota resources (:func:`governor.config.resources.quota_keys`) Slurm has a TRES for.
TRES: dict[str, Tres] = {
    "cpu": Tres("cpu", "CPUs"),
    "memory": Tres("mem", "MiB", MIB),
    "gpu": Tres("gres/gpu", "GPUs"),
}


@dataclass(frozen=True)
class SlurmExport:
    """What :func:`slurm_accounting` gives.

    Attributes:
        commands: ``sacctmgr`` command lines, parents before children, names quoted for sh.
        notes: what has no Slurm equivalent or changed on the way, one line each, no ``#``.
        fairshare_factor: what every weight was multiplied by to give whole fairshares.
    """

    commands: tuple[str, ...]
    notes: tuple[str, ...]
    fairshare_factor: Fraction

    def script(self, source: str) -> str:
        """A ``sh`` script: a header naming ``source`` (the config file), the commands, then the
        notes as ``# no Slurm equivalent:`` comments."""
        header = [
            "#!/bin/sh",
            f"# Slurm accounting for the groups of {_comment(source)}, written by `governor export slurm`.",
            "# Run it where sacctmgr reaches the cluster's slurmdbd. Each line stands alone: run again after",
            "# a change, the adds say 'Nothing new added' and the modifies set the new values.",
            f"# fairshare = weight x {float(self.fairshare_factor):.6g}",
        ]
        return "\n".join([*header, *self.commands, *(f"# {_comment(note)}" for note in self.notes)]) + "\n"


def slurm_accounting(config: Config, unix_members: Mapping[str, Sequence[str]]) -> SlurmExport:
    """The Slurm accounts, limits and associations that hold ``config``'s group tree.

    Args:
        config: a checked config.
        unix_members: Unix group name → its members' user names (those listing it and those
            having it as primary group); a Unix group left out is unknown where this runs.

    Returns:
        The commands and the notes (:class:`SlurmExport`).

    Raises:
        ConfigError: at ``groups.<name>``, for a group name Slurm would change (upper case) or
            that is Slurm's ``root``; at ``groups.<name>.users`` (or ``unix_groups``) for a user
            name Slurm cannot keep as it is.
    """
    groups = _parents_first(config.groups)
    for rule in groups:
        _check_account(rule, config.file)
    factor = _fairshare_factor([rule.weight for rule in groups])
    commands: list[str] = []
    notes: list[str] = []
    tres = [resource for resource in TRES if resource in config.resources]
    for rule in groups:
        name = shlex.quote(rule.name)
        commands.append(f"sacctmgr -i add account {name} parent={shlex.quote(rule.parent or SLURM_ROOT)}")
        fairshare = _fairshare(rule.weight, factor)
        commands.append(f"sacctmgr -i modify account where name={name} set fairshare={fairshare} "
                        f"GrpTRES={_tres(rule.limit, tres, f'groups.{rule.name}.limit', notes)}")
        for user in _members(rule, unix_members, config.file, notes):
            commands.append(f"sacctmgr -i add user {shlex.quote(user)} account={name}")
            if rule.user_limit:
                limit = _tres(rule.user_limit, tres, f"groups.{rule.name}.user_limit", notes)
                commands.append(f"sacctmgr -i modify user where name={shlex.quote(user)} account={name} "
                                f"set GrpTRES={limit}")
        if rule.guarantee:
            notes.append(f"no Slurm equivalent: groups.{rule.name}.guarantee ({_amounts(rule.guarantee)}): "
                         "Slurm gives an account no floor (a reservation or a preempting QOS comes nearest)")
    if any((Fraction(repr(rule.weight)) * factor).denominator != 1 for rule in groups):
        notes.append(f"rounded: fairshare = weight x {float(factor):.6g}, rounded to whole shares "
                     f"(the exact ratios need more than {MAX_FAIRSHARE:,})")
    notes.extend(_config_notes(config))
    return SlurmExport(tuple(commands), tuple(dict.fromkeys(notes)), factor)


def _parents_first(groups: Sequence[GroupRule]) -> list[GroupRule]:
    """``groups`` by depth (file order within one depth): sacctmgr needs a parent to exist."""
    parent = {rule.name: rule.parent for rule in groups}

    def depth(name: str) -> int:
        return 0 if parent[name] is None else 1 + depth(parent[name])

    return sorted(groups, key=lambda rule: depth(rule.name))


def _check_account(rule: GroupRule, file: str) -> None:
    where = f"groups.{rule.name}"
    if rule.name == SLURM_ROOT:
        raise ConfigError(file, where, "is named like Slurm's own top account, root; rename the group to export it")
    if not _SLURM_NAME.fullmatch(rule.name):
        raise ConfigError(file, where, "has upper case, which Slurm folds to lower case in account names; "
                                       "rename the group in lower case to export it")


def _fairshare_factor(weights: Sequence[float]) -> Fraction:
    """The least factor that makes every weight a whole number (as the config writes them:
    0.5 and 1 give 2), or where that would pass :data:`MAX_FAIRSHARE`, the one giving the
    largest weight that many shares (each then rounded)."""
    exact = [Fraction(repr(weight)) for weight in weights]
    if not exact:  # only [groups."*"]: no account to weigh
        return Fraction(1)
    factor = Fraction(math.lcm(*(weight.denominator for weight in exact)),
                      math.gcd(*(weight.numerator for weight in exact)))
    if max(exact) * factor > MAX_FAIRSHARE:
        return MAX_FAIRSHARE / max(exact)
    return factor


def _fairshare(weight: float, factor: Fraction) -> int:
    return max(1, round(Fraction(repr(weight)) * factor))


def _tres(quota: Mapping[str, float], tres: Sequence[str], where: str, notes: list[str]) -> str:
    """``cpu=N,mem=M,gres/gpu=K`` for ``quota``, ``-1`` (none) for each governed TRES it leaves
    out, so that loading again clears a limit taken out of the config."""
    parts = []
    for resource in tres:
        entry = TRES[resource]
        if resource not in quota:
            parts.append(f"{entry.name}=-1")
            continue
        count = entry.count(quota[resource])
        if count * entry.per != quota[resource]:
            notes.append(f"rounded: {where}.{resource} = {format_amount(resource, quota[resource])}; "
                         f"Slurm counts whole {entry.unit}: {entry.name}={count}")
        parts.append(f"{entry.name}={count}")
    return ",".join(parts)


def _members(rule: GroupRule, unix_members: Mapping[str, Sequence[str]], file: str, notes: list[str]) -> list[str]:
    """The user names of ``rule``'s members: its ``users``, then its Unix groups' members."""
    users = list(rule.users)
    for unix_group in rule.unix_groups:
        if unix_group not in unix_members:
            notes.append(f"not exported: groups.{rule.name}.unix_groups names {unix_group}, "
                         "a Unix group unknown here: add its members with sacctmgr add user")
        users.extend(unix_members.get(unix_group, ()))
    for user in users:
        if not _USER_NAME.fullmatch(user):
            key = "users" if user in rule.users else "unix_groups"
            raise ConfigError(file, f"groups.{rule.name}.{key}",
                              f"has the user {user!r}, which Slurm cannot keep as a user name "
                              "(lower-case letters, digits, _ . -, starting with a letter or _, at most 32)")
    return list(dict.fromkeys(users))


def _config_notes(config: Config) -> list[str]:
    """What of the config outside the group tree has no place in Slurm's accounting."""
    notes = []
    if config.everyone_weight is not None:
        each = "".join(f", at most {format_amount(resource, amount, unit=True)} of {resource} each"
                       for resource, amount in config.everyone_user_limit.items())
        notes.append(f'no Slurm equivalent: [groups."{EVERYONE}"] (a group of their own, weight '
                     f"{config.everyone_weight:g}{each}, for each user in no other group): add such users to an "
                     "account")
    if config.sessions.enabled:
        notes.append("no Slurm equivalent: [sessions] (login sessions governed as tasks); on login nodes "
                     "keep governor, on compute nodes pam_slurm_adopt puts ssh sessions into the user's job")
    if config.io_devices:
        devices = ", ".join(device.name for device in config.io_devices)
        notes.append(f"no Slurm equivalent: [[capacity.io]] ({devices}): Slurm's accounting has no I/O bandwidth "
                     "limit")
    if config.memory_mode() == "soft":
        notes.append('no Slurm equivalent: enforcement.memory = "soft": Slurm caps memory hard '
                     "(cgroup.conf ConstrainRAMSpace)")
    if config.fairshare_half_life_s is not None:
        notes.append(f"in slurm.conf, not sacctmgr: [fairshare] half_life is PriorityDecayHalfLife="
                     f"{_minutes(config.fairshare_half_life_s)}")
    return notes


def _amounts(quota: Mapping[str, float]) -> str:
    return ", ".join(f"{resource} {format_amount(resource, amount, unit=True)}" for resource, amount in quota.items())


def _minutes(seconds: float) -> str:
    """Slurm's time format, days-hours:minutes (whole minutes, at least one)."""
    minutes = max(1, round(seconds / 60))
    return f"{minutes // 1440}-{minutes % 1440 // 60:02d}:{minutes % 60:02d}"


def _comment(text: str) -> str:
    """``text`` safe on one comment line: a newline in a file name must not end the comment."""
    return text.replace("\n", "\\n").replace("\r", "\\r")
