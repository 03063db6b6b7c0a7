"""``governor daemon``: run the root daemon that divides this host by DRF (DESIGN.md §4–8)."""

from __future__ import annotations

import click

DEFAULT_CONFIG = "/etc/governor/governor.toml"


@click.command(short_help="Run the daemon (as root); tasks outlive it.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help=f"Config file. Default: {DEFAULT_CONFIG} if it exists, else the embedded default "
                   "(every user a group of their own, host minus a small reserve).")
@click.option("--socket", "socket_path", metavar="PATH",
              help="Control socket. Default: $GOVERNOR_SOCKET, else /run/governor/governor.sock.")
@click.option("--cgroup-root", default="governor", show_default=True, metavar="PATH",
              help="governor's cgroup root: relative = below the daemon's own cgroup; absolute = a v2 "
                   "cgroup directory, or a path inside every v1 hierarchy.")
@click.option("--state-dir", metavar="DIR", help="Task records (overrides [daemon] state_dir).")
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
    from pathlib import Path

    import psutil

    from governor.cgroups.foreign_subtrees import ForeignPlaces
    from governor.cgroups.devices import whole_disk
    from governor.cgroups.hierarchy import open_hierarchy
    from governor.cli.check_config import check_on_this_host
    from governor.cli.client import socket_path as resolve_socket
    from governor.cli.inputs import read_input
    from governor.cli.systemd_files import OWN_UNITS
    from governor.config.load import default_config, parse_config
    from governor.daemon import Daemon
    from governor.host.daemons import DaemonEntry, Registry
    from governor.errors import GovernorError
    from governor.host.logs import setup_logging
    from governor.host.sd_notify import Notifier
    from governor.host.task_store import TaskStore

    setup_logging()
    if os.geteuid() != 0:
        raise GovernorError("governor daemon must run as root: it creates cgroups and moves processes")
    asked = _note_signals_until_serving()
    raise_descriptor_limit()
    if config_path is None and os.path.exists(DEFAULT_CONFIG):
        config_path = DEFAULT_CONFIG
    def load():
        return parse_config(read_input(config_path, owner=0), config_path)

    config = load() if config_path else default_config()
    check_on_this_host(config)  # what check-config checks: refused before anything is made
    socket = resolve_socket(socket_path)
    registry = Registry()
    # A start refused on the way (sessions another daemon's, a taken port or socket) undoes what
    # it made: the state directory, the claim on the sessions, the cgroup root.
    with contextlib.ExitStack() as undo:
        store = TaskStore(Path(state_dir or config.state_dir))
        undo.callback(_remove_made, _missing(store.directory))
        store.prepare()  # an untrusted state directory stops the start before any cgroup is made
        if config.sessions.enabled:
            registry.claim_sessions(DaemonEntry(os.getpid(), cgroup_root, config_path or "<embedded default>",
                                                socket))
            undo.callback(registry.release_sessions)
        from governor.host.devices import governs_any
        from governor.wire.metrics import Metrics

        # Always there: a reload may turn [metrics] listen on. Listening first: a taken port or a
        # bad address stops the start before any cgroup is made. --metrics overrides the config.
        # Served to whoever reaches it: the public view.
        metrics = Metrics(lambda: server.observation.snapshot(), pinned=metrics_address is not None)
        listen = _metrics_address(metrics_address) if metrics_address else config.metrics_listen
        if listen is not None:
            metrics.bind(*listen)
        hierarchy = open_hierarchy(cgroup_root, devices=governs_any(config))
        undo.callback(_remove_root, hierarchy)
        server = Daemon(config, config_path or "<embedded default>", hierarchy, store,
                        host_cpus=sorted(os.sched_getaffinity(0)), host_memory=psutil.virtual_memory().total,
                        resolve_device=whole_disk, load_config=load if config_path else None, notifier=Notifier(),
                        metrics=metrics, registry=registry,
                        foreign_places=ForeignPlaces.of_host(hierarchy.mode, hierarchy.hierarchies),
                        systemd_units=OWN_UNITS)
        try:
            asyncio.run(server.serve(socket, asked))
        finally:
            if server.served:
                undo.pop_all()  # it served: what it made is the running host's (serve cleans its own)


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


def _missing(directory) -> list:
    """``directory`` and its ancestors that do not exist yet, deepest first."""
    return [d for d in (directory, *directory.parents) if not d.exists()]


def _remove_made(directories) -> None:
    """Remove the directories a refused start made, deepest first, where they are still empty."""
    import os

    for directory in directories:
        try:
            for stale in directory.glob(".*.tmp"):
                stale.unlink()
            os.rmdir(directory)
        except OSError:
            return


def _remove_root(hierarchy) -> None:
    """A refused start's cgroup root goes again, where nothing is below it."""
    from governor.daemon.effector import Effector

    Effector(hierarchy).remove_empty_root()

def _metrics_address(text: str) -> tuple[str, int]:
    """``"9110"`` → (127.0.0.1, 9110); ``"0.0.0.0:9110"`` → as given (loopback unless configured)."""
    from governor.config.units import listen_address

    try:
        return listen_address(text)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--metrics") from None
