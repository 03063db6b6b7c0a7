"""The ``governor`` command's entry point.

A plain ``governor run`` (only run's own options, then the command; ``governor --verbose run``
too) goes straight to :func:`governor.cli.launch.start` without loading click, whose imports alone cost
three times Python's own start on a slow host; everything else, ``governor run --help`` and a
bad option included, goes to the click commands (:mod:`governor.cli.main`). Both print a failure the same
way, with the same exit code (:mod:`governor.cli.failures`).
"""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    verbose = args[:1] in (["-v"], ["--verbose"])
    if args[verbose:verbose + 1] == ["run"]:
        from governor.cli.launch import plain, start

        parsed = plain(args[verbose + 1:])
        if parsed is not None:
            from governor.cli.failures import report
            from governor.errors import GovernorError

            sys.stderr.reconfigure(errors="replace")
            try:
                start(**parsed, verbose=verbose)
            except GovernorError as error:  # as governor.cli.main shows one
                text, status = report(error, verbose=verbose)
                sys.stderr.write(text + "\n")
                sys.exit(status)
    from governor.cli.main import main as commands

    commands(prog_name="governor")
