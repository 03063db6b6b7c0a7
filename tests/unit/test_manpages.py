"""The man pages: made from the click commands and the example config (cli/manpages.py),
written by ``governor man --directory``, and rendered by the real ``man -l`` as a reader sees them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from governor.cli.main import main
from governor.cli.manpages import _KEY, pages

COMMANDS = sorted(name for name, command in main.commands.items() if not command.hidden)
EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "governor.toml"
needs_man = pytest.mark.skipif(shutil.which("man") is None, reason="man (man-db) is not installed")


def render(page: Path) -> str:
    """``page`` as ``man -l`` shows it at 80 columns: plain text, ASCII hyphens."""
    done = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80", "LC_ALL": "C.UTF-8"})
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr, done.stderr  # groff's: a page it could not lay out
    text = re.sub(r".\x08", "", re.sub(r"\x1b\[[0-9;]*m", "", done.stdout))  # bold by overstrike or SGR
    return text.replace("\u2010", "-").replace("\u2212", "-")  # groff's hyphen and minus, where mapped


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("man")
    result = CliRunner().invoke(main, ["man", "--directory", str(directory)])
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {len(COMMANDS) + 2} man pages to {directory}\n"
    return directory


def test_a_page_for_governor_each_command_and_the_config(written):
    assert sorted(p.name for p in (written / "man1").iterdir()) == sorted(
        ["governor.1", *(f"governor-{name}.1" for name in COMMANDS)])
    assert [p.name for p in (written / "man5").iterdir()] == ["governor.toml.5"]
    for page in [*written.glob("man*/*")]:
        page.read_text(encoding="ascii")  # non-ASCII is escaped: any locale renders it
        assert page.stat().st_mode & 0o777 == 0o644


@needs_man
@pytest.mark.parametrize("name", ["governor", *(f"governor-{c}" for c in COMMANDS)])
def test_every_command_page_renders_with_its_options(written, name):
    text = render(written / "man1" / f"{name}.1")
    assert text.startswith(name.upper() + "(1)")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES", "SEE ALSO"):
        assert f"\n{section}\n" in text, section
    command = main if name == "governor" else main.commands[name.removeprefix("governor-")]
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.opts[-1] in text, param.opts
    assert "-h, --help" in text


@needs_man
def test_governor_run_shows_its_options_and_examples(written):
    text = render(written / "man1/governor-run.1")
    assert "governor-run - Run CMD as a governed task" in text
    assert "governor run [OPTIONS] CMD..." in text
    assert re.search(r"^ +--gpus N\n +Whole GPUs", text, re.MULTILINE)
    assert re.search(r"^ +--memory SIZE\n +Memory demand", text, re.MULTILINE)
    examples = text.split("\nEXAMPLES\n")[1].split("\nSEE ALSO\n")[0]
    # click's \b block: line for line, as in `governor run --help`
    assert examples.splitlines()[:2] == ["           governor run --cpus 2 --memory 4G -- make -j2",
                                         "           governor run --group physics --no-wait -- python train.py"]


@needs_man
def test_governor_page_lists_every_command(written):
    text = render(written / "man1/governor.1")
    listing = text.split("\nCOMMANDS\n")[1].split("\nEXAMPLES\n")[0]
    for command in COMMANDS:
        assert re.search(rf"^       {re.escape(command)}\b", listing, re.MULTILINE), command
        assert f"governor-{command}(1)" in listing
    assert "governor.toml(5)" in text.split("\nSEE ALSO\n")[1]


@needs_man
def test_the_config_page_documents_the_tables_and_keys(written):
    text = render(written / "man5/governor.toml.5")
    assert text.startswith("GOVERNOR.TOML(5)")
    assert "/etc/governor/governor.toml" in text.split("\nSYNOPSIS\n")[1]
    tables = text.split("\nTABLES")[1]
    for table in ("capacity", "defaults", "enforcement", "groups", "fairshare", "sessions", "daemon"):
        assert f"\n   [{table}]\n" in tables, table
    assert "[capacity]" in tables and "gpus" in tables
    assert re.search(r"^       gpus +the GPUs governor hands out", tables, re.MULTILINE)  # a key, described
    assert '           # gpus = "auto"' in tables  # the example's lines, as in the file
    assert '           reserve = { cpu = 0.5, memory = "1G" }' in tables


def test_no_continuation_line_of_the_config_reads_as_a_key():
    # "… events wait (1,000 at / most: more are dropped …)" made a key "most" in governor.toml(5).
    # Keys open at the comment's left or, nested, 3 spaces in; a description goes on deeper.
    for number, line in enumerate(EXAMPLE_CONFIG.read_text().splitlines(), 1):
        prose = line[1:].removeprefix(" ") if line.startswith("#") else ""
        if len(prose) - len(prose.lstrip()) > 3:
            assert not _KEY.fullmatch(prose.strip()), f"governor.toml:{number} reads as a key: {line}"


def test_roff_is_escaped_and_verbatim_blocks_are_kept():
    @click.group()
    def tool():
        """A tool."""

    @tool.command()
    @click.option("--pattern", help=r"A regex like \d+ - or -- anything.")
    def grep(pattern):
        """Search.

        .this line starts with a dot
        'and this one with a quote; ≥ 1 café

        \b
        Kept:
          a\\b   c
        """

    source = pages(tool, version="1.2", date="2000-01-02")["man1/governor-grep.1"]
    assert "\n\\&.this line starts with a dot\n" in source and "\n\\&'and this" in source
    assert r"\(>= 1" not in source and r"\[u2265] 1 caf\[u00E9]" in source
    assert r"A regex like \ed+ \- or \-\- anything." in source
    assert ".nf\nKept:\n  a\\eb   c\n.fi" in source  # a\b, spaces and all
    assert '.TH "GOVERNOR\\-GREP" "1" "2000-01-02" "governor 1.2" "User Commands"' in source


@needs_man
def test_a_help_text_roff_would_misread_renders_as_written(tmp_path):
    @click.command()
    def tool():
        """Search.

        .TH is not a request here, \\fB is not bold and 'quotes stay.
        """

    page = tmp_path / "tool.1"
    page.write_text(pages(click.Group(commands={"tool": tool}), version="1", date="2000-01-01")["man1/governor-tool.1"])
    assert ".TH is not a request here, \\fB is not bold and 'quotes stay." in render(page)


def test_the_date_follows_source_date_epoch(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    assert all('"1970-01-02"' in page.splitlines()[0] for page in pages(main).values())


@pytest.mark.parametrize("given", ["abc", "1.5", "99999999999999999999", "-99999999999999", "１"])
def test_a_source_date_epoch_that_is_no_whole_seconds_is_one_line(tmp_path, monkeypatch, given):
    # Stranger check: a ValueError or OverflowError traceback, or a year -3166904 in every page.
    monkeypatch.setenv("SOURCE_DATE_EPOCH", given)
    result = CliRunner().invoke(main, ["man", "--directory", str(tmp_path / "man")])
    assert result.exit_code == 1 and result.stderr.startswith("governor: error: SOURCE_DATE_EPOCH must be whole "
                                                               "seconds since 1970, got "), result.stderr
    assert not (tmp_path / "man").exists()


def test_an_empty_source_date_epoch_is_today(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "")
    assert all(f'"{time.strftime("%Y-%m-%d", time.gmtime())}"' in page.splitlines()[0] for page in pages(main).values())


def test_an_unwritable_directory_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(main, ["man", "--directory", str(tmp_path / "file" / "man")])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"governor: error: {tmp_path}/file/man")
    assert "cannot write the man pages" in result.stderr
