"""``governor check-config``: check a config file and say how governor reads it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from governor.config import Config

# What each enforcement mode writes, for the summary.
_ENFORCEMENT_FILES = {
    "quota": "cpu.max",
    "cores": "cpu.max + exclusive cpuset.cpus",
    "soft": "memory.high; on cgroup v1 a soft limit that binds only under memory pressure",
    "hard": "memory.high + memory.max",
}


@click.command("check-config", short_help="Check a config file and summarise it.")
@click.argument("file", required=False, type=click.Path())
@click.option("--default", "show_default", is_flag=True,
              help="Print the embedded default config instead, to start a file from.")
@click.option("--portable", is_flag=True,
              help="Check the file alone, not against this host (a config written for another machine).")
def check_config(file: str | None, show_default: bool, portable: bool) -> None:
    """Check the config FILE and print a summary of it; exit 2 if it is refused.

    Without --portable it runs every check the daemon runs at start on this host (the reserve
    leaves something, each governed device exists) and warns, on stderr, of names this host
    does not know (users, Unix groups, the admin group). Sizes print with K/M/G/T suffixes
    (powers of 1024); CPU is in cores.

    \b
    Examples:
      governor check-config /etc/governor/governor.toml
      governor check-config --portable my.toml    # checks that need no host
      governor check-config --default > governor.toml
    """
    # Imported here so `governor run` does not load the config checker.
    from governor.config import DEFAULT_CONFIG, parse_config

    if show_default == (file is not None):
        raise click.UsageError("give FILE to check, or --default to print the embedded default")
    if show_default:
        click.echo(DEFAULT_CONFIG, nl=False)
        return
    from governor.cli.inputs import read_input

    config = parse_config(read_input(file), file)
    if not portable:
        check_on_this_host(config)
    click.echo(f"{file}: OK")
    for line in summary(config):
        click.echo(line)
    for warning in [] if portable else unknown_names(config):
        click.echo(f"governor: warning: {file}: {warning}", err=True)


def check_on_this_host(config: Config) -> None:
    """What the daemon checks at start against the host: the capacity after the reserve, and
    each governed device.

    Raises:
        ConfigError: naming the key, as the daemon would refuse it.
    """
    import os

    import psutil

    from governor.cgroups.devices import whole_disk
    from governor.errors import ConfigError, DeviceError

    config.capacity(float(len(os.sched_getaffinity(0))), psutil.virtual_memory().total)
    for index, device in enumerate(config.io_devices):
        try:
            whole_disk(device.device)
        except DeviceError as error:
            raise ConfigError(config.file, f"capacity.io[{index}].device", f"{error} (on this host)") from None


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


def summary(config: Config) -> list[str]:
    """The lines ``check-config`` prints for a checked :class:`~governor.config.Config`."""
    from governor.units import format_amount, format_number

    lines = ["capacity:"]
    if config.cpu_cores is None:
        lines.append(f"  cpu: host CPUs minus {format_amount('cpu', config.reserve_cpu_cores)} reserved")
    else:
        lines.append(f"  cpu: {format_amount('cpu', config.cpu_cores, unit=True)} (fixed)")
    if config.memory_bytes is None:
        lines.append(f"  memory: host memory minus {format_amount('memory', config.reserve_memory_bytes)} reserved")
    else:
        lines.append(f"  memory: {format_amount('memory', config.memory_bytes)} (fixed)")
    for device in config.io_devices:
        lines.append(f"  io {device.name} ({device.device}): read {format_amount('io.read', device.read_bps)}, "
                     f"write {format_amount('io.write', device.write_bps)}")
    if not config.io_devices:
        lines.append("  io: no block device governed")

    task = (f"default task: cpu {format_amount('cpu', config.task_cpu_cores)}, "
            f"memory {format_amount('memory', config.task_memory_bytes)}")
    if config.io_devices:
        task += (f", io read {format_amount('io.read', config.task_io_read_bps)}, "
                 f"write {format_amount('io.write', config.task_io_write_bps)} on each device")
    lines.append(task)
    lines.append(f"enforcement: cpu {config.cpu_enforcement} ({_ENFORCEMENT_FILES[config.cpu_enforcement]}), "
                 f"memory {config.memory_enforcement} ({_ENFORCEMENT_FILES[config.memory_enforcement]})")
    lines.append("  all governed memory together: at most the memory capacity (memory.max on governor's root)")

    lines.append("groups:")
    for rule in config.groups:
        members = [f"users {', '.join(rule.users)}"] if rule.users else []
        members += [f"unix groups {', '.join(rule.unix_groups)}"] if rule.unix_groups else []
        lines.append(f"  {rule.name}: weight {format_number(rule.weight)}; {'; '.join(members)}")
    if config.everyone_weight is not None:
        lines.append(f'  "*": weight {format_number(config.everyone_weight)}; '
                     "every user in no explicit group, a group of their own")
    else:
        lines.append("  users in no group above cannot launch tasks")
    sessions = config.sessions
    if sessions.enabled:
        exempt = f"; exempt {', '.join(sessions.exempt)}" if sessions.exempt else ""
        lines.append(f"sessions: every other process of a governed user, one session each: cpu "
                     f"{format_amount('cpu', sessions.cpu_cores)}, "
                     f"memory {format_amount('memory', sessions.memory_bytes)}{exempt}")
    else:
        lines.append("sessions: off (only governor run is governed)")
    admin = f"root and members of {config.admin_group}" if config.admin_group else "root only"
    lines.append(f"admin: {admin}")
    lines.append(f"daemon: sample every {format_number(config.sample_interval_s)}s, "
                 f"reconcile every {format_number(config.reconcile_interval_s)}s, state in {config.state_dir}")
    lines.append(f"bounds per user (root excepted): {config.max_tasks_per_user} tasks running and queued, "
                 f"{config.max_connections_per_user} connections")
    return lines
