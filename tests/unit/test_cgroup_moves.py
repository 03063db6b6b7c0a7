"""Whether moves into cgroups wait for an RCU grace period, read from a fake ``/proc/mounts``
(governor.host.cgroup_moves: check-config's favordynmods note, issue 46)."""

from __future__ import annotations

from governor.host.cgroup_moves import favordynmods_advice, moves_wait

V2 = ("sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\n"
      "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0\n")
V2_FAVOURED = V2.replace("nsdelegate,", "nsdelegate,favordynmods,")
HYBRID = ("tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
          "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
          "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n")


def test_a_v2_root_without_favordynmods_waits_and_one_with_it_does_not():
    assert moves_wait(V2)
    assert not moves_wait(V2_FAVOURED)


def test_a_hybrid_or_legacy_host_is_not_a_v2_one():
    assert not moves_wait(HYBRID)  # its cgroup2 at unified/ governs nothing of governor's
    assert not moves_wait("")


def test_the_mount_in_force_is_the_last_at_its_point():
    assert not moves_wait(V2 + V2_FAVOURED.splitlines(keepends=True)[1])  # remounted over
    assert moves_wait(V2_FAVOURED + V2.splitlines(keepends=True)[1])


def test_the_advice_names_the_mount_option_and_the_boot_parameter(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(V2)
    advice = favordynmods_advice(mounts)
    assert advice.startswith("cgroup2 at /sys/fs/cgroup is mounted without favordynmods: ")
    assert "-o favordynmods" in advice and "cgroup_favordynmods=1" in advice
    mounts.write_text(V2_FAVOURED)
    assert favordynmods_advice(mounts) is None
    assert favordynmods_advice(tmp_path / "missing") is None  # unreadable: nothing to say
