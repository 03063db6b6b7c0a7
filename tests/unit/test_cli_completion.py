"""Shell completion (click's own): ``--group`` and GROUP arguments complete to group names, from
the config file and, when it answers quickly, the daemon; completion never fails."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from support.fake_socket import FakeSocket

import governor.cli.completion
from governor.cli.main import main

CONFIG = '[groups.physics]\nweight = 2\n[groups.ops]\nusers = ["alice"]\n[groups."*"]\n'


def complete(words: str, env: dict | None = None) -> list[str]:
    """What bash gets for ``words`` (the last one being completed), as click's protocol sends it."""
    parts = words.split(" ")
    result = CliRunner().invoke(main, [], prog_name="governor", env={
        "_GOVERNOR_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1), **(env or {})})
    assert result.exit_code == 0, result.output
    return [line.split(",", 1)[1] for line in result.output.splitlines() if line]


@pytest.fixture
def config(tmp_path, monkeypatch):
    path = tmp_path / "governor.toml"
    path.write_text(CONFIG)
    monkeypatch.setattr(governor.cli.completion, "DEFAULT_CONFIG", str(path))
    monkeypatch.setenv("GOVERNOR_SOCKET", str(tmp_path / "absent.sock"))
    return path


def test_group_options_and_arguments_complete_to_the_configs_groups(config):
    assert complete("governor run --group ") == ["physics", "ops"]
    assert complete("governor run --group ph") == ["physics"]
    assert complete("governor explain o") == ["ops"]
    assert complete("governor set-weight ") == ["physics", "ops"]


def test_the_daemons_groups_are_added_when_it_answers(config, tmp_path):
    server = FakeSocket(str(tmp_path / "g.sock"), [{"ok": True, "explain": {
        "groups": {"alice": {}, "physics": {}}, "configured": {"physics": 2.0, "ops": 1.0, "bio": 1.0}}}])
    names = complete(f"governor explain --socket {server.path} ")
    server.close()
    assert names == ["physics", "ops", "alice", "bio"]


@pytest.mark.parametrize("text", ["[groups\n", "groups = 3\n"])
def test_a_bad_config_or_no_daemon_gives_fewer_names_never_an_error(config, text):
    config.write_text(text)
    assert complete("governor run --group ") == []


def test_a_daemon_that_answers_garbage_gives_no_names(config, tmp_path):
    server = FakeSocket(str(tmp_path / "g.sock"), [b"nonsense\n"])
    assert complete(f"governor explain --socket {server.path} ") == ["physics", "ops"]
    server.close()


def test_a_silent_daemon_costs_at_most_the_timeout(config, tmp_path):
    import time

    server = FakeSocket(str(tmp_path / "g.sock"), [], hold=True)  # reads the request, never answers
    started = time.monotonic()
    assert complete(f"governor explain --socket {server.path} ") == ["physics", "ops"]
    assert time.monotonic() - started < governor.cli.completion.DAEMON_TIMEOUT_S + 1
    server.close()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_script_is_click_s(shell):
    result = CliRunner().invoke(main, [], prog_name="governor", env={"_GOVERNOR_COMPLETE": f"{shell}_source"})
    assert result.exit_code == 0 and "_GOVERNOR_COMPLETE" in result.output
