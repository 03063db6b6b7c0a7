"""Real-kernel cases shared by test_daemon_v1 (native) and test_daemon_v2 (VM): each module
imports them, so they run under that module's marker and its skip check."""

import device_class_scenarios
import foreign_scenarios
import gpu_scenarios
import guard_scenarios
import history_scenarios
import pids_scenarios
import pytest
import readopt_scenarios
import records_scenarios
import scenarios
import session_scenarios
import tree_scenarios


def test_cpu_follows_drf_under_contention_and_a_stopped_groups_share_flows_back(tmp_path):
    scenarios.drf_cpu_shares_and_refill_on_stop(tmp_path)


def test_an_idle_groups_share_is_lent_and_comes_back(tmp_path):
    scenarios.work_conservation(tmp_path)


@pytest.mark.parametrize("enforcement", ["soft", "hard"])
def test_memory_is_admitted_in_drf_order_and_never_squeezed(tmp_path, enforcement):
    scenarios.memory_is_admitted_never_squeezed(tmp_path, enforcement=enforcement)


def test_cores_shrink_and_grow_while_tasks_run(tmp_path):
    scenarios.cores_shrink_and_grow_while_tasks_run(tmp_path)


def test_hard_memory_limit_kills_only_the_offender(tmp_path):
    scenarios.memory_hard_limit_kills_only_the_offender(tmp_path)


def test_plain_processes_are_governed_whichever_way_they_start_and_share_by_drf(tmp_path):
    reason = session_scenarios.missing()
    if reason:
        pytest.skip(reason)
    session_scenarios.plain_processes_are_governed_and_share_by_drf(tmp_path)


def test_a_session_ends_with_its_users_last_process(tmp_path):
    reason = session_scenarios.missing()
    if reason:
        pytest.skip(reason)
    session_scenarios.session_ends_when_its_user_has_no_process(tmp_path)


def test_a_two_level_tree_shares_by_hdrf_at_each_level(tmp_path):
    tree_scenarios.two_level_tree_under_contention(tmp_path)


def test_a_group_limit_holds_cpu_and_memory(tmp_path):
    tree_scenarios.group_limit_holds(tmp_path)


def test_a_guarantee_holds_against_a_heavier_weight(tmp_path):
    tree_scenarios.guarantee_beats_a_heavier_weight(tmp_path)


def test_a_user_limit_holds_each_member_of_a_group():
    tree_scenarios.user_limit_holds_per_member()


def test_fair_share_lowers_the_weight_of_a_group_that_ran_alone(tmp_path):
    tree_scenarios.fair_share_falls_for_a_group_that_ran_alone(tmp_path)


def test_gpus_are_admitted_in_drf_order_guarded_by_the_device_cgroup_and_handed_to_cuda(tmp_path):
    gpu_scenarios.gpus_are_admitted_guarded_and_handed(tmp_path)


def test_a_gpu_added_by_a_reload_or_a_restart_is_denied_to_running_tasks(tmp_path):
    gpu_scenarios.a_gpu_added_by_a_reload_or_a_restart_is_denied_to_running_tasks(tmp_path)


def test_a_restart_that_turns_gpus_on_readopts_the_processes_and_stop_ends_them(tmp_path):
    readopt_scenarios.restart_with_gpus_readopts_the_processes_and_stop_ends_them(tmp_path)


def test_a_restart_with_the_gpus_reordered_keeps_each_held_gpu_with_its_task(tmp_path):
    readopt_scenarios.restart_with_the_gpus_reordered_keeps_each_held_gpu(tmp_path)


def test_a_standin_class_is_placed_handed_over_and_readopted_by_identity(tmp_path):
    device_class_scenarios.a_standin_class_is_placed_handed_over_and_readopted_by_identity(tmp_path)


def test_a_gpu_fd_passed_to_a_task_without_gpus_is_ended_before_the_gpu_is_handed_on(tmp_path):
    gpu_scenarios.a_passed_gpu_fd_is_ended_before_the_gpu_is_handed_on(tmp_path)


def test_a_session_process_opens_no_gpu_where_it_starts_moved_yet_or_not():
    reason = session_scenarios.missing()
    if reason:
        pytest.skip(reason)
    guard_scenarios.sessions_open_no_gpu_where_they_start()


def test_fair_share_charges_short_tasks_as_a_steady_tasks_equal_use(tmp_path):
    tree_scenarios.fair_share_charges_short_tasks_as_a_steady_tasks_equal_use(tmp_path)


def test_the_capacity_follows_a_foreign_slurm_job_whose_processes_stay_its_own(tmp_path):
    foreign_scenarios.capacity_follows_a_slurm_job_and_its_processes_stay_slurms(tmp_path)


def test_a_fork_bomb_in_a_task_stops_at_its_pids_cap_and_every_cgroup_has_one(tmp_path):
    pids_scenarios.task_fork_bomb_stops_at_its_cap(tmp_path)


def test_a_fork_bomb_in_a_session_stops_at_its_pids_cap(tmp_path):
    reason = session_scenarios.missing()
    if reason:
        pytest.skip(reason)
    pids_scenarios.session_fork_bomb_stops_at_its_cap(tmp_path)


def test_a_fork_bomb_outside_a_session_is_held_at_its_cap_once_moved(tmp_path):
    reason = session_scenarios.missing()
    if reason:
        pytest.skip(reason)
    pids_scenarios.session_fork_bomb_started_outside_stops_at_its_cap(tmp_path)


def test_launches_in_flight_when_the_daemon_is_killed_start_once_each(tmp_path):
    records_scenarios.launches_in_flight_at_a_kill_start_once_each(tmp_path)


def test_waiting_launches_keep_their_ids_and_places_across_a_restart(tmp_path):
    records_scenarios.waiting_launches_keep_their_ids_and_places_across_a_restart(tmp_path)


def test_a_task_whose_record_is_garbage_is_governed_unrecorded(tmp_path):
    records_scenarios.a_task_whose_record_is_garbage_is_governed_unrecorded(tmp_path)


def test_an_empty_task_cgroup_no_task_has_is_removed_and_the_root_goes_at_stop(tmp_path):
    records_scenarios.an_empty_task_cgroup_no_task_has_is_removed_and_the_root_goes_at_stop(tmp_path)


def test_a_journaled_queue_survives_a_kill_and_replays_to_its_recorded_waits(tmp_path):
    history_scenarios.a_journaled_queue_survives_a_kill_and_replays_to_its_recorded_waits(tmp_path)
