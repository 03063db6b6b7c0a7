"""The composition root: :func:`build` makes what the daemon runs on from the options
``governor daemon`` parsed (``cli/daemon_cmd.py`` parses the flags, reads and checks the
config, and calls it): the state directory, the claim on the sessions, the metrics listener,
the cgroup hierarchy, and the :class:`~governor.daemon.root.Daemon` with its stages.

A start refused on the way (sessions another daemon's, a taken port or socket) undoes what it
made; once the daemon served, what it made is the running host's (it cleans up its own).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from governor.cgroups.devices import whole_disk
from governor.cgroups.foreign_subtrees import ForeignPlaces
from governor.cgroups.hierarchy import Hierarchy, open_hierarchy
from governor.config.history_rules import following
from governor.config.load import Config
from governor.daemon.effector import Effector
from governor.daemon.root import Daemon
from governor.host.daemons import DaemonEntry, Registry
from governor.host.devices import governs_any
from governor.host.sd_notify import Notifier
from governor.host.task_store import TaskStore
from governor.wire.metrics import Metrics

__all__ = ["EMBEDDED", "Options", "build"]

# How a daemon on the embedded default config names its config source.
EMBEDDED = "<embedded default>"


@dataclass(frozen=True)
class Options:
    """What ``governor daemon`` was asked to run (its flags, the config read and checked).

    Attributes:
        config: the config to put in force; ``config_path`` its file (None: the embedded default).
        load_config: reads ``config_path`` again, for reload (None: nothing to reload from).
        socket: the control socket's path.
        cgroup_root: governor's cgroup root (``--cgroup-root``).
        state_dir: task records (``--state-dir``; None: the config's ``[daemon] state_dir``),
            and the history journal where the config names no ``[history] directory``.
        metrics_listen: (address, port) given by ``--metrics``, which overrides the config's
            ``[metrics] listen``, reloads included (None: the config's).
        systemd_units: the names of governor's own systemd units (memory protection above the root).
    """

    config: Config
    config_path: str | None
    load_config: Callable[[], Config] | None
    socket: str
    cgroup_root: str
    state_dir: str | None = None
    metrics_listen: tuple[str, int] | None = None
    systemd_units: Collection[str] = ()

    @property
    def config_source(self) -> str:
        return self.config_path or EMBEDDED


@contextlib.contextmanager
def build(options: Options) -> Iterator[Daemon]:
    """The daemon for ``options``, built on this host, for as long as the ``with`` block runs
    (it serves there: ``asyncio.run(daemon.serve(options.socket, asked))``).

    What is made, in order, each refusing the start before the next is made: the claim on the
    state directory (another daemon's stops the start), the state directory (an untrusted one
    stops the start before any cgroup is made), the claim on the sessions (where the config
    governs them), the metrics listener (always there: a reload may turn ``[metrics] listen``
    on; a taken port or a bad address stops the start), the cgroup root. Should the block end
    before the daemon served, what was made goes again.

    Raises:
        GovernorError: the start is refused (the state directory untrusted or another
            daemon's, the sessions another daemon's, the port, the hierarchy, the config here:
            :class:`Daemon`).
    """
    config = options.config
    registry = Registry()
    with contextlib.ExitStack() as undo:
        store = TaskStore(Path(options.state_dir or config.state_dir))
        me = DaemonEntry(os.getpid(), options.cgroup_root, options.config_source, options.socket)
        registry.claim_state(store.directory, me)  # before the records are read: they are its alone
        undo.callback(registry.release_state)
        undo.callback(_remove_made, _missing(store.directory))
        store.prepare()
        if config.sessions.enabled:
            registry.claim_sessions(me)
            undo.callback(registry.release_sessions)
        # Served to whoever reaches it: the public view (read from the daemon built below).
        metrics = Metrics(lambda: daemon.observation.snapshot(), pinned=options.metrics_listen is not None)
        listen = options.metrics_listen or config.metrics_listen
        if listen is not None:
            metrics.bind(*listen)
        hierarchy = open_hierarchy(options.cgroup_root, devices=governs_any(config))
        undo.callback(hierarchy.release_lock)  # last: its root goes first, still locked
        undo.callback(_remove_root, hierarchy)
        daemon = Daemon(config, options.config_source, hierarchy, store,
                        host_cpus=sorted(os.sched_getaffinity(0)), host_memory=psutil.virtual_memory().total,
                        resolve_device=whole_disk, load_config=options.load_config, notifier=Notifier(),
                        metrics=metrics, registry=registry,
                        foreign_places=ForeignPlaces.of_host(hierarchy.mode, hierarchy.hierarchies),
                        systemd_units=options.systemd_units, history_dir=_journal(options))
        try:
            yield daemon
        finally:
            if daemon.served:
                undo.pop_all()  # it served: what it made is the running host's (serve cleans its own)


def _journal(options: Options) -> Path | None:
    """The history journal's directory where ``--state-dir`` moves it, as ``[daemon] state_dir``
    would (:func:`~governor.config.history_rules.following`): a second daemon with state of its
    own wrote into the first one's journal, each pruning the other's files. None: the config's."""
    if options.state_dir is None or options.config.history.named:
        return None
    return Path(following(options.state_dir))


def _missing(directory: Path) -> list[Path]:
    """``directory`` and its ancestors that do not exist yet, deepest first."""
    return [d for d in (directory, *directory.parents) if not d.exists()]


def _remove_made(directories: list[Path]) -> None:
    """Remove the directories a refused start made, deepest first, where they are still empty."""
    for directory in directories:
        try:
            for stale in directory.glob(".*.tmp"):
                stale.unlink()
            os.rmdir(directory)
        except OSError:
            return


def _remove_root(hierarchy: Hierarchy) -> None:
    """A refused start's cgroup root goes again, where nothing is below it."""
    Effector(hierarchy).remove_empty_root()
