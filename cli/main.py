"""``governor``: the click command group.

Kept light on purpose: ``governor run`` must start fast, so this module imports only click and
the error classes, and each command imports what it needs (rich, the allocator, SciPy) inside
its own function.
"""

from __future__ import annotations

import sys

import click

from governor.cli.admin import reload, set_weight
from governor.cli.check_config import check_config
from governor.cli.daemon_cmd import daemon
from governor.cli.explain import explain
from governor.cli.history import history
from governor.cli.export import export
from governor.cli.command_failure import Failure
from governor.cli.failures import EXIT_INTERRUPTED
from governor.cli.install_systemd import install_systemd
from governor.cli.man_cmd import man
from governor.cli.ps import ps
from governor.cli.replay import replay
from governor.cli.run import command as run_command
from governor.cli.simulate import simulate
from governor.cli.status import status
from governor.cli.stop import stop
from governor.cli.top import top
from governor.errors import GovernorError

__all__ = ["main"]

# A command given no arguments shows its help (click ≥ 8.2 raises this usage error for it):
# that is help, not a failure to put on one line.
_HELP_ONLY = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _Group(click.Group):
    """Turns every failure into one :class:`Failure` line, so commands just raise the library's
    errors; a Ctrl-C ends with 130 and no traceback."""

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except _HELP_ONLY:
            raise
        except click.UsageError as error:  # an unknown command or a bad global option
            raise Failure.usage(error) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except Failure as failure:
            failure.verbose = ctx.params.get("verbose", False)
            raise
        except _HELP_ONLY:
            raise
        except click.UsageError as error:
            failure = Failure.usage(error)
        except click.ClickException as error:  # a command's own (history's, replay's): the same one line
            failure = Failure(error.format_message(), error.exit_code)
        except GovernorError as error:
            failure = Failure.of(error)
        except KeyboardInterrupt:
            click.echo(err=True)  # ends the terminal's "^C" line
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        failure.verbose = ctx.params.get("verbose", False)
        raise failure


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="drf-governor", prog_name="governor")
@click.option("-v", "--verbose", is_flag=True, help="Show the internal code of a failure, e.g. [forbidden].")
def main(verbose: bool) -> None:
    """Share one Linux host among user groups with Dominant Resource Fairness.

    Every failure is one line, "governor: error: <what> (<hint>)", and each kind of failure
    has its own exit code (docs/user.md lists them).

    \b
    Examples:
      governor run --cpus 2 --memory 4G -- make -j2
      governor status
      eval "$(_GOVERNOR_COMPLETE=bash_source governor)"    # completion
    """
    # A terminal or a pipe that cannot show "·", "λ" or "…" (PYTHONIOENCODING=ascii, LANG=C on
    # an old Python) gets "?" for them rather than a traceback.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


main.add_command(daemon)
main.add_command(install_systemd)
main.add_command(reload)
main.add_command(set_weight)
main.add_command(run_command())
main.add_command(simulate)
main.add_command(check_config)
main.add_command(status)
main.add_command(ps)
main.add_command(stop)
main.add_command(explain)
main.add_command(history)
main.add_command(replay)
main.add_command(export)
main.add_command(top)
main.add_command(man)
