"""Isolation beside hostile neighbours (issue 42; `scripts/bench --isolation`), after
resctl-bench's protection measure: how much of its throughput a victim keeps beside each hostile
neighbour, governed and with no governor at all, side by side in one run.

The victim is a CPU loop that reports its iterations a second every 0.5 s, and the CPU it had
(cores: what governing decides; its iterations per CPU-second are the host's, and on a VM they
drift between phases more than governing moves them). It runs alone (the
baseline, before and after each neighbour, so that a ratio compares runs minutes apart at most
on a host whose other load comes and goes), then beside each neighbour twice: governed (the
victim and the neighbour each launched by `governor run` into a group of their own, under a
daemon of the benchmark's own with sessions on) and ungoverned (the same commands, plain, no
daemon running). The modes alternate in order (governed first, then ungoverned first) so each
neighbour costs one start or stop of the daemon. Each governed storm also measures the daemon's
CPU (% of one core) and user B's `governor run -- true` (two a second) against B's quiet
figure; the daemon's CPU per exec is measured once, for a governed and an ungoverned user.

    sudo scripts/bench --isolation [--seconds 10] [--json PATH] [--only WORDS] [--vm]

Outside the v2 VM, --vm builds the wheel here and runs the benchmark inside
../shared/vm/run-in-vm (under /tmp/governor-vm.lock, with a scratch disk); inside it
(VMLAB_GUEST=1) the memory hog and the I/O flood join the neighbours. The fork bombs (one in a
task, one in a session, each against a cap of 100 pids) run everywhere, bounded at 1,000 sleeps
for the ungoverned run's sake. --only runs the neighbours whose name contains WORDS.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import REPO, percentile

VM_LOCK, VM_DISK_MIB = "/tmp/governor-vm.lock", 256
TARGET = 0.9  # the governed victim keeps at least this share of its guarantee (issue 42)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The isolation benchmark's options, added to scripts/bench's ``parser``."""
    group = parser.add_argument_group("isolation beside hostile neighbours (issue 42)")
    group.add_argument("--isolation", action="store_true",
                       help="run only the isolation benchmark: a victim beside each hostile neighbour, "
                            "governed and with no governor (a few minutes)")
    group.add_argument("--seconds", type=float, default=10, metavar="S",
                       help="the victim's run in each phase, seconds (default: 10)")
    group.add_argument("--execs", type=int, metavar="N",
                       help="execs per user for the daemon's CPU per exec (default: 3000; 100 in the VM)")
    group.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH ('-': stdout)")
    group.add_argument("--only", metavar="WORDS",
                       help="run only the neighbours whose name contains WORDS (e.g. 'fork bomb'); "
                            "quiet, the exec cost and the runs alone as ever")
    group.add_argument("--vm", action="store_true",
                       help="run it in the cgroup v2 VM (../shared/vm/run-in-vm), with the fork bomb, "
                            "memory hog and I/O flood")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (``parser.error``) an isolation option without --isolation, or beside another part."""
    own = [flag for flag, given in (("--vm", args.vm), ("--json", args.json), ("--execs", args.execs is not None),
                                    ("--seconds", args.seconds != 10), ("--only", args.only is not None)) if given]
    if not args.isolation:
        if own:
            parser.error(f"{own[0]} belongs to --isolation")
        return
    others = [flag for flag, given in (("--quick", args.quick), ("--launch", args.launch), ("--storm", args.storm),
                                       ("--big", args.big), ("--against", args.against), ("--profile", args.profile))
              if given]
    if others:
        parser.error(f"--isolation runs alone: leave out {', '.join(others)}")
    if not 2 <= args.seconds <= 600:  # (NaN too)
        parser.error(f"--seconds: each phase must last from 2 to 600 seconds, not {args.seconds:g}")
    if args.execs is not None and not 10 <= args.execs <= 100_000:
        parser.error(f"--execs: from 10 to 100000 execs, not {args.execs}")
    if args.json and args.json != "-" and not Path(args.json).absolute().parent.is_dir():
        # Said now, not after minutes of phases (the table is printed, the file is lost).
        parser.error(f"--json: {args.json}: its directory does not exist")


def in_guest() -> bool:
    """Whether this runs inside ../shared/vm/run-in-vm's guest."""
    return os.environ.get("VMLAB_GUEST") == "1"


def cgroup_mode() -> str:
    """This host's cgroup layout: "v2", "v1 (hybrid)" (v1 controllers, an empty v2 tree) or "v1"."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():
        return "v2"
    return "v1 (hybrid)" if (base / "unified").is_dir() else "v1"


def host() -> dict:
    """What the figures were measured on."""
    uname = os.uname()
    return {"name": uname.nodename, "cpus": os.cpu_count(), "kernel": uname.release, "cgroup": cgroup_mode(),
            "vm": os.environ.get("VMLAB_ACCEL") if in_guest() else None, "load": list(os.getloadavg()),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def ratios(samples: list[float], baseline: float) -> dict:
    """The victim's throughput each 0.5 s over its throughput alone: median and p10."""
    values = sorted(sample / baseline for sample in samples)
    return {"median": statistics.median(values), "p10": percentile(values, 10), "samples": len(values)}


def main(governor: str, work: Path, args: argparse.Namespace) -> None:
    """Run the benchmark (here, or in the VM with ``args.vm``), print its table, write its JSON."""
    if args.vm and not in_guest():
        sys.exit(relaunch_in_vm(governor, args))
    results = measure(governor, work, args)
    print(render(results))
    if args.json == "-":
        print(json.dumps(results, indent=2))
    elif args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


def relaunch_in_vm(governor: str, args: argparse.Namespace) -> int:
    """This benchmark inside the v2 VM, reusing the venv of ``governor`` just built here (the
    guest sees this host's files), under the VM lock: its exit code."""
    command = [sys.executable, str(REPO / "scripts" / "bench"), "--isolation", "--seconds", f"{args.seconds:g}",
               "--keep-venv", str(Path(governor).parents[2])]
    # The guest's own files are thrown away with it: its JSON goes to the checkout, which it
    # shares, and comes here to --json's path after.
    shared = REPO / f".isolation-{os.getpid()}.json" if args.json and args.json != "-" else None
    command += ["--json", str(shared or args.json)] if args.json else []
    command += ["--execs", str(args.execs)] if args.execs else []
    command += ["--only", args.only] if args.only else []
    print(f"waiting for {VM_LOCK}, then the VM …", file=sys.stderr, flush=True)
    try:
        return subprocess.run(["flock", VM_LOCK, "env", f"VMLAB_DISKS={VM_DISK_MIB}",
                               str(REPO.parent / "shared" / "vm" / "run-in-vm"), *command], cwd=REPO).returncode
    finally:
        if shared is not None and shared.exists():
            shutil.move(shared, args.json)


def measure(governor: str, work: Path, args: argparse.Namespace) -> dict:
    """Every phase, in order; every process and cgroup it made is gone when it returns or raises."""
    from isolation_loads import NEIGHBOUR_USER, neighbours
    from isolation_phases import Phases

    guest = in_guest()
    disk = (os.environ.get("VMLAB_DISK_DEVS") or "").replace(",", " ").split()
    results: dict = {"host": host(), "seconds": args.seconds, "neighbours": []}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # the cleanup below runs
    phases = Phases(governor, work, args.seconds)
    try:
        found = [n for n in neighbours(phases.python, os.cpu_count() or 1, guest, disk[0] if disk else None)
                 if args.only is None or args.only in n.name]
        if not found:
            raise SystemExit(f"--only {args.only!r}: no neighbour's name contains it")
        if guest and disk:
            os.chown(disk[0], pwd.getpwnam(NEIGHBOUR_USER).pw_uid, -1)  # the guest's own scratch disk
        note("B's launches, quiet")
        results["quiet"] = phases.quiet()
        note("the daemon's CPU per exec")
        results["exec_cost"] = phases.exec_cost(args.execs or (100 if guest else 3000))
        note("the victim alone")
        alone = [phases.alone()]
        for index, neighbour in enumerate(found):
            runs = {}
            for governed in (True, False) if index % 2 == 0 else (False, True):
                note(f"{neighbour.name}, {'governed' if governed else 'ungoverned'}")
                runs[governed] = phases.beside(neighbour, governed)
            note("the victim alone")
            alone.append(phases.alone())
            baseline = statistics.median(alone[-2] + alone[-1])
            results["neighbours"].append({
                "name": neighbour.name, "baseline": baseline, "vm_only": neighbour.vm_only,
                "governed": {**ratios(runs[True]["samples"], baseline),
                             **{key: runs[True][key] for key in ("cpu", "guarantee", "daemon_cpu", "launches", "processes")}},
                "ungoverned": {**ratios(runs[False]["samples"], baseline),
                               **{key: runs[False][key] for key in ("cpu", "launches", "processes")}}})
    finally:
        phases.close()
    return results


def note(what: str) -> None:
    """Say on stderr which phase starts (a run takes minutes)."""
    print(f"[{time.strftime('%H:%M:%S')}] {what} …", file=sys.stderr, flush=True)


def _launches(found: dict | None, quiet: dict) -> str:
    """B's run p50 / p99 (ms), and the p99 over ``quiet``'s (the same runs with nothing else)."""
    if not found or found["p50"] is None:
        return "none finished" if found else ""
    text = f"{found['p50']:.0f} / {found['p99']:.0f} ms"
    if found is not quiet and quiet.get("p99"):
        text += f" ({found['p99'] / quiet['p99']:.1f}× quiet)"
    return text + (f"; {found['failed']} failed" if found["failed"] else "")


def render(results: dict) -> str:
    """The results as markdown: the host, one row per neighbour, the daemon's CPU per exec."""
    about = results["host"]
    where = f"{about['name']}: {about['cpus']} CPUs, Linux {about['kernel']}, cgroup {about['cgroup']}"
    if about.get("vm"):
        where += f", in the VM ({about['vm']})"
    lines = [f"**Host:** {where}; load average {', '.join(f'{x:.2f}' for x in about['load'])} at the start; "
             f"{about['date']}; the victim runs {results['seconds']:g} s per phase.", "",
             "| neighbour | victim governed: median / p10 | ungoverned: median / p10 "
             "| victim's CPU, governed / ungoverned | victim's guarantee "
             f"| governed median ≥ {TARGET} × guarantee? | governed ≥ ungoverned? | daemon CPU | "
             "B's `governor run -- true` p50 / p99 | B's CPU twin, no governor: p50 / p99 "
             "| neighbour's processes, governed / ungoverned |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    quiet = results["quiet"]
    lines.append(f"| none (quiet) | | | | | | | {quiet['daemon_cpu']:.1f} % of a core | {_launches(quiet, quiet)} | "
                 f"{_launches(quiet['twin'], quiet['twin'])} | |")
    for row in results["neighbours"]:
        governed, ungoverned = row["governed"], row["ungoverned"]
        # The victim is one busy thread: alone it uses one core, its whole demand; beside a
        # neighbour it is owed min(guarantee, 1 core) of that.
        owed = None if governed["guarantee"] is None else min(governed["guarantee"], 1.0)
        meets = ("not counted" if owed is None else "yes" if governed["median"] >= TARGET * owed
                 else f"no (< {TARGET * owed:.2f})")
        guarantee = "not counted" if owed is None else f"{governed['guarantee']:.2f} cores"
        better = "yes" if governed["median"] >= ungoverned["median"] else "no"
        # The quiet phase's daemon CPU is B's launches' and the daemon's idle work: the
        # difference is what the neighbour cost the daemon.
        cpu = ("" if governed["daemon_cpu"] is None else f"{governed['daemon_cpu']:.1f} % of a core "
               f"({governed['daemon_cpu'] - quiet['daemon_cpu']:+.1f} over quiet)")
        lines.append(f"| {row['name']} | {governed['median']:.2f} / {governed['p10']:.2f} | "
                     f"{ungoverned['median']:.2f} / {ungoverned['p10']:.2f} | "
                     f"{governed['cpu']:.2f} / {ungoverned['cpu']:.2f} cores | {guarantee} | "
                     f"{meets} | {better} | {cpu} | {_launches(governed['launches'], quiet)} | "
                     f"{_launches(ungoverned['launches'], quiet['twin'])} | "
                     f"{governed['processes']:,} / {ungoverned['processes']:,} |")
    cost = results["exec_cost"]
    lines += ["", f"B's CPU twin: a new interpreter spinning until it has used {quiet['cpu_p50']:.0f} ms of CPU, "
                  "what B's launch used, quiet; beside a neighbour with no governor, its time is what the "
                  "neighbour's CPU alone makes of a launch's, and it loads the victim as B's launches do "
                  "in the governed phase.",
              "", f"Daemon CPU per exec ({cost['execs']:,} × `/bin/true` per user, less its idle "
                  f"{cost['idle_cpu']:.1f} % of a core): a governed user's {cost['governed']:.0f} µs, "
                  f"an ungoverned user's {cost['ungoverned']:.0f} µs."]
    return "\n".join(lines)
