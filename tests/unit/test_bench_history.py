"""`scripts/bench-history`'s journal is one the commands it times read as the daemon's: every
entry listed, and replayed under its config. Nothing here times anything."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import time
from pathlib import Path

from click.testing import CliRunner

from governor.cli.main import main

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _script(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # its benchlib
    loader = importlib.machinery.SourceFileLoader("bench_history_script", str(SCRIPTS / "bench-history"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("bench_history_script", loader))
    loader.exec_module(module)
    return module


def test_the_benchmarks_journal_is_listed_and_replayed_whole(monkeypatch, tmp_path):
    bench = _script(monkeypatch)
    begins = bench.write_journal(tmp_path, 10, time.time())
    (tmp_path / "proposed.toml").write_text(bench.CONFIG)
    since = ["--dir", str(tmp_path), "--since", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(begins - 2))]
    runner = CliRunner()
    listed = runner.invoke(main, ["history", "--json", *since])
    assert listed.exit_code == 0, listed.output
    kinds = [json.loads(line)["kind"] for line in listed.output.splitlines()]
    assert kinds.count("launch") == kinds.count("start") == kinds.count("end") == 10
    replayed = runner.invoke(main, ["replay", str(tmp_path / "proposed.toml"), "--json", *since])
    assert replayed.exit_code == 0, replayed.output
    report = json.loads(replayed.output)
    for side in ("recorded", "proposed"):  # every task started, none refused, on both sides
        assert sum(group[side]["tasks"] for group in report["groups"].values()) == 10, report["groups"]
        assert not any(group[side]["refused"] for group in report["groups"].values())
