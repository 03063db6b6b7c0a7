"""Where the history journal lives (issue 47): on disk, in systemd's StateDirectory, so that it
outlives a reboot; kept by an uninstall unless it is purged."""

import subprocess
from pathlib import Path

import pytest

from governor.config.history_rules import DEFAULT_DIRECTORY
from governor.config.load import parse_config
from governor.errors import ConfigError

GROUPS = '[groups.A]\nusers = ["root"]\n'
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_the_journal_is_on_disk_by_default_and_stays_in_a_state_dir_the_config_sets():
    assert DEFAULT_DIRECTORY == "/var/lib/governor/history"
    assert parse_config(GROUPS, "t.toml").history.directory == DEFAULT_DIRECTORY
    moved = parse_config(GROUPS + '[daemon]\nstate_dir = "/srv/gov state/"\n', "t.toml")
    assert moved.history.directory == "/srv/gov state/history"  # where governor kept it before
    named = parse_config(GROUPS + '[daemon]\nstate_dir = "/srv/g"\n[history]\ndirectory = "/data/h"\n', "t.toml")
    assert named.history.directory == "/data/h"


@pytest.mark.parametrize("value", ['"history"', "7"])
def test_a_directory_that_is_not_an_absolute_path_is_refused_at_its_key(value):
    with pytest.raises(ConfigError) as raised:
        parse_config(GROUPS + f"[history]\ndirectory = {value}\n", "t.toml")
    assert raised.value.key == "history.directory" and "absolute path" in str(raised.value)


def test_the_unit_has_systemd_make_and_keep_the_state_directory():
    unit = (CONFIGS / "governor.service").read_text()
    assert "\nStateDirectory=governor\n" in unit
    assert DEFAULT_DIRECTORY.startswith("/var/lib/governor/")


def _uninstall(root: Path, *, purge: bool, tmp_path: Path, capsys) -> str:
    from governor.cli.uninstall_systemd import uninstall

    uninstall(root, purge=purge, dry_run=False, live=True,
              run=lambda argv: subprocess.CompletedProcess(argv, 0, "", ""), cgroup_mount=tmp_path / "cgroup")
    return capsys.readouterr().out


def test_an_uninstall_keeps_the_history_and_a_purge_leaves_nothing_of_it(tmp_path, capsys):
    root = tmp_path / "r"
    journal = root / DEFAULT_DIRECTORY.lstrip("/") / "history-000001764400000000.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"at":1,"kind":"launch"}\n')
    (root / "etc/governor").mkdir(parents=True)
    (root / "etc/governor/governor.toml").write_text(GROUPS)
    output = _uninstall(root, purge=False, tmp_path=tmp_path, capsys=capsys)
    assert journal.is_file() and f"kept {journal.parent} (the history journal; --purge removes it)" in output
    output = _uninstall(root, purge=True, tmp_path=tmp_path, capsys=capsys)
    assert f"removed {journal.parent} (the history journal)" in output
    assert not (root / "var/lib/governor").exists() and (root / "var/lib").is_dir()


def test_a_purge_removes_the_journal_where_the_config_puts_it(tmp_path, capsys):
    root = tmp_path / "r"
    journal = root / "data/gov-history/history-000001764400000000.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text("")
    (root / "etc/governor").mkdir(parents=True)
    (root / "etc/governor/governor.toml").write_text(GROUPS + '[history]\ndirectory = "/data/gov-history"\n')
    _uninstall(root, purge=True, tmp_path=tmp_path, capsys=capsys)
    assert not journal.parent.exists() and (root / "data").is_dir()
