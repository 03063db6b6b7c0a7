"""What the views and the metrics show, as text and numbers the tests compare."""

import io

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from governor.cli.status_view import status_renderables
from governor.wire.status_json import decode
from support.status_sample import NOW


def samples(metrics) -> dict[tuple[str, tuple], float]:
    """Every sample :class:`governor.wire.metrics.Metrics` exposes, parsed back by prometheus-client:
    (name, sorted label pairs) → value."""
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def render(status: dict, width: int, now: float = NOW) -> str:
    """``governor status``'s output for ``status`` (the JSON object, decoded as the client
    does) at ``width`` columns, as plain text."""
    console = Console(record=True, width=width, file=io.StringIO())
    for renderable in status_renderables(decode(status), now=now):
        console.print(renderable)
    return console.export_text()
