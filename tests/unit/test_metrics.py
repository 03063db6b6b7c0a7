"""Metrics render from a status snapshot and parse with prometheus-client's own parser."""

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from status_sample import STATUS

from governor.metrics import Metrics


def samples(metrics):
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_group_gauges_come_from_the_snapshot():
    metrics = Metrics(lambda: STATUS)
    got = samples(metrics)
    for name, group in STATUS["groups"].items():
        assert got[("governor_group_dominant_share", (("group", name),))] == group["dominant_share"]
        assert got[("governor_group_tasks", (("group", name),))] == len(group["tasks"])
        for resource, amount in group["allocation"].items():
            assert got[("governor_group_allocation", (("group", name), ("resource", resource)))] == amount


def test_counters_and_the_refill_histogram_count_what_happened():
    metrics = Metrics(lambda: {})
    metrics.refill(0.0004)
    metrics.refill(0.002)
    metrics.event("refill")
    metrics.event("refill")
    metrics.event("task_started")
    metrics.write_error()
    got = samples(metrics)
    assert got[("governor_refill_duration_seconds_count", ())] == 2
    assert got[("governor_refill_duration_seconds_bucket", (("le", "0.0005"),))] == 1
    assert got[("governor_events_total", (("kind", "refill"),))] == 2
    assert got[("governor_limit_write_errors_total", ())] == 1
