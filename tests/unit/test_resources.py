"""The resource registry (issue 31): a stand-in resource declared in the registry alone is an
option of ``governor run``, a key of the protocol's launch, a resource of the daemon's status
(capacity, reservation, queue), a column of ``ps`` and a series of the metrics."""

import asyncio
import copy
import io
import json

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from support.daemons import GIB, collect, launch, make_daemon
from support.task_rows import ROWS

from governor.config import resources
from governor.cli.launch import plain
from governor.cli import view_common as view
from governor.cli.main import main
from governor.cli import ps_plain
from governor.cli.ps_view import tasks_table
from governor.cli.run import command
from governor.config.load import parse_config
from governor.errors import ConfigError
from governor.wire.metrics import Metrics
from governor.wire.protocol import LaunchRequest, Peer, parse_request
from governor.config.resources import RESOURCES, ResourceKind, compressible, find, governed
from governor.config.tomlcheck import number
from governor.wire.status_json import decode
from governor.wire.ps_types import TaskRow, decode_rows

# A site's software licenses, 3 of them, counted at the door as memory is.
LICENSES = find("memory")._replace(name="licenses", unit="licenses", flag="--licenses", metavar="N",
                                   help="Licenses of the site's solver the task holds while it runs.", wire="licenses",
                                   config=None, parse=resources.devices, format=lambda value, unit: f"{value:g}",
                                   capacity=lambda config, host: {"licenses": 3.0}, names=lambda config: ("licenses",),
                                   noun="license", queue="licenses_")


@pytest.fixture
def licenses(monkeypatch):
    monkeypatch.setattr(resources, "RESOURCES", (*RESOURCES, LICENSES))


def test_the_registry_declares_each_resource_once_with_its_kind():
    assert [(r.name, r.kind, r.flag, r.wire) for r in RESOURCES] == [
        ("cpu", ResourceKind.COMPRESSIBLE, "--cpus", "cpu"), ("memory", ResourceKind.ADMITTED, "--memory", "memory"),
        ("gpu", ResourceKind.DEVICE, "--gpus", "gpu"),
        ("io.<dev>.read", ResourceKind.COMPRESSIBLE, "--io-read", "io_read"),
        ("io.<dev>.write", ResourceKind.COMPRESSIBLE, "--io-write", "io_write"),
        ("pids", ResourceKind.COUNT, "--pids", "pids")]
    assert find("io.sda.write").wire == "io_write" and find("cpu.nr_throttled") is None
    assert [compressible(r) for r in ("cpu", "memory", "gpu", "io.sda.read", "memory.high")] == [
        True, False, False, True, True]
    assert find("gpu").said(1) == "1 GPU" and find("gpu").said(2) == "2 GPUs" and find("memory").said(GIB) == "1.0G"


def test_a_familys_members_come_per_device_in_the_order_of_the_devices():
    config = parse_config('[capacity]\ngpus = ["/dev/nvidia0"]\n[[capacity.io]]\ndevice = "/dev/sdb"\nread = "1G"\n'
                          'write = "1G"\n[[capacity.io]]\ndevice = "/dev/sda"\nread = "2G"\nwrite = "2G"\n'
                          '[groups."*"]\n', "t.toml")
    assert governed(config) == ("cpu", "memory", "gpu", "pids", "io.sdb.read", "io.sdb.write", "io.sda.read",
                                "io.sda.write")
    assert config.capacity(8.0, 16 * GIB, 1)["io.sda.write"] == 2 * GIB


def test_a_stand_in_is_an_option_of_run(licenses):
    result = CliRunner().invoke(command(), ["--help"])
    assert result.exit_code == 0
    assert "--licenses N" in result.output and "Licenses of the site's solver" in result.output
    refused = CliRunner().invoke(command(), ["--licenses", "-1", "--", "true"])
    assert refused.exit_code == 2 and "must be a whole number" in refused.output


def test_the_main_commands_run_is_built_from_the_registry_as_it_was_at_import():
    # Without the stand-in, `governor run --licenses` is no option: what the registry holds is what run offers.
    result = CliRunner().invoke(main, ["run", "--licenses", "2", "--", "true"])
    assert result.exit_code == 2 and "No such option" in result.output


def test_a_stand_in_with_a_config_key_is_a_key_of_the_config_and_reaches_the_default_demand(monkeypatch):
    solver = LICENSES._replace(config="licenses", setting=lambda value, key, file: float(number(value, key, file)))
    monkeypatch.setattr(resources, "RESOURCES", (*RESOURCES, solver))
    config = parse_config('[defaults.task]\nlicenses = 2\n[sessions]\nlicenses = 1\n[groups."*"]\n', "t.toml")
    assert config.task_defaults == {"cpu": 1.0, "memory": 512 * 1024**2, "io_read": 0, "io_write": 0, "pids": 4096,
                                    "licenses": 2.0}
    assert config.task_demand()["licenses"] == 2 and config.task_demand(licenses=1)["licenses"] == 1
    assert config.session_demand()["licenses"] == 1
    assert "licenses" not in parse_config('[groups."*"]\n', "t.toml").task_demand()  # left out: 0, not asked
    with pytest.raises(ConfigError, match="t.toml: defaults.task.licenses: must be a number"):
        parse_config('[defaults.task]\nlicenses = "two"\n[groups."*"]\n', "t.toml")


def test_a_stand_in_travels_in_a_launch_request(licenses):
    parsed = plain(["--cpus", "1", "--licenses", "2", "--", "solve"])
    assert parsed["demand"] == {"cpu": 1.0, "licenses": 2}
    line = json.dumps({"op": "launch", "pid": 7, "demand": parsed["demand"], "command": list(parsed["cmd"])})
    assert parse_request(line.encode()).demand == {"cpu": 1.0, "licenses": 2}
    with pytest.raises(Exception, match="demand.licenses: must be an integer"):
        parse_request(b'{"op": "launch", "pid": 7, "demand": {"licenses": 1.5}}')


def test_a_stand_in_is_admitted_reported_and_measured(tmp_path, licenses):
    daemon = make_daemon(tmp_path)
    launch(daemon, 100, group="A", cpu=0.5, memory=GIB, licenses=2)

    async def waits():
        stream = daemon.requests.stream(LaunchRequest(pid=200, group="B", demand={"cpu": 0.5, "memory": GIB, "licenses": 2},
                                             command=("solve",)), Peer(pid=200, uid=0, gid=0))
        queued = await anext(stream)
        status = json.loads(json.dumps(daemon.observation.status()))  # as `governor status --json` prints it
        await stream.aclose()  # the client leaves the queue
        return queued, status

    queued, status = asyncio.run(waits())
    assert status["capacity"]["licenses"] == 3.0
    assert status["groups"]["A"]["reserved"]["licenses"] == 2 and "licenses" not in status["groups"]["A"]["guarantee"]
    [waiting] = status["queue"]
    assert waiting["licenses_waiting_for"] == 1 and waiting["licenses_held_by"] == [{"group": "A", "licenses": 2}]
    assert waiting["reason"] == "licenses: waits for 1 license to free (held by A 2)"
    assert queued["queued"]["reason"] == waiting["reason"]
    [item] = decode(status).queue  # as the client reads it
    assert view.reason(item.reason) == waiting["reason"] and view.short_of(item).name == "licenses"

    text = generate_latest(Metrics(lambda: decode(status)).registry).decode()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for family in text_string_to_metric_families(text) for s in family.samples}
    assert got[("governor_capacity", (("resource", "licenses"),))] == 3.0
    assert got[("governor_group_reserved", (("group", "A"), ("leaf", "true"), ("parent", ""), ("resource", "licenses")))] == 2


def test_ps_shows_a_stand_in_as_it_shows_memory(licenses):
    rows = copy.deepcopy(ROWS)
    rows[0]["demand"]["licenses"] = rows[0]["reserved"]["licenses"] = 2
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(tasks_table(decode_rows(TaskRow, rows, "tasks"), now=1100.0, users=True))
    text = console.file.getvalue()
    header = next(line.split() for line in text.splitlines() if line.split()[:1] == ["id"])
    assert header[-5:] == ["cpu", "memory", "pids", "licenses", "reason"]
    assert "2/2/—" in text  # reserved/declared/use: nobody measures licenses


def test_a_launch_asking_for_more_of_a_stand_in_than_there_is_is_refused(tmp_path, licenses):
    daemon = make_daemon(tmp_path)
    request = LaunchRequest(pid=100, group="A", demand={"cpu": 0.5, "memory": GIB, "licenses": 4}, command=("x",))
    with pytest.raises(Exception, match="demand licenses = 4 exceeds the capacity of 3"):
        asyncio.run(collect(daemon.requests.stream(request, Peer(pid=100, uid=0, gid=0))))


def test_a_launch_asking_for_a_resource_this_config_governs_none_of_is_refused(tmp_path, monkeypatch):
    # A second device class on a host whose config names none: refused, never silently dropped.
    fpga = find("gpu")._replace(name="fpga", flag="--fpgas", wire="fpga", names=lambda config: (),
                                capacity=lambda config, host: {}, absent="no FPGA is governed (capacity.fpgas)")
    monkeypatch.setattr(resources, "RESOURCES", (*RESOURCES, fpga))
    daemon = make_daemon(tmp_path)
    request = LaunchRequest(pid=100, group="A", demand={"cpu": 0.5, "memory": GIB, "fpga": 1}, command=("x",))
    with pytest.raises(Exception, match=r"demand.fpga: no FPGA is governed \(capacity.fpgas\)"):
        asyncio.run(collect(daemon.requests.stream(request, Peer(pid=100, uid=0, gid=0))))
    assert "fpga" not in daemon.observation.status()["capacity"]


def test_a_family_over_other_devices_keeps_all_its_members(monkeypatch):
    # A later family (GPU memory per dmem region, say) need not have one member per block device.
    regions = find("io.<dev>.read")._replace(name="dmem.<dev>", flag="--gpu-memory", wire="gpu_memory",
                                             names=lambda config: ("dmem.r0", "dmem.r1", "dmem.r2"))
    monkeypatch.setattr(resources, "RESOURCES", (*RESOURCES, regions))
    config = parse_config('[[capacity.io]]\ndevice = "/dev/sda"\nread = "1G"\nwrite = "1G"\n[groups."*"]\n', "t.toml")
    assert governed(config) == ("cpu", "memory", "pids", "io.sda.read", "io.sda.write", "dmem.r0", "dmem.r1", "dmem.r2")


def test_piped_ps_shows_a_stand_in_as_the_table_does(licenses):
    rows = copy.deepcopy(ROWS)
    rows[0]["demand"]["licenses"] = rows[0]["reserved"]["licenses"] = 2
    fields = ps_plain.default_fields(ended=False, users=False, gpus=False)
    assert fields[-5:] == ["cpu", "memory", "pids", "licenses", "reason"]
    chosen = ps_plain.parse_fields("id,licenses", ended=False)
    assert ps_plain.lines(decode_rows(TaskRow, rows, "tasks"), chosen, now=1100.0, ended=False)[1].split()[1] == "2/2/-"
