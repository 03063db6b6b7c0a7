"""Test-wide settings.

Hypothesis runs 1,000 examples per property unless HYPOTHESIS_PROFILE asks for fewer: ``dev``
(100) while editing, ``quick`` (25) for ``scripts/test --quick``.

Real-kernel tests skip with a reason where root or a cgroup hierarchy is missing. A run that
must prove enforcement sets GOVERNOR_REQUIRE_MARKS (e.g. ``kernel_v1`` natively in CI,
``kernel_v2`` in the VM): then a skipped test with one of those marks fails the run.

The commands the tests start get SIGINT and SIGQUIT as a terminal's shell gives them: a suite
started as a background job of a script (``scripts/test &``) inherits both ignored, and a
command started with a signal ignored keeps it so (a Ctrl-C test then waited forever).

No test may change what later ones run under: a test that leaves this process's signal mask
changed fails (a ``governor run`` invoked in-process once left SIGTERM and SIGHUP blocked for
every daemon the suite started afterwards, which then neither stopped nor reloaded).
"""

import os
import signal

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("quick", max_examples=25, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# An ignored signal stays ignored across fork and exec; a handled one is default in the command.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _signal_mask_kept():
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    after = signal.pthread_sigmask(signal.SIG_SETMASK, before)
    assert after == before, f"the test left the signal mask changed: {sorted(after)} instead of {sorted(before)}"


_REQUIRED = {m for m in os.environ.get("GOVERNOR_REQUIRE_MARKS", "").split(",") if m}
_skipped_but_required: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped and _REQUIRED & set(report.keywords):
        _skipped_but_required.append(f"{report.nodeid}: {report.longrepr[-1] if report.longrepr else ''}")


def pytest_sessionfinish(session, exitstatus):
    if _skipped_but_required and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    if _skipped_but_required:
        terminalreporter.write_line(
            f"FAILED: {len(_skipped_but_required)} required real-kernel tests were skipped "
            f"(GOVERNOR_REQUIRE_MARKS={','.join(sorted(_REQUIRED))}):", red=True)
        for line in _skipped_but_required:
            terminalreporter.write_line(f"  {line}")
