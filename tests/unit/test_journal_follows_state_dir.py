"""``governor daemon --state-dir`` moves the history journal as ``[daemon] state_dir`` does: a
second daemon run by hand with state of its own wrote into the host daemon's journal, both
appending to one file and either one's pruning removing the file the other wrote to."""

from pathlib import Path

from governor.config.history_rules import DEFAULT_DIRECTORY
from governor.config.load import DEFAULT_STATE_DIR, parse_config
from governor.daemon.build import Options, _journal

GROUPS = '[groups.A]\nusers = ["root"]\n'


def options(config: str, state_dir: str | None) -> Options:
    return Options(parse_config(GROUPS + config, "t.toml"), "t.toml", None, "/run/governor.sock", "governor",
                   state_dir=state_dir)


def test_a_state_dir_given_on_the_command_line_takes_the_journal_with_it(tmp_path):
    state = tmp_path / "a state dir"
    assert _journal(options("", str(state))) == state / "history"
    moved = f'[daemon]\nstate_dir = "{tmp_path / "elsewhere"}"\n'
    assert parse_config(GROUPS + moved, "t.toml").history.directory == f"{tmp_path / 'elsewhere'}/history"
    assert _journal(options(moved, str(state))) == state / "history"  # the flag overrides the config's


def test_the_journal_stays_where_the_config_puts_it_or_at_the_default_state_dirs_place(tmp_path):
    assert _journal(options("", None)) is None  # the config's own
    named = f'[history]\ndirectory = "{tmp_path / "journal"}"\n'
    assert parse_config(GROUPS + named, "t.toml").history.named
    assert _journal(options(named, str(tmp_path / "state"))) is None
    moved = f'[daemon]\nstate_dir = "{tmp_path / "elsewhere"}"\n'
    assert _journal(options(moved, DEFAULT_STATE_DIR + "/")) == Path(DEFAULT_DIRECTORY)
    # The default spelt otherwise is the default in the config too (review: it moved the journal to /run).
    for spelt in (DEFAULT_STATE_DIR + "/", "/run/governor/./state", "/var/run/governor/state",
                  "//run/governor/state"):
        assert parse_config(GROUPS + f'[daemon]\nstate_dir = "{spelt}"\n', "t.toml").history.directory == DEFAULT_DIRECTORY
        assert _journal(options("", spelt)) == Path(DEFAULT_DIRECTORY)


def test_uninstall_finds_the_journal_where_the_daemon_writes_it(tmp_path):
    # One rule (history_rules.following) for the config, --state-dir and uninstall-systemd.
    from governor.cli.uninstall_systemd import _history_dir

    config = tmp_path / "governor.toml"
    for spelt, journal in ((DEFAULT_STATE_DIR + "/", DEFAULT_DIRECTORY), ("/run/governor/./state", DEFAULT_DIRECTORY),
                           (str(tmp_path / "elsewhere"), f"{tmp_path / 'elsewhere'}/history")):
        config.write_text(GROUPS + f'[daemon]\nstate_dir = "{spelt}"\n')
        assert _history_dir(config) == parse_config(config.read_text(), "t.toml").history.directory == journal
