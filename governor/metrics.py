"""Prometheus metrics for ``governor daemon --metrics [ADDR:]PORT`` (prometheus-client).

Per-group gauges are read at scrape time from the daemon's published status snapshot (a dict
replaced, never mutated, once a second), so the HTTP thread never walks live daemon state.
Counters and the refill histogram are updated by the daemon as things happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from governor.errors import GovernorError

REFILL_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
QUEUE_WAIT_BUCKETS_S = (0.01, 0.1, 1, 10, 60, 300, 1800, 3600, 4 * 3600, 24 * 3600)


class Metrics:
    """The daemon's metrics sink and exporter.

    Args:
        snapshot: returns the latest status object (``governor status --json`` shape).
    """

    def __init__(self, snapshot: Callable[[], dict]):
        self.registry = CollectorRegistry()
        self._refill = Histogram("governor_refill_duration_seconds", "Time to re-run progressive filling "
                                 "and write the limits that changed", buckets=REFILL_BUCKETS_S, registry=self.registry)
        self._events = Counter("governor_events", "Daemon events by kind", ["kind"], registry=self.registry)
        self._queue_wait = Histogram("governor_queue_wait_seconds", "Time a started task waited in the "
                                     "admission queue for its memory to fit", buckets=QUEUE_WAIT_BUCKETS_S,
                                     registry=self.registry)
        self._write_errors = Counter("governor_limit_write_errors", "cgroup limit writes the kernel refused",
                                     registry=self.registry)
        self.registry.register(_Snapshot(snapshot))

    def refill(self, seconds: float) -> None:
        self._refill.observe(seconds)

    def event(self, kind: str) -> None:
        self._events.labels(kind).inc()

    def write_error(self) -> None:
        self._write_errors.inc()

    def admitted(self, waited_s: float) -> None:
        self._queue_wait.observe(waited_s)

    def serve(self, address: str, port: int) -> None:
        """Serve ``/metrics`` over HTTP on ``address:port`` in a background thread.

        Raises:
            GovernorError: the port is taken, or the address is not one of this host's.
        """
        try:
            start_http_server(port, addr=address, registry=self.registry)
        except OSError as error:  # socket.gaierror for a name that does not resolve is one too
            raise GovernorError(f"cannot serve metrics on {address}:{port}: {error.strerror or error}") from None


class _Snapshot:
    """Gauges built from a status snapshot on each scrape."""

    def __init__(self, snapshot: Callable[[], dict]):
        self.snapshot = snapshot

    def collect(self):
        status = self.snapshot()
        capacity = GaugeMetricFamily("governor_capacity", "What governor divides (cores, bytes, bytes/s)",
                                     labels=["resource"])
        for resource, amount in status.get("capacity", {}).items():
            capacity.add_metric([resource], amount)
        share = GaugeMetricFamily("governor_group_dominant_share", "Dominant share of the host (0..1)",
                                  labels=["group"])
        weight = GaugeMetricFamily("governor_group_weight", "Group weight", labels=["group"])
        tasks = GaugeMetricFamily("governor_group_tasks", "Running tasks", labels=["group"])
        allocation = GaugeMetricFamily("governor_group_allocation", "DRF allocation: the group's guarantee (cores, bytes, bytes/s)",
                                       labels=["group", "resource"])
        used = GaugeMetricFamily("governor_group_usage", "Measured use (cores, bytes, bytes/s)",
                                 labels=["group", "resource"])
        queue = status.get("queue", [])
        waiting = GaugeMetricFamily("governor_queue_length", "Tasks waiting for their memory to fit",
                                    value=len(queue))
        oldest = GaugeMetricFamily("governor_queue_oldest_wait_seconds", "How long the longest-waiting "
                                   "task has waited (0 with an empty queue)",
                                   value=max((time.time() - q["queued_at"] for q in queue), default=0))
        for name, group in status.get("groups", {}).items():
            share.add_metric([name], group["dominant_share"])
            weight.add_metric([name], group["weight"])
            tasks.add_metric([name], len(group["tasks"]))
            for resource, amount in group["allocation"].items():
                allocation.add_metric([name, resource], amount)
            for resource, amount in group["usage"].items():
                used.add_metric([name, resource], amount)
        yield from (capacity, share, weight, tasks, allocation, used, waiting, oldest)
