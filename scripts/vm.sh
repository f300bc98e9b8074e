#!/usr/bin/env bash
# The VM lane (`make vm-test`): edgebed on a real Linux kernel with sch_netem and the openvswitch
# module, in a Debian VM under qemu, for machines whose own kernel has neither (the netem
# backend's tests skip there).
#
#   scripts/vm.sh            # as root, on the host: build the image if needed, boot, test
#   scripts/vm.sh guest      # inside the VM, started by the VM's init: the job itself
#
# Host side: builds a Debian root filesystem once with debootstrap (every apt package that
# scripts/setup.sh needs, plus a kernel), cached under $EDGEBED_VM_CACHE and rebuilt when its
# package list or init changes; prepares a wheelhouse of the Python dependencies with pip; boots
# the image read-only (qemu -snapshot) with KVM where a quick probe shows it works and TCG
# otherwise. Three 9p shares: the checkout (read-only), the wheelhouse (read-only) and the results
# folder (read-write). The VM has no network device: it needs none.
#
# Guest side: copies the checkout, runs scripts/setup.sh offline (EDGEBED_WHEELHOUSE), checks that
# `edgebed doctor` reports netem and the kernel datapath, runs the tests that need this kernel and
# `make demo`, and writes logs and the exit status into the results folder. The host's exit
# status is the guest's; a VM that never reports one fails.
#
# Settings (environment):
#   EDGEBED_VM_CACHE    image and wheelhouse cache     (/var/cache/edgebed/vm)
#   EDGEBED_VM_RESULTS  results folder                 (<checkout>/runs/vm-test)
#   EDGEBED_VM_TESTS    pytest arguments in the VM     (the tests that need a real kernel)
#   EDGEBED_VM_DEMO     0 skips `make demo` in the VM  (1)
#   EDGEBED_VM_ACCEL    kvm or tcg, instead of probing
#   EDGEBED_VM_MEMORY / EDGEBED_VM_CPUS                (3072 MiB / 2)
#   EDGEBED_VM_TIMEOUT  seconds before the VM is killed and the lane fails (3600)
#   EDGEBED_VM_MIRROR   Debian mirror for debootstrap  (http://deb.debian.org/debian)
#   EDGEBED_VM_LOCK     a lock file held (flock) while the VM runs, for shared machines
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf 'vm [%ss]: %s\n' "$SECONDS" "$*"; }
fail() { say "$*" >&2; exit 1; }

SUITE=bookworm
# The VM's own needs beside setup.sh's packages: a kernel with modules and what loads them, and
# make for `make demo`.
VM_PACKAGES=(linux-image-amd64 kmod make psmisc)
# The tests that need a real kernel: the netem backend's fidelity tests (they skip on a kernel
# without sch_netem), here over Open vSwitch's kernel datapath. `make demo` then runs a whole
# scenario with both. Everything else already runs on the host; under TCG each test takes about
# a minute, so the lane runs only these by default (EDGEBED_VM_TESTS runs others).
DEFAULT_TESTS="tests/integration/test_impairments.py -k netem"
GUEST_PYTHON_MINOR=3.11  # bookworm's python3: the wheelhouse is built for it

# PID 1 of the VM: mounts what a job needs, runs `vm.sh guest` from the shared checkout (so the
# job is the checkout's, not the image's) and powers off.
read -r -d '' GUEST_INIT <<'EOF' || true
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
# The initramfs hands over /sys, /dev and /proc already mounted (moved to the real root).
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mountpoint -q /dev/pts || mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 cgroup2 /sys/fs/cgroup
hostname edgebed-vm
ip link set lo up
modprobe 9pnet_virtio
modprobe 9p
mkdir -p /mnt/checkout /mnt/wheels /mnt/results
options=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$options,ro" checkout /mnt/checkout
mount -t 9p -o "$options,ro" wheels /mnt/wheels
mount -t 9p -o "$options" results /mnt/results
bash /mnt/checkout/scripts/vm.sh guest
sync
mount -o remount,ro / 2>/dev/null
echo o > /proc/sysrq-trigger
sleep 60
EOF

image_packages() {
    { bash "$repo/scripts/setup.sh" --print-packages; printf '%s\n' "${VM_PACKAGES[@]}"; } | sort -u
}

# ---------------------------------------------------------------------------------------- host

install_host_tools() {
    local missing=()
    command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
    if [ "${#missing[@]}" -gt 0 ]; then
        say "installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null
    fi
}

build_image() {  # $1: the image directory to create
    local image="$1" build root size_mb
    build="$(mktemp -d "$cache/build.XXXXXX")"
    root="$build/root"
    trap 'rm -rf "$build"' EXIT
    say "building the VM image (debootstrap $SUITE, $(image_packages | wc -l) packages and their dependencies; a few minutes)"
    debootstrap --variant=minbase --include="$(image_packages | paste -sd,)" \
        "$SUITE" "$root" "${EDGEBED_VM_MIRROR:-http://deb.debian.org/debian}" \
        > "$build/debootstrap.log" 2>&1 || { tail -20 "$build/debootstrap.log" >&2; fail "debootstrap failed"; }
    printf '%s\n' "$GUEST_INIT" > "$root/sbin/edgebed-vm-init"
    chmod 755 "$root/sbin/edgebed-vm-init"
    echo edgebed-vm > "$root/etc/hostname"
    rm -f "$root"/var/cache/apt/archives/*.deb
    cp "$root"/boot/vmlinuz-* "$build/vmlinuz"
    cp "$root"/boot/initrd.img-* "$build/initrd.img"
    # Room for the copied checkout, its .venv and the runs, on top of the system.
    size_mb=$(( $(du -sm "$root" | cut -f1) + 3072 ))
    mkfs.ext4 -q -F -L edgebed-vm -d "$root" "$build/root.img" "${size_mb}M"
    rm -rf "$root"
    image_packages > "$build/packages"
    mv "$build" "$image"
    trap - EXIT
    say "image ready: $image ($(du -sh "$image/root.img" | cut -f1) on disk)"
}

# pyproject.toml's dependencies, test extras and build requirements (the VM installs edgebed
# editable, offline, so setuptools must be in the wheelhouse too), one a line: what the
# wheelhouse holds and what the provisioned layer installed, so both are keyed on it (and not
# on the rest of pyproject.toml, whose tool settings change more often and install nothing).
python_requirements() {
    /usr/bin/python3 - "$repo/pyproject.toml" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))
wanted = (project["project"]["dependencies"] + project["project"]["optional-dependencies"]["test"]
          + project["build-system"]["requires"] + ["wheel"])
print("\n".join(wanted))
PY
}

build_wheelhouse() {  # $1: the wheelhouse directory to create
    local wheels="$1" build python requirements
    python="$repo/.venv/bin/python"
    [ -x "$python" ] || python=/usr/bin/python3
    [ "$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$GUEST_PYTHON_MINOR" ] ||
        fail "the wheelhouse is built with the host's Python, which must be $GUEST_PYTHON_MINOR like the VM's ($SUITE); $python is not"
    build="$(mktemp -d "$cache/wheels.XXXXXX")"
    trap 'rm -rf "$build"' EXIT
    requirements="$build/requirements.txt"
    python_requirements > "$requirements"
    say "building the wheelhouse for the VM ($(wc -l < "$requirements") requirements, with pip)"
    "$python" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$build/wheels" \
        -r "$requirements" > "$build/pip.log" 2>&1 || { tail -20 "$build/pip.log" >&2; fail "pip wheel failed"; }
    mv "$build/wheels" "$wheels"
    rm -rf "$build"
    trap - EXIT
}

# KVM only where it works: a kernel booting to its "no root filesystem" panic within seconds.
# (Where /dev/kvm exists but KVM is broken, qemu aborts or crawls; then TCG, after the probe's
# 20 s.) The answer is kept for the host's uptime (its boot id): it changes only with the host's
# kernel or KVM setup.
choose_accel() {  # $1: kernel
    local answer
    if [ -n "${EDGEBED_VM_ACCEL:-}" ]; then
        echo "$EDGEBED_VM_ACCEL"
        return
    fi
    answer="$cache/accel-$(cat /proc/sys/kernel/random/boot_id)"
    if [ ! -f "$answer" ]; then
        rm -f "$cache"/accel-*
        if [ -w /dev/kvm ] && timeout 20 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nodefaults \
                -display none -serial stdio -no-reboot -kernel "$1" \
                -append "console=ttyS0 panic=-1 root=/dev/edgebed-none" </dev/null 2>/dev/null |
                grep -q "Kernel panic"; then
            echo kvm > "$answer"
        else
            echo tcg > "$answer"
        fi
    fi
    cat "$answer"
}

# EDGEBED_VM_LOCK: each boot holds the lock (flock) from start to power-off. The emulated CPUs
# keep the host's cores busy the whole time, provisioning included, which would disturb other
# timing-sensitive runs sharing the machine.
locked() {
    if [ -n "${EDGEBED_VM_LOCK:-}" ]; then
        say "waiting for the lock $EDGEBED_VM_LOCK"
        flock "$EDGEBED_VM_LOCK" "$@"
    else
        "$@"
    fi
}

boot() {  # boot MODE DISK RESULTS [-snapshot]: one VM run of the guest job in MODE
    local mode="$1" disk="$2" results="$3" snapshot="${4:-}" status=0 started=$SECONDS
    # The job's settings, read by the guest half.
    {
        printf 'mode=%q\n' "$mode"
        printf 'accel=%q\n' "$accel"
        printf 'tests=%q\n' "${EDGEBED_VM_TESTS:-$DEFAULT_TESTS}"
        printf 'demo=%q\n' "${EDGEBED_VM_DEMO:-1}"
    } > "$results/job.env"
    local qemu=(qemu-system-x86_64 -accel "$accel" -cpu "$cpu"
                -m "${EDGEBED_VM_MEMORY:-3072}" -smp "${EDGEBED_VM_CPUS:-2}"
                -nodefaults -display none -serial stdio -no-reboot -nic none
                -device virtio-rng-pci
                -kernel "$image/vmlinuz" -initrd "$image/initrd.img"
                -append "root=/dev/vda rw console=ttyS0 quiet panic=-1 init=/sbin/edgebed-vm-init"
                -drive "file=$disk,if=virtio,format=qcow2" $snapshot
                -virtfs "local,path=$repo,mount_tag=checkout,security_model=none,readonly=on"
                -virtfs "local,path=$wheels,mount_tag=wheels,security_model=none,readonly=on"
                -virtfs "local,path=$results,mount_tag=results,security_model=none"
                -virtfs "local,path=$pycache,mount_tag=pycache,security_model=none")
    locked timeout "${EDGEBED_VM_TIMEOUT:-3600}" "${qemu[@]}" </dev/null | tee "$results/console.log" || status=$?
    say "the $mode VM ran for $((SECONDS - started)) s"
    grep -h "^=.* in [0-9.]*s" "$results/pytest.log" 2>/dev/null | tail -1 | sed 's/^/vm: pytest in the VM: /' || true
    [ "$status" -eq 0 ] || fail "qemu failed or timed out (status $status); see $results/console.log"
    [ -f "$results/status" ] || fail "the VM reported no exit status; see $results/console.log"
    status="$(cat "$results/status")"
    [ "$status" -eq 0 ] || fail "the $mode VM failed (status $status): $(cat "$results/failed" 2>/dev/null); logs in $results"
}

host_main() {
    [ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, the image cache); run it with sudo"
    local cache results key requirements_key image wheels provisioned pycache accel cpu
    cache="${EDGEBED_VM_CACHE:-/var/cache/edgebed/vm}"
    results="${EDGEBED_VM_RESULTS:-$repo/runs/vm-test}"
    mkdir -p "$cache"
    install_host_tools

    key="$( { echo "$SUITE"; image_packages; printf '%s\n' "$GUEST_INIT"; } | sha256sum | cut -c1-16)"
    image="$cache/image-$key"
    if [ -f "$image/root.img" ]; then
        say "reusing the VM image $image"
    else
        build_image "$image"
        for old in "$cache"/image-*; do
            [ "$old" = "$image" ] || rm -rf "$old"
        done
    fi
    requirements_key="$(python_requirements | sha256sum | cut -c1-16)"
    wheels="$cache/wheels-$requirements_key"
    if [ -d "$wheels" ]; then
        say "reusing the wheelhouse $wheels"
    else
        build_wheelhouse "$wheels"
        for old in "$cache"/wheels-*; do
            [ "$old" = "$wheels" ] || rm -rf "$old"
        done
    fi

    rm -rf "$results"
    mkdir -p "$results"
    accel="$(choose_accel "$image/vmlinuz")"
    if [ "$accel" = kvm ]; then cpu=host; else cpu=max; fi

    # Provisioning: scripts/setup.sh on the fresh image, offline, kept as a copy-on-write layer
    # over it, made again when the image, pyproject.toml or setup.sh change. Installing the
    # Python packages under TCG takes many minutes; the test boot runs setup.sh again on top of
    # this layer, where it finds everything installed.
    provisioned="$cache/provisioned-$( { echo "$key" "$requirements_key"; cat "$repo/scripts/setup.sh"; } | sha256sum | cut -c1-16).qcow2"
    # Python's byte code for what the guest imports, kept across boots (the test boot's disk is
    # a throwaway snapshot, and the layer is installed without byte-compiling): under TCG,
    # compiling the imports of one Python start takes most of a minute.
    pycache="${provisioned%.qcow2}.pycache"
    mkdir -p "$pycache"
    if [ -f "$provisioned" ]; then
        say "reusing the provisioned VM layer $provisioned"
    else
        say "provisioning a fresh VM with scripts/setup.sh, offline ($accel; under TCG many minutes)"
        mkdir -p "$results/provision"
        qemu-img create -q -f qcow2 -b "$image/root.img" -F raw "$provisioned.part"
        boot provision "$provisioned.part" "$results/provision"
        mv "$provisioned.part" "$provisioned"
        for old in "$cache"/provisioned-*.qcow2 "$cache"/provisioned-*.pycache; do
            [ "$old" = "$provisioned" ] || [ "$old" = "$pycache" ] || rm -rf "$old"
        done
    fi

    say "booting the VM for the tests ($accel; results in $results)"
    boot test "$provisioned" "$results" -snapshot
    say "the VM lane passed; logs in $results"
}

# --------------------------------------------------------------------------------------- guest

guest_main() {
    local results=/mnt/results work=/root/edgebed failed=()
    # Everything the job prints goes to the results folder and to the console (the host's log).
    exec > >(tee -a "$results/guest.log" > /dev/console) 2>&1
    # shellcheck source=/dev/null
    . "$results/job.env"
    say "guest: kernel $(uname -r), accel $accel, $(nproc) CPUs ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2-))"
    # The tests' bounds for an emulated CPU apply (topologies.capabilities.cpu_emulated).
    if [ "$accel" = tcg ]; then export EDGEBED_CPU_EMULATED=1; fi
    step() {  # step NAME COMMAND...: run one step, log it, remember a failure
        local name="$1" begin=$SECONDS rc=0
        shift
        say "guest: step $name"
        "$@" || rc=$?
        printf '%s\t%s\t%ss\n' "$name" "$rc" "$((SECONDS - begin))" >> "$results/steps.tsv"
        [ "$rc" -eq 0 ] || failed+=("$name")
        return 0
    }
    # A private, writable copy of the read-only checkout (setup.sh puts .venv beside it). The
    # test boot refreshes the provisioned copy: everything but its .venv comes from the share.
    mkdir -p "$work"
    find "$work" -mindepth 1 -maxdepth 1 ! -name .venv -exec rm -rf {} +
    # Not the committed reports (most of the checkout's bytes; nothing here reads them).
    tar -C /mnt/checkout --exclude=./.venv --exclude=./runs --exclude=./.git --exclude=./reports \
        -cf - . | tar -C "$work" -xf -
    cd "$work"
    mkdir -p /mnt/pycache
    if mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 pycache /mnt/pycache; then
        export PYTHONPYCACHEPREFIX=/mnt/pycache
    fi
    modprobe sch_netem
    step setup env EDGEBED_WHEELHOUSE=/mnt/wheels bash scripts/setup.sh
    if [ "$mode" = test ]; then
        step doctor guest_doctor "$results"
        # $tests is pytest's arguments as shell words (EDGEBED_VM_TESTS='... -k "a and b"').
        eval "set -- $tests"
        step pytest guest_pytest "$results" "$@"
        if [ "$demo" = 1 ]; then
            step demo guest_demo "$results"
        fi
    fi
    if [ "${#failed[@]}" -gt 0 ]; then
        echo "${failed[*]}" > "$results/failed"
        echo 1 > "$results/status"
    else
        echo 0 > "$results/status"
    fi
    say "guest: done, failed steps: ${failed[*]:-none}"
    sync
}

guest_doctor() {  # edgebed doctor must see netem and choose the kernel datapath
    local results="$1"
    .venv/bin/edgebed doctor | tee "$results/doctor.txt" || return 1
    .venv/bin/edgebed doctor --json > "$results/doctor.json" || return 1
    .venv/bin/python - "$results/doctor.json" <<'PY'
import json, sys
found = json.load(open(sys.argv[1]))
wrong = {key: found[key] for key, want in (("impairment_backend", "netem"), ("ovs_datapath", "kernel"))
         if found[key] != want}
if wrong:
    sys.exit(f"edgebed doctor in the VM: expected netem and the kernel datapath, found {wrong}")
PY
}

guest_pytest() {  # the tests, none of them skipped: a skip here is a test that never ran
    local results="$1" rc=0
    shift
    .venv/bin/python -m pytest -ra -v -p no:cacheprovider --junitxml="$results/pytest.xml" "$@" \
        2>&1 | tee "$results/pytest.log" || rc=$?
    # The tests' own logs (relays, agents) come back too.
    cp -r /tmp/pytest-of-root "$results/pytest-tmp" 2>/dev/null || true
    # What each test measured (its `measured` properties), passed or failed, one line each.
    .venv/bin/python - "$results/pytest.xml" > "$results/measured.tsv" <<'PY' || true
import sys
import xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")),
                   "passed")
    for prop in case.iter("property"):
        print(case.get("name"), outcome, case.get("time"), prop.get("value"), sep="\t")
PY
    [ "$rc" -eq 0 ] || return "$rc"
    .venv/bin/python - "$results/pytest.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
suites = ET.parse(sys.argv[1]).getroot()
skipped = [f"{case.get('classname')}::{case.get('name')}" for case in suites.iter("testcase")
           if case.find("skipped") is not None]
if skipped:
    sys.exit("tests skipped in the VM, where everything they need exists:\n  " + "\n  ".join(skipped))
PY
}

guest_demo() {  # make demo on the kernel datapath with netem; its run directory comes back
    local results="$1" rc=0 run
    make demo 2>&1 | tee "$results/demo.log" || rc=$?
    run="$(ls -dt runs/*/ 2>/dev/null | head -1)"
    [ -n "$run" ] && cp -r "$run" "$results/demo-run"
    [ "$rc" -eq 0 ] || return "$rc"
    [ -n "$run" ] || { say "make demo left no run directory"; return 1; }
    .venv/bin/python - "$run/manifest.json" <<'PY'
import json, sys
backends = json.load(open(sys.argv[1]))["backends"]
if backends.get("ovs_datapath") != "kernel":
    sys.exit(f"the demo ran on the {backends.get('ovs_datapath')} datapath, not the kernel one")
print("demo backends:", backends)
PY
}

case "${1:-host}" in
    host) host_main ;;
    guest) guest_main ;;
    *) fail "usage: scripts/vm.sh [host|guest]" ;;
esac
