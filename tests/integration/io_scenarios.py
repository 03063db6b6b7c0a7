"""I/O on the real kernel (the v2 VM's scratch disk): a task's io.max cap holds direct writes,
and where the disk has io.cost the guarantees are io.weight and share a busy disk by DRF."""

from __future__ import annotations

import re
import time
from pathlib import Path

from daemon_harness import MIB, Governor
from scenarios import config, task_rel


def io_write_held_to_io_max(tmp_path, device: str) -> None:
    """Direct writes of a task declaring 8M/s of writes on ``device`` run at 8M/s ± 15 %, as
    dd itself times them (process start-up under an emulated CPU is not I/O)."""
    io = f'[[capacity.io]]\ndevice = "{device}"\nread = "40M"\nwrite = "40M"\n'
    gov = Governor(tmp_path, config(cpu=2.0, io=io))
    try:
        dd = ["dd", "if=/dev/zero", f"of={device}", "bs=1M", "count=32", "oflag=direct"]
        # A whole core: in the VM even direct I/O costs emulated CPU, and this test is about I/O.
        task = gov.run("C", dd, cpus=1.0, memory="64M", io_write="8M")
        assert gov.limit_file(task_rel(gov, "C"), "io.max").split()[2] == f"wbps={8 * MIB}"  # the cap
        # No io.cost or BFQ on the VM's disk: the guarantee falls back to io.max = A_g on the group.
        [sharing] = gov.status()["daemon"]["io_sharing"].values()
        assert sharing == "io.max" and gov.limit_file("C", "io.max").split()[2] == f"wbps={8 * MIB}"
        _, report = task.communicate(timeout=120)
        assert task.returncode == 0, report
        copied, seconds = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", report).groups()
        rate = int(copied) / float(seconds)
        print(f"\nio.max wbps=8M on {device}: direct writes at {rate / MIB:.2f} MiB/s")
        assert abs(rate - 8 * MIB) <= 0.15 * 8 * MIB
    finally:
        gov.close()


IO_COST_MODEL = ("{dev} ctrl=user model=linear rbps=8388608 rseqiops=2048 rrandiops=2048 "
                 "wbps=8388608 wseqiops=2048 wrandiops=2048")
# Writes 28M again and again from the go flag to the stop flag: both writers write through the
# whole measurement, however slow the host (one that wrote 28M once could be done, and its group's
# cgroup gone, before the other began).
WRITER = ("while [ ! -e {go} ]; do sleep 0.05; done; while [ ! -e {stop} ]; do "
          "dd if=/dev/zero of={device} bs=256k count=112 seek={seek} oflag=direct status=none || exit 1; done")


def io_weight_shares_a_busy_disk(tmp_path, device: str, cgroup_mount) -> None:
    """Where the disk has io.cost (enabled here by the test, as an administrator would, with a
    linear model of 8M/s), I/O guarantees are io.weight, not hard limits. A (weight 3) and B
    (weight 1) both declare 8M/s of writes on an 8M/s disk: DRF guarantees 6M/s and 2M/s, and
    two writers started together share the disk about 3 : 1."""
    dev = (Path("/sys/class/block") / Path(device).name / "dev").read_text().strip()
    (cgroup_mount / "io.cost.model").write_text(IO_COST_MODEL.format(dev=dev))
    (cgroup_mount / "io.cost.qos").write_text(f"{dev} enable=1 ctrl=user rpct=0 rlat=0 wpct=0 wlat=0 min=100 max=100")
    io = f'[[capacity.io]]\ndevice = "{device}"\nread = "8M"\nwrite = "8M"\n'
    gov = Governor(tmp_path, config(cpu=2.0, io=io).replace("[groups.A]\n", "[groups.A]\nweight = 3\n"))
    go, stop = tmp_path / "go", tmp_path / "stop"
    try:
        [sharing] = gov.status()["daemon"]["io_sharing"].values()
        writers = {group: gov.run(group, ["sh", "-c", WRITER.format(go=go, stop=stop, device=device, seek=seek)],
                                  cpus=0.5, memory="64M", io_write="8M")
                   for group, seek in (("A", 0), ("B", 128))}
        weights = {g: gov.limit_file(g, "io.weight").split()[-1] for g in writers}
        guarantees = {g: gov.status()["groups"][g]["allocation"][f"io.{Path(device).name}.write"] for g in writers}
        go.touch()
        written = lambda g: gov.driver.read_stats(g).io_stat.get(dev, {}).get("wbytes", 0)  # noqa: E731
        gov.wait(lambda: all(written(g) > 0 for g in writers), "both writers to start writing")
        first, t0 = {g: written(g) for g in writers}, time.monotonic()
        time.sleep(2.5)  # the measurement window, not a wait
        rates = {g: (written(g) - first[g]) / (time.monotonic() - t0) for g in writers}
        stop.touch()
        for writer in writers.values():
            writer.wait(timeout=120)
        print(f"\nio.cost on {device}: guarantees A {guarantees['A'] / MIB:.1f}, B {guarantees['B'] / MIB:.1f} MiB/s "
              f"(io.weight {weights['A']} : {weights['B']}); measured A {rates['A'] / MIB:.2f}, "
              f"B {rates['B'] / MIB:.2f} MiB/s")
        assert sharing == "io.weight"
        assert abs(guarantees["A"] - 6 * MIB) < 1 and abs(guarantees["B"] - 2 * MIB) < 1
        # About 3 : 1 on a quiet host; equal weights give about 1 : 1. At queue depth one on an
        # emulated disk a writer can leave part of its share unused, which io.cost lends to the other.
        assert rates["A"] >= 1.5 * rates["B"], rates
    finally:
        gov.close()
        (cgroup_mount / "io.cost.qos").write_text(f"{dev} enable=0")
