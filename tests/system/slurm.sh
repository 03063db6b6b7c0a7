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
"${SLURM_ONE_NODE:?the path of ../shared/vm/slurm-one-node, shared into the VM}" || die "slurm-one-node failed"
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

echo "time: ${SECONDS}s"
echo "== governor export slurm, loaded with sh"
install_governor
echo "time: ${SECONDS}s (governor installed)"
$gov export slurm "$repo/tests/system/slurm-tree.toml" > "$out/accounts.sh" || die "governor export slurm failed"
sh "$out/accounts.sh" > "$out/load.log" 2>&1 || fail "loading the export failed: $(tail -5 "$out/load.log")"
# Loaded again (as after a change): its adds say "Nothing new added" (and exit 1), its modifies
# set the same values; the sshare below is after both.
sh "$out/accounts.sh" > "$out/reload.log" 2>&1 || true
sshare -a -P -o Account,User,RawShares | sed 's/^/sshare|/'
sacctmgr -n -P show assoc format=Account,ParentName,User,Fairshare,GrpTRES | sed 's/^/assoc|/'

echo "time: ${SECONDS}s"
echo "== governor beside an sbatch job: alice's governed task, bob's job, both users governed (sessions on)"
mkdir -p /etc/governor
cat > "$config" <<'EOF'
[capacity]
reserve = { cpu = 0.25, memory = "256M" }

[groups.alice]
users = ["alice"]

[groups.bob]
users = ["bob"]

[daemon]
reconcile_interval = 2.0
EOF
$gov install-systemd >/dev/null || die "install-systemd failed"
systemctl start governor || die "systemctl start governor failed"
# count_tasks N: governor lists N tasks of `governor run` (sessions not counted).
count_tasks() { [ "$($gov status --json | $py -c 'import json,sys; s=json.load(sys.stdin); print(sum(not t["session"] for g in s["groups"].values() for t in g["tasks"]))')" = "$1" ]; }
cgroup_of() { cat "/proc/$1/cgroup" 2>/dev/null; }
runuser -u alice -- "$gov" run --cpus 0.25 --memory 64M -- sleep 900 >>"$out/run.log" 2>&1 &
wait_for 120 "the governed task" count_tasks 1 || die "$(cat "$out/run.log")"
task_pid=$($gov status --json | $py -c 'import json,sys; print(*(t["pid"] for t in json.load(sys.stdin)["groups"]["alice"]["tasks"] if not t["session"]))')
task_cg=$(cgroup_of "$task_pid")
$gov status --json > "$out/status-before.json"

# (in /tmp: bob may not write the shared checkout, and a job that cannot open its output ends)
job=$(cd /tmp && runuser -u bob -- sbatch --parsable -c 1 --mem 200M -o /dev/null --wrap 'sleep 900') || die "sbatch failed"
running() { [ "$(squeue -h -j "$job" -o %T)" = RUNNING ]; }
wait_for 120 "job $job to run" running || die "job $job does not run: $(squeue -j "$job")"
# slurm_cgroups: every Slurm pid (its daemons, slurmstepd, the job's processes: bob runs nothing
# else) with its cgroup, sorted as join wants.
slurm_cgroups() {
    { pgrep -f '^(/usr/sbin/)?slurm(ctld|d|dbd|stepd)'; pgrep -u bob; } | sort -u | while read -r pid; do
        if cg=$(cgroup_of "$pid"); then echo "$pid $cg"; fi   # (a pid may end meanwhile)
    done
}
# outside_job: the job's processes (bob's) not in the job's own cgroup.
outside_job() { for pid in $(pgrep -u bob); do cgroup_of "$pid" | grep -q "/sysvm_slurmstepd.scope/job_$job/" || echo "$pid"; done; }
# With foreign tenants (issue 36.2) governor sees the job: wait for it, then keep its status.
# (The scope stays a tenant between jobs, holding zeros: a held amount, not the key, counts.)
if $gov status --json | $py -c 'import json,sys; sys.exit("foreign" not in json.load(sys.stdin))'; then
    held() { $gov status --json | $py -c 'import json,sys; sys.exit(not any(any(f["held"].values()) for f in json.load(sys.stdin)["foreign"].values()))'; }
    wait_for 60 "governor to count job $job" held || true
fi
$gov status --json > "$out/status-during.json"
slurm_cgroups > "$out/slurm-pids-start"
outside_start=$(outside_job)
running && pgrep -u bob -x sleep >/dev/null || die "job $job ended early: $(sacct -j "$job" -o State,ExitCode -n)"

pid=$(systemctl show -p MainPID --value governor)
systemctl restart governor || die "restart of governor failed"
[ "$(systemctl show -p MainPID --value governor)" != "$pid" ] || fail "governor kept its pid over a restart"
wait_for 60 "governor to re-adopt its task" count_tasks 1 || fail "governor lost its task over its restart"
running && job_after_governor=running || job_after_governor="$(squeue -h -j "$job" -o %T)"

slurmd_pid=$(systemctl show -p MainPID --value slurmd)
systemctl restart slurmd || die "restart of slurmd failed"
[ "$(systemctl show -p MainPID --value slurmd)" != "$slurmd_pid" ] || fail "slurmd kept its pid over a restart"
wait_for 120 "the node back after slurmd's restart" sh -c "sinfo -h -o %T | grep -qE '^(mixed|allocated)'" || true
kill -0 "$task_pid" && [ "$(cgroup_of "$task_pid")" = "$task_cg" ] && count_tasks 1 \
    && task_after_slurmd=running || task_after_slurmd=gone
running && job_after_slurmd=running || job_after_slurmd="$(squeue -h -j "$job" -o %T)"

# No Slurm pid moved: each one still alive sits where it was (slurmd's new pid is its own), and
# no process of the job left the job's cgroup (test_slurm_vm.py judges these two).
slurm_cgroups > "$out/slurm-pids-end"
moved=$(join "$out/slurm-pids-start" "$out/slurm-pids-end" | awk '$2 != $3')
outside=$(echo $outside_start $(outside_job) | tr ' ' '\n' | sort -u | grep . || true)
echo "slurm beside governor: job after governor restart $job_after_governor, job after slurmd restart" \
     "$job_after_slurmd, task after slurmd restart $task_after_slurmd"
echo "slurm pids: $(wc -l < "$out/slurm-pids-start") seen, $(echo -n "$moved" | grep -c . || true) moved," \
     "$(echo -n "$outside" | grep -c . || true) of the job's outside its cgroup"
[ -z "$moved$outside" ] || { echo "moved: $moved"; echo "outside the job: $outside"; }

echo "time: ${SECONDS}s"
scancel "$job"
cancelled=$SECONDS
# (squeue -j lists an ended job too, until MinJobAge: ask for it running or completing)
wait_for 120 "job $job to end" sh -c "[ -z \"\$(squeue -h -j $job -t running,completing -o %T)\" ]" \
    || fail "job $job did not end"
# Slurm ends what is in the job's cgroup: a process taken out of it would outlive the job.
echo "job ended after $((SECONDS - cancelled))s: processes of its user left $(pgrep -u bob | wc -l)"
if $gov status --json | $py -c 'import json,sys; sys.exit("foreign" not in json.load(sys.stdin))'; then
    gone() { $gov status --json | $py -c 'import json,sys; sys.exit(any(any(f["held"].values()) for f in json.load(sys.stdin)["foreign"].values()))'; }
    wait_for 60 "governor to see job $job end" gone || true
fi
$gov status --json > "$out/status-after.json"

echo "time: ${SECONDS}s"
if [ "$failures" -gt 0 ]; then
    echo "FAILED: $failures check(s)"
    exit 1
fi
echo "OK: all checks passed"
