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

# install_governor: governor as a sysadmin installs it, a wheel in a venv under /opt, outside
# the checkout (whose path the unit may not see: PrivateTmp= hides /tmp). The VM has no network
# and no ensurepip: tests/system/test_systemd_vm.py builds the wheelhouse on the host, and pip
# runs from its own wheel. Sets $gov and $py.
install_governor() {
    local wheels=$PWD/build/vm-wheelhouse pip
    pip=$(ls "$wheels"/pip-*.whl 2>/dev/null | head -1)
    [ -n "$pip" ] || { echo "no pip wheel in $wheels: tests/system/test_systemd_vm.py builds it on the host"; exit 2; }
    python3 -m venv --without-pip /opt/governor
    /opt/governor/bin/python "$pip/pip" install --quiet --disable-pip-version-check --no-index \
        --find-links "$wheels" drf-governor
    gov=/opt/governor/bin/governor
    py=/opt/governor/bin/python
}
