"""``governor install-systemd``: install governor.service and governor-tasks.service.

The units come from ``configs/``, installed with governor as the package data
``governor.configs`` (a wheel, pipx or a checkout alike). governor.service's ExecStart is pointed at
the governor executable this command runs from (or ``--prefix``), and ``/etc/governor/governor.toml``
is created from ``configs/governor.toml`` only if it does not exist: an existing config is never
overwritten. The man pages (``governor(1)``, ``governor-<command>(1)``, ``governor.toml(5)``) are
made from the installed commands (:mod:`governor.cli.manpages`) into ``/usr/local/share/man``. Then
``systemctl daemon-reload``, so ``systemctl start governor`` sees the units.

Refused before anything is written: an executable the unit could not run (its sandbox hides
``/tmp`` and ``/var/tmp`` with ``PrivateTmp=``, homes with ``ProtectHome=yes``), and, when
installing into ``/``, a host whose PID 1 is not systemd.
"""

from __future__ import annotations

import click

from governor.host.systemd_files import CONFIG, MAN_DIR, UNIT_DIR, UNITS

# The executable configs/governor.service names, replaced on install (a real path, so the
# file in configs/ passes `systemd-analyze verify` as it is).
TEMPLATE_EXECUTABLE = "/usr/local/bin/governor"
_PAGES = "man1/governor.1, man1/governor-<command>.1, man5/governor.toml.5"


@click.command("install-systemd", short_help="Install the systemd units and man pages.")
@click.option("--prefix", metavar="DIR", type=click.Path(file_okay=False),
              help="Directory of the governor executable for ExecStart. Default: the one running now.")
@click.option("--root", "root_dir", metavar="DIR", default="/", show_default=True, type=click.Path(file_okay=False),
              help="Install below DIR instead of / (packaging); daemon-reload runs only for /.")
@click.option("--dry-run", is_flag=True, help="Print what would be written and run; change nothing.")
@click.option("--uninstall", is_flag=True,
              help="Take governor off this host instead: stop the daemon, reset users' login slices, stop "
                   "governor-tasks.service (its tasks and held session processes end), remove the units "
                   "and man pages.")
@click.option("--purge", is_flag=True, help="With --uninstall: remove what it keeps too: /etc/governor/governor.toml, "
                                           "a state_dir outside /run/governor, the history journal.")
def install_systemd(prefix: str | None, root_dir: str, dry_run: bool, uninstall: bool, purge: bool) -> None:
    """Install the systemd units, the man pages (in /usr/local/share/man) and a config if there
    is none, then daemon-reload; or, with --uninstall, take them off again.

    \b
    Examples:
      sudo governor install-systemd --dry-run    # what it would write
      sudo governor install-systemd && sudo systemctl enable --now governor
      sudo governor install-systemd --uninstall  # keeps the config (--purge: not)
    """
    import subprocess
    from importlib.resources import files
    from pathlib import Path

    from governor.errors import GovernorError

    if purge and not uninstall:
        raise click.UsageError("--purge goes with --uninstall")
    if uninstall:
        from governor.cli.uninstall_systemd import uninstall as take_off

        root = Path(root_dir)
        live = root.resolve() == Path("/") and Path("/run/systemd/system").is_dir()
        if root.resolve() == Path("/") and not live:
            click.echo(f"# PID 1 is {_pid1() or 'unknown'}, not systemd: no unit to stop; a `governor daemon` "
                       "started by hand stops with SIGTERM and removes its cgroups once its tasks ended")
        take_off(root, purge=purge, dry_run=dry_run, live=live)
        return

    try:
        configs = files("governor.configs")
        found = (configs / "governor.service").is_file()
    except ModuleNotFoundError:
        found = False
    if not found:
        raise GovernorError("governor's unit files are not installed with it (package data governor.configs): "
                            "reinstall governor")
    executable = _executable(prefix)
    root = Path(root_dir)
    files = {root / UNIT_DIR / name: (configs / name).read_text() for name in UNITS}
    hidden = hidden_from_unit(files[root / UNIT_DIR / "governor.service"], executable)
    if hidden:
        raise GovernorError(f"{executable}: governor.service could not run it: {hidden}. Install governor "
                            "where the unit sees it (e.g. python3 -m venv /opt/governor), or give --prefix DIR")
    init = _pid1()
    if root.resolve() == Path("/") and init != "systemd":
        message = f"PID 1 is {init or 'unknown'}, not systemd: this host does not run systemd units"
        if not dry_run:
            raise GovernorError(f"{message} (--root DIR stages the files for another host)")
        click.echo(f"# {message}; an install would stop here")
    files[root / UNIT_DIR / "governor.service"] = with_executable(files[root / UNIT_DIR / "governor.service"],
                                                                   executable)
    config = root / CONFIG
    reload_systemd = root.resolve() == Path("/") and Path("/run/systemd/system").is_dir()
    from governor.cli.manpages import pages

    man_dir = root / MAN_DIR
    governor = click.get_current_context().find_root().command  # the group this command is in
    man_pages = {man_dir / name: text for name, text in pages(governor).items()}

    if dry_run:
        for path, text in files.items():
            click.echo(f"# would write {path}\n{text}")
        click.echo(f"# would write {len(man_pages)} man pages to {man_dir}: {_PAGES}")
        click.echo(f"# would keep {config} (exists)" if config.exists()
                   else f"# would copy {configs / 'governor.toml'} to {config}")
        if reload_systemd:
            click.echo("# would run: systemctl daemon-reload")
        return

    try:
        for path, text in files.items():
            _write(path, text)
            click.echo(f"wrote {path}")
        for path, text in man_pages.items():
            _write(path, text)
        click.echo(f"wrote {len(man_pages)} man pages to {man_dir}: {_PAGES} (e.g. man governor-run)")
        if config.exists():
            click.echo(f"kept {config} (exists)")
        else:
            _write(config, (configs / "governor.toml").read_text())
            click.echo(f"wrote {config} (from configs/governor.toml: edit its [groups])")
    except OSError as error:
        raise GovernorError(f"{error.filename or root}: cannot install: {error.strerror}") from error
    if reload_systemd:
        done = subprocess.run(["systemctl", "daemon-reload"], capture_output=True, text=True)
        if done.returncode != 0:
            raise GovernorError(f"systemctl daemon-reload failed: {done.stderr.strip()}")
        click.echo("ran systemctl daemon-reload; start with: systemctl enable --now governor")
    else:
        click.echo(f"systemd is not managing {root}: no daemon-reload")


def _write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)


# What a unit's sandboxing hides from its processes (systemd.exec(5)): setting → hidden trees.
_HIDING = {"PrivateTmp": {"yes": ("/tmp", "/var/tmp"), "true": ("/tmp", "/var/tmp")},
           "ProtectHome": {value: ("/home", "/root", "/run/user") for value in ("yes", "true", "tmpfs")}}


def hidden_from_unit(unit: str, executable: str) -> str | None:
    """Why the unit's sandbox hides ``executable`` (its real path) from the service, or None.
    Only the settings governor.service uses are read: ``PrivateTmp=`` and ``ProtectHome=``
    (``read-only`` still lets it run)."""
    import os

    real = os.path.realpath(executable)
    for line in unit.splitlines():
        key, _, value = line.strip().partition("=")
        for tree in _HIDING.get(key, {}).get(value.strip().lower(), ()):
            if real == tree or real.startswith(tree + "/"):
                return f"the unit's {key}={value.strip()} hides {tree} from it"
    return None


def unit_values(unit, key: str) -> list[str]:
    """The values of ``key`` (``CapabilityBoundingSet``, …) in the unit file ``unit`` (a
    :class:`~pathlib.Path`, e.g. ``/etc/systemd/system/governor.service``) and then in its
    drop-ins (``<unit>.d/*.conf``, in systemd's order: by name), one per assignment as written
    (``""``: an empty assignment, which resets the list in systemd). A missing file gives none."""
    values = []
    for path in [unit, *sorted(unit.with_name(unit.name + ".d").glob("*.conf"))]:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            name, equals, value = line.strip().partition("=")
            if equals and name.strip() == key:
                values.append(value.strip())
    return values


def _pid1() -> str:
    """The name of PID 1 (``systemd`` on a systemd host), "" if it cannot be read."""
    try:
        with open("/proc/1/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


def _executable(prefix: str | None) -> str:
    """Absolute path of the governor executable: ``prefix/governor``, else the running one."""
    import os
    import shutil
    import sys
    from pathlib import Path

    from governor.errors import GovernorError

    if prefix is not None:
        candidate = Path(prefix) / "governor"
    else:
        # sys.argv[0] is the console script as invoked (".venv/bin/governor", or "governor"
        # found on PATH); under `python -m` it is not executable, and the venv's script is used.
        found = shutil.which(sys.argv[0])
        candidate = Path(found) if found else Path(sys.executable).with_name("governor")
    candidate = candidate.absolute()
    if not os.access(candidate, os.X_OK) or not candidate.is_file():
        raise GovernorError(f"{candidate}: not an executable governor (give --prefix DIR)")
    return str(candidate)


def with_executable(unit: str, executable: str) -> str:
    """``unit`` with the template executable in its ExecStart= and ExecReload= lines replaced by
    ``executable``, quoted for systemd (``%`` and ``$`` doubled; quotes around a path with blanks).

    Raises:
        GovernorError: ``unit`` lacks one of those lines, or has it twice.
    """
    from governor.errors import GovernorError

    quoted = executable.replace("%", "%%").replace("$", "$$")
    if any(c.isspace() or c in "\"'\\" for c in quoted):
        quoted = '"' + quoted.replace("\\", "\\\\").replace('"', '\\"') + '"'
    lines = unit.splitlines(keepends=True)
    for key in ("ExecStart", "ExecReload"):
        start = f"{key}={TEMPLATE_EXECUTABLE} "
        hits = [i for i, line in enumerate(lines) if line.startswith(start)]
        if len(hits) != 1:
            raise GovernorError(f"governor.service: expected one line starting with {start!r}, found {len(hits)}")
        lines[hits[0]] = f"{key}={quoted} " + lines[hits[0]][len(start):]
    return "".join(lines)
