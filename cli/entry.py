"""The ``governor`` command's entry point.

A plain ``governor run`` (only run's own options, then the command; ``governor --verbose run``
too) goes straight to :func:`governor.cli.launch.start` without loading click, whose imports alone cost
three times Python's own start on a slow host; everything else, ``governor run --help`` and a
bad option included, goes to the click commands (:mod:`governor.cli.main`). Both print a failure the same
way, with the same exit code (:mod:`governor.cli.failures`).
"""

from __future__ import annotations

import gc
import os
import signal
import sys


def main() -> None:
    if sys.stderr is None:  # closed (2>&-): said nowhere, and the exit status still says it (it was 1)
        sys.stderr = open(os.devnull, "w")
    # A Ctrl-C while the modules load ends governor quietly, by SIGINT as a C program ends (the
    # shell sees it and stops a script), not with a KeyboardInterrupt traceback from an import;
    # Python's handler is back before the command runs. An ignored SIGINT (a script's
    # background job) stays ignored.
    interrupt = signal.getsignal(signal.SIGINT)
    if interrupt is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    args = sys.argv[1:]
    verbose = args[:1] in (["-v"], ["--verbose"])
    if args[verbose:verbose + 1] == ["run"]:
        # No cycle collection in a plain run: the launch's imports make no cyclic garbage, yet
        # the collections they trigger cost it ~3 ms of CPU (of ~50) on the bench host;
        # then this process only execs or waits for its command, which makes none either.
        gc.disable()
        from governor.cli.launch import plain, start

        parsed = plain(args[verbose + 1:])
        if parsed is not None:
            from governor.cli.failures import EXIT_INTERRUPTED, report
            from governor.errors import GovernorError

            sys.stderr.reconfigure(errors="replace")
            signal.signal(signal.SIGINT, interrupt)
            try:
                start(**parsed, verbose=verbose)
            except GovernorError as error:  # as governor.cli.main shows one
                text, status = report(error, verbose=verbose)
                sys.stderr.write(text + "\n")
                sys.exit(status)
            except KeyboardInterrupt:  # a Ctrl-C before the queue's own handling: as click's path says it
                sys.stderr.write("\n")  # ends the terminal's "^C" line
                _leave(SystemExit(EXIT_INTERRUPTED))
            except SystemExit as leaving:  # the command's end, its exit status ours
                _leave(leaving)
    gc.enable()  # not a plain run: the commands collect as any program does
    from governor.cli.main import main as commands

    signal.signal(signal.SIGINT, interrupt)
    commands(prog_name="governor")


def _leave(leaving: SystemExit) -> None:
    """Exit as ``leaving`` asks, as Python would (None: 0; a number: it; text: said on stderr,
    then 1), but without tearing the interpreter down: by then the command has ended, and the
    teardown of the ~200 modules loaded cost governor run's user ~6 ms more of waiting."""
    code = leaving.code
    if code is not None and not isinstance(code, int):
        sys.stderr.write(f"{code}\n")
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:  # try, not contextlib.suppress: a plain run loads no contextlib (issue 46)
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed pipe: nothing more can be said; None: the fd
            pass  # was closed when governor started
    os._exit(code or 0)
