#!/usr/bin/env bash
# What a login session is promised (issue 43): the memory.min and memory.low governor writes, in
# its tree, on its units and on logind's user slices, sum to at most the capacity with idle and
# busy shells (an idle shell is promised none of its cap); and a user's `runuser` session beside
# her logind session reserves memory once, so a queued task does not start past the capacity.
# Run from the repo root inside the systemd VM with logind (tests/system/test_systemd_vm.py
# builds the wheelhouse):
#
#     ../shared/vm/run-in-systemd-vm --full ./tests/system/session_sums.sh
#
# Prints "sums (<case>): …" and "double session: …" lines; exits non-zero if a check fails.
# Changes the machine it runs on (users, /etc, units): VM only.
set -euo pipefail
if [ "${SYSVM:-}" != 1 ]; then
    echo "tests/system/session_sums.sh adds users and installs units: run it in ../shared/vm/run-in-systemd-vm --full" >&2
    exit 2
fi
cd "$(dirname "$0")/../.."
export PYTHONDONTWRITEBYTECODE=1
since=$(date +%s)
sleep 1   # journalctl --since has one-second resolution
. tests/system/lib.sh
install_governor
die() { echo "FAIL: $*"; journalctl -u governor --no-pager -n 60 || true; exit 1; }
systemctl is-active --quiet systemd-logind || { echo "session_sums.sh: no logind: run it with run-in-systemd-vm --full"; exit 2; }

for user in gov-alice gov-bob gov-carol; do id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/sh "$user"; done
alice=$(id -u gov-alice)
# Capacity 1G; each session may use 768M: three shells' caps are 2.25G.
mkdir -p /etc/governor
cat > /etc/governor/governor.toml <<'EOF'
[capacity]
cpu = 1
memory = "1G"

[groups.A]
users = ["gov-alice"]

[groups.B]
users = ["gov-bob"]

[groups.C]
users = ["gov-carol"]

[sessions]
cpu = 0.2
memory = "768M"

[daemon]
reconcile_interval = 2.0
EOF
$gov install-systemd >/dev/null
systemctl start governor || die "systemctl start governor failed"

task_ids='[t["id"] for g in s["groups"].values() for t in g["tasks"]]'
generation() { $gov status --json | $py -c 'import json,sys; print(json.load(sys.stdin)["daemon"]["settle_generation"])'; }
past_generation() { [ "$(generation)" -ge "$1" ]; }
# settles TIMES: wait until the daemon has settled TIMES more times (what was asked is decided).
settles() { local until=$(($(generation) + $1)); wait_for 60 "$1 settles" past_generation "$until"; }

# sums CASE: every memory.min and memory.low governor wrote, summed per level, against the
# capacity: the root's (it bounds its groups'), the units' above it, the leaves' (tasks,
# sessions, and the login slices systemd writes for it) together; a session's own are 0.
sums() {
    $py - "$1" "$(id -u gov-alice) $(id -u gov-bob) $(id -u gov-carol)" "$($gov status --json)" <<'EOF' \
        || fail "sums ($1) past the capacity or a session protected"
import json, os, sys
case, uids, s = sys.argv[1], sys.argv[2].split(), json.loads(sys.argv[3])
root, capacity = s["daemon"]["cgroup_root"], s["host_capacity"]["memory"]
def read(path):
    return tuple(int(open(os.path.join(path, f)).read()) for f in ("memory.min", "memory.low"))
leaves, sessions = [], []
for where, dirs, _ in os.walk(root):
    for name in dirs:
        if name.startswith(("task-", "session-")):
            leaves.append(read(os.path.join(where, name)))
            if name.startswith("session-"):
                sessions.append(leaves[-1])
for uid in uids:
    login = f"/sys/fs/cgroup/user.slice/user-{uid}.slice"
    if os.path.isdir(login):
        sessions.append(read(login))
        leaves.append(sessions[-1])
units = [read(os.path.dirname(root)), read(os.path.dirname(os.path.dirname(root)))]
top = read(root)
summed = (sum(v[0] for v in leaves), sum(v[1] for v in leaves))
print(f"sums ({case}): root memory.min {top[0]} memory.low {top[1]}, units {units}, leaves memory.min "
      f"{summed[0]} memory.low {summed[1]} ({len(leaves)}), sessions {sessions}, capacity {int(capacity)}")
# The units are rounded up to 64M steps (governor/daemon/unit_protection.py); 1G is one.
fine = max(*top, *summed, *(v for u in units for v in u)) <= capacity and all(v == (0, 0) for v in sessions)
sys.exit(0 if fine else 1)
EOF
}

section "three idle shells (su -l, pam_systemd)"
for user in gov-alice gov-bob gov-carol; do su -l "$user" -c 'exec sleep 900' </dev/null >/dev/null 2>&1 & done
for uid in $(id -u gov-alice) $(id -u gov-bob) $(id -u gov-carol); do
    wait_for 90 "login-$uid in governor status" status_has "'login-$uid' in $task_ids" || die "$($gov status)"
done
sums "idle shells"

section "alice's shell holds 200M; bob runs a 512M task"
su -l gov-alice -c 'exec python3 -c "import time; x = b\"1\" * (200 << 20); time.sleep(900)"' </dev/null >/dev/null 2>&1 &
wait_for 90 "alice's use reserved" status_has 's["groups"]["A"]["reserved"].get("memory", 0) >= 150 << 20' || die "$($gov status)"
runuser -u gov-bob -- "$gov" run --cpus 0.1 --memory 512M -- sleep 900 >/dev/null 2>&1 &
wait_for 90 "bob's task" status_has '[t for t in s["groups"]["B"]["tasks"] if not t["session"]]' || die "$($gov status)"
sums "a busy shell and a task"

section "carol's 400M task waits; alice's runuser beside her login session"
runuser -u gov-carol -- "$gov" run --cpus 0.1 --memory 400M -- sleep 900 >/dev/null 2>&1 &
wait_for 90 "carol's task queued" status_has 'len(s["queue"]) == 1' || die "$($gov status)"
runuser -u gov-alice -- sleep 900 &
wait_for 90 "alice's session in governor's tree" status_has "'session-$alice' in $task_ids" || die "$($gov status)"
settles 2 || true
$py - "$alice" "$($gov status --json)" <<'EOF' || fail "alice's two places reserved more than once, or a task started past the capacity"
import json, sys
alice, s = sys.argv[1], json.loads(sys.argv[2])
group = s["groups"]["A"]
held = {t["id"]: t["reserved"].get("memory", 0.0) for t in group["tasks"]}
launched = sum(t["demand"].get("memory", 0.0) for g in s["groups"].values() for t in g["tasks"] if not t["session"])
sessions = sum(t["reserved"].get("memory", 0.0) for g in s["groups"].values() for t in g["tasks"] if t["session"])
capacity, reserved = s["capacity"]["memory"], group["reserved"].get("memory", 0.0)
print(f"double session: login-{alice} {held.get('login-' + alice, 0):.0f}, session-{alice} "
      f"{held.get('session-' + alice, 0):.0f}, group A reserved {reserved:.0f} of one cap {768 << 20}; "
      f"carol's task queued {len(s['queue'])}; declared {launched:.0f} + sessions {sessions:.0f} of {capacity:.0f}")
once = 0 <= reserved <= 768 << 20 and abs(reserved - sum(held.values())) < 1
fits = launched + sessions <= capacity and len(s["queue"]) == 1
total = abs(s["reserved"].get("memory", 0.0) - sum(g["reserved"].get("memory", 0.0) for g in s["groups"].values()
                                                    if not g.get("internal"))) < 1
sys.exit(0 if once and fits and total else 1)
EOF
sums "a login session and a runuser session"

errors=$(journalctl -u governor -p err --since "@$since" -o cat)
[ -z "$errors" ] || fail "the daemon logged errors: $errors"
$gov install-systemd --uninstall --purge >/dev/null || fail "uninstall failed"
for user in gov-alice gov-bob gov-carol; do pkill -u "$user" || true; done

if [ "$failures" -gt 0 ]; then
    journalctl -u governor --no-pager -n 80
    echo "FAILED: $failures check(s)"
    exit 1
fi
echo "OK: all checks passed"
