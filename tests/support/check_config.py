"""``governor check-config`` through click's CliRunner, for its tests: :func:`run`, and
:data:`needs_root`, the mark of a test that needs a config the daemon would trust."""

import os

import pytest
from click.testing import CliRunner

from governor.cli.main import main


def run(*args: str):
    return CliRunner().invoke(main, ["check-config", *args])


# The daemon trusts only a config root owns (and nobody else may write), and so does check-config.
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a config the daemon trusts is root's: run as root")
