#!/usr/bin/env bash
# governor beside a real one-node Slurm with accounting (issue 36, points 2 and 3), in the systemd
# VM booted with SYSVM_EXTRA="slurmd slurmctld munge slurmdbd mariadb-server"
# (tests/system/test_slurm_vm.py runs it):
#   1. `governor export slurm tests/system/slurm-tree.toml` loaded into slurmdbd (MariaDB);
#      `sshare -a -P` is printed as "sshare|<line>" for the test to compare with the config.
#   2. an sbatch job beside a governed task: no Slurm pid moves, a restart of governor leaves the
#      job running, a restart of slurmd leaves the task running; governor's status before,
#      during and after the job is written to $out for the capacity check.
# Changes the machine it runs on (users, /etc, units): VM only.
set -euo pipefail
if [ "${SYSVM:-}" != 1 ]; then
    echo "tests/system/slurm.sh adds users and installs units: run it in ../shared/vm/run-in-systemd-vm" >&2
    exit 2
fi
cd "$(dirname "$0")/../.."
export PYTHONDONTWRITEBYTECODE=1
repo=$PWD
out=$repo/build/slurm-vm
rm -rf "$out" && mkdir -p "$out"
config=/etc/governor/governor.toml
. tests/system/lib.sh
die() { echo "FAIL: $*"; journalctl -u governor -u slurmctld -u slurmd -u slurmdbd --no-pager -n 60 || true; exit 1; }
for user in alice bob carol; do id "$user" >/dev/null 2>&1 || useradd --no-create-home --shell /bin/sh "$user"; done

echo "== slurm: one node (../shared/vm/slurm-one-node), then accounting in slurmdbd on MariaDB"
"$repo/../shared/vm/slurm-one-node" || die "slurm-one-node failed"
systemctl start mariadb || die "mariadb did not start"
mysql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm-vm';
          GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
cat > /etc/slurm/slurmdbd.conf <<C
AuthType=auth/munge
DbdHost=$(hostname)
DbdAddr=127.0.0.2
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm-vm
StorageLoc=slurm_acct_db
PidFile=/run/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
C
chown slurm: /etc/slurm/slurmdbd.conf && chmod 600 /etc/slurm/slurmdbd.conf
# gres/gpu as a TRES: the export's GrpTRES names it (no node needs a GPU for the limit to exist).
cat >> /etc/slurm/slurm.conf <<C
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.2
AccountingStorageTRES=gres/gpu
GresTypes=gpu
PriorityType=priority/multifactor
C
systemctl start slurmdbd || die "slurmdbd did not start"
wait_for 120 "slurmdbd to answer" sacctmgr -n show cluster || die "slurmdbd does not answer"
sacctmgr -i add cluster one >/dev/null || die "sacctmgr add cluster failed"
systemctl restart slurmctld slurmd || die "Slurm did not restart with accounting"
wait_for 120 "the node back up" sh -c "sinfo -h -o %T | grep -qE '^(idle|mixed|allocated)'" || die "node not up"

echo "== governor export slurm, loaded with sh"
install_governor
$gov export slurm "$repo/tests/system/slurm-tree.toml" > "$out/accounts.sh" || die "governor export slurm failed"
sh "$out/accounts.sh" > "$out/load.log" 2>&1 || fail "loading the export failed: $(tail -5 "$out/load.log")"
sh "$out/accounts.sh" > "$out/reload.log" 2>&1 || fail "loading the export again failed: $(tail -5 "$out/reload.log")"
sshare -a -P -o Account,User,RawShares | sed 's/^/sshare|/'
sacctmgr -n -P show assoc format=Account,ParentName,User,Fairshare,GrpTRES | sed 's/^/assoc|/'

echo "== governor beside an sbatch job"
mkdir -p /etc/governor
cat > "$config" <<'EOF'
[capacity]
reserve = { cpu = 0.25, memory = "256M" }

[groups.alice]
users = ["alice"]

[sessions]
enabled = false

[daemon]
reconcile_interval = 2.0
EOF
$gov install-systemd >/dev/null || die "install-systemd failed"
systemctl start governor || die "systemctl start governor failed"
count_tasks() { [ "$($gov status --json | $py -c 'import json,sys; s=json.load(sys.stdin); print(sum(len(g["tasks"]) for g in s["groups"].values()))')" = "$1" ]; }
runuser -u alice -- "$gov" run --cpus 0.25 --memory 64M -- sleep 900 >>"$out/run.log" 2>&1 &
wait_for 120 "the governed task" count_tasks 1 || die "$(cat "$out/run.log")"
task_pid=$(pgrep -u alice -x sleep)
task_cg=$(cat "/proc/$task_pid/cgroup")
$gov status --json > "$out/status-before.json"

job=$(runuser -u bob -- sbatch --parsable -c 1 --mem 200M --wrap 'sleep 900') || die "sbatch failed"
running() { [ "$(squeue -h -j "$job" -o %T)" = RUNNING ]; }
wait_for 120 "job $job to run" running || die "job $job does not run: $(squeue -j "$job")"
# slurm_cgroups: every Slurm pid (daemons, slurmstepd, the job's processes) with its cgroup.
slurm_cgroups() {
    { pgrep -f '^(/usr/sbin/)?slurm(ctld|d|dbd|stepd)' ; scontrol listpids "$job" | awk 'NR > 1 {print $1}'; } \
        | sort -un | while read -r pid; do
        [ -r "/proc/$pid/cgroup" ] && echo "$pid $(cat "/proc/$pid/cgroup")"
    done | sort   # (as join wants)
}
slurm_cgroups > "$out/slurm-pids-start"
job_pids=$(scontrol listpids "$job" | awk 'NR > 1 {print $1}' | sort -un | tr '\n' ' ')
outside=$(for pid in $job_pids; do grep -q "/sysvm_slurmstepd.scope/job_$job/" "/proc/$pid/cgroup" || echo "$pid"; done)
[ -z "$outside" ] || fail "job $job's pids outside its Slurm cgroup: $outside"
# With foreign tenants (issue 36.2) governor sees the job: wait for it, then keep its status.
if $gov status --json | $py -c 'import json,sys; sys.exit("foreign" not in json.load(sys.stdin))'; then
    held() { $gov status --json | $py -c 'import json,sys; sys.exit(not any(f["held"] for f in json.load(sys.stdin)["foreign"].values()))'; }
    wait_for 60 "governor to count job $job" held || true
fi
$gov status --json > "$out/status-during.json"

pid=$(systemctl show -p MainPID --value governor)
systemctl restart governor || die "restart of governor failed"
[ "$(systemctl show -p MainPID --value governor)" != "$pid" ] || fail "governor kept its pid over a restart"
wait_for 60 "governor to re-adopt its task" count_tasks 1 || fail "governor lost its task over its restart"
running && job_after_governor=running || job_after_governor="$(squeue -h -j "$job" -o %T)"

slurmd_pid=$(systemctl show -p MainPID --value slurmd)
systemctl restart slurmd || die "restart of slurmd failed"
[ "$(systemctl show -p MainPID --value slurmd)" != "$slurmd_pid" ] || fail "slurmd kept its pid over a restart"
wait_for 120 "the node back after slurmd's restart" sh -c "sinfo -h -o %T | grep -qE '^(mixed|allocated)'" || true
kill -0 "$task_pid" && [ "$(cat "/proc/$task_pid/cgroup")" = "$task_cg" ] && count_tasks 1 \
    && task_after_slurmd=running || task_after_slurmd=gone
running && job_after_slurmd=running || job_after_slurmd="$(squeue -h -j "$job" -o %T)"

# No Slurm pid moved: each one still alive sits where it was (slurmd's new pid is its own).
slurm_cgroups > "$out/slurm-pids-end"
moved=$(join "$out/slurm-pids-start" "$out/slurm-pids-end" | awk '$2 != $3')
[ -z "$moved" ] || fail "Slurm pids moved: $moved"
echo "slurm beside governor: job after governor restart $job_after_governor, job after slurmd restart" \
     "$job_after_slurmd, task after slurmd restart $task_after_slurmd," \
     "slurm pids $(wc -l < "$out/slurm-pids-start") moved $(echo -n "$moved" | grep -c . || true)"

scancel "$job"
wait_for 120 "job $job to end" sh -c "[ -z \"\$(squeue -h -j $job -o %T 2>/dev/null)\" ]" || fail "job $job did not end"
if $gov status --json | $py -c 'import json,sys; sys.exit("foreign" not in json.load(sys.stdin))'; then
    gone() { $gov status --json | $py -c 'import json,sys; sys.exit(any(f["held"] for f in json.load(sys.stdin)["foreign"].values()))'; }
    wait_for 60 "governor to see job $job end" gone || true
fi
$gov status --json > "$out/status-after.json"

if [ "$failures" -gt 0 ]; then
    echo "FAILED: $failures check(s)"
    exit 1
fi
echo "OK: all checks passed"
