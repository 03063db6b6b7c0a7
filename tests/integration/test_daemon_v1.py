"""governor end to end on this host's real cgroup v1 hierarchies (hybrid or legacy host)."""

import signal
import subprocess

import admission_scenarios
import notify_scenarios
import pressure_scenarios
import pytest
import reserve_scenarios
import scenarios
import service_scenarios
import session_scenarios
import slurm_v1_scenarios
import task_scenarios
from kernel_cases import (  # noqa: F401  (collected here, under this module's marker)
    test_a_gpu_fd_passed_to_a_task_without_gpus_is_ended_before_the_gpu_is_handed_on,
    test_a_session_process_opens_no_gpu_where_it_starts_moved_yet_or_not,
    test_a_group_limit_holds_cpu_and_memory,
    test_a_journaled_queue_survives_a_kill_and_replays_to_its_recorded_waits,
    test_a_guarantee_holds_against_a_heavier_weight,
    test_a_two_level_tree_shares_by_hdrf_at_each_level,
    test_a_user_limit_holds_each_member_of_a_group,
    test_fair_share_charges_short_tasks_as_a_steady_tasks_equal_use,
    test_fair_share_lowers_the_weight_of_a_group_that_ran_alone,
    test_gpus_are_admitted_in_drf_order_guarded_by_the_device_cgroup_and_handed_to_cuda,
    test_a_gpu_added_by_a_reload_or_a_restart_is_denied_to_running_tasks,
    test_a_restart_that_turns_gpus_on_readopts_the_processes_and_stop_ends_them,
    test_a_task_whose_record_is_garbage_is_governed_unrecorded,
    test_waiting_launches_keep_their_ids_and_places_across_a_restart,
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

from daemon_harness import GOVERNOR, Governor

from governor.cgroups.files import read_file

pytestmark = pytest.mark.kernel_v1


def test_a_slurm_v1_jobs_process_is_never_moved_and_the_capacity_shrinks_by_its_limits(tmp_path):
    reason = session_scenarios.missing()
    if reason:
        pytest.skip(reason)
    slurm_v1_scenarios.a_slurm_v1_jobs_process_stays_and_the_capacity_shrinks(tmp_path)


def test_pressure_stalls_are_said_unmeasured_once_on_v1(tmp_path):
    pressure_scenarios.no_psi_is_said_once(tmp_path)


def test_the_reserved_cores_are_lent_while_the_system_leaves_them_idle(tmp_path):
    reserve_scenarios.reserve_is_lent_while_idle_and_taken_back(tmp_path)


def test_a_pid_left_by_an_exited_client_is_not_governed(tmp_path):
    service_scenarios.exited_client_pid_is_not_governed(tmp_path)


def test_an_undecodable_command_line_leaves_status_readable(tmp_path):
    service_scenarios.undecodable_command_line_leaves_status_readable(tmp_path)


def test_soft_memory_is_bounded_by_the_capacity(tmp_path):
    service_scenarios.soft_memory_is_bounded_by_the_capacity(tmp_path)


def test_soft_memory_limit_does_not_kill(tmp_path):
    scenarios.memory_soft_limit_throttles_without_killing(tmp_path, v2=False)


def test_metrics_are_served_and_parse(tmp_path):
    service_scenarios.metrics_scrape(tmp_path)


def test_reload_refuses_a_bad_config_and_applies_a_good_one(tmp_path):
    service_scenarios.reload_refuses_a_bad_config_and_applies_a_good_one(tmp_path)


def test_stop_ends_a_tasks_whole_tree(tmp_path):
    task_scenarios.stop_ends_the_whole_tree(tmp_path)


def test_a_time_limit_ends_the_whole_tree_and_is_recorded(tmp_path):
    task_scenarios.time_limit_ends_the_whole_tree(tmp_path)


def test_a_declared_memory_is_a_hard_cap_by_default(tmp_path):
    task_scenarios.default_memory_cap_is_hard(tmp_path)


def test_governor_run_warns_when_its_task_nears_its_memory_cap(tmp_path):
    # Issue 33, point 1: the warning read only v2's memory.current, so a v1 task was never warned.
    task_scenarios.run_warns_before_the_memory_cap(tmp_path)


def test_an_oom_kill_is_recorded_as_such(tmp_path):
    task_scenarios.oom_kill_is_the_recorded_reason(tmp_path)


def test_run_summary_prints_what_the_command_used(tmp_path):
    task_scenarios.summary_prints_what_the_command_used(tmp_path)


def test_a_daemon_handed_sigterm_and_sighup_blocked_still_reloads_and_stops(tmp_path):
    # A parent's blocked signals are inherited across exec: such a daemon ignored both.
    handled = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, handled)
    try:
        gov = Governor(tmp_path, "[capacity]\ncpu = 1\nmemory = \"1G\"\n[groups.A]\nusers = [\"root\"]\n")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:
        gov.daemon.send_signal(signal.SIGHUP)
        gov.wait(lambda: "reloaded (SIGHUP)" in gov.daemon_log(), "the reload on SIGHUP", 20)
        gov.daemon.send_signal(signal.SIGTERM)
        assert gov.daemon.wait(20) == 0
    finally:
        gov.close()


def test_guaranteed_memory_is_kept_as_headroom(tmp_path):
    admission_scenarios.guaranteed_memory_is_kept_as_headroom(tmp_path)


def test_a_time_limit_and_an_oom_kill_are_each_notified_once_to_a_command_run_as_another_user(tmp_path):
    notify_scenarios.time_limit_and_oom_kill_are_notified(tmp_path)


def test_a_reload_below_a_running_tasks_cap_keeps_the_root_at_that_cap_without_a_refusal(tmp_path):
    # v1 bounds a group with no quota by its parent's: a reload to 1 core under a task capped at
    # 1.5 had the kernel refuse the root's 1 core (an error event, EINVAL); the root now keeps
    # 1.5 while the task runs and goes to 1 once it has ended.
    gov = Governor(tmp_path, '[capacity]\ncpu = 2\nmemory = "1G"\n[groups.A]\nusers = ["root"]\n')
    try:
        task = gov.run("A", ["sh", "-c", "echo running; exec sleep 600"], cpus=1.5, memory="32M")
        assert task.stdout.readline() == "running\n"
        config = gov.dir / "governor.toml"
        config.write_text(config.read_text().replace("cpu = 2\n", "cpu = 1\n"))
        before = gov.generation()
        reloaded = subprocess.run([GOVERNOR, "reload", "--socket", gov.socket], capture_output=True, text=True,
                                  timeout=60)
        assert reloaded.returncode == 0, reloaded.stderr
        gov.wait(lambda: gov.generation() > before, "a refill under the new capacity")
        quota = lambda: read_file(gov.driver.controller_path("cpu", ""), "cpu.cfs_quota_us").strip()
        assert quota() == "150000"
        assert [e["message"] for e in gov.status()["events"] if e["kind"] == "error"] == []
        gov.stop_tasks([task])
        gov.wait(lambda: quota() == "100000", "the root at the new capacity once the task ended")
    finally:
        gov.close()
