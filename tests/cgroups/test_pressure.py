"""Pressure files (PSI): the parser on the kernel's text and on odd or hostile lines, the
reader on a fake tree, and how a host without PSI is told (the stalls themselves are proved
on a real v2 kernel: tests/integration/pressure_scenarios.py)."""

import errno

import pytest

import governor.cgroups.pressure
from governor.cgroups.errors import CgroupReadError
from governor.cgroups.pressure import parse_pressure, psi_unavailable, read_pressure
from governor.cgroups.stats import Stall
from governor.cgroups.v2 import CgroupV2Driver

MEMORY = ("some avg10=23.01 avg60=4.10 avg300=0.88 total=1234567\n"
          "full avg10=1.50 avg60=0.30 avg300=0.07 total=89012\n")


def test_both_lines_are_read_avg10_in_percent_total_in_usec():
    assert parse_pressure(MEMORY) == {"some": Stall(23.01, 1234567), "full": Stall(1.5, 89012)}


def test_a_kernel_before_5_13_has_no_full_line_for_cpu():
    assert parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n") == {"some": Stall(0.0, 0)}


def test_a_kind_or_a_field_a_later_kernel_adds_is_left_out():
    text = "some avg10=5.00 avg60=0 avg300=0 avg1=9 total=7\nmost avg10=99 total=1\n\n"
    assert parse_pressure(text) == {"some": Stall(5.0, 7)}


@pytest.mark.parametrize("line", [
    "some avg10=1.00 avg60=0 avg300=0",            # no total
    "some total=12",                                # no avg10
    "full avg10=x avg60=0 avg300=0 total=1",        # not a number
    "some avg10=1 total=1e3",                       # a total is an integer of µs
    "some avg10=[red]boom[/red] total=1",           # markup is text, never a number
    "some avg10=101.00 total=1",                    # a share above all of the time
    "some avg10=1.00 total=-5",
])
def test_a_line_that_is_not_the_kernels_is_refused_and_named(line):
    with pytest.raises(ValueError) as raised:
        parse_pressure(line + "\n")
    assert repr(line) in str(raised.value)


def test_the_reader_leaves_out_a_resource_whose_file_is_absent(tmp_path):
    (tmp_path / "cpu.pressure").write_text("some avg10=12.50 avg60=1 avg300=0 total=3000000\n"
                                           "full avg10=0.00 avg60=0 avg300=0 total=0\n")
    (tmp_path / "memory.pressure").write_text(MEMORY)
    assert read_pressure(tmp_path) == {"cpu": {"some": Stall(12.5, 3_000_000), "full": Stall(0.0, 0)},
                                       "memory": {"some": Stall(23.01, 1234567), "full": Stall(1.5, 89012)}}


def test_a_sample_carries_the_stalls_and_a_bad_pressure_file_fails_it(tmp_path):
    from test_v2_fake import fake_cgroup

    root = fake_cgroup(tmp_path / "root")
    group = fake_cgroup(root / "g")
    for name, text in (("cpu.stat", "usage_usec 1\n"), ("memory.events", "high 0\n"),
                       ("io.stat", ""), ("cgroup.events", "populated 1\nfrozen 0\n"), ("memory.pressure", MEMORY)):
        (group / name).write_text(text)
    driver = CgroupV2Driver(root)
    assert driver.read_stats("g").psi == {"memory": {"some": Stall(23.01, 1234567), "full": Stall(1.5, 89012)}}
    driver.psi = False  # the host has none: no pressure file is read
    assert driver.read_stats("g").psi == {}
    driver.psi = True
    (group / "memory.pressure").write_text("some avg10=oops\n")
    with pytest.raises(CgroupReadError, match="counters of cgroup 'g'.*oops"):
        driver.read_stats("g")


def test_a_v1_host_is_told_once_why_it_has_no_stalls(tmp_path):
    assert "v1" in psi_unavailable("v1", tmp_path)


def test_a_v2_host_with_psi_has_no_reason(tmp_path):
    (tmp_path / "cpu.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert psi_unavailable("v2", tmp_path) is None


def test_a_kernel_without_the_files_is_told_where_it_looked(tmp_path):
    why = psi_unavailable("v2", tmp_path)
    assert str(tmp_path / "cpu.pressure") in why and "CONFIG_PSI" in why


def test_a_kernel_booted_with_psi_0_refuses_the_read(tmp_path, monkeypatch):
    def refused(directory, name):
        raise CgroupReadError(f"failed to read {directory / name}", path=str(directory / name),
                              errno=errno.EOPNOTSUPP)

    monkeypatch.setattr(governor.cgroups.pressure, "read_file", refused)
    assert "psi=0" in psi_unavailable("v2", tmp_path)
    assert read_pressure(tmp_path) == {}
