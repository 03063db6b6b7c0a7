"""governor end to end on a real cgroup v2 hierarchy (the VM suite: ../shared/vm/run-in-vm)."""

import os

import io_scenarios

import pressure_scenarios
import protection_scenarios
import pytest
import scenarios
import task_scenarios
from kernel_cases import (  # noqa: F401  (collected here, under this module's marker)
    test_a_gpu_fd_passed_to_a_task_without_gpus_is_ended_before_the_gpu_is_handed_on,
    test_a_session_process_opens_no_gpu_where_it_starts_moved_yet_or_not,
    test_a_group_limit_holds_cpu_and_memory,
    test_a_guarantee_holds_against_a_heavier_weight,
    test_a_two_level_tree_shares_by_hdrf_at_each_level,
    test_a_user_limit_holds_each_member_of_a_group,
    test_fair_share_charges_short_tasks_as_a_steady_tasks_equal_use,
    test_fair_share_lowers_the_weight_of_a_group_that_ran_alone,
    test_gpus_are_admitted_in_drf_order_guarded_by_the_device_cgroup_and_handed_to_cuda,
    test_a_gpu_added_by_a_reload_or_a_restart_is_denied_to_running_tasks,
    test_a_restart_that_turns_gpus_on_readopts_the_processes_and_stop_ends_them,
    test_a_task_whose_record_is_garbage_is_governed_unrecorded,
    test_an_empty_task_cgroup_no_task_has_is_removed_and_the_root_goes_at_stop,
    test_launches_in_flight_when_the_daemon_is_killed_start_once_each,
    test_a_restart_with_the_gpus_reordered_keeps_each_held_gpu_with_its_task,
    test_a_standin_class_is_placed_handed_over_and_readopted_by_identity,
    test_a_session_ends_with_its_users_last_process,
    test_a_fork_bomb_in_a_session_stops_at_its_pids_cap,
    test_a_fork_bomb_outside_a_session_is_held_at_its_cap_once_moved,
    test_a_fork_bomb_in_a_task_stops_at_its_pids_cap_and_every_cgroup_has_one,
    test_an_idle_groups_share_is_lent_and_comes_back,
    test_cores_shrink_and_grow_while_tasks_run,
    test_the_capacity_follows_a_foreign_slurm_job_whose_processes_stay_its_own,
    test_cpu_follows_drf_under_contention_and_a_stopped_groups_share_flows_back,
    test_hard_memory_limit_kills_only_the_offender,
    test_memory_is_admitted_in_drf_order_and_never_squeezed,
    test_plain_processes_are_governed_whichever_way_they_start_and_share_by_drf,
)

from governor.cgroups import detect

pytestmark = pytest.mark.kernel_v2


def test_pressure_a_cpu_cap_shows_as_a_cpu_stall_on_every_screen(tmp_path):
    pressure_scenarios.a_cpu_cap_shows_as_cpu_stall(tmp_path)


def test_memory_high_throttles_without_killing(tmp_path):
    scenarios.memory_soft_limit_throttles_without_killing(tmp_path, v2=True)


def test_io_max_holds_direct_writes(tmp_path):
    disks = os.environ.get("VMLAB_DISK_DEVS", "").split()
    if not disks:
        pytest.skip("no scratch disk (VMLAB_DISKS=64 gives the VM /dev/vda)")
    io_scenarios.io_write_held_to_io_max(tmp_path, disks[0])


def test_io_weight_shares_a_busy_disk_where_io_cost_is_on(tmp_path):
    disks = os.environ.get("VMLAB_DISK_DEVS", "").split()
    if not disks:
        pytest.skip("no scratch disk (VMLAB_DISKS=64 gives the VM /dev/vda)")
    io_scenarios.io_weight_shares_a_busy_disk(tmp_path, disks[0], detect.CGROUP_ROOT)


def test_a_declared_memory_is_a_hard_cap_by_default(tmp_path):
    task_scenarios.default_memory_cap_is_hard(tmp_path)


def test_governor_run_warns_when_its_task_nears_its_memory_cap(tmp_path):
    task_scenarios.run_warns_before_the_memory_cap(tmp_path)


def test_stop_ends_a_tasks_whole_tree_with_cgroup_kill(tmp_path):
    task_scenarios.stop_ends_the_whole_tree(tmp_path)


def test_memory_protection_keeps_a_guaranteed_working_set_resident(tmp_path):
    disks = os.environ.get("VMLAB_DISK_DEVS", "").split()
    if len(disks) < 2:
        pytest.skip('no swap disk (VMLAB_DISKS="64 1024" gives the VM /dev/vdb)')
    protection_scenarios.guaranteed_working_set_stays_resident(tmp_path, disks[1])
