# Shared by the scripts of the systemd VM suite (sourced): counting failures, and polling.
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# wait_for SECONDS WHAT CMD…: poll CMD until it succeeds (the VM's CPU is emulated: be patient).
wait_for() {
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { fail "timed out waiting for $what"; return 1; }
        sleep 0.5
    done
}
