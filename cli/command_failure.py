"""A failure of a click command, shown as one line in governor's style (:mod:`governor.cli.failures`
has the wording, the hints and the exit codes): commands raise it, :mod:`governor.cli.main`
shows it."""

from __future__ import annotations

import click

from governor.cli.failures import EXIT_BAD_INPUT, describe, line
from governor.errors import GovernorError

__all__ = ["Failure"]


class Failure(click.ClickException):
    """One line on stderr in governor's style (:mod:`governor.cli.failures`): ``governor: error: <what>
    (<hint>)``, and `` [<code>]`` once the group has set ``verbose``."""

    def __init__(self, message: str, exit_code: int, *, hint: str | None = None, code: str = "error"):
        super().__init__(message)
        self.exit_code = exit_code
        self.hint = hint
        self.code = code
        self.verbose = False

    @classmethod
    def of(cls, error: GovernorError) -> Failure:
        """The failure for a library error, with its hint and exit code from :mod:`governor.cli.failures`."""
        what, hint, code, status = describe(error)
        return cls(what, status, hint=hint, code=code)

    @classmethod
    def usage(cls, error: click.UsageError) -> Failure:
        """A click usage error (unknown option, bad value...) as one line, exit 2."""
        where = error.ctx.command_path if error.ctx else "governor"
        return cls(error.format_message().rstrip("."), EXIT_BAD_INPUT, hint=f"see {where} -h", code="usage")

    def show(self, file=None) -> None:
        click.echo(line(self.format_message(), self.hint, self.code if self.verbose else None), err=True, file=file)
