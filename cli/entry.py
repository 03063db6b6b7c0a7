"""The ``governor`` command's entry point.

A plain ``governor run`` (only run's own options, then the command) goes straight to
:func:`cli.launch.start` without loading click, whose imports alone cost three times Python's
own start on a slow host; everything else, ``governor run --help`` and a bad option
included, goes to the click commands (:mod:`cli.main`).
"""

from __future__ import annotations

import sys

# As cli.main: 1 for a failure that is not the user's input.
EXIT_FAILURE = 1


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["run"]:
        from cli.launch import plain, start

        parsed = plain(args[1:])
        if parsed is not None:
            from governor.errors import GovernorError

            sys.stderr.reconfigure(errors="replace")
            try:
                start(**parsed)
            except GovernorError as error:  # as cli.main shows one
                sys.stderr.write(f"governor: error: {error}\n")
                sys.exit(EXIT_FAILURE)
    from cli.main import main as commands

    commands(prog_name="governor")
