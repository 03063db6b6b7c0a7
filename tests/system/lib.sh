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

# install_governor: governor as the README's offline install says, a wheel in a venv under /opt,
# outside the checkout (whose path the unit may not see: PrivateTmp= hides /tmp), from the
# wheelhouse tests/system/test_systemd_vm.py built on the host (`pip wheel -w wheelhouse ./`):
# the VM has no network. Sets $gov and $py. Once per boot: the scripts that share a boot
# (test_systemd_vm.py runs three in one) share the install, ~2 min under the emulated CPU.
install_governor() {
    local wheels=$PWD/build/vm-wheelhouse start=$SECONDS
    gov=/opt/governor/bin/governor
    if [ ! -x "$gov" ]; then
        ls "$wheels"/drf_governor-*.whl >/dev/null 2>&1 || { echo "no governor wheel in $wheels: tests/system/test_systemd_vm.py builds it on the host"; exit 2; }
        python3 -m venv /opt/governor
        local venv=$((SECONDS - start))
        /opt/governor/bin/pip install --quiet --no-index --find-links "$wheels" drf-governor
        echo "install_governor: python3 -m venv $venv s, pip install $((SECONDS - start - venv)) s"
    fi
    py=/opt/governor/bin/python
}
