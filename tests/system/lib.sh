# Shared by the scripts of the systemd VM suite (sourced): counting failures, and polling.
failures=0
# A command failing under set -e ends a script with no word of its own (sessions.sh did, 6 s
# after alice's burner started, in two CI runs): say which, and with what status. (Not with
# set -E: a command substitution would then print this into what it captures.)
trap 'echo "FAIL: line $LINENO: $BASH_COMMAND exited $?"' ERR

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# section TITLE: a section's header line, with the seconds since the script began: where the
# suite's time goes, for the next cut (CI prints it).
section() { echo "== $* (at $SECONDS s)"; }

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
# (test_systemd_vm.py runs four in one) share the install.
# The venv is made without pip, and Debian's own pip wheel (python3-pip-whl, which python3-venv
# depends on) installs governor into it: python3 -m venv spent 116 of the install's 191 s under
# the emulated CPU installing and compiling a pip into the venv that nothing here runs again. The
# tree is the README's but for pip; the README's own lines run on the host in
# tests/integration/test_wheel_install.py.
install_governor() {
    local wheels=$PWD/build/vm-wheelhouse start=$SECONDS pip_wheel
    gov=/opt/governor/bin/governor
    if [ ! -x "$gov" ]; then
        ls "$wheels"/drf_governor-*.whl >/dev/null 2>&1 || { echo "no governor wheel in $wheels: tests/system/test_systemd_vm.py builds it on the host"; exit 2; }
        pip_wheel=$(ls /usr/share/python-wheels/pip-*.whl | tail -1)
        python3 -m venv --without-pip /opt/governor
        local venv=$((SECONDS - start))
        # --no-compile, then governor's own package compiled: what users who cannot write the
        # venv import (governor run); root's first imports cache the rest (rich, click). pip
        # compiled every package, pygments' lexers the most (on the host 5.3 s with, 3.3 without).
        /opt/governor/bin/python "$pip_wheel/pip" install --quiet --no-compile --no-index --find-links "$wheels" drf-governor
        /opt/governor/bin/python -m compileall -q /opt/governor/lib/python3*/site-packages/governor
        echo "install_governor: python3 -m venv $venv s, pip install $((SECONDS - start - venv)) s"
    fi
    py=/opt/governor/bin/python
}

# status_has PY-EXPR: the status object (s) makes the expression true.
status_has() { $gov status --json | $py -c "import json,sys; s=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }

# governor_paths: every path governor may make on a host, one a line, sorted (issue 44.1): its
# units and their drop-ins, the set-property drop-ins on governor's units and users' slices
# (50-<Property>.conf), the man pages, /etc/governor, /run/governor, /var/lib/governor (the
# history journal, issue 47), its cgroups. The same before
# install-systemd and after install-systemd --uninstall --purge.
governor_paths() {
    {
        find /etc/systemd/system /etc/systemd/system.control /run/systemd/system.control /run/systemd/transient \
            /usr/local/share/man \( -name '*governor*' -o -path '*/user-*.slice.d/50-*' \) 2>/dev/null
        find /etc/governor /run/governor /var/lib/governor 2>/dev/null
        find /sys/fs/cgroup -name '*governor*' 2>/dev/null
    } | sort
}

# same_paths BEFORE WHAT: fail, naming the difference, unless governor_paths is BEFORE again.
same_paths() {
    local after
    after=$(governor_paths)
    if [ "$1" = "$after" ]; then
        echo "$2: paths left 0"
    else
        fail "$2 left paths: $(diff <(echo "$1") <(echo "$after") | grep '^[<>]' | tr '\n' ' ')"
    fi
}

# changed_on_disk UNIT…: the units whose `systemctl status` tells the admin to run daemon-reload
# (issue 44.2: governor's set-property calls must leave none), space-separated; empty: none.
changed_on_disk() {
    local unit
    for unit; do
        systemctl status --no-pager -n0 "$unit" 2>&1 | grep -q "changed on disk" && printf '%s ' "$unit"
    done
    return 0
}
