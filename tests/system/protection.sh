#!/usr/bin/env bash
# governor's memory protection under systemd (issue 35.1): the kernel bounds a cgroup's
# memory.min/memory.low by its parent's, so the daemon sets MemoryMin=/MemoryLow= on
# governor.slice and governor-tasks.service to its root's. Run from the repo root inside the
# systemd VM (tests/system/test_systemd_vm.py builds the wheelhouse):
#
#     ../shared/vm/run-in-systemd-vm ./tests/system/protection.sh
#
# Prints "protection: …" and "protection off: …" lines; exits non-zero if a check fails.
# Changes the machine it runs on (users, /etc, units): VM only.
set -euo pipefail
if [ "${SYSVM:-}" != 1 ]; then
    echo "tests/system/protection.sh adds users and installs units: run it in ../shared/vm/run-in-systemd-vm" >&2
    exit 2
fi
cd "$(dirname "$0")/../.."
export PYTHONDONTWRITEBYTECODE=1
config=/etc/governor/governor.toml
work=$(mktemp -d)
# This script's own journal: in test_systemd_vm.py's boot run.sh came first (and logged errors).
since=$(date +%s)
sleep 1   # journalctl --since has one-second resolution
. tests/system/lib.sh
install_governor
die() { echo "FAIL: $*"; journalctl -u governor --no-pager -n 60 || true; exit 1; }
count_status_tasks() { [ "$($gov status --json | $py -c 'import json,sys; s=json.load(sys.stdin); print(sum(len(g["tasks"]) for g in s["groups"].values()))')" = "$1" ]; }
unit_min() { systemctl show -p MemoryMin --value "$1"; }
unit_low() { systemctl show -p MemoryLow --value "$1"; }
# at_least FILE-OR-VALUE BYTES: the number is at least BYTES.
at_least() { [ "$1" -ge "$2" ]; }
units_protect() { for unit in governor.slice governor-tasks.service; do at_least "$(unit_min "$unit")" "$1" || return 1; done; }
units_reset() { for unit in governor.slice governor-tasks.service; do [ "$(unit_min "$unit")" = 0 ] || return 1; done; }

id alice >/dev/null 2>&1 || useradd --no-create-home --shell /bin/sh alice
guarantee=$((256 << 20))
paths_before=$(governor_paths)
mkdir -p /etc/governor
cat > "$config" <<'EOF'
[capacity]
reserve = { cpu = 0.25, memory = "256M" }

[groups.alice]
users = ["alice"]
guarantee = { memory = "256M" }

[sessions]
enabled = false
EOF
$gov install-systemd >/dev/null
systemctl start governor || die "systemctl start governor failed"
runuser -u alice -- "$gov" run --cpus 0.1 --memory 128M -- sleep 600 >>"$work/run.log" 2>&1 &
wait_for 120 "alice's task in governor status" count_status_tasks 1 || die "$(cat "$work/run.log")"
wait_for 60 "MemoryMin= on governor's units" units_protect "$guarantee"
slice=/sys/fs/cgroup/governor.slice
root=$slice/governor-tasks.service/governed
for file in "$slice/memory.min" "$slice/governor-tasks.service/memory.min" "$root/memory.min"; do
    at_least "$(cat "$file")" "$guarantee" || fail "$file is $(cat "$file"), below alice's guarantee $guarantee"
done
shown=$($gov status --json | $py -c 'import json,sys; u=json.load(sys.stdin)["daemon"]["unit_protection"]
print(" ".join(k + " " + str(v.get("MemoryMin")) + "/" + str(v.get("MemoryLow")) for k, v in sorted(u.items())))')
echo "protection: governor.slice MemoryMin $(unit_min governor.slice) MemoryLow $(unit_low governor.slice)," \
     "governor-tasks.service MemoryMin $(unit_min governor-tasks.service) MemoryLow $(unit_low governor-tasks.service)," \
     "governor.slice/memory.min $(cat "$slice/memory.min"), governed/memory.min $(cat "$root/memory.min"), status $shown"

warned=$(changed_on_disk governor.slice governor-tasks.service governor.service)
echo "changed on disk with protection: ${warned:-none}"
[ -z "$warned" ] || fail "systemctl status says changed on disk: $warned"

sed -i 's/^\[groups.alice\]$/[enforcement]\nmemory_protection = false\n\n[groups.alice]/' "$config"
systemctl reload governor || fail "reload with memory_protection = false failed"
wait_for 60 "MemoryMin= reset on governor's units" units_reset
echo "protection off: governor.slice MemoryMin $(unit_min governor.slice) MemoryLow $(unit_low governor.slice)," \
     "governor.slice/memory.min $(cat "$slice/memory.min"), governed/memory.min $(cat "$root/memory.min")"
errors=$(journalctl -u governor -p err --since "@$since" -o cat)
[ -z "$errors" ] || fail "the daemon logged errors: $errors"
warned=$(changed_on_disk governor.slice governor-tasks.service governor.service)
echo "changed on disk with protection off: ${warned:-none}"
[ -z "$warned" ] || fail "systemctl status says changed on disk: $warned"
$gov install-systemd --uninstall --purge >/dev/null || fail "uninstall failed"
same_paths "$paths_before" "protection uninstall"

if [ "$failures" -gt 0 ]; then
    journalctl -u governor --no-pager -n 60
    echo "FAILED: $failures check(s)"
    exit 1
fi
echo "OK: all checks passed"
