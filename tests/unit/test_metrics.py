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


def test_idle_connections_cost_at_most_a_few_descriptors_for_a_few_seconds(monkeypatch):
    # Issue 22, point 3: nobody's ~1,010 idle connections each took a thread and a descriptor of
    # the daemon for ever (no timeout), until launches and status failed with EMFILE.
    import asyncio
    import os

    import governor.metrics as module

    monkeypatch.setattr(module, "SCRAPE_TIMEOUT_S", 0.5)
    metrics = Metrics(lambda: STATUS)
    metrics.bind("127.0.0.1", 0)
    port = metrics._listener.getsockname()[1]

    async def scrape() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = await reader.read()
        writer.close()
        return data

    async def attack():
        await metrics.serve()
        fds = len(os.listdir("/proc/self/fd"))
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(200)]
        await asyncio.sleep(0.2)
        held = len(os.listdir("/proc/self/fd")) - fds - len(idle)  # the server's side of them
        await asyncio.sleep(0.6)  # past the scrape timeout: the idle ones are closed
        answer = await scrape()
        for _, writer in idle:
            writer.close()
        await metrics.close()
        return held, answer

    held, answer = asyncio.run(attack())
    assert held <= module.MAX_SCRAPES + 1
    assert answer.startswith(b"HTTP/1.1 200 OK") and b"governor_group_dominant_share" in answer
