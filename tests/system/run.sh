#!/usr/bin/env bash
# governor under a real systemd: the installed units, and what restart, kill -9, a refused
# reload and stop do to running tasks. Run from the repo root inside the systemd VM, with the
# wheelhouse the test builds on the host (the VM has no network):
#
#     ../shared/vm/run-in-systemd-vm ./tests/system/run.sh
#
# Prints one line per case, "<case>: tasks before N, tasks after M, tasks killed K", and exits
# non-zero if any check fails. Changes the machine it runs on (users, /etc, units): VM only.
set -euo pipefail
if [ "${SYSVM:-}" != 1 ]; then
    echo "tests/system/run.sh adds users and installs units: run it in ../shared/vm/run-in-systemd-vm" >&2
    exit 2
fi
cd "$(dirname "$0")/../.."
export PYTHONDONTWRITEBYTECODE=1   # keep the shared checkout free of root-owned caches

repo=$PWD
config=/etc/governor/governor.toml
work=$(mktemp -d)
. tests/system/lib.sh
install_governor
# (a function, not a string: the checkout's path may hold a space)
tasks() { "$py" "$repo/tests/system/tasks.py" "$@"; }
die() { echo "FAIL: $*"; journalctl -u governor -u governor-tasks --no-pager -n 60 || true; exit 1; }
count_status_tasks() { [ "$($gov status --json | $py -c 'import json,sys; s=json.load(sys.stdin); print(sum(len(g["tasks"]) for g in s["groups"].values()))')" = "$1" ]; }
main_pid() { systemctl show -p MainPID --value governor; }
serving() { systemctl is-active --quiet governor && $gov status --json; }

[ "$(cat /proc/1/comm)" = systemd ] || { echo "run.sh: PID 1 is not systemd: run it in ../shared/vm/run-in-systemd-vm"; exit 2; }

section "setup"
for user in alice bob; do id "$user" >/dev/null 2>&1 || useradd --no-create-home --shell /bin/sh "$user"; done
paths_before=$(governor_paths)  # nothing of governor's yet: the same after the last uninstall
# Weights differ and the 4 tasks ask for 2 cores of the 1.75 governed: alice (weight 2) gets
# all she asks, bob the rest.
mkdir -p /etc/governor
cat > "$config" <<'EOF'
[capacity]
reserve = { cpu = 0.25, memory = "256M" }

[groups.alice]
weight = 2
users = ["alice"]

[groups.bob]
weight = 1
users = ["bob"]

# This suite checks the units and the tasks of governor run; sessions have their own
# (tests/system/sessions.sh): alice's and bob's runuser shells here would each make one.
[sessions]
enabled = false

[daemon]
reconcile_interval = 2.0
EOF
cp "$config" "$work/governor.toml"
$gov install-systemd
cmp -s "$config" "$work/governor.toml" || fail "install-systemd overwrote an existing $config"
for page in man1/governor.1 man1/governor-run.1 man5/governor.toml.5; do
    [ -s "/usr/local/share/man/$page" ] || fail "install-systemd did not install the man page $page"
done
grep -qx "ExecStart=$gov daemon .*" /etc/systemd/system/governor.service \
    || fail "ExecStart does not name $gov: $(grep ExecStart= /etc/systemd/system/governor.service)"

section "systemd-analyze verify"
verify=$(systemd-analyze verify /etc/systemd/system/governor.service /etc/systemd/system/governor-tasks.service 2>&1) \
    || fail "systemd-analyze verify failed"
[ -z "$verify" ] || fail "systemd-analyze verify is not clean: $verify"

section "start"
systemctl start governor || die "systemctl start governor failed"
systemctl is-active --quiet governor-tasks || fail "governor-tasks.service is not active"
tasks_cg=/sys/fs/cgroup/governor.slice/governor-tasks.service
[ "$(cat /proc/"$(main_pid)"/cgroup)" = "0::/system.slice/governor.service" ] \
    || fail "daemon is in $(cat /proc/"$(main_pid)"/cgroup), not its unit's cgroup"
# (cgroupfs files report size 0: read them, do not test -s)
[ -n "$(cat "$tasks_cg/holder/cgroup.procs")" ] && [ -z "$(cat "$tasks_cg/cgroup.procs")" ] \
    || fail "the tasks unit's process is not (only) in its holder leaf"
grep -qw memory "$tasks_cg/cgroup.subtree_control" || fail "controllers not enabled below governor-tasks.service"
[ "$(systemctl show -p WatchdogUSec --value governor)" = 30s ] || fail "watchdog not armed"

section "launch 2 tasks as alice and 2 as bob"
# Idle: what this script checks (the tasks and their limits through restarts, kills, reloads
# and stops) follows their declarations, not their use. As CPU burners they kept the VM's two
# emulated CPUs busy from here to the end of the tasks, the host's CPU the other VM suites
# share in CI: this script alone, two runs side by side, took 8:08 (7:50 of the host's CPU) with
# them, 7:06 (6:03) without. Sharing under contention is proven in the cgroup v2 suite and in
# sessions.sh.
for user in alice alice bob bob; do
    runuser -u "$user" -- "$gov" run --cpus 0.5 --memory 64M -- sleep 3600 >>"$work/run.log" 2>&1 &
done
wait_for 120 "4 tasks in governor status" count_status_tasks 4 || die "$(cat "$work/run.log")"
$gov status --json | tasks snap > "$work/start.json" || fail "limits in status are not in the cgroup files"
$gov status
[ "$(tasks alive "$work/start.json")" = 4 ] || die "the 4 tasks are not running"

# check_case NAME: compare the tasks now with $work/start.json and print the case line.
# Tasks "after" are those the daemon lists if it is serving, else the tasks still running.
check_case() {
    local name=$1 before alive after
    before=$($py -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tasks"]))' "$work/start.json")
    alive=$(tasks alive "$work/start.json")
    if systemctl is-active --quiet governor; then
        $gov status --json | tasks snap > "$work/now.json" || fail "$name: limits in status are not in the cgroup files"
        tasks same "$work/start.json" "$work/now.json" || fail "$name: tasks or limits changed"
        after=$($py -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tasks"]))' "$work/now.json")
    else
        after=$alive
    fi
    echo "$name: tasks before $before, tasks after $after, tasks killed $((before - alive))"
    [ "$alive" = "$before" ] || fail "$name: $((before - alive)) task(s) killed"
    [ "$after" = "$before" ] || fail "$name: $after task(s) after, $before before"
}

section "systemctl daemon-reload"
# systemd rewrites the attributes of the cgroups it manages; the limits below the delegated
# governor-tasks.service must not be among them.
systemctl daemon-reload
check_case "systemctl daemon-reload"

section "systemctl restart governor"
pid=$(main_pid)
systemctl restart governor || fail "restart failed"
[ "$(main_pid)" != "$pid" ] || fail "restart kept the same daemon pid"
check_case "systemctl restart governor"

section "kill -9 the daemon"
pid=$(main_pid)
kill -9 "$pid"
# Restart=on-failure starts a new daemon; Type=notify makes it active only once READY=1.
wait_for 120 "systemd to restart the daemon" sh -c "[ \"\$(systemctl show -p MainPID --value governor)\" != $pid ] && systemctl is-active --quiet governor" \
    || die "not restarted after kill -9"
check_case "kill -9 MainPID"

section "systemctl reload governor with a broken config"
pid=$(main_pid)
since=$(date +%s)
sleep 1   # journalctl --since has one-second resolution
sed -i 's/^weight = 2$/weight = -1/' "$config"
refused="$config: groups.alice.weight: must be a number between 0.001 and 1000, got -1"
# ExecReload runs `governor reload`, which waits for the verdict: a refused config fails visibly.
if systemctl reload governor 2>"$work/systemctl-reload.out"; then
    fail "systemctl reload governor exited 0 for a broken config"
fi
wait_for 60 "the refused reload in the journal at priority err" \
    sh -c "journalctl -u governor -p err --since @$since -o cat | grep -F '$refused'" \
    || journalctl -u governor --since "@$since" --no-pager
if $gov reload >"$work/reload.out" 2>&1; then
    fail "governor reload accepted a broken config"
else
    grep -qF "$refused" "$work/reload.out" || fail "governor reload did not say why: $(cat "$work/reload.out")"
fi
[ "$(main_pid)" = "$pid" ] && serving >/dev/null || fail "the daemon stopped serving after a refused reload"
check_case "systemctl reload governor (broken config)"   # also: alice's weight is still 2
cp "$work/governor.toml" "$config"
systemctl reload governor || fail "reload of the restored config failed"
wait_for 60 "the restored config reloaded" \
    sh -c "journalctl -u governor --since @$since -o cat | grep -F 'config $config reloaded'" || true
systemctl is-active --quiet governor || fail "governor not active after the restored reload"

# Only the kill -9 may have made systemd restart the daemon: a missed watchdog ping (over the
# ~30 s since) would count too. An explicit stop/start resets the counter, so check it now.
restarts=$(systemctl show -p NRestarts --value governor)
[ "$restarts" = 1 ] || fail "systemd restarted the daemon $restarts times, expected 1 (the kill -9)"

section "systemctl stop governor"
systemctl stop governor
systemctl is-active --quiet governor && fail "governor still active after stop"
systemctl is-active --quiet governor-tasks || fail "governor-tasks.service stopped with the daemon"
[ -d /run/governor/state ] || fail "/run/governor/state removed on stop (RuntimeDirectoryPreserve)"
check_case "systemctl stop governor"
systemctl start governor
check_case "systemctl start governor (re-adopt)"

section "systemctl stop governor-tasks: the deliberate end of every task"
systemctl stop governor-tasks
systemctl is-active --quiet governor && fail "governor still active without its tasks unit (BindsTo=)"
alive=$(tasks alive "$work/start.json")
echo "systemctl stop governor-tasks: tasks before 4, tasks after $alive, tasks killed $((4 - alive))"
[ "$alive" = 0 ] || fail "stopping governor-tasks left $alive task(s) running"

section "governor history and governor replay on the unit's journal (issue 47)"
# The four tasks were journaled in /var/lib/governor/history across the restart and the
# kill -9 above; replayed under the installed config itself, each group starts what it started.
$gov history --since 1h --json >"$work/history.jsonl" 2>"$work/history.err" \
    || fail "governor history failed: $(cat "$work/history.err")"
$gov replay "$config" --since 1h --json >"$work/replay.json" 2>"$work/replay.err" \
    || fail "governor replay failed: $(cat "$work/replay.err")"
python3 - "$work/history.jsonl" "$work/replay.json" <<'EOF' || fail "history or replay does not show the 4 tasks"
import json, sys
entries = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
starts = {group: sum(1 for e in entries if e["kind"] == "start" and e.get("group") == group) for group in ("alice", "bob")}
groups = json.load(open(sys.argv[2]))["groups"]
sides = {group: (groups[group]["recorded"]["tasks"], groups[group]["proposed"]["tasks"]) for group in ("alice", "bob")}
print(f"history: {len(entries)} entries, starts {starts}; replay tasks (recorded, proposed) {sides}")
assert starts == {"alice": 2, "bob": 2} and sides == {"alice": (2, 2), "bob": (2, 2)}
EOF

section "install-systemd --uninstall: nothing of governor is left"
systemctl start governor || fail "start before the uninstall failed"
runuser -u alice -- "$gov" run --cpus 0.2 --memory 32M -- sleep 600 >>"$work/run.log" 2>&1 &
wait_for 120 "a task to take off with governor" count_status_tasks 1 || die "$(cat "$work/run.log")"
$gov install-systemd --uninstall || fail "uninstall failed"
for unit in governor.service governor-tasks.service; do
    [ ! -e "/etc/systemd/system/$unit" ] || fail "uninstall left /etc/systemd/system/$unit"
done
left=$(find /sys/fs/cgroup -name '*governor*')
[ -z "$left" ] || fail "uninstall left in /sys/fs/cgroup: $left"
pgrep -f 'sleep 600' >/dev/null && fail "uninstall left a task running"
pages=$(find /usr/local/share/man -name 'governor*' 2>/dev/null)
[ -z "$pages" ] || fail "uninstall left man pages: $pages"
[ -f "$config" ] || fail "uninstall removed the config without --purge"
[ -n "$(ls /var/lib/governor/history)" ] || fail "uninstall removed the history journal without --purge"
$gov install-systemd --uninstall --purge >/dev/null || fail "uninstall --purge failed"
[ ! -e "$config" ] || fail "uninstall --purge kept $config"
echo "uninstall: units $(ls /etc/systemd/system | grep -c governor || true), cgroups left $(echo -n "$left" | grep -c . || true)"

section "capacity.gpus on cgroup v2: the unit loads the GPU device program (issue 31.8)"
# Two stand-in GPUs: char nodes on a local/experimental major no driver holds (an allowed open
# reaches no driver, ENXIO; a denied one is refused, EPERM), as tests/support/device_nodes.py
# makes them: 60-63 and 120-127 first (a GPU host's drivers hold every one of 240-254).
taken=$(sed -n '/^Character/,/^Block/p' /proc/devices | awk '{print $1}')
major=$(for m in $(seq 60 63) $(seq 120 127) $(seq 240 254); do echo "$taken" | grep -qx "$m" || { echo "$m"; break; }; done)
[ -n "$major" ] || fail "no free local/experimental character major (60-63, 120-127, 240-254) for the stand-in GPUs"
mknod -m 0666 /dev/governor-test-gpu0 c "$major" 0
mknod -m 0666 /dev/governor-test-gpu1 c "$major" 1
mkdir -p /etc/governor   # (the uninstall --purge above removed it)
cat > "$config" <<'EOF'
[capacity]
reserve = { cpu = 0.25, memory = "256M" }
gpus = ["/dev/governor-test-gpu0", "/dev/governor-test-gpu1"]
gpu_control = []

[groups.alice]
users = ["alice"]

[sessions]
enabled = false
EOF
$gov install-systemd >/dev/null || fail "install-systemd with capacity.gpus failed"
$gov check-config "$config" >/dev/null 2>"$work/check.err" || fail "check-config refused: $(cat "$work/check.err")"
grep -F "lacks" "$work/check.err" && fail "check-config says the installed unit lacks something"
# A drop-in that takes CAP_BPF away again: check-config must say so.
mkdir -p /etc/systemd/system/governor.service.d
printf '[Service]\nCapabilityBoundingSet=~CAP_BPF\n' > /etc/systemd/system/governor.service.d/no-bpf.conf
# Read from a file, not a pipe: grep -q leaves at its match, and what check-config writes after it
# (the favordynmods note on this v2 host) would meet a closed pipe (pipefail).
$gov check-config "$config" >/dev/null 2>"$work/check.err" || fail "check-config refused: $(cat "$work/check.err")"
grep -qF "lacks CAP_BPF in CapabilityBoundingSet=" "$work/check.err" \
    || fail "check-config does not warn of a unit without CAP_BPF"
rm -r /etc/systemd/system/governor.service.d
systemctl start governor || die "systemctl start governor with capacity.gpus failed"
probe='import errno, os, sys
seen = ["CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", "")]
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDONLY)); seen.append(path + " ok")
    except OSError as e:
        seen.append(path + " " + errno.errorcode[e.errno])
print(", ".join(seen))'
runuser -u alice -- "$gov" run --gpus 1 --cpus 0.1 --memory 64M -- "$py" -c "$probe" /dev/governor-test-gpu0 \
    /dev/governor-test-gpu1 >"$work/gpu.out" 2>"$work/gpu.err" || fail "the GPU task failed: $(cat "$work/gpu.out" "$work/gpu.err")"
systemctl is-active --quiet governor || fail "governor with capacity.gpus is not active"
echo "gpus on v2: unit $(systemctl is-active governor), restarts $(systemctl show -p NRestarts --value governor), task saw $(cat "$work/gpu.out")"

section "capacity.gpus on cgroup v2: device programs replaced at a reload, found again after a restart"
# Under the unit a program attached earlier can be replaced or taken off only with CAP_SYS_ADMIN
# (BPF_PROG_GET_FD_BY_ID): a reload that adds a GPU replaces the running task's program, the
# guard's ("host": every top-level cgroup but governor's and the daemon's own) is put again, a
# restart finds both, and no step logs an error.
mknod -m 0666 /dev/governor-test-gpu2 c "$major" 2
sed -i 's/^gpu_control = \[\]$/gpu_control = []\ngpu_guard = "host"/' "$config"
systemctl restart governor || die "restart with gpu_guard = host failed"
runuser -u alice -- "$gov" run --gpus 1 --cpus 0.1 --memory 64M -- sleep 600 >>"$work/run.log" 2>&1 &
wait_for 120 "the GPU task in governor status" count_status_tasks 1 || die "$(cat "$work/run.log")"
gpu_pid=$(pgrep -u alice -x sleep)
gpu_cg=/sys/fs/cgroup$(sed -n 's/^0:://p' "/proc/$gpu_pid/cgroup")
# in_task NODE…: open each node from a process in the GPU task's cgroup (the kernel asks its
# device programs at each open; root is refused as anyone is).
in_task() { sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$gpu_cg" "$py" -c "$probe" "$@" | cut -d, -f2-; }
ours() { "$py" -c 'import sys; from governor.cgroups.device_filter import attached_programs as a
print(" ".join(sorted(a(__import__("pathlib").Path(sys.argv[1])).values())) or "none")' "$1"; }
nodes=(/dev/governor-test-gpu0 /dev/governor-test-gpu1 /dev/governor-test-gpu2)
saw=$(in_task "${nodes[@]:0:2}")
[ "$(echo "$saw" | grep -o EPERM | wc -l)" = 1 ] || fail "the GPU task is not denied exactly the other GPU: $saw"
guarded=$($gov status --json | "$py" -c 'import json,sys; print(" ".join(json.load(sys.stdin)["daemon"]["gpu_guard"]["guarded"]))')
case " $guarded " in *" /sys/fs/cgroup/system.slice "*|*" /sys/fs/cgroup/governor.slice "*)
    fail "gpu_guard = host guards the daemon's or the tasks' slice: $guarded";; esac
since=$(date +%s)
sleep 1   # journalctl --since has one-second resolution
sed -i 's|^gpus = .*|gpus = ["/dev/governor-test-gpu0", "/dev/governor-test-gpu1", "/dev/governor-test-gpu2"]|' "$config"
systemctl reload governor || fail "reload adding a GPU failed"
wait_for 60 "the config with 3 GPUs reloaded" sh -c "journalctl -u governor --since @$since -o cat | grep -F 'config $config reloaded'"
after_reload=$(in_task "${nodes[@]}")
systemctl restart governor || die "restart with 3 GPUs failed"
wait_for 60 "the restarted daemon to re-adopt the GPU task" count_status_tasks 1
after_restart=$(in_task "${nodes[@]}")
errors=$(journalctl -u governor -p err --since "@$since" -o cat)
[ -z "$errors" ] || fail "the daemon logged errors at the reload or restart: $errors"
for saw in "$after_reload" "$after_restart"; do
    [ "$(echo "$saw" | grep -o EPERM | wc -l)" = 2 ] && echo "$saw" | grep -qF "gpu2 EPERM" \
        || fail "the GPU task is not denied the other GPU and the added one: $saw"
done
programs="task $(ours "$gpu_cg"), guard $(for place in $guarded; do ours "$place"; done | sort -u | tr '\n' ' ')"
echo "gpus reload and restart: task saw$after_reload after the reload,$after_restart after the restart; programs: $programs; errors logged $(echo -n "$errors" | grep -c . || true)"
$gov install-systemd --uninstall --purge >/dev/null || fail "uninstall after the GPU case failed"
same_paths "$paths_before" "run uninstall"
for place in $guarded; do
    [ -d "$place" ] && [ "$(ours "$place")" != none ] && fail "the guard stayed on $place after the daemon stopped"
done
rm -f /dev/governor-test-gpu0 /dev/governor-test-gpu1 /dev/governor-test-gpu2

if [ "$failures" -gt 0 ]; then
    journalctl -u governor -u governor-tasks --no-pager -n 80
    echo "FAILED: $failures check(s)"
    exit 1
fi
echo "OK: all checks passed"
