"""devices.py: real block devices of this machine, plus fake /sys trees for partition → disk."""

import os
import stat
from pathlib import Path

import pytest

from governor.cgroups.devices import device_number, parent_disk, whole_disk
from governor.errors import DeviceError

SYS_BLOCK = Path("/sys/class/block")


def real_block_devices(partitions):
    """(name, MAJ:MIN) of block devices that have a /dev node; partitions or whole disks."""
    if not SYS_BLOCK.is_dir():
        return []
    return [(d.name, (d / "dev").read_text().strip()) for d in sorted(SYS_BLOCK.iterdir())
            if (d / "partition").exists() == partitions and Path("/dev", d.name).exists()]


def test_whole_disks_resolve_to_themselves():
    disks = real_block_devices(partitions=False)
    if not disks:
        pytest.skip("no block device with a /dev node on this machine")
    for name, number in disks:
        assert whole_disk(Path("/dev", name)) == number, name
        assert whole_disk(name) == number, name  # bare names are looked up in /dev
    print(f"whole disks: {dict(disks)}")


def test_real_partition_resolves_to_its_disk():
    parts = real_block_devices(partitions=True)
    if not parts:
        pytest.skip("no partition with a /dev node here (and loop partition scanning is off)")
    for name, number in parts:
        disk = (SYS_BLOCK / name).resolve().parent
        assert whole_disk(Path("/dev", name)) == (disk / "dev").read_text().strip()
        assert whole_disk(Path("/dev", name)) != number


def test_loop_device_numbers():
    loops = [(n, num) for n, num in real_block_devices(partitions=False) if n.startswith("loop")]
    if not loops:
        pytest.skip("no loop device node")
    name, number = loops[0]
    assert device_number(Path("/dev", name)) == tuple(int(x) for x in number.split(":"))


def test_not_a_block_device(tmp_path):
    with pytest.raises(DeviceError, match="not a block device") as info:
        whole_disk("/dev/null")
    assert info.value.path == "/dev/null"
    (tmp_path / "file").write_text("")
    with pytest.raises(DeviceError, match="not a block device"):
        whole_disk(tmp_path / "file")
    with pytest.raises(DeviceError, match="cannot stat") as info:
        whole_disk(tmp_path / "missing")
    assert info.value.path == str(tmp_path / "missing")


def fake_sys(tmp_path):
    """/sys with disk sdx (8:0), its partition sdx1 (8:1) and loop0 (7:0), linked as the kernel
    does: /sys/dev/block/MAJ:MIN → ../../devices/.../block/<disk>[/<part>]."""
    sys = tmp_path / "sys"
    disk = sys / "devices" / "pci0000:00" / "block" / "sdx"
    (disk / "sdx1").mkdir(parents=True)
    (disk / "dev").write_text("8:0\n")
    (disk / "sdx1" / "dev").write_text("8:1\n")
    (disk / "sdx1" / "partition").write_text("1\n")
    loop = sys / "devices" / "virtual" / "block" / "loop0"
    loop.mkdir(parents=True)
    (loop / "dev").write_text("7:0\n")
    links = sys / "dev" / "block"
    links.mkdir(parents=True)
    os.symlink("../../devices/pci0000:00/block/sdx", links / "8:0")
    os.symlink("../../devices/pci0000:00/block/sdx/sdx1", links / "8:1")
    os.symlink("../../devices/virtual/block/loop0", links / "7:0")
    return sys


def test_parent_disk_on_fake_sys(tmp_path):
    sys = fake_sys(tmp_path)
    assert parent_disk(8, 1, sys) == "8:0"
    assert parent_disk(8, 0, sys) == "8:0"
    assert parent_disk(7, 0, sys) == "7:0"
    with pytest.raises(DeviceError, match="no block device 9:9"):
        parent_disk(9, 9, sys)


def test_partition_without_disk_dev_file(tmp_path):
    sys = fake_sys(tmp_path)
    (sys / "devices" / "pci0000:00" / "block" / "sdx" / "dev").unlink()
    with pytest.raises(DeviceError, match="partition without a readable disk entry"):
        parent_disk(8, 1, sys)


def test_whole_disk_through_a_device_node_and_fake_sys(tmp_path):
    node = tmp_path / "dev" / "sdx1"
    node.parent.mkdir()
    try:
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(8, 1))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    assert whole_disk(node, sys=fake_sys(tmp_path)) == "8:0"
    assert whole_disk("sdx1", sys=tmp_path / "sys", dev=tmp_path / "dev") == "8:0"
    with pytest.raises(DeviceError, match="no block device 8:1") as info:
        whole_disk(node, sys=tmp_path / "empty-sys")
    assert info.value.path == str(node)
