"""Where the GPU guard goes (issue 31, point 4), on a fake cgroup mount: the configured login
parents that exist, every top-level cgroup but governor's branch for "host", nothing for
"tasks", each place left out named with why."""

from pathlib import Path

from governor.cgroups.device_guard import plan_guard


def mount_with(tmp_path: Path, *dirs: str) -> Path:
    for directory in dirs:
        (tmp_path / directory).mkdir(parents=True)
    return tmp_path


def test_sessions_guard_the_parents_that_exist_and_never_governors_branch(tmp_path):
    mount = mount_with(tmp_path, "user.slice", "system.slice/governor.service/governor")
    plan = plan_guard("sessions", ["user.slice", "gone.slice", "system.slice"], mode="v2", mount=mount,
                      governor_root=mount / "system.slice/governor.service/governor")
    assert plan.places == (mount / "user.slice",)
    assert plan.notes == (f"{mount / 'gone.slice'} does not exist here: not guarded",
                          f"{mount / 'system.slice'} is not guarded: it holds governor's root, whose tasks open their "
                          "GPUs; its other processes are not kept from GPUs")


def test_host_guards_every_top_level_cgroup_but_the_one_holding_governors_root(tmp_path):
    mount = mount_with(tmp_path, "user.slice", "machine.slice", "governor")
    (mount / "cgroup.procs").write_text("")  # files are not cgroups
    plan = plan_guard("host", [], mode="v1", mount=mount, governor_root=mount / "governor")
    assert plan.places == (mount / "machine.slice", mount / "user.slice")
    assert plan.notes[0].startswith(f"processes in the root cgroup {mount} itself are not kept from GPUs")
    assert plan.notes[1].startswith(f"{mount / 'governor'} is not guarded: it holds governor's root")


def test_tasks_guard_nothing_outside_and_say_so(tmp_path):
    plan = plan_guard("tasks", ["user.slice"], mode="v2", mount=mount_with(tmp_path, "user.slice"),
                      governor_root=tmp_path / "governor")
    assert plan.places == () and plan.notes == ('gpu_guard = "tasks": processes outside governor\'s tasks are not '
                                                "kept from GPUs",)


def test_host_never_guards_the_cgroup_holding_the_daemon_itself(tmp_path):
    # Review of main, finding 2: under the shipped unit the daemon runs in
    # system.slice/governor.service, beside (not below) its root in governor.slice; "host"
    # guarded system.slice and the daemon's own NVML calls (/dev/nvidiactl) were refused.
    mount = mount_with(tmp_path, "user.slice", "system.slice/governor.service",
                       "governor.slice/governor-tasks.service/governed")
    plan = plan_guard("host", [], mode="v2", mount=mount,
                      governor_root=mount / "governor.slice/governor-tasks.service/governed",
                      daemon_cgroup=mount / "system.slice/governor.service")
    assert plan.places == (mount / "user.slice",)
    assert plan.notes[2] == (f"{mount / 'system.slice'} is not guarded: it holds the governor daemon "
                             f"({mount / 'system.slice/governor.service'}), which opens the GPUs' control nodes "
                             "itself; its other processes are not kept from GPUs")
    # Run by hand from a login shell, the daemon is in user.slice: "sessions" leaves it too.
    daemon = mount / "user.slice/user-0.slice/session-1.scope"
    daemon.mkdir(parents=True)
    by_hand = plan_guard("sessions", ["user.slice"], mode="v1", mount=mount, governor_root=mount / "governor.slice",
                         daemon_cgroup=daemon)
    assert by_hand.places == () and by_hand.notes[0].startswith(f"{mount / 'user.slice'} is not guarded: it holds "
                                                                 "the governor daemon")
