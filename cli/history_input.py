"""What ``governor history`` and ``governor replay`` share: the period asked for, where the
journal is, and who reads it (:mod:`governor.wire.visibility`)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import click

# The config the installed governor.service names (not imported: `governor run` must not load
# the config package).
INSTALLED = "/etc/governor/governor.toml"
WHEN_HELP = ('a span back from now ("7d", "12h", "30min") or a local date and time '
             '("2026-11-20", "2026-11-20 14:00")')


def journal_options(command):
    """The options ``history`` and ``replay`` share: ``--since``, ``--until``, ``--config``, ``--dir``."""
    for option in reversed((
        click.option("--since", metavar="WHEN", default="7d", show_default=True, help=f"From: {WHEN_HELP}."),
        click.option("--until", metavar="WHEN", help="Up to (not included), as --since; default now."),
        click.option("--config", "config_file", metavar="FILE", default=INSTALLED, show_default=True,
                     help="The daemon's config in force: its [history] directory holds the journal (a daemon "
                          "started with --state-dir DIR keeps it in DIR/history unless the config names one: "
                          "give --dir)."),
        click.option("--dir", "directory", metavar="DIR", type=click.Path(), help="The journal's directory itself."),
    )):
        command = option(command)
    return command


def parse_when(text: str, now: float, option: str) -> float:
    """``text`` as unix seconds: a span back from ``now``, or an ISO date and time (local).

    Raises:
        click.BadParameter: neither, naming ``option``.
    """
    from governor.config.units import parse_duration, quoted

    try:
        span = parse_duration(text)
    except ValueError:
        pass
    else:  # 99999999d was the year -271764 in replay's heading
        if span > now:
            raise click.BadParameter(f"{quoted(text)} reaches back before 1970, when no journal was written",
                                     param_hint=option)
        return now - span
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"must be {WHEN_HELP}, got {quoted(text)}", param_hint=option) from None
    try:
        return when.timestamp()
    except (ValueError, OverflowError, OSError):  # year 1 in a zone east of UTC is year 0 in UTC
        raise click.BadParameter(f"{quoted(text)} is a date this host's clock cannot say (from 0001-01-02 to "
                                 "9999-12-30)", param_hint=option) from None


def period(since: str | None, until: str | None, now: float) -> tuple[float | None, float | None]:
    """(since, until) in unix seconds (None: unbounded) from the ``--since``/``--until`` options.

    Raises:
        click.BadParameter: either is no span or date; ``--since`` is not before ``--until``.
    """
    from governor.config.units import quoted

    start = None if since is None else parse_when(since, now, "--since")
    end = None if until is None else parse_when(until, now, "--until")
    if start is not None and until is None and start >= now:  # replay printed a period ending before it began
        raise click.BadParameter(f"{quoted(since)} is not before now: the period up to now would be empty",
                                 param_hint="--since")
    if start is not None and end is not None and start >= end:
        raise click.BadParameter(f"{quoted(since)} is not before --until {quoted(until)}: the period would be "
                                 "empty (a span counts back from now: --since 1h --until 10min)",
                                 param_hint="--since")
    return start, end


def journal_dir(config_file: str, directory: str | None):
    """The journal's directory and the config read for it (None when there was none to read):
    ``directory`` if given, else ``config_file``'s ``[history] directory`` (or the embedded
    default's when the installed config is missing).

    Raises:
        ConfigError: ``config_file`` was asked for and cannot be read or is not valid.
    """
    from governor.config.load import default_config, parse_config
    from governor.cli.inputs import read_input

    if config_file == INSTALLED and not os.path.exists(INSTALLED):
        config = default_config()
    else:
        config = parse_config(read_input(config_file), config_file)
    return Path(directory or config.history.directory), config


def reader(config):
    """Who is reading (:class:`governor.wire.visibility.Viewer`): this process's uid, an admin
    if root or in ``config``'s admin_group."""
    import grp

    from governor.wire.visibility import Viewer

    uid = os.getuid()
    groups = set()
    for gid in os.getgroups():
        try:
            groups.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return Viewer(uid, uid == 0 or (config.admin_group is not None and config.admin_group in groups))


def entries(directory: Path, since: float | None, until: float | None) -> list[dict]:
    """The journal's entries in the period, oldest first. Lines of the period that are no
    usable entry are skipped, and said on standard error: how many, and the first's file,
    line and fault.

    Raises:
        click.ClickException: the journal cannot be read, saying why and what to do.
    """
    from governor.host.history_store import read_history

    skipped: list[tuple[Path, int, str]] = []
    try:
        found = list(read_history(directory, since, until, lambda *line: skipped.append(line)))
    except PermissionError:
        raise click.ClickException(f"cannot read the history in {directory}: the journal is the "
                                   "daemon's (mode 0700); run it as root or with sudo") from None
    except OSError as error:
        raise click.ClickException(f"cannot read the history in {directory}: {error.strerror or error} "
                                   "(is [history] enabled, and is this the daemon's [history] directory? --dir names "
                                   "another)") from None
    if skipped:
        from governor.cli.view_common import printable

        path, number, problem = skipped[0]
        lines = "1 line" if len(skipped) == 1 else f"{len(skipped):,} lines"
        click.echo(f"governor: skipped {lines} of the journal that {'is' if len(skipped) == 1 else 'are'} no entry "
                   f"(the first: {printable(str(path))} line {number}: {printable(problem)})", err=True)
    return found
