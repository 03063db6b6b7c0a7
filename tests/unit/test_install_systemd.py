"""``governor install-systemd`` into a temporary root, and the units' paths agreeing with each other.
(The units under a real systemd: tests/system/.)"""

import json
import os
import re
import shutil
import tempfile
from importlib.resources import files
from pathlib import Path

import pytest
from click.testing import CliRunner

from governor.cli.install_systemd import TEMPLATE_EXECUTABLE, hidden_from_unit, with_executable
from governor.host.systemd_files import installed_man_pages
from governor.cli.main import main
from governor.errors import GovernorError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture
def visible():
    """A directory governor.service could run a program from (its PrivateTmp= hides /tmp)."""
    where = Path(tempfile.mkdtemp(dir="/run" if os.access("/run", os.W_OK) else Path.home(), prefix="gov-test-"))
    yield where
    shutil.rmtree(where)


def _fake_governor(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "governor").write_text("#!/bin/sh\n")
    (bin_dir / "governor").chmod(0o755)
    return bin_dir


def _settings(unit: str, key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", unit, re.MULTILINE)


def test_install_writes_units_with_the_executable_and_a_config(tmp_path, visible):
    bin_dir = _fake_governor(visible)
    result = CliRunner().invoke(main, ["install-systemd", "--prefix", str(bin_dir), "--root", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    units = tmp_path / "r/etc/systemd/system"
    service = (units / "governor.service").read_text()
    [exec_start] = _settings(service, "ExecStart")
    assert exec_start.startswith(f"{bin_dir}/governor daemon --config /etc/governor/governor.toml ")
    assert (units / "governor-tasks.service").read_text() == (CONFIGS / "governor-tasks.service").read_text()
    assert (tmp_path / "r/etc/governor/governor.toml").read_text() == (CONFIGS / "governor.toml").read_text()
    assert "no daemon-reload" in result.output


def test_install_writes_the_man_pages_of_every_command(tmp_path, visible):
    result = CliRunner().invoke(main, ["install-systemd", "--prefix", str(_fake_governor(visible)),
                                       "--root", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    man_dir = tmp_path / "r/usr/local/share/man"
    expected = {"man1/governor.1", "man5/governor.toml.5", *(f"man1/governor-{name}.1" for name in main.commands)}
    assert {str(p.relative_to(man_dir)) for p in installed_man_pages(man_dir)} == expected
    assert f"wrote {len(expected)} man pages to {man_dir}: " in result.output
    assert "--gpus" in (man_dir / "man1/governor-run.1").read_text().replace("\\-", "-")


def test_install_never_overwrites_an_existing_config(tmp_path, visible):
    config = tmp_path / "r/etc/governor/governor.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[groups.mine]\nusers = ['me']\n")
    result = CliRunner().invoke(main, ["install-systemd", "--prefix", str(_fake_governor(visible)),
                                       "--root", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert config.read_text() == "[groups.mine]\nusers = ['me']\n"
    assert f"kept {config} (exists)" in result.output


def test_dry_run_prints_the_units_and_writes_nothing(tmp_path, visible):
    bin_dir = _fake_governor(visible)
    result = CliRunner().invoke(main, ["install-systemd", "--dry-run", "--prefix", str(bin_dir),
                                       "--root", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert f"ExecStart={bin_dir}/governor daemon" in result.output
    assert "ExecStartPost=" in result.output  # the tasks unit, printed in full
    # The installed example (the package's data, as install-systemd reads it): the checkout's
    # configs/ through .venv's links, a wheel's own copy.
    assert f"would copy {files('governor.configs') / 'governor.toml'}" in result.output
    assert f"# would write {len(main.commands) + 2} man pages to {tmp_path}/r/usr/local/share/man: " in result.output
    assert not (tmp_path / "r").exists()


def test_a_prefix_without_governor_is_refused(tmp_path):
    result = CliRunner().invoke(main, ["install-systemd", "--prefix", str(tmp_path), "--root", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert f"{tmp_path}/governor: not an executable governor" in result.output
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("path, expected", [
    ("/opt/governor/bin/governor", "/opt/governor/bin/governor"),
    ("/opt/my tools/governor", '"/opt/my tools/governor"'),
    ("/opt/50%/$HOME/governor", "/opt/50%%/$$HOME/governor"),
])
def test_the_executable_is_quoted_for_systemd(path, expected):
    unit = with_executable((CONFIGS / "governor.service").read_text(), path)
    [exec_start] = _settings(unit, "ExecStart")
    assert exec_start.startswith(f"{expected} daemon ")
    [exec_reload] = _settings(unit, "ExecReload")
    assert exec_reload.startswith(f"{expected} reload ")


def test_systemctl_reload_waits_for_the_daemons_verdict():
    # Issue 33, point 6: ExecReload=kill -HUP returned 0 for a refused config. `governor reload`
    # exits 2 then, so systemctl reload fails; it asks on the socket the unit's daemon serves.
    from governor.cli.client import DEFAULT_SOCKET

    unit = (CONFIGS / "governor.service").read_text()
    [exec_reload] = _settings(unit, "ExecReload")
    assert exec_reload == f"{TEMPLATE_EXECUTABLE} reload --socket {DEFAULT_SOCKET}"
    [runtime] = _settings(unit, "RuntimeDirectory")
    assert DEFAULT_SOCKET.startswith(f"/run/{runtime}/")


def test_a_unit_without_the_template_execstart_is_refused():
    with pytest.raises(GovernorError, match="expected one line starting with"):
        with_executable("[Service]\nExecStart=/bin/true\n", "/usr/bin/governor")
    with pytest.raises(GovernorError, match="expected one line starting with 'ExecReload="):
        with_executable(f"[Service]\nExecStart={TEMPLATE_EXECUTABLE} daemon\nExecReload=/bin/kill -HUP $MAINPID\n",
                        "/usr/bin/governor")


def test_the_daemon_root_is_inside_the_tasks_unit_cgroup():
    """governor.service's --cgroup-root and the tasks unit's holder follow from its Slice= and
    name; a rename on one side only would put the tasks in a cgroup nobody delegated."""
    service = (CONFIGS / "governor.service").read_text()
    tasks = (CONFIGS / "governor-tasks.service").read_text()
    [slice_name] = _settings(tasks, "Slice")
    unit_cgroup = f"/{slice_name}/governor-tasks.service"  # as the cgroup tree spells it, v1 and v2
    [exec_start] = _settings(service, "ExecStart")
    assert exec_start.startswith(f"{TEMPLATE_EXECUTABLE} ")
    assert re.search(r"--cgroup-root (\S+)", exec_start)[1] == f"{unit_cgroup}/governed"
    # The holder leaf is cgroup v2's no-internal-process rule, and only there.
    v2_only = "if [ -e /sys/fs/cgroup/cgroup.controllers ]; then "
    [pre], [post] = _settings(tasks, "ExecStartPre"), _settings(tasks, "ExecStartPost")
    assert f"{v2_only}mkdir -p /sys/fs/cgroup{unit_cgroup}/holder; fi" in pre
    assert f"{v2_only}echo $MAINPID > /sys/fs/cgroup{unit_cgroup}/holder/cgroup.procs; fi" in post
    assert _settings(service, "BindsTo") == ["governor-tasks.service"]
    assert not _settings(tasks, "BindsTo") and not _settings(tasks, "PartOf")


@pytest.mark.parametrize("path, hidden", [
    ("/tmp/clone/.venv/bin/governor", "PrivateTmp=yes hides /tmp"),
    ("/var/tmp/v/bin/governor", "PrivateTmp=yes hides /var/tmp"),
    ("/opt/governor/bin/governor", None),
    ("/home/alice/.local/bin/governor", None),  # ProtectHome=read-only: still runs
    ("/tmpfoo/bin/governor", None),
])
def test_what_the_shipped_unit_hides(path, hidden):
    found = hidden_from_unit((CONFIGS / "governor.service").read_text(), path)
    assert (found is None) if hidden is None else (hidden in found)


def test_protect_home_yes_hides_homes_and_links_are_followed(tmp_path):
    unit = "[Service]\nProtectHome=yes\n"
    assert "hides /root" in hidden_from_unit(unit, "/root/.venv/bin/governor")
    (tmp_path / "link").symlink_to("/home/alice/bin")
    assert "hides /home" in hidden_from_unit(unit, str(tmp_path / "link" / "governor"))


def test_an_executable_the_unit_cannot_see_is_refused_before_writing(tmp_path):
    bin_dir = _fake_governor(tmp_path)  # under /tmp
    result = CliRunner().invoke(main, ["install-systemd", "--prefix", str(bin_dir), "--root", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert "governor.service could not run it: the unit's PrivateTmp=yes hides /tmp" in result.output
    assert "/opt/governor" in result.output and not (tmp_path / "r").exists()


def test_without_systemd_as_pid_1_nothing_is_written(visible, monkeypatch):
    bin_dir = _fake_governor(visible)
    monkeypatch.setattr("governor.cli.install_systemd._pid1", lambda: "init")

    def refuse(*args, **kwargs):
        raise AssertionError("install-systemd wrote a file")

    monkeypatch.setattr(Path, "write_text", refuse)
    monkeypatch.setattr(Path, "mkdir", refuse)
    result = CliRunner().invoke(main, ["install-systemd", "--prefix", str(bin_dir), "--root", "/"])
    assert result.exit_code == 1, result.output
    assert "PID 1 is init, not systemd" in result.output and "--root DIR" in result.output
    dry = CliRunner().invoke(main, ["install-systemd", "--dry-run", "--prefix", str(bin_dir), "--root", "/"])
    assert dry.exit_code == 0 and dry.output.startswith("# PID 1 is init, not systemd") and "would stop here" in dry.output


def test_uninstall_from_a_staged_root_removes_the_units_and_keeps_the_config(tmp_path, visible):
    root = tmp_path / "r"
    assert CliRunner().invoke(main, ["install-systemd", "--prefix", str(_fake_governor(visible)),
                                     "--root", str(root)]).exit_code == 0
    man_dir = root / "usr/local/share/man"
    (man_dir / "man1/governor-retired.1").write_text("a page of a command since removed")
    (man_dir / "man1/git.1").write_text("not governor's")
    pages = len(main.commands) + 3
    dry = CliRunner().invoke(main, ["install-systemd", "--uninstall", "--dry-run", "--root", str(root)])
    assert dry.exit_code == 0 and "# would remove " in dry.output and "would removed" not in dry.output and (root / "etc/systemd/system/governor.service").exists()
    assert f" {pages} man pages from {man_dir}" in dry.output and len(installed_man_pages(man_dir)) == pages
    result = CliRunner().invoke(main, ["install-systemd", "--uninstall", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert not list((root / "etc/systemd/system").iterdir())
    assert f"removed {pages} man pages from {man_dir}" in result.output
    assert [p.name for p in man_dir.glob("man*/*")] == ["git.1"]
    assert f"kept {root}/etc/governor/governor.toml (--purge removes it)" in result.output
    result = CliRunner().invoke(main, ["install-systemd", "--uninstall", "--purge", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert not (root / "etc/governor").exists()
    assert CliRunner().invoke(main, ["install-systemd", "--purge"]).exit_code == 2  # without --uninstall


def test_uninstall_on_a_systemd_host_stops_resets_and_removes_in_order(tmp_path):
    import subprocess

    from governor.cli.uninstall_systemd import uninstall

    root = tmp_path / "r"
    for name in ("governor.service", "governor-tasks.service"):
        (root / "etc/systemd/system").mkdir(parents=True, exist_ok=True)
        (root / "etc/systemd/system" / name).write_text("[Service]\n")
    (root / "run/governor/state").mkdir(parents=True)
    (root / "run/governor/state/login-1000.json").write_text("{}")
    (root / "run/governor/state/7.json").write_text("{}")
    calls = []

    def run(argv):
        calls.append(argv[:4] if argv[1] == "set-property" else argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    uninstall(root, purge=False, dry_run=False, live=True, run=run, cgroup_mount=tmp_path / "cgroup")
    assert calls == [
        ["systemctl", "disable", "--now", "governor.service"],  # the daemon first: nothing refills
        ["systemctl", "set-property", "--runtime", "--"],  # alice's login slice: governor's limits reset
        ["systemctl", "stop", "governor-tasks.service", "governor.slice"],
        ["systemctl", "daemon-reload"],
        ["systemctl", "reset-failed", "governor.service", "governor-tasks.service"],
    ]
    assert not (root / "run/governor").exists() and not list((root / "etc/systemd/system").iterdir())


def _held_lock(path):
    """A lock file held (flock) by this test until the descriptor is closed."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_uninstall_removes_every_drop_in_entry_and_lock_governor_left_and_names_what_it_keeps(tmp_path, capsys):
    """Issue 44.1: a fake host root with what governor (and an admin) left: the units' drop-ins
    in /etc and /run/systemd/system.control, the resets on users' slices, the registry entries
    and locks of stopped daemons. Uninstall removes those, keeps an admin's own value on a user
    slice, a running daemon's lock and entry, a state directory outside /run (unless --purge)."""
    import subprocess

    from governor.cli.uninstall_systemd import uninstall

    root = tmp_path / "r"
    made = {
        "etc/systemd/system/governor.service": "[Service]\n",
        "etc/systemd/system/governor-tasks.service": "[Service]\n",
        "etc/systemd/system/governor.service.d/metrics.conf": "[Service]\nExecStart=\n",
        "run/systemd/system.control/governor.slice.d/50-MemoryLow.conf": "[Slice]\nMemoryLow=1409286144\n",
        "run/systemd/system.control/governor-tasks.service.d/50-MemoryMin.conf": "[Service]\nMemoryMin=0\n",
        "run/systemd/system.control/user-1000.slice.d/50-MemoryMax.conf": "# set-property\n[Slice]\nMemoryMax=infinity\n",
        "run/systemd/system.control/user-1000.slice.d/50-CPUQuota.conf": "[Slice]\nCPUQuota=\n",
        "run/systemd/transient/user-1001.slice.d/50-MemoryLow.conf": "[Slice]\nMemoryLow=0\n",
        "etc/governor/governor.toml": f'[daemon]\nstate_dir = "{tmp_path}/var/governor"\n',
        "run/governor/state/login-1000.json": "{}",
        "run/governor/daemons/root-gone.json": json.dumps({"root": str(tmp_path / "gone")}),
        "run/governor/locks/root-stopped.lock": "",
        "run/governor/daemons/sessions.lock": "",  # where a governor before issue 31.7 kept it
    }
    kept = {  # an admin's value on a user slice; a running daemon's entry and lock; the state dir
        "run/systemd/system.control/user-1002.slice.d/50-MemoryMax.conf": "[Slice]\nMemoryMax=4G\n",
        "run/governor/daemons/root-live.json": json.dumps({"root": str(tmp_path)}),
        "run/governor/locks/root-live.lock": "",
    }
    for rel, text in {**made, **kept}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    state = tmp_path / "var/governor"
    (root / state.relative_to("/")).mkdir(parents=True)
    (root / state.relative_to("/") / "login-1000.json").write_text("{}")
    fd = _held_lock(root / "run/governor/locks/root-live.lock")
    try:
        uninstall(root, purge=False, dry_run=False, live=True,
                  run=lambda argv: subprocess.CompletedProcess(argv, 0, "", ""), cgroup_mount=tmp_path / "cgroup")
        output = capsys.readouterr().out
    finally:
        os.close(fd)
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert left == sorted([*kept, "etc/governor/governor.toml", f"{str(state).lstrip('/')}/login-1000.json"]), output
    assert not (root / "run/systemd/system.control/user-1000.slice.d").exists()
    assert "drop-ins of governor's units" in output and "a stopped daemon's lock" in output
    assert f"kept {root}/run/governor/locks/root-live.lock (held by a running governor daemon)" in output
    assert "(the state directory: task records, fair-share history; --purge removes it)" in output
    assert "(--purge removes it)" in output
    uninstall(root, purge=True, dry_run=False, live=True,
              run=lambda argv: subprocess.CompletedProcess(argv, 0, "", ""), cgroup_mount=tmp_path / "cgroup")
    assert not (root / state.relative_to("/")).exists() and not (root / "etc/governor").exists()


def test_a_dry_run_of_the_uninstall_names_the_leftovers_and_removes_nothing(tmp_path, capsys):
    import subprocess

    from governor.cli.uninstall_systemd import uninstall

    root = tmp_path / "r"
    dropin = root / "run/systemd/system.control/governor.slice.d/50-MemoryLow.conf"
    lock = root / "run/governor/locks/root-x.lock"
    for path in (dropin, lock):
        path.parent.mkdir(parents=True)
        path.write_text("[Slice]\nMemoryLow=1\n")
    uninstall(root, purge=False, dry_run=True, live=True,
              run=lambda argv: subprocess.CompletedProcess(argv, 0, "", ""), cgroup_mount=tmp_path / "cgroup")
    output = capsys.readouterr().out
    assert f"# would remove {dropin.parent} (drop-ins of governor's units)" in output
    assert f"# would remove {lock} (a stopped daemon's lock)" in output
    assert dropin.exists() and lock.exists()
