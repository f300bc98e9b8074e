#!/usr/bin/env bash
# The VM lane (`make vm-test`): edgebed on a real Linux kernel with sch_netem and the openvswitch
# module, in a Debian VM under qemu, for machines whose own kernel has neither (the netem
# backend's tests skip there).
#
#   scripts/vm.sh            # as root, on the host: build the image if needed, boot, test
#   scripts/vm.sh key        # the image's cache key (what the image is built from, hashed)
#   scripts/vm.sh guest      # inside the VM, started by the VM's init: the job itself
#
# Host side: everything that does not need the guest's kernel is done on the host at native
# speed (an emulated CPU is 5-10 times slower). The image is a Debian root filesystem made with
# debootstrap (every apt package scripts/setup.sh needs, plus a kernel), then provisioned in a
# chroot by scripts/setup.sh --no-services itself, offline from a wheelhouse the host's pip
# prepared, and byte-compiled; cached under $EDGEBED_VM_CACHE on a key over everything that goes
# into it (`scripts/vm.sh key`). Each run stages the checkout as one tar file, byte-compiled by
# the host's Python (the guest's version), and boots the image read-only (qemu -snapshot) with KVM
# where a quick probe shows it works and TCG otherwise. Two 9p shares: the job (read-only) and
# the results folder (read-write). The VM has no network device: it needs none.
#
# Guest side: unpacks the checkout over the provisioned one (keeping its .venv), runs
# scripts/setup.sh (which finds everything installed and starts Open vSwitch on the kernel
# datapath), runs the tests that need this kernel, `edgebed doctor` (it must report netem and the
# kernel datapath) and `make demo`, and writes logs and the exit status into the results
# folder. The host's exit status is the guest's; a VM that never reports one fails.
#
# Settings (environment):
#   EDGEBED_VM_CACHE    image and wheelhouse cache     (/var/cache/edgebed/vm)
#   EDGEBED_VM_RESULTS  results folder                 (<checkout>/runs/vm-test)
#   EDGEBED_VM_TESTS    pytest arguments in the VM     (the tests that need a real kernel)
#   EDGEBED_VM_DEMO     0 skips `make demo` in the VM  (1)
#   EDGEBED_VM_ACCEL    kvm or tcg, instead of probing
#   EDGEBED_VM_MEMORY / EDGEBED_VM_CPUS                (3072 MiB / 2)
#   EDGEBED_VM_TIMEOUT  seconds before the VM is killed and the lane fails (3600)
#   EDGEBED_VM_BOOT_TIMEOUT  seconds for the guest's job to start before the boot is
#                       taken for hung and tried once more (600)
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
GUEST_PYTHON_MINOR=3.11  # bookworm's python3: the wheelhouse and the byte code are made for it
# The checkout's files the chroot's provisioning reads, and so part of the image's key: setup.sh
# and what it runs, and pyproject.toml (the dependencies pip installs; setup.sh's own stamp is
# over the whole file, so any change to it would make the guest's setup.sh install again).
IMAGE_INPUTS=(scripts/setup.sh scripts/build-compiled.sh topologies/impairments/wire_relay.c
              agents/send_engine.c pyproject.toml)
# Where the checkout lives in the VM: the editable install in the provisioned .venv points here.
GUEST_CHECKOUT=/root/edgebed

# PID 1 of the VM: mounts what a job needs, unpacks the job's checkout over the provisioned one
# (all but its .venv), runs its `vm.sh guest` (so the job is the checkout's, not the image's) and
# powers off.
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
mkdir -p /mnt/job /mnt/results
options=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$options,ro" job /mnt/job
mount -t 9p -o "$options" results /mnt/results
cd /root/edgebed && find . -mindepth 1 -maxdepth 1 ! -name .venv -exec rm -rf {} + &&
    tar -xf /mnt/job/checkout.tar && bash scripts/vm.sh guest
sync
mount -o remount,ro / 2>/dev/null
echo o > /proc/sysrq-trigger
sleep 60
EOF

image_packages() {
    { bash "$repo/scripts/setup.sh" --print-packages; printf '%s\n' "${VM_PACKAGES[@]}"; } | sort -u
}

# The checkout as the VM gets it, into the directory $1: the files git tracks or would (not
# .venv, runs or .git) and not the committed reports (most of its bytes; nothing in the VM reads
# them).
stage_checkout() {
    tar -C "$repo" --exclude=./.venv --exclude=./runs --exclude=./.git --exclude=./reports \
        --exclude='__pycache__' -cf - . | tar -C "$1" -xf -
}

# ---------------------------------------------------------------------------------------- host

# The image's cache key: a hash of everything that goes into it (the suite, the package list,
# the VM's init, the recipe below and the checkout files the provisioning reads). An image
# whose key is unchanged is the same image; any change builds a new one.
image_key() {
    {
        echo "$SUITE"
        image_packages
        printf '%s\n' "$GUEST_INIT" "$GUEST_CHECKOUT"
        declare -f build_image provision_root
        local input
        for input in "${IMAGE_INPUTS[@]}"; do
            printf '== %s\n' "$input"
            cat "$repo/$input"
        done
    } | sha256sum | cut -c1-16
}

install_host_tools() {
    local missing=()
    command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
    command -v qemu-img >/dev/null || missing+=(qemu-utils)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
    if [ "${#missing[@]}" -gt 0 ]; then
        say "installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null
    fi
}

# The host's Python for what the guest's Python runs (the wheelhouse, the checkout's byte
# code): it must be the guest's version.
host_python() {
    local python="$repo/.venv/bin/python"
    [ -x "$python" ] || python=/usr/bin/python3
    [ "$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$GUEST_PYTHON_MINOR" ] ||
        fail "the wheelhouse and byte code are made with the host's Python, which must be $GUEST_PYTHON_MINOR like the VM's ($SUITE); $python is not"
    echo "$python"
}

# The provisioning, in a chroot on the host: the checkout copied to where the VM keeps it,
# then scripts/setup.sh --no-services there, offline (EDGEBED_WHEELHOUSE: pip from the
# wheelhouse only, no apt-get, so a package debootstrap did not install is an error), exactly as
# on any fresh Debian; then everything the image's Pythons import byte-compiled, which under an
# emulated CPU would take most of a minute per Python start. Its own mount namespace: the
# mounts go when it ends, however it ends.
provision_root() {  # $1: the root filesystem, $2: the wheelhouse
    local root="$1" wheels="$2"
    mkdir -p "$root$GUEST_CHECKOUT" "$root/mnt/wheels"
    stage_checkout "$root$GUEST_CHECKOUT"
    unshare --mount --propagation private -- bash -euc '
        root="$1"
        mount -t proc proc "$root/proc"
        mount --bind /dev "$root/dev"
        mount --bind -o ro "$2" "$root/mnt/wheels"
        in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
        in_root EDGEBED_WHEELHOUSE=/mnt/wheels bash "$3/scripts/setup.sh" --no-services
        in_root python3 -m compileall -q -j 0 -x "/test/|/tests/" /usr/lib/python3 /usr/lib/python3.11 \
            "$3/.venv/lib" >/dev/null || true
    ' provision "$root" "$wheels" "$GUEST_CHECKOUT"
}

build_image() {  # $1: the image directory to create, $2: the wheelhouse
    local image="$1" build root size_mb begin=$SECONDS
    build="$(mktemp -d "$cache/build.XXXXXX")"
    root="$build/root"
    trap 'rm -rf "$build"' EXIT
    say "building the VM image (debootstrap $SUITE, $(image_packages | wc -l) packages and their dependencies)"
    debootstrap --variant=minbase --include="$(image_packages | paste -sd,)" \
        "$SUITE" "$root" "${EDGEBED_VM_MIRROR:-http://deb.debian.org/debian}" \
        > "$build/debootstrap.log" 2>&1 || { tail -20 "$build/debootstrap.log" >&2; fail "debootstrap failed"; }
    say "debootstrap done in $((SECONDS - begin)) s; provisioning it in a chroot with scripts/setup.sh --no-services"
    begin=$SECONDS
    provision_root "$root" "$2" 2>&1 | tee "$build/provision.log" | sed 's/^/vm: chroot: /'
    say "provisioned in $((SECONDS - begin)) s"
    printf '%s\n' "$GUEST_INIT" > "$root/sbin/edgebed-vm-init"
    chmod 755 "$root/sbin/edgebed-vm-init"
    echo edgebed-vm > "$root/etc/hostname"
    rm -f "$root"/var/cache/apt/archives/*.deb
    rm -rf "$root/root/.cache"
    cp "$root"/boot/vmlinuz-* "$build/vmlinuz"
    cp "$root"/boot/initrd.img-* "$build/initrd.img"
    # Room for the runs and the tests' captures on top of the system.
    size_mb=$(( $(du -sm "$root" | cut -f1) + 2048 ))
    mkfs.ext4 -q -F -L edgebed-vm -d "$root" "$build/root.img" "${size_mb}M" >/dev/null
    rm -rf "$root"
    image_packages > "$build/packages"
    mv "$build" "$image"
    trap - EXIT
    say "image ready: $image ($(du -sh "$image/root.img" | cut -f1) on disk)"
}

# pyproject.toml's dependencies, test extras and build requirements (the chroot installs
# edgebed editable, offline, so setuptools must be in the wheelhouse too), one a line: what
# the wheelhouse holds, so it is keyed on it (and not on the rest of pyproject.toml, whose tool
# settings change more often and install nothing).
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
    python="$(host_python)"
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
# 20 s.) The answer and why are kept for the host's uptime (its boot id): they change only with
# the host's kernel or KVM setup. Prints kvm or tcg; says which and why on stderr, so that a
# lane that is 5-10 times slower than it could be says so.
choose_accel() {  # $1: kernel
    local answer choice why
    if [ -n "${EDGEBED_VM_ACCEL:-}" ]; then
        say "accelerator: $EDGEBED_VM_ACCEL (EDGEBED_VM_ACCEL)" >&2
        echo "$EDGEBED_VM_ACCEL"
        return
    fi
    answer="$cache/accel-$(cat /proc/sys/kernel/random/boot_id)"
    if [ ! -f "$answer" ]; then
        rm -f "$cache"/accel-*
        if [ ! -e /dev/kvm ]; then
            echo "tcg there is no /dev/kvm" > "$answer"
        elif [ ! -w /dev/kvm ]; then
            echo "tcg /dev/kvm is not writable" > "$answer"
        elif timeout 20 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nodefaults \
                -display none -serial stdio -no-reboot -kernel "$1" \
                -append "console=ttyS0 panic=-1 root=/dev/edgebed-none" </dev/null 2>/dev/null |
                grep -q "Kernel panic"; then
            echo "kvm a kernel booted under KVM within 20 s" > "$answer"
        else
            echo "tcg /dev/kvm exists but KVM does not work (a kernel did not boot under it within 20 s)" > "$answer"
        fi
    fi
    read -r choice why < "$answer"
    if [ "$choice" = kvm ]; then
        say "accelerator: KVM ($why; kept in $answer)" >&2
    else
        say "accelerator: TCG, an emulated CPU 5-10 times slower than KVM (${why:-probed earlier}; kept in $answer, EDGEBED_VM_ACCEL=kvm forces KVM)" >&2
    fi
    echo "$choice"
}

# EDGEBED_VM_LOCK: the boot holds the lock (flock) from start to power-off. The emulated CPUs
# keep the host's cores busy the whole time, which would disturb other timing-sensitive runs
# sharing the machine.
locked() {
    if [ -n "${EDGEBED_VM_LOCK:-}" ]; then
        say "waiting for the lock $EDGEBED_VM_LOCK"
        flock "$EDGEBED_VM_LOCK" "$@"
    else
        "$@"
    fi
}

# The job the VM runs: its settings (read by the guest half) and the checkout as one tar file
# (one read over 9p instead of hundreds), byte-compiled here so that no Python start in the
# guest compiles the checkout's modules (the tar keeps the files' times, which the byte code is
# checked against).
stage_job() {  # $1: the job directory
    local job="$1" staged
    staged="$job/checkout"
    mkdir -p "$staged"
    stage_checkout "$staged"
    "$(host_python)" -m compileall -q -j 0 "$staged" >/dev/null
    tar -C "$staged" -cf "$job/checkout.tar" .
    rm -rf "$staged"
    {
        printf 'accel=%q\n' "$accel"
        printf 'tests=%q\n' "${EDGEBED_VM_TESTS:-$DEFAULT_TESTS}"
        printf 'demo=%q\n' "${EDGEBED_VM_DEMO:-1}"
    } > "$job/job.env"
}

boot() {  # boot JOB RESULTS: the test VM, booted from the image, its disk thrown away after
    local job="$1" results="$2" status=0 started=$SECONDS
    local qemu=(qemu-system-x86_64 -accel "$accel" -cpu "$cpu"
                -m "${EDGEBED_VM_MEMORY:-3072}" -smp "${EDGEBED_VM_CPUS:-2}"
                -nodefaults -display none -serial stdio -no-reboot -nic none
                -device virtio-rng-pci
                -kernel "$image/vmlinuz" -initrd "$image/initrd.img"
                -append "root=/dev/vda rw console=ttyS0 quiet panic=-1 init=/sbin/edgebed-vm-init"
                -drive "file=$image/root.img,if=virtio,format=raw" -snapshot
                -virtfs "local,path=$job,mount_tag=job,security_model=none,readonly=on"
                -virtfs "local,path=$results,mount_tag=results,security_model=none")
    local attempt
    for attempt in 1 2; do
        status=0
        rm -f "$results/qemu_started" "$results/qemu_pid" "$results/boot_hung"
        watch_boot "$results" &
        local watcher=$!
        # qemu_pid: timeout's, which passes a signal on to qemu (exec keeps the shell's pid).
        locked bash -c 'date +%s.%N > "$1/qemu_started"; echo $$ > "$1/qemu_pid"; shift; exec "$@"' \
            boot "$results" timeout "${EDGEBED_VM_TIMEOUT:-3600}" "${qemu[@]}" </dev/null |
            tee "$results/console.log" || status=$?
        kill "$watcher" 2>/dev/null || true
        wait "$watcher" 2>/dev/null || true
        [ -f "$results/boot_hung" ] && [ "$attempt" -eq 1 ] || break
        say "the guest's job had not started ${EDGEBED_VM_BOOT_TIMEOUT:-600} s after qemu did (a boot that hung without a word on the console: seen once under TCG, 3 Dec 2026); booting once more"
    done
    [ -f "$results/boot_hung" ] && fail "the guest's job did not start within ${EDGEBED_VM_BOOT_TIMEOUT:-600} s of qemu, twice; see $results/console.log"
    say "the VM ran for $((SECONDS - started)) s"
    grep -h "^=.* in [0-9.]*s" "$results/pytest.log" 2>/dev/null | tail -1 | sed 's/^/vm: pytest in the VM: /' || true
    first_test_after "$results"
    [ "$status" -eq 0 ] || fail "qemu failed or timed out (status $status); see $results/console.log"
    [ -f "$results/status" ] || fail "the VM reported no exit status; see $results/console.log"
    status="$(cat "$results/status")"
    # Each step's exit status and time, and the tests that failed, for a CI log that says why.
    [ -f "$results/steps.tsv" ] && say "steps in the VM (exit status, time): $(awk -F'\t' '{ printf "%s%s %s %s", sep, $1, $2, $3; sep = ", " }' "$results/steps.tsv")"
    if [ "$status" -ne 0 ]; then
        grep -E '^(FAILED|ERROR) ' "$results/pytest.log" 2>/dev/null | cut -c1-200 | sed 's/^/vm: in the VM: /' >&2 || true
        fail "the test VM failed (status $status): $(cat "$results/failed" 2>/dev/null); logs in $results"
    fi
}

# A guest whose job has not begun (its first line in guest.log) this long after qemu started
# has hung at boot: the job starts 35-84 s after qemu under TCG on this project's machine, and a
# boot on 3 Dec 2026 sat 18 minutes with nothing on the console until it was killed. Kills that
# qemu and leaves boot_hung for boot() to try once more.
watch_boot() {  # $1: results
    local results="$1" limit="${EDGEBED_VM_BOOT_TIMEOUT:-600}" waited=0
    until [ -f "$results/qemu_pid" ]; do sleep 1; done  # the lock may be held by someone else
    while [ ! -s "$results/guest.log" ]; do
        if [ "$waited" -ge "$limit" ]; then
            touch "$results/boot_hung"
            kill "$(cat "$results/qemu_pid")" 2>/dev/null || true
            return
        fi
        sleep 5
        waited=$((waited + 5))
    done
}

# Boot to first test: from qemu's start (the host's clock) to the first test's start (the
# guest's clock, which qemu sets from the host's at boot, to the second).
first_test_after() {  # $1: results
    local first
    first="$(awk -F'\t' '$2 == "start" { print $1; exit }' "$1/tests.tsv" 2>/dev/null)"
    [ -n "$first" ] && [ -f "$1/qemu_started" ] || return 0
    say "qemu started to the first test started: $(awk -v a="$(cat "$1/qemu_started")" -v b="$first" 'BEGIN { printf "%.0f", b - a }') s"
}

host_main() {
    [ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, chroot, the image cache); run it with sudo"
    local cache results job key requirements_key image wheels accel cpu
    cache="${EDGEBED_VM_CACHE:-/var/cache/edgebed/vm}"
    results="${EDGEBED_VM_RESULTS:-$repo/runs/vm-test}"
    mkdir -p "$cache"
    install_host_tools

    key="$(image_key)"
    image="$cache/image-$key"
    if [ -f "$image/root.img" ]; then
        say "reusing the VM image $image"
    else
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
        build_image "$image" "$wheels"
        for old in "$cache"/image-* "$cache"/provisioned-*; do
            [ "$old" = "$image" ] || rm -rf "$old"
        done
    fi

    rm -rf "$results"
    mkdir -p "$results"
    accel="$(choose_accel "$image/vmlinuz")"
    if [ "$accel" = kvm ]; then cpu=host; else cpu=max; fi
    job="$(mktemp -d "$cache/job.XXXXXX")"
    trap "rm -rf ${job@Q}" EXIT
    stage_job "$job"
    say "booting the VM ($accel; results in $results)"
    boot "$job" "$results"
    say "the VM lane passed; logs in $results"
}

# --------------------------------------------------------------------------------------- guest

guest_main() {
    local results=/mnt/results failed=()
    # Everything the job prints goes to the results folder and to the console (the host's log).
    exec > >(tee -a "$results/guest.log" > /dev/console) 2>&1
    # shellcheck source=/dev/null
    . /mnt/job/job.env
    say "guest: kernel $(uname -r), accel $accel, $(nproc) CPUs ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2-)), up $(cut -d' ' -f1 /proc/uptime) s"
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
    modprobe sch_netem
    # The service-start part of setup.sh (the chroot ran the rest): it finds everything
    # installed, starts Open vSwitch and loads its kernel module.
    step setup bash scripts/setup.sh
    # A test run on the userspace datapath or without netem would pass without testing what the
    # lane is for: both modules must be in before the tests start (edgebed doctor checks the
    # same from Python after them).
    step modules guest_modules
    if [ "${#failed[@]}" -eq 0 ]; then
        # $tests is pytest's arguments as shell words (EDGEBED_VM_TESTS='... -k "a and b"').
        eval "set -- $tests"
        step pytest guest_pytest "$results" "$@"
    fi
    step doctor guest_doctor "$results"
    if [ "$demo" = 1 ]; then
        step demo guest_demo "$results"
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

guest_modules() {  # sch_netem loaded and Open vSwitch on the kernel datapath
    local module
    for module in sch_netem openvswitch; do
        [ -d "/sys/module/$module" ] || { say "guest: kernel module $module not loaded"; return 1; }
    done
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
    # Each test's start and finish on the guest's clock (tests.tsv; the host reports boot to
    # first test from it), by a pytest plugin of a few lines kept out of the checkout.
    mkdir -p /tmp/edgebed-vm-plugin
    cat > /tmp/edgebed-vm-plugin/edgebed_vm_clock.py <<'PY'
import time

def _note(event, nodeid):
    with open("/mnt/results/tests.tsv", "a") as clock, open("/proc/uptime") as uptime:
        print(f"{time.time():.3f}", event, uptime.read().split()[0], nodeid, sep="\t", file=clock)

def pytest_runtest_logstart(nodeid, location):
    _note("start", nodeid)

def pytest_runtest_logfinish(nodeid, location):
    _note("finish", nodeid)
PY
    PYTHONPATH=/tmp/edgebed-vm-plugin .venv/bin/python -m pytest -ra -v -p no:cacheprovider \
        -p edgebed_vm_clock --junitxml="$results/pytest.xml" "$@" 2>&1 | tee "$results/pytest.log" || rc=$?
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
    key) image_key ;;
    guest) guest_main ;;
    *) fail "usage: scripts/vm.sh [host|key|guest]" ;;
esac
