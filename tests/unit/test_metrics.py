"""Metrics render from a status snapshot and parse with prometheus-client's own parser."""

from support.rendered import samples
from support.status_sample import STATUS

from governor.wire.metrics import Metrics
from governor.wire.status_json import decode


def test_group_gauges_come_from_the_snapshot():
    metrics = Metrics(lambda: decode(STATUS))
    got = samples(metrics)
    for name, group in STATUS["groups"].items():
        assert got[("governor_group_dominant_share", (("group", name), ("leaf", "true"), ("parent", "")))] == group["dominant_share"]
        assert got[("governor_group_tasks", (("group", name), ("leaf", "true"), ("parent", "")))] == len(group["tasks"])
        for resource, amount in group["allocation"].items():
            assert got[("governor_group_allocation", (("group", name), ("leaf", "true"), ("parent", ""), ("resource", resource)))] == amount


def test_counters_and_the_refill_histogram_count_what_happened():
    metrics = Metrics(lambda: decode({}))
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


# ── GPUs (issue 26, point 3) ─────────────────────────────────────────────────────────────

def gpu_status() -> dict:
    from support.status_sample import with_gpus

    return with_gpus(STATUS)


def test_each_governed_gpu_has_one_held_series_1_with_its_holder_0_when_free():
    got = samples(Metrics(lambda: decode(gpu_status())))
    assert got[("governor_gpus", ())] == 4
    assert got[("governor_capacity", (("resource", "gpu"),))] == 4
    held = {labels: value for (name, labels), value in got.items() if name == "governor_gpu_held"}
    assert held == {
        (("gpu", "0"), ("group", "physics"), ("task", "t7"), ("uuid", "GPU-8a3bbf48-4b8c-4d2e-9f10-0123456789ab")): 1,
        (("gpu", "1"), ("group", "physics"), ("task", "t7"), ("uuid", "GPU-9b4ccf59-4b8c-4d2e-9f10-0123456789ab")): 1,
        (("gpu", "2"), ("group", ""), ("task", ""), ("uuid", "")): 0,
        (("gpu", "3"), ("group", "ops"), ("task", "t8"), ("uuid", "MIG-4f0c1234-aaaa-4bbb-8ccc-dddddddddddd")): 1,
    }
    # GPUs are reserved like memory; cgroups measure no use of one: no usage series, not a 0.
    assert got[("governor_group_reserved", (("group", "physics"), ("leaf", "true"), ("parent", ""), ("resource", "gpu")))] == 2
    assert ("governor_group_usage", (("group", "physics"), ("leaf", "true"), ("parent", ""), ("resource", "gpu"))) not in got
    assert ("governor_group_usage", (("group", "physics"), ("leaf", "true"), ("parent", ""), ("resource", "cpu"))) in got
    # No NVML sample yet: no NVML series.
    assert not any(name.startswith(("governor_gpu_utilization", "governor_gpu_memory", "governor_task_gpu"))
                   for name, _ in got)


def test_without_gpus_there_is_no_gpu_series():
    got = samples(Metrics(lambda: decode(STATUS)))
    assert not any("gpu" in name for name, _ in got)


def test_the_nvml_sample_gives_utilization_memory_and_each_tasks_gpu_memory():
    from governor.core.gpus import GpuUse

    metrics = Metrics(lambda: decode(gpu_status()))
    use = GpuUse(utilization={0: 0.75, 1: 0.0}, memory_used={0: 30 * 1024**3, 1: 1024**3, 3: 4 * 1024**3},
                 process_memory={4242: 20 * 1024**3, 4250: 10 * 1024**3, 5001: 4 * 1024**3, 777: 1024**3,
                                 778: 1024**3})
    # 4242 and 4250 run in t7 (summed), 5001 in t8; 777 in no task, 778 in t99, ended since (left out).
    metrics.gpu_sample(use, {4242: ("physics", "t7"), 4250: ("physics", "t7"), 5001: ("ops", "t8"),
                             778: ("ops", "t99")})
    got = samples(metrics)
    assert got[("governor_gpu_utilization_ratio", (("gpu", "0"),))] == 0.75
    assert got[("governor_gpu_utilization_ratio", (("gpu", "1"),))] == 0.0
    assert ("governor_gpu_utilization_ratio", (("gpu", "3"),)) not in got  # a MIG instance: NVML does not say
    assert got[("governor_gpu_memory_used_bytes", (("gpu", "3"),))] == 4 * 1024**3
    assert {labels: value for (name, labels), value in got.items() if name == "governor_task_gpu_memory_bytes"} == {
        (("group", "physics"), ("task", "t7")): 30 * 1024**3, (("group", "ops"), ("task", "t8")): 4 * 1024**3}
    metrics.gpu_sample(None, {})  # NVML stopped answering: its series go
    assert not any(name.startswith("governor_gpu_utilization") for name, _ in samples(metrics))


def test_the_daemon_samples_nvml_on_its_sampler_only_for_served_metrics(tmp_path, monkeypatch):
    import asyncio

    from support.daemons import GIB, launch, make_daemon

    import governor.daemon.observation as observation
    from governor.core.gpus import Gpu, GpuInventory, GpuUse

    calls = []

    def fake_sample(inventory):
        calls.append(inventory)
        return GpuUse(utilization={0: 0.5}, memory_used={0: GIB}, process_memory={100: GIB, 101: GIB // 2,
                                                                                      200: GIB // 4, 999: GIB})

    monkeypatch.setattr(observation, "sample_use", fake_sample)
    inventory = GpuInventory(gpus=(Gpu(0, "/dev/nvidia0", 195, 0, "GPU-aaaa"), Gpu(1, "/dev/nvidia1", 195, 1, None)),
                             control=(), source="listed")
    plain = make_daemon(tmp_path / "plain")  # no metrics served: NVML is never asked
    plain.policy.gpus = inventory
    plain.observation.sample()
    assert calls == []

    daemon = None
    metrics = Metrics(lambda: daemon.observation.snapshot())
    metrics.bind("127.0.0.1", 0)  # served (a sink that serves nowhere asks NVML nothing either)
    daemon = make_daemon(tmp_path / "served", metrics=metrics)
    launch(daemon, 100, group="A", cpu=0.5, memory=GIB // 4)
    launch(daemon, 200, group="B", cpu=0.5, memory=GIB // 4)
    one = daemon.tasks.get("1")
    daemon.hierarchy.driver.procs[one.cgroup].append(101)  # a child of task 1's
    daemon.observation.sample()
    assert calls == []  # no GPU governed
    daemon.policy.gpus = inventory
    asyncio.run(daemon.observation.sample_off_loop())
    assert calls == [inventory]
    got = samples(metrics)
    assert got[("governor_gpu_utilization_ratio", (("gpu", "0"),))] == 0.5
    assert {labels: value for (name, labels), value in got.items() if name == "governor_task_gpu_memory_bytes"} == {
        (("group", "A"), ("task", "1")): GIB * 1.5, (("group", "B"), ("task", "2")): GIB // 4}
    daemon.observation.sample()
    assert len(calls) == 1  # at most every GPU_SAMPLE_S
    monkeypatch.setattr(observation, "GPU_SAMPLE_S", 0.0)
    daemon.observation.sample()
    assert len(calls) == 2
    daemon.policy.gpus = GpuInventory(gpus=(inventory.gpus[1],), control=(), source="listed")
    daemon.observation.sample()
    assert len(calls) == 2  # no GPU with a UUID: NVML cannot find one
    daemon.observation.close()


def test_a_group_tree_is_labelled_so_a_sum_over_leaves_counts_each_task_once(tmp_path):
    # Issue 33, point 8: D2's series are the sums of L1's and L2's, unlabelled they were counted twice.
    from support.daemons import GIB, TREE, launch, make_daemon

    daemon = make_daemon(tmp_path, TREE)
    for group, pid in (("D1", 100), ("L1", 200), ("L2", 300)):
        launch(daemon, pid, group=group, cpu=0.5, memory=GIB // 4)
    got = samples(Metrics(daemon.observation.snapshot))
    reserved = {labels[:3]: value for (name, labels), value in got.items()
                if name == "governor_group_reserved" and ("resource", "memory") in labels}
    assert set(reserved) == {(("group", "D1"), ("leaf", "true"), ("parent", "")),
                             (("group", "D2"), ("leaf", "false"), ("parent", "")),
                             (("group", "L1"), ("leaf", "true"), ("parent", "D2")),
                             (("group", "L2"), ("leaf", "true"), ("parent", "D2"))}
    leaves = sum(value for labels, value in reserved.items() if ("leaf", "true") in labels)
    assert leaves == 3 * (GIB // 4)  # each task once
    assert sum(reserved.values()) == 5 * (GIB // 4)  # what sum() without the label counts


def test_notify_outcomes_are_counters_only_where_a_command_is_given():
    counts = {"pending": 3, "running": 2, "dropped": 9000, "refused": 1, "failed": 4, "done": 995}
    got = samples(Metrics(lambda: decode({**STATUS, "daemon": {**STATUS["daemon"], "notify": counts}})))
    for outcome in ("done", "failed", "dropped", "refused"):
        assert got[("governor_notify_events_total", (("outcome", outcome),))] == counts[outcome]
    assert not any(name.startswith("governor_notify") for name, _ in samples(Metrics(lambda: decode(STATUS))))


def test_the_metrics_address_is_a_config_key_that_a_reload_follows_and_the_flag_overrides(tmp_path):
    """Issue 44.5: the metrics address was an ExecStart= drop-in; now `[metrics] listen` (reloaded),
    `--metrics` pinning it."""
    import socket

    import pytest

    from support.daemons import make_daemon, on_loop

    from governor.config.load import parse_config
    from governor.errors import ConfigError
    from governor.wire.protocol import Peer, ReloadRequest

    base = "[capacity]\ncpu = 2\nmemory = \"4G\"\n[groups.A]\nusers = [\"root\"]\n[sessions]\nenabled = false\n"
    assert parse_config(base + '[metrics]\nlisten = "9101"\n', "t.toml").metrics_listen == ("127.0.0.1", 9101)
    assert parse_config(base, "t.toml").metrics_listen is None
    with pytest.raises(ConfigError, match=r"metrics.listen.*\[ADDR:\]PORT"):
        parse_config(base + '[metrics]\nlisten = "localhost"\n', "t.toml")

    def free_port() -> int:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]

    path = tmp_path / "governor.toml"
    daemon = None
    metrics = Metrics(lambda: daemon.observation.snapshot())
    daemon = make_daemon(tmp_path / "d", metrics=metrics)
    daemon.reloads.load_config = lambda: parse_config(path.read_text(), str(path))
    port = free_port()
    path.write_text(base + f'[metrics]\nlisten = "127.0.0.1:{port}"\n')
    on_loop(daemon, lambda: daemon.requests.handle(ReloadRequest(), Peer(pid=1, uid=0, gid=0)))
    assert metrics.address == ("127.0.0.1", port)
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # listening there
    path.write_text(base)  # the key gone: served nowhere
    on_loop(daemon, lambda: daemon.requests.handle(ReloadRequest(), Peer(pid=1, uid=0, gid=0)))
    assert metrics.address is None
    pinned = Metrics(lambda: decode({}), pinned=True)
    pinned.follow(("127.0.0.1", free_port()))
    assert pinned.address is None  # --metrics (here: none given, pinned) wins over the config
