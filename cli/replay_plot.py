"""``governor replay --plot FILE``: the comparison drawn, for admins who would rather look than
read (issue 47). Per group, recorded beside proposed: queue wait p50 and p95, CPU share and
memory share of the host. Drawn with matplotlib, an optional extra
(``pip install 'drf-governor[plot]'``): a daemon host need not carry it."""

from __future__ import annotations

import os

import click

from governor.config.units import quoted

__all__ = ["plot_report"]

_PANELS = (("wait_p50_s", "queue wait p50 (s)", 1.0), ("wait_p95_s", "queue wait p95 (s)", 1.0),
           ("cpu_share", "CPU share (%)", 100.0), ("memory_share", "memory share (%)", 100.0))
_SIDES = (("recorded", "#7f7f7f"), ("proposed", "#1f77b4"))


def plot_report(report: dict, path: str, proposed: str) -> None:
    """Draw ``report`` (:func:`governor.daemon.replay_report.compare`'s) to ``path``, its format
    by its suffix (``.png``, ``.svg``, ``.pdf``); ``proposed``: the proposed config's file, for
    the title.

    Raises:
        click.ClickException: matplotlib is not installed, or the file cannot be written.
    """
    try:
        from matplotlib.backend_bases import FigureCanvasBase
        from matplotlib.figure import Figure
    except ImportError:
        raise click.ClickException("--plot needs matplotlib, an optional extra: "
                                   "pip install 'drf-governor[plot]' (the tables and --json need nothing)") from None
    # The format is the name's suffix, and the file is the name: matplotlib added ".png" to one
    # with none (--plot /dev/null made /dev/null.png, --plot plots/.png plots/.png.png).
    kind = os.path.splitext(path)[1][1:].lower()
    if kind not in FigureCanvasBase.get_supported_filetypes():
        raise click.ClickException(f"--plot {quoted(path, 80)}: name the file with the suffix of its format "
                                   "(.png, .svg, .pdf)")
    groups = list(report["groups"])
    figure = Figure(figsize=(max(6.0, 1.2 * len(groups) + 3), 8), layout="constrained")
    figure.suptitle(f"governor replay: recorded beside {proposed}, {report['jobs']} tasks")
    width = 0.4
    for index, (field, title, scale) in enumerate(_PANELS):
        axes = figure.add_subplot(len(_PANELS) // 2, 2, index + 1)
        for offset, (side, colour) in enumerate(_SIDES):
            values = [(report["groups"][group][side].get(field) or 0.0) * scale for group in groups]
            axes.bar([i + (offset - 0.5) * width for i in range(len(groups))], values, width, label=side,
                     color=colour)
        axes.set_xticks(range(len(groups)), groups)
        axes.set_title(title)
        if index == 0:
            axes.legend()
    try:
        figure.savefig(path, format=kind)
    except (OSError, ValueError) as error:  # ValueError: a suffix matplotlib cannot write
        raise click.ClickException(f"cannot write the plot to {path}: {error}") from None
