"""v1's populated: a cgroup below the one asked about, removed between the listing and its read,
holds nothing (a root's sample once failed in CI on a group removed meanwhile); the cgroup asked
about itself gone is still an error."""

import pytest

from governor.cgroups.errors import CgroupReadError
from governor.cgroups.v1_cgroup import populated_below


def _cgroup(directory, pids=""):
    directory.mkdir(parents=True)
    (directory / "cgroup.procs").write_text(pids)


def test_a_child_removed_meanwhile_holds_nothing_and_the_rest_is_still_read(tmp_path):
    _cgroup(tmp_path / "root")
    (tmp_path / "root" / "B").mkdir()  # listed, its files gone: rmdir under way
    _cgroup(tmp_path / "root" / "C")
    assert not populated_below(tmp_path / "root")
    (tmp_path / "root" / "C" / "cgroup.procs").write_text("42\n")
    assert populated_below(tmp_path / "root")


def test_the_cgroup_asked_about_gone_is_an_error(tmp_path):
    with pytest.raises(CgroupReadError) as raised:
        populated_below(tmp_path / "gone")
    assert raised.value.vanished
