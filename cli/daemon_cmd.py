"""``governor daemon``: run the root daemon that divides this host by DRF (DESIGN.md §4–8)."""

from __future__ import annotations

import click

DEFAULT_CONFIG = "/etc/governor/governor.toml"


@click.command(short_help="Run the daemon (as root); tasks outlive it.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help=f"Config file. Default: {DEFAULT_CONFIG} if it exists, else the embedded default "
                   "(every user a group of their own, host minus a small reserve, sessions on: every "
                   "ordinary user's processes are governed; governor check-config --default shows it).")
@click.option("--socket", "socket_path", metavar="PATH",
              help="Control socket. Default: $GOVERNOR_SOCKET, else /run/governor/governor.sock.")
@click.option("--cgroup-root", default="governor", show_default=True, metavar="PATH",
              callback=lambda ctx, param, value: _cgroup_root(value),
              help="governor's cgroup root: relative = below the daemon's own cgroup; absolute = a v2 "
                   "cgroup directory, or a path inside every v1 hierarchy.")
@click.option("--state-dir", metavar="DIR", callback=lambda ctx, param, value: _state_dir(value),
              help="Task records, and the history journal where the config names no [history] directory "
                   "(overrides [daemon] state_dir; an absolute path).")
@click.option("--metrics", "metrics_address", metavar="[ADDR:]PORT",
              help="Serve Prometheus metrics on /metrics; ADDR defaults to 127.0.0.1 (default: the config's "
                   "[metrics] listen, else off). Overrides the config, reloads included.")
def daemon(config_path: str | None, socket_path: str | None, cgroup_root: str, state_dir: str | None,
           metrics_address: str | None) -> None:
    """Run the governor daemon (as root) until SIGTERM or SIGINT. Tasks outlive it.

    Under systemd, install-systemd sets it up; by hand:

    \b
    Examples:
      sudo governor daemon --config /etc/governor/governor.toml
      sudo governor daemon --metrics 9110    # Prometheus on 127.0.0.1:9110
    """
    import asyncio
    import contextlib
    import os

    from governor.cli.client import socket_path as resolve_socket
    from governor.cli.inputs import read_input
    from governor.host.systemd_files import OWN_UNITS
    from governor.config.load import default_config, parse_config
    from governor.daemon.build import Options, build
    from governor.errors import GovernorError
    from governor.host.host_check import check_on_this_host
    from governor.host.logs import setup_logging

    setup_logging()
    if os.geteuid() != 0:
        raise GovernorError("governor daemon must run as root: it creates cgroups and moves processes")
    asked = _note_signals_until_serving()
    raise_descriptor_limit()
    if config_path is None and os.path.exists(DEFAULT_CONFIG):
        config_path = DEFAULT_CONFIG
    if config_path is not None and not os.path.isabs(config_path):
        # Named in full in status, the journal and the registry, whatever the working directory
        # (joined, not normalised: link/../x.toml is the file the kernel finds); a working
        # directory removed meanwhile leaves it as given, for the read to say what is wrong.
        with contextlib.suppress(OSError):
            config_path = os.path.join(os.getcwd(), config_path)
    def load():
        return parse_config(read_input(config_path, owner=0), config_path)

    config = load() if config_path else default_config()
    check_on_this_host(config)  # what check-config checks: refused before anything is made
    socket = resolve_socket(socket_path)
    options = Options(config, config_path, load_config=load if config_path else None, socket=socket,
                      cgroup_root=cgroup_root, state_dir=state_dir, systemd_units=OWN_UNITS,
                      metrics_listen=_metrics_address(metrics_address) if metrics_address else None)
    with build(options) as server:  # a start refused on the way undoes what it made
        asyncio.run(server.serve(socket, asked))


def _note_signals_until_serving() -> list[int]:
    """SIGTERM, SIGINT and SIGHUP taken while the daemon starts, in order: the daemon stops (or
    reloads) once it serves, which undoes the start. By the default action a SIGTERM right
    after the socket appeared (``systemctl stop`` just after a start, ``scripts/demo``
    interrupted at once in CI) killed it with its root lock and registry entry left behind.
    ``serve`` replaces these handlers with its own and reads the list."""
    import signal

    asked: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda signum, _frame: asked.append(signum))
    return asked


def raise_descriptor_limit() -> None:
    """Take the hard limit on open files as the soft one: each connection and each task holds
    descriptors, and three users with ~250 tasks each ran a daemon out of the usual soft 1,024
    (it then took a failed user lookup for "no group", and lost track of exits)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _cgroup_root(path: str) -> str:
    """``path`` (``--cgroup-root``) when it names one cgroup, each part a directory's name:
    ``/a/../b`` made ``/a`` as well and was shown as given (status printed an empty "cgroup v1
    at"), and ``/`` or ``""`` would have been the hierarchy's root itself.

    Raises:
        click.BadParameter: an empty, ``.`` or ``..`` part, or nothing but slashes.
    """
    from governor.config.units import quoted

    path = path.rstrip("/") or path  # governor/ is governor
    parts = path.split("/")[1:] if path.startswith("/") else path.split("/")
    if not path.strip("/") or any(part in ("", ".", "..") for part in parts):
        raise click.BadParameter(f"must name a cgroup, each part a directory's name (no empty, '.' or '..' "
                                 f"part), got {quoted(path)}", param_hint="--cgroup-root")
    return path


def _state_dir(path: str | None) -> str | None:
    """``path`` (``--state-dir``) when absolute, as ``[daemon] state_dir`` must be: a relative
    one was taken from the daemon's working directory, and a restart from another found no
    record of the running tasks.

    Raises:
        click.BadParameter: a relative path.
    """
    from governor.config.units import quoted

    if path is not None and not path.startswith("/"):
        raise click.BadParameter(f"must be an absolute path, got {quoted(path)}", param_hint="--state-dir")
    return path


def _metrics_address(text: str) -> tuple[str, int]:
    """``"9110"`` → (127.0.0.1, 9110); ``"0.0.0.0:9110"`` → as given (loopback unless configured)."""
    from governor.config.units import listen_address

    try:
        return listen_address(text)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--metrics") from None
