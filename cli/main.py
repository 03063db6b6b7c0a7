"""``governor``: the click command group.

Kept light on purpose: ``governor run`` must start fast, so this module imports only click and
the error classes, and each command imports what it needs (rich, the allocator, SciPy) inside
its own function.
"""

from __future__ import annotations

import sys

import click

from cli.admin import reload, set_weight
from cli.check_config import check_config
from cli.daemon_cmd import daemon
from cli.explain import explain
from cli.install_systemd import install_systemd
from cli.ps import ps
from cli.run import run
from cli.simulate import simulate
from cli.status import status
from cli.stop import stop
from cli.top import top
from governor.errors import ConfigError, GovernorError

# Exit codes: 2 for input the user must fix (click's code for usage errors), 1 for the rest.
EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1


class Failure(click.ClickException):
    """A GovernorError as one line on stderr, ``governor: error: <file>: <key>: <reason>``."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file=None) -> None:
        click.echo(f"governor: error: {self.format_message()}", err=True, file=file)


class _Group(click.Group):
    """Turns the library's errors into :class:`Failure`, so commands just raise them."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ConfigError as error:
            raise Failure(str(error), EXIT_BAD_INPUT) from error
        except GovernorError as error:
            raise Failure(str(error), EXIT_FAILURE) from error


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="governor", prog_name="governor")
def main() -> None:
    """Share one Linux host among user groups with Dominant Resource Fairness."""
    # A terminal or a pipe that cannot show "·", "λ" or "…" (PYTHONIOENCODING=ascii, LANG=C on
    # an old Python) gets "?" for them rather than a traceback.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


main.add_command(daemon)
main.add_command(install_systemd)
main.add_command(reload)
main.add_command(set_weight)
main.add_command(run)
main.add_command(simulate)
main.add_command(check_config)
main.add_command(status)
main.add_command(ps)
main.add_command(stop)
main.add_command(explain)
main.add_command(top)
