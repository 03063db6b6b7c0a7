"""``governor run``: have the daemon govern the user's command as a task, and say why it ended.

The command runs as a child: the child asks the daemon to launch its own pid; the daemon moves
it into a fresh task cgroup before answering, so after ``exec`` the command runs with the
terminal, environment and exit code it would have had, and all its memory is charged to the
task from the first byte. ``governor run`` waits for it, and when governor ended it (stop, time
limit, OOM kill) says so in one line before its exit code (``srun`` does the same); with
``--exec`` it execs the command itself instead, keeping its own pid, and says nothing.

When the task's declared memory does not fit yet, the daemon queues it and the CLI waits,
saying so on stderr: one line updated in place on a terminal, a plain line per change
otherwise. Ctrl-C leaves the queue (exit 130); ``--no-wait`` refuses at once (exit 75). If
the daemon restarts meanwhile, the CLI queues again (nothing had started).

This module is the command's options and help; what runs is :mod:`governor.cli.launch`, which a plain
``governor run`` reaches without click (:mod:`governor.cli.entry`).
"""

from __future__ import annotations

import click

from governor.config import resources
from governor.cli.completion import group_names
from governor.cli.launch import RUN_OPTIONS, start


def _checked(parse):
    """A click callback giving an option's text to ``parse`` (a ValueError is the user's
    mistake, said as click says one)."""
    def callback(ctx: click.Context, param: click.Parameter, value: str | None):
        try:
            return None if value is None else parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback


def command() -> click.Command:
    """``governor run``, with its own options (:data:`governor.cli.launch.RUN_OPTIONS`, which
    a plain ``governor run`` is parsed by too) and one demand option per resource of
    :data:`governor.config.resources.RESOURCES` as it is when called (a test declaring a stand-in
    resource builds its own)."""
    own = [click.option(option.flag, option.keyword, is_flag=option.parse is None, metavar=option.metavar,
                        callback=None if option.parse in (None, str) else _checked(option.parse), help=option.help,
                        **({"shell_complete": group_names} if option.flag == "--group" else {}))
           for option in RUN_OPTIONS]
    demand = [click.option(entry.flag, entry.wire, metavar=entry.metavar, callback=_checked(entry.parse),
                           help=entry.help) for entry in resources.RESOURCES]
    # --help lists the group, then the demand, then the rest.
    options = [own[0], *demand, *own[1:], click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)]
    built = run
    for option in reversed(options):
        built = option(built)
    # Options end at the command's name: `governor run ls -l` gives -l to ls. Before it, an
    # option run does not know is an error (with click's "did you mean"), not a command to run.
    return click.command("run", context_settings={"allow_interspersed_args": False})(built)


def run(group: str | None, no_wait: bool, name: str | None, time_limit: float | None, summary: bool,
        exec_in_place: bool, socket_option: str | None, cmd: tuple[str, ...], **demand: float | None) -> None:
    """Run CMD as a governed task with the given demand.

    Flags not given take the daemon's default task demand. Sizes use K, M, G, T (powers of
    1024). The demand is a cap: CMD never gets more; when others are idle it may use their
    share up to it. CMD starts when its memory (and GPUs) fit; until then it waits in a queue
    (and says when it starts). CMD keeps this terminal and its exit code becomes governor's. At
    --time-limit the daemon kills every process of the task (SIGKILL), as `governor stop`
    does, and governor says so: "governor: task 12 ended: its time limit of 3s was reached".

    \b
    Examples:
      governor run --cpus 2 --memory 4G -- make -j2
      governor run --group physics --no-wait -- python train.py
      governor run --gpus 2 --cpus 8 --memory 64G -- python train.py
      governor run --name nightly --time-limit 1h30m --summary -- ./build.sh
    """
    if summary and exec_in_place:
        raise click.UsageError("--summary needs governor run to wait for CMD: not with --exec")
    # DaemonNotRunning / DaemonError propagate to governor.cli.main, which prints one line and exits 1.
    verbose = bool(click.get_current_context().find_root().params.get("verbose"))
    start({key: value for key, value in demand.items() if value is not None}, group, no_wait, socket_option, cmd,
          name=name, time_limit=time_limit, summary=summary, exec_in_place=exec_in_place, verbose=verbose)
