"""``governor check-config``: check a config file and say how governor reads it."""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from collections.abc import Sequence

    from governor.config.load import Config
    from governor.host.host_check import Version

# What each enforcement mode writes, for the summary (v2's names: on a v1 host the summary says
# them as governor.cgroups.versions names them there).
_ENFORCEMENT_FILES = {
    "quota": "cpu.max",
    "cores": "cpu.max + exclusive cpuset.cpus",
    "soft": "memory.high",
    "hard": "memory.max",
    None: "memory.max, the default",
}


@click.command("check-config", short_help="Check a config file and summarise it.")
@click.argument("file", required=False, type=click.Path(readable=False))  # read_input says why, and to use sudo
@click.option("--default", "show_default", is_flag=True,
              help="Print the embedded default config instead, to start a file from.")
@click.option("--portable", is_flag=True,
              help="Check the file alone, not against this host (a config written for another machine).")
def check_config(file: str | None, show_default: bool, portable: bool) -> None:
    """Check the config FILE and print a summary of it; exit 2 if it is refused.

    Without --portable it runs every check the daemon runs at start on this host (the file is
    root's and writable by nobody else, the reserve leaves something, each governed device
    exists, the state directory can be trusted), prints who each group is today (its users,
    the members of its Unix groups, the users of "*") with its floor, the share of every
    resource DRF promises it while every group is busy, and warns, on stderr, of names this
    host does not know (users, Unix groups, the admin group) and of a default task or session
    larger than this host divides. Sizes print with K/M/G/T suffixes (powers of 1024); CPU is
    in cores. Any admin may run it without sudo: what must be root's is checked against root,
    the daemon's user; where the caller cannot read what the daemon reads, it says to use sudo.

    \b
    Examples:
      governor check-config /etc/governor/governor.toml
      governor check-config --portable my.toml    # checks that need no host
      governor check-config --default > governor.toml
    """
    # Imported here so `governor run` does not load the config checker.
    from governor.config.load import DEFAULT_CONFIG, parse_config

    if show_default == (file is not None):
        raise click.UsageError("give FILE to check, or --default to print the embedded default")
    if show_default:
        click.echo(DEFAULT_CONFIG, nl=False)
        return
    from governor.cli.inputs import read_input
    from governor.host.host_check import DAEMON_UID

    from governor.cli.check_config_gpus import gpu_report, unit_warnings
    from governor.cli.check_config_notify import notify_warnings
    from governor.errors import ConfigError

    try:
        config = parse_config(read_input(file, owner=None if portable else DAEMON_UID), file)
        host = None
        if portable:
            check_fixed_capacity(config)
        else:
            from governor.host import access
            from governor.core.headroom import check_guarantees_held
            from governor.host.host_check import check_on_this_host, kernel_here
            from governor.host.session_rules import NOBODY_UID, login_uid_min

            host = (check_on_this_host(config), access.members(config, login_uid_min(), NOBODY_UID), kernel_here())
            check_guarantees_held(config, host[0])
        gpus = [] if portable or config.gpus is None else gpu_report(config, host[2])
    except ConfigError as error:
        raise as_root_hint(error, file) from None
    click.echo(f"{file}: OK")
    for line in summary(config, host) + gpus:
        click.echo(line)
    soft = config.soft_memory_warning(host[2].memory_high_throttles) if host else None
    unprotected = config.unprotected_memory_warning(host[2].mode) if host else None
    unit = [] if portable else unit_warnings(config, host[2])
    fit = [] if portable else (fit_warnings(config, host[0]) + memory_bound_warnings(config, host[0]["memory"])
                               + notify_warnings(config))
    for warning in [] if portable else unknown_names(config) + [w for w in (soft, unprotected) if w] + unit + fit:
        click.echo(f"governor: warning: {file}: {warning}", err=True)
    if not portable:  # of the host, not of the file: launches are slower than they need be
        from governor.host.cgroup_moves import favordynmods_advice

        advice = favordynmods_advice()
        if advice:
            click.echo(f"governor: note: {advice}", err=True)


def as_root_hint(error, file: str):
    """``error`` (a ConfigError), told to use sudo when this user was denied what the daemon, as
    root, may read (``nginx -t`` says the same): the check itself is no less strict."""
    from governor.errors import ConfigError
    from governor.host.host_check import DAEMON_UID

    if os.geteuid() == DAEMON_UID or "Permission denied" not in error.reason:
        return error
    return ConfigError(error.file, error.key, f"{error.reason}; the daemon reads it as root: "
                                              f"sudo governor check-config {file}")


def fit_warnings(config: Config, capacity: dict[str, float]) -> list[str]:
    """What of ``config`` could never run on a host of ``capacity`` (resource → cores, bytes):
    a default task (``[defaults.task]``) or a session's demand (``[sessions]``) larger than the
    host divides, each refused by the daemon at every launch or login."""
    from governor.host.access import check_fits
    from governor.errors import RequestError

    demands = [("defaults.task", config.task_demand(),
                "every governor run that does not ask for less is refused")]
    if config.sessions.enabled:
        demands.append(("sessions", config.session_demand(), "no login session can be governed"))
    warnings = []
    for key, demand, consequence in demands:
        try:
            check_fits(demand, capacity)
        except RequestError as error:
            warnings.append(f"{key}: {error.message} on this host: {consequence}")
    return warnings


def memory_bound_warnings(config: Config, memory_bytes: float) -> list[str]:
    """The groups in which one user's tasks may declare all ``memory_bytes`` (the memory
    governor divides here), on a host several users share: nothing bounds them (no
    ``limit.memory`` on the group or above it, no ``user_limit.memory``, each below it;
    ``[groups."*"]`` takes a ``user_limit`` for each of its users). Memory is admitted at
    its declaration and never taken back, so while such tasks run every other launch waits: an
    attacker's check held 23.3G with two idle ``sleep`` tasks."""
    from governor.config.units import format_size

    members = [rule for rule in config.groups if rule.users or rule.unix_groups]
    shared = config.everyone_weight is not None or len({u for r in members for u in r.users}) > 1 or any(
        r.unix_groups for r in members)
    if not shared or memory_bytes <= 0:
        return []
    open_ = [rule.name for rule in members
             if config.effective_limit(rule.name).get("memory", memory_bytes) >= memory_bytes
             and rule.user_limit.get("memory", memory_bytes) >= memory_bytes]
    if config.everyone_weight is not None and config.everyone_user_limit.get("memory", memory_bytes) >= memory_bytes:
        open_.append('"*"')
    if not open_:
        return []
    where = ", ".join(f"groups.{name}" for name in open_)
    return [f"{where}: nothing bounds the memory one user's tasks declare below the {format_size(memory_bytes)} "
            "governor divides: one user can reserve it all, and every other launch then waits until those "
            "tasks end; give each a user_limit.memory (or a group a limit.memory) (docs/admin.md, "
            "\"One user's memory\")"]


def check_fixed_capacity(config: Config) -> None:
    """Refuse, as the daemon does on any host, guarantees over the capacity the file fixes
    (``capacity.cpu``/``memory``): top-level ones (:meth:`~governor.config.settings.Config.check_guarantees_fit`)
    and headroom that cannot all be kept (:func:`~governor.core.headroom.check_guarantees_held`);
    ConfigError at the first group's ``guarantee.<resource>``."""
    from governor.core.headroom import check_guarantees_held

    fixed = {"cpu": config.cpu_cores, "memory": config.memory_bytes}
    capacity = {resource: amount for resource, amount in fixed.items() if amount is not None}
    config.check_guarantees_fit(capacity)
    check_guarantees_held(config, capacity)


def unknown_names(config: Config) -> list[str]:
    """Names the config gives that this host's user and group databases do not know."""
    import grp
    import pwd

    def known(lookup, name: str) -> bool:
        try:
            lookup(name)
        except KeyError:
            return False
        return True

    warnings = []
    for rule in config.groups:
        warnings += [f"groups.{rule.name}.users: no user {u!r} on this host" for u in rule.users
                     if not known(pwd.getpwnam, u)]
        warnings += [f"groups.{rule.name}.unix_groups: no Unix group {g!r} on this host" for g in rule.unix_groups
                     if not known(grp.getgrnam, g)]
    if config.admin_group and not known(grp.getgrnam, config.admin_group):
        warnings.append(f"daemon.admin_group: no Unix group {config.admin_group!r} on this host: only root "
                        "may run admin operations")
    warnings += [f"sessions.exempt: no user {u!r} on this host" for u in config.sessions.exempt
                 if not known(pwd.getpwnam, u)]
    return warnings


def _quota(quota: dict) -> str:
    """A group's quota as its table says it: by quota key (``gpus 2``, ``cpu 1.5 cores``)."""
    from governor.config.resources import find
    from governor.config.resources import format_amount

    return ", ".join(f"{find(resource).quota} {format_amount(resource, amount, unit=True)}"
                     for resource, amount in quota.items())


def _fixed_capacity(config: Config) -> dict[str, float]:
    """The capacity the config fixes without a host (``capacity.cpu``, ``capacity.memory``):
    what a floor is clipped to a limit against where no host says the rest."""
    fixed = {"cpu": config.cpu_cores, "memory": config.memory_bytes}
    return {resource: float(amount) for resource, amount in fixed.items() if amount is not None}


def summary(config: Config, host: tuple[dict[str, float], dict[str, list[str]], Version] | None = None) -> list[str]:
    """The lines ``check-config`` prints for a checked :class:`~governor.config.load.Config`; with
    ``host``, the capacity it gives on this host, each group's members today
    (:func:`governor.host.access.members`) and what the host's cgroup version gives
    (:func:`governor.host.host_check.kernel_here`): the groups' floors, who they are, and how
    memory is capped here."""
    from governor.config.resources import format_amount
    from governor.config.units import format_number, format_timespan
    from governor.core.vocabulary import floors

    lines = ["capacity:"]
    if config.cpu_cores is None:
        lines.append(f"  cpu: host CPUs minus {format_amount('cpu', config.reserve_cpu_cores)} reserved")
    else:
        lines.append(f"  cpu: {format_amount('cpu', config.cpu_cores, unit=True)} (fixed)")
    if config.memory_bytes is None:
        lines.append(f"  memory: host memory minus {format_amount('memory', config.reserve_memory_bytes)} reserved")
    else:
        lines.append(f"  memory: {format_amount('memory', config.memory_bytes)} (fixed)")
    reserve = "a tenth" if config.reserve_pids is None else format_amount("pids", config.reserve_pids, unit=True)
    lines.append(f"  pids: the kernel's limit (the lower of pid_max and threads-max) minus {reserve} reserved, "
                 "a cap on governor's root (pids.max), never divided")
    if host is not None:
        capacity = host[0]
        lines.append(f"  on this host: cpu {format_amount('cpu', capacity['cpu'], unit=True)}, "
                     f"memory {format_amount('memory', capacity['memory'])}"
                     + (f", gpu {format_amount('gpu', capacity['gpu'])}" if "gpu" in capacity else "")
                     + (f", pids {format_amount('pids', capacity['pids'], unit=True)}" if "pids" in capacity else ""))
    for device in config.io_devices:
        lines.append(f"  io {device.name} ({device.device}): read {format_amount('io.read', device.read_bps)}, "
                     f"write {format_amount('io.write', device.write_bps)}")
    if not config.io_devices:
        lines.append("  io: no block device governed")
    if config.gpus == "auto":
        lines.append("  gpu: every NVIDIA GPU NVML finds, whole devices")
    elif config.gpus is not None:
        lines.append(f"  gpu: {len(config.gpus)} whole devices: {', '.join(config.gpus)}")

    task = (f"default task: cpu {format_amount('cpu', config.task_defaults['cpu'])}, "
            f"memory {format_amount('memory', config.task_defaults['memory'])}, "
            f"pids {format_amount('pids', config.task_defaults['pids'])}")
    if config.io_devices:
        task += (f", io read {format_amount('io.read', config.task_defaults['io_read'])}, "
                 f"write {format_amount('io.write', config.task_defaults['io_write'])} on each device")
    lines.append(task)
    memory = f"{config.memory_mode()} cap ({_ENFORCEMENT_FILES[config.memory_enforcement]})"
    enforcement = (f"enforcement: cpu {config.cpu_enforcement} ({_ENFORCEMENT_FILES[config.cpu_enforcement]}), "
                   f"memory {memory}")
    together = "  all governed memory together: at most the memory capacity (memory.max on governor's root)"
    kernel = host[2] if host is not None else None
    if kernel is not None:  # the files by this host's names (the v2 ones where no host is asked)
        enforcement, together = kernel.in_own_names(enforcement), kernel.in_own_names(together)
    protection = ("memory protection: memory.min = a group's guarantee, memory.low = what it reserved up to its floor"
                  if config.memory_protection else "memory protection: off (enforcement.memory_protection = false)")
    if kernel is not None and not kernel.memory_floor and config.memory_protection:
        protection = f"memory protection: none on cgroup {kernel.mode} (no memory.min or memory.low), admission only"
    looked_for = [pattern for pattern, _ in config.foreign.patterns()]
    # Said, because a match shrinks the capacity and keeps its processes out of sessions.
    foreign = (f"foreign tenants, never moved, what they hold taken off the capacity: {', '.join(looked_for)}"
               if looked_for else "foreign tenants: none looked for (foreign.detect = false, no foreign.paths)")
    lines += [enforcement, together, protection, foreign]

    from governor.host.access import configured_weights

    explicit = {rule.name for rule in config.groups}
    members = host[1] if host is not None else {}
    own = [group for group in members if group not in explicit]  # "*": a group per user
    weights = configured_weights(config, members)
    floor = (floors(weights, config.parents, capacity=host[0] if host is not None else _fixed_capacity(config),
                    limits={group: config.effective_limit(group) for group in weights})
             if host is not None or config.everyone_weight is None else {})

    def floor_words(group: str) -> str:
        if group not in floor:
            return ""
        words = f"floor {floor[group]:.1%}"
        if host is not None:
            words += (f" ({format_amount('cpu', floor[group] * host[0]['cpu'], unit=True)}, "
                      f"{format_amount('memory', floor[group] * host[0]['memory'])})")
        return words

    lines.append("groups:" + (" (floor: the share of every resource DRF promises a group while every group is "
                              "busy, all of it while the others are idle)" if floor else ""))
    for rule in config.groups:
        declared = [f"users {', '.join(rule.users)}"] if rule.users else []
        declared += [f"unix groups {', '.join(rule.unix_groups)}"] if rule.unix_groups else []
        floor_text = floor_words(rule.name)
        declared += [f"{words} {_quota(quota)}" for words, quota in (
            ("guarantee", rule.guarantee), ("limit", rule.limit), ("each user at most", rule.user_limit)) if quota]
        indent = "  " * (len(config.ancestors(rule.name)) + 1)
        within = f" (in {rule.parent})" if rule.parent else ""
        lines.append(f"{indent}{rule.name}{within}: weight {format_number(rule.weight)}{', ' if floor_text else ''}"
                     f"{floor_text}; {'; '.join(declared) or 'its child groups'}")
        if host is not None and (rule.users or rule.unix_groups):
            found = members.get(rule.name, [])
            lines.append(f"{indent}  members today: {', '.join(found)}" if found
                         else f"{indent}  no member on this host today")
    if config.everyone_weight is not None:
        each = f"; each at most {_quota(config.everyone_user_limit)}" if config.everyone_user_limit else ""
        lines.append(f'  "*": weight {format_number(config.everyone_weight)}; '
                     f"every user in no explicit group, a group of their own{each}")
        if host is not None:
            lines.append(f"    today: {', '.join(own)}; each such group: {floor_words(own[0])}" if own
                         else "    today: no login user outside the groups above")
    else:
        lines.append("  users in no group above cannot launch tasks")
    if config.fairshare_half_life_s is not None:
        lines.append(f"fair share over time: past use lowers a group's weight, halving every "
                     f"{format_timespan(config.fairshare_half_life_s)}")
    sessions = config.sessions
    if sessions.enabled:
        exempt = f"; exempt {', '.join(sessions.exempt)}" if sessions.exempt else ""
        lines.append(f"sessions: every other process of a governed user, one session each: cpu "
                     f"{format_amount('cpu', sessions.demand['cpu'])}, "
                     f"memory {format_amount('memory', sessions.demand['memory'])}, "
                     f"pids {format_amount('pids', sessions.demand['pids'])}{exempt}; one daemon per host "
                     "may govern sessions")
    else:
        lines.append("sessions: off (only governor run is governed)")
    notify = config.notify
    if notify.command:
        lines.append(f"notify: {_shell_words(notify.command)} as {notify.user or 'the daemon'} on "
                     f"{', '.join(notify.events)}; {notify.max_running} at once, each within "
                     f"{format_timespan(notify.timeout_s)}")
    admin = f"root and members of {config.admin_group}" if config.admin_group else "root only"
    lines.append(f"admin: {admin}")
    lines.append(f"daemon: sample every {format_number(config.sample_interval_s)}s, "
                 f"reconcile every {format_number(config.reconcile_interval_s)}s, "
                 f"state in {_shell_words([config.state_dir])}")
    lines.append(f"bounds per user (root excepted): {config.max_tasks_per_user} tasks running and queued, "
                 f"{config.max_connections_per_user} connections")
    return lines


def _shell_words(command: Sequence[str]) -> str:
    """``command`` as a shell would take it; a word with a character no terminal shows as itself
    (an escape sequence, a newline) in bash's ``$'…'``, that character escaped: the summary
    printed ``"a\\x1b[2Jb"`` as ``'ab'``, and broke its line at a newline."""
    return " ".join(shlex.quote(word) if word.isprintable() else f"$'{''.join(map(_escaped, word))}'"
                    for word in command)


def _escaped(char: str) -> str:
    """``char`` as it reads inside bash's ``$'…'``."""
    if char in "\\'":
        return "\\" + char
    if char.isprintable():
        return char
    if char in _NAMED:
        return _NAMED[char]
    # Its UTF-8 bytes: bash reads \u only in a UTF-8 locale (in C it stays "\u009B").
    return "".join(f"\\x{byte:02x}" for byte in char.encode())


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
