"""The memory protection of governor's systemd units follows its root's (issue 35): which
units, the rounding, when systemctl is called, the reset when protection is turned off."""

from pathlib import Path

from governor.cgroups.systemd import SliceDriver, units_above
from governor.host.systemd_files import OWN_UNITS
from governor.config.load import parse_config
from governor.daemon.journal import Journal
from governor.daemon.unit_protection import STEP_BYTES, UnitProtection
from governor.wire.protocol import Peer, ReloadRequest
from support.daemons import GIB, launch, make_daemon, on_loop
from support.systemctl import Systemctl

MIB = 1 << 20
MOUNT = Path("/sys/fs/cgroup")
UNITS = ["governor.slice", "governor.slice/governor-tasks.service"]
CONFIG = """
[capacity]
cpu = 2
memory = "4G"
[groups.G]
users = ["root"]
guarantee = { memory = "1G" }
[sessions]
enabled = false
"""


def at_once(work, then):
    """The cgroup thread's runner, synchronous."""
    then(work())


def test_the_units_are_governors_own_ancestors_of_the_root():
    root = MOUNT / "governor.slice/governor-tasks.service/governed"
    assert units_above(root, MOUNT, OWN_UNITS) == UNITS
    # Another's slice bounds it too, but is not governor's to set.
    assert units_above(MOUNT / "system.slice/governor-tasks.service/governed", MOUNT, OWN_UNITS) == [
        "system.slice/governor-tasks.service"]
    assert units_above(MOUNT / "governor", MOUNT, OWN_UNITS) == []  # a root straight below the mount
    assert units_above(MOUNT / "governor.slice", MOUNT, OWN_UNITS) == []  # the root itself is not above it
    assert units_above(Path("/elsewhere/governor.slice/x"), MOUNT, OWN_UNITS) == []


def test_systemctl_is_called_when_a_rounded_value_changes_and_a_failure_is_told_once(tmp_path):
    systemctl, journal = Systemctl(), Journal()
    units = UnitProtection(SliceDriver(tmp_path, run=systemctl), UNITS, at_once, journal)
    units.follow((GIB, 1.5 * GIB + 1), True)  # one byte past a step: up to the next
    low = int(1.5 * GIB) + STEP_BYTES
    assert systemctl.properties() == [("governor.slice", f"MemoryLow={low}", f"MemoryMin={GIB}"),
                                      ("governor-tasks.service", f"MemoryLow={low}", f"MemoryMin={GIB}")]
    assert units.in_force["governor.slice"] == {"MemoryMin": str(GIB), "MemoryLow": str(low)}
    units.follow((GIB, 1.5 * GIB + 60 * MIB), True)  # a reservation a little larger: the same step
    assert len(systemctl.calls) == 2
    units.follow((GIB, 1.5 * GIB + 65 * MIB), True)  # past it: only what changed
    assert systemctl.properties()[2:] == [("governor.slice", f"MemoryLow={low + STEP_BYTES}"),
                                          ("governor-tasks.service", f"MemoryLow={low + STEP_BYTES}")]

    systemctl.refuse = True
    units.follow((2 * GIB, 3 * GIB), True)
    units.follow((2 * GIB, 4 * GIB), True)
    errors = [e for e in journal.events if e["kind"] == "error"]
    assert len(errors) == 1 and "Access denied" in errors[0]["message"]  # once, not per call or unit
    assert units.in_force["governor.slice"]["MemoryMin"] == str(GIB)  # what systemd holds
    systemctl.refuse = False
    units.follow((2 * GIB, 3 * GIB), True)
    assert units.in_force["governor-tasks.service"] == {"MemoryMin": str(2 * GIB), "MemoryLow": str(3 * GIB)}


def test_protection_off_resets_only_what_governor_set(tmp_path):
    systemctl = Systemctl()
    untouched = UnitProtection(SliceDriver(tmp_path, run=systemctl), UNITS, at_once, Journal())
    untouched.follow((GIB, GIB), False)  # never set: an admin's own values stay
    assert systemctl.calls == []
    units = UnitProtection(SliceDriver(tmp_path, run=systemctl), UNITS, at_once, Journal())
    units.follow((GIB, 2 * GIB), True)
    units.follow((GIB, 2 * GIB), False)
    assert systemctl.properties()[2:] == [("governor.slice", "MemoryLow=", "MemoryMin="),
                                          ("governor-tasks.service", "MemoryLow=", "MemoryMin=")]
    assert units.in_force == {"governor.slice": {}, "governor-tasks.service": {}}
    units.follow((GIB, 3 * GIB), False)
    assert len(systemctl.calls) == 4


def test_the_daemon_sets_the_units_to_its_roots_protection_off_the_loop(tmp_path):
    daemon = make_daemon(tmp_path, CONFIG)
    systemctl = Systemctl()
    daemon.enforcement.units = UnitProtection(SliceDriver(tmp_path, run=systemctl), UNITS, daemon.tree.run,
                                              daemon.journal)

    def in_force():
        return {unit: tuple(int(v) for v in values.values())
                for unit, values in daemon.observation.status()["daemon"]["unit_protection"].items()}

    # G: min its 1G guarantee, low max(1G, min(512M reserved, its whole 4G floor)) = 1G; the root the same.
    launch(daemon, 100, group="G", cpu=0.5, memory=GIB // 2)
    assert in_force() == {"governor.slice": (GIB, GIB), "governor-tasks.service": (GIB, GIB)}
    calls = len(systemctl.calls)
    launch(daemon, 200, group="G", cpu=0.5, memory=GIB // 4)  # 768M reserved: low stays 1G, nothing to call
    assert len(systemctl.calls) == calls
    launch(daemon, 300, group="G", cpu=0.5, memory=GIB)  # 1.75G reserved: low 1.75G, a multiple of the step
    assert in_force() == {"governor.slice": (GIB, 7 * GIB // 4), "governor-tasks.service": (GIB, 7 * GIB // 4)}

    path = tmp_path / "governor.toml"
    path.write_text(CONFIG.replace("[groups.G]", '[enforcement]\nmemory_protection = false\n[groups.G]'))
    daemon.reloads.load_config = lambda: parse_config(path.read_text(), str(path))
    on_loop(daemon, lambda: daemon.requests.handle(ReloadRequest(), Peer(pid=1, uid=0, gid=0)))
    assert systemctl.properties()[-1] == ("governor-tasks.service", "MemoryLow=", "MemoryMin=")
    assert in_force() == {"governor.slice": (), "governor-tasks.service": ()}


def test_each_change_is_one_journal_line_per_unit_in_status_words(tmp_path, caplog):
    """Issue 44.3: the journal said `systemd units' memory protection: {'governor.slice':
    {'MemoryMin': '0', 'MemoryLow': '939524096'}, …}` (a Python dict, raw bytes) at each change."""
    import logging

    units = UnitProtection(SliceDriver(tmp_path, run=Systemctl()), UNITS, at_once, Journal())
    caplog.set_level(logging.INFO, logger="governor")
    units.follow((0, 896 * MIB), True)
    units.follow((0, 896 * MIB - 1), True)  # the same rounded values: no call, no line
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"{unit}'s memory protection (through systemd): memory.min 0, memory.low 896.0M"
                     for unit in ("governor.slice", "governor-tasks.service")]
    caplog.clear()
    units.follow((0, 0), False)
    assert [r.getMessage() for r in caplog.records] == [
        f"{unit}'s memory protection (through systemd): none" for unit in ("governor.slice", "governor-tasks.service")]
