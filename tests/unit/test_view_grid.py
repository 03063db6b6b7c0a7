"""``view_common.grid``: status's tasks drawn as plain text (rich's grid cost half a millisecond
a row) must read exactly as ``Table.grid(padding=(0, 1))`` drew them, wrapping included."""

from __future__ import annotations

import io

from hypothesis import given, strategies as st
from rich.console import Console
from rich.table import Table

from governor.cli import view_common as view

# What a task's lines hold: words of a command line and its figures, some wide (中), the
# separators status puts between amounts (·, —), and words longer than any line.
WORDS = st.one_of(st.text(st.sampled_from("abz09-_/=.[]:中文é"), min_size=1, max_size=60),
                  st.sampled_from(["·", "—", "[/oops]", "x" * 45]))
VALUES = st.lists(WORDS, min_size=1, max_size=12).map(" ".join)
# Labels: task ids, and a session's, its user's name (up to 32 characters).
LABELS = st.sampled_from(["", "7", "1234"]) | st.text(st.sampled_from("abz09-_中"), min_size=1, max_size=32)
ROWS = st.lists(st.tuples(LABELS, st.sampled_from(["pid", "cap", "limits", "protected"]),
                          VALUES), min_size=1, max_size=6)


def _lines(renderable, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]


def _rich_grid(rows) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(overflow="fold")
    grid.add_column(style="dim")
    grid.add_column(overflow="fold")
    for cells in rows:
        view.row(grid, *cells)
    return grid


@given(ROWS, st.integers(min_value=30, max_value=160))
def test_the_plain_grid_reads_as_richs(rows, width):
    assert _lines(view.Fitted(lambda room: view.grid(rows, room)), width) == _lines(_rich_grid(rows), width)


def test_a_long_command_wraps_at_spaces_and_a_longer_word_is_cut():
    rows = [("7", "pid", "12 · root · " + "x" * 40 + " yy"), ("", "limits", "cpu.max 50000 100000")]
    assert _lines(view.Fitted(lambda room: view.grid(rows, room)), 36) == [
        "7 pid    12 · root ·", "         " + "x" * 27, "         " + "x" * 13 + " yy", "  limits cpu.max 50000 100000"]
