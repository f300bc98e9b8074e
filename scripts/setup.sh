#!/usr/bin/env bash
# One setup for every place edgebed runs: this machine, CI, and the Vagrant VM's provisioner.
# Installs what is missing (apt packages, a .venv that can import the distribution's Mininet,
# the Python dependencies), starts Open vSwitch with the kernel datapath where the openvswitch
# module loads and the userspace datapath where it does not, and says which.
# Idempotent and quick when nothing is missing. Needs root (apt, OVS).
#
#   scripts/setup.sh                    # as root: set this machine up
#   scripts/setup.sh --print-packages   # the apt packages it needs, one a line (scripts/vm.sh
#                                       # bakes them into the VM image)
#   scripts/setup.sh --no-services      # everything but starting Open vSwitch and loading its
#                                       # module: for a root filesystem being built in a chroot
#                                       # (scripts/vm.sh), whose kernel is not the one running
#   EDGEBED_WHEELHOUSE=DIR scripts/setup.sh
#       offline: Python packages only from the wheels in DIR (no index), and no apt-get: a
#       missing apt package is an error. The VM lane (scripts/vm.sh) runs it this way.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv"
# python3-setuptools: Mininet 2.3.0 imports distutils, which Python 3.12 (Ubuntu 24.04) only
# has through setuptools' shim. tshark: the tests check the shipped Wireshark dissector with it.
packages=(mininet openvswitch-switch iperf3 tcpdump ethtool iproute2 iputils-ping procps
          util-linux python3-venv python3-pip python3-setuptools tshark)
# Wanted, not needed: gcc and libc6-dev build the compiled wire relay and send engine
# (scripts/build-compiled.sh); without them delayed links use the Python relay and paced agents
# send from Python, slower, and setup says so instead of failing.
optional_packages=(gcc libc6-dev)

say() { printf 'setup: %s\n' "$*"; }

services=1
case "${1:-}" in
    --print-packages)
        printf '%s\n' "${packages[@]}" "${optional_packages[@]}"
        exit 0 ;;
    --no-services) services=0 ;;
    "") ;;
    *) say "usage: scripts/setup.sh [--print-packages|--no-services]" >&2; exit 2 ;;
esac
wheelhouse="${EDGEBED_WHEELHOUSE:-}"
if [ -n "$wheelhouse" ] && [ ! -d "$wheelhouse" ]; then
    say "EDGEBED_WHEELHOUSE=$wheelhouse is not a directory" >&2
    exit 2
fi

if [ "$(id -u)" -ne 0 ]; then
    say "needs root (apt-get, Open vSwitch, network namespaces); run it with sudo" >&2
    exit 3
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
missing=()
for package in "${packages[@]}"; do
    installed "$package" || missing+=("$package")
done
missing_optional=()
for package in "${optional_packages[@]}"; do
    installed "$package" || missing_optional+=("$package")
done
if [ "${#missing[@]}" -gt 0 ] && [ -n "$wheelhouse" ]; then
    say "offline (EDGEBED_WHEELHOUSE set) and these apt packages are missing: ${missing[*]}" >&2
    exit 1
fi
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # policy-rc.d-style failures to start services inside containers are handled below.
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "${#missing_optional[@]}" -gt 0 ] && [ -z "$wheelhouse" ]; then
    say "installing ${missing_optional[*]}"
    export DEBIAN_FRONTEND=noninteractive
    [ "${#missing[@]}" -gt 0 ] || apt-get update -qq || true
    apt-get install -y -qq --no-install-recommends "${missing_optional[@]}" >/dev/null \
        || say "WARNING: could not install ${missing_optional[*]}" >&2
fi

# The venv uses the distribution's python3 (the one apt's Mininet is built for) and sees its
# site-packages, so `import mininet` works inside it.
stamp="$venv/.edgebed-installed"
want="$(sha256sum "$repo/pyproject.toml" | cut -c1-16)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "creating $venv and installing edgebed with its dependencies"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    pip_source=()
    if [ -n "$wheelhouse" ]; then
        say "offline: Python packages from the wheelhouse $wheelhouse"
        pip_source=(--no-index --find-links "$wheelhouse")
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${pip_source[@]}" -e "$repo[test]"
    echo "$want" > "$stamp"
fi
"$venv/bin/python" -c "import mininet.net" || { say "the venv cannot import Mininet" >&2; exit 1; }

# The compiled wire relay: the Python one is accurate only to ~7,500 packets/s per direction on
# two cores. Without a compiler, or if it does not build, the Python relay stays in use, said
# here and by every run (topologies/impairments/relay.py).
bash "$repo/scripts/build-compiled.sh" relay "$venv/bin/edgebed-wire-relay"
# The paced senders' send engine: a paced packet sent from Python costs ~90 us of CPU, from it a
# few. Without it the agents send from Python, said by each agent that would have used it.
bash "$repo/scripts/build-compiled.sh" sender "$venv/bin/edgebed-send-engine"

if [ "$services" -eq 0 ]; then
    say "installed; Open vSwitch not started (--no-services)"
    exit 0
fi
# Open vSwitch: start it unless it answers already (systemd starts it on Ubuntu).
if ! ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
    say "starting Open vSwitch"
    /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null 2>&1 || true
    ovs-vsctl --timeout=10 show >/dev/null || { say "Open vSwitch did not start" >&2; exit 1; }
fi
if [ -d /sys/module/openvswitch ] || modprobe openvswitch 2>/dev/null; then
    say "Open vSwitch $(ovs-vsctl --version | head -1 | awk '{print $NF}') running, kernel datapath"
else
    say "Open vSwitch $(ovs-vsctl --version | head -1 | awk '{print $NF}') running, userspace datapath (this kernel has no openvswitch module)"
fi
