"""What this kernel and machine can do for an emulation, found by trying, not by guessing.

Queueing disciplines are probed in a throwaway network namespace (``unshare --net``, which
vanishes with the probe), so nothing is left behind and no real interface is touched.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

QDISC_PROBES = {
    "netem": "tc qdisc add dev lo root netem delay 1ms",
    "htb": "tc qdisc add dev lo root handle 1: htb default 1",
    "tbf": "tc qdisc add dev lo root tbf rate 1mbit burst 32kbit latency 50ms",
    "clsact": "tc qdisc add dev lo clsact",
}
TOOLS = {"ovs-vsctl": ["ovs-vsctl", "--version"], "mnexec": ["mnexec", "-v"],
         "tcpdump": ["tcpdump", "--version"], "iperf3": ["iperf3", "--version"],
         "ethtool": ["ethtool", "--version"], "tc": ["tc", "-V"]}


def _run(command: list[str], timeout: float = 10) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None


def probe_qdiscs() -> dict[str, bool]:
    """Which queueing disciplines the kernel accepts, tried in one throwaway namespace."""
    script = "; ".join(f"{{ {command} >/dev/null 2>&1 && echo {name}=1 || echo {name}=0; "
                       f"tc qdisc del dev lo root >/dev/null 2>&1; "
                       f"tc qdisc del dev lo clsact >/dev/null 2>&1; }}"
                       for name, command in QDISC_PROBES.items())
    result = _run(["unshare", "--net", "sh", "-c", script])
    found = dict.fromkeys(QDISC_PROBES, False)
    if result is not None:
        for line in result.stdout.split():
            name, _, value = line.partition("=")
            if name in found:
                found[name] = value == "1"
    return found


def ovs_kernel_module() -> bool:
    """True when the openvswitch kernel module is loaded or loads now."""
    if Path("/sys/module/openvswitch").exists():
        return True
    result = _run(["modprobe", "openvswitch"])
    return result is not None and result.returncode == 0 and Path("/sys/module/openvswitch").exists()


def cpu_emulated(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True in a virtual machine whose CPU qemu emulates in software (TCG), where the guest
    runs tens of times slower than its host and timers fire late: ``EDGEBED_CPU_EMULATED=1``
    (the VM lane, scripts/vm.sh, sets it) or qemu's TCG CPU model in ``cpuinfo``."""
    if os.environ.get("EDGEBED_CPU_EMULATED") == "1":
        return True
    try:
        return "QEMU TCG CPU" in cpuinfo.read_text()
    except OSError:
        return False


def ovs_running() -> bool:
    """Both halves of Open vSwitch answer: the database server and the switch daemon."""
    database = _run(["ovs-vsctl", "--timeout=3", "show"])
    switch = _run(["ovs-appctl", "--timeout=3", "-t", "ovs-vswitchd", "version"])
    return all(r is not None and r.returncode == 0 for r in (database, switch))


def ovs_af_xdp() -> bool:
    """Open vSwitch was built with AF_XDP ports (its ``iface_types`` list ``afxdp``)."""
    result = _run(["ovs-vsctl", "--timeout=3", "get", "Open_vSwitch", ".", "iface_types"])
    return result is not None and result.returncode == 0 and "afxdp" in result.stdout


def tool_version(command: list[str]) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    result = _run(command)
    if result is None:
        return None
    text = (result.stdout or result.stderr).strip().splitlines()
    return text[0] if text else "present"


def cgroup_controllers() -> list[str] | None:
    """cgroup v2 controllers available, or None without a unified hierarchy."""
    path = Path("/sys/fs/cgroup/cgroup.controllers")
    return path.read_text().split() if path.exists() else None


def mininet_version() -> str | None:
    try:
        from mininet.net import VERSION
    except ImportError:
        return None
    return VERSION


def controller_framework() -> str | None:
    """The Ryu API the controller app will load from: os-ken (or Ryu where it runs)."""
    from importlib.metadata import PackageNotFoundError, version

    for package in ("os-ken", "ryu"):
        try:
            return f"{package} {version(package)}"
        except PackageNotFoundError:
            continue
    return None


@dataclass
class Capabilities:
    """The machine as an emulation platform, and what edgebed will use on it."""

    kernel: str
    python: str
    qdiscs: dict[str, bool]
    ovs_kernel_module: bool
    ovs_running: bool
    cgroup_v2: list[str] | None
    mininet: str | None
    controller: str | None = None
    cpu_emulated: bool = False
    ovs_af_xdp: bool = False
    tools: dict[str, str | None] = field(default_factory=dict)

    @property
    def ovs_datapath(self) -> str:
        """``kernel`` when the openvswitch module is there, else OVS's userspace datapath."""
        return "kernel" if self.ovs_kernel_module else "user"

    @property
    def impairment_backend(self) -> str:
        return "netem" if self.qdiscs.get("netem") else "fallback"

    def as_dict(self) -> dict:
        data = asdict(self)
        data["ovs_datapath"] = self.ovs_datapath
        data["impairment_backend"] = self.impairment_backend
        return data

    def problems(self) -> list[str]:
        """What stops a run on this machine, each with the fix."""
        found = []
        if self.mininet is None:
            found.append("Mininet is not importable: run 'make setup' (installs apt mininet and "
                         "a .venv that sees it)")
        if self.tools.get("mnexec") is None:
            found.append("mnexec is missing: apt-get install mininet")
        if not self.ovs_running:
            found.append("Open vSwitch is not running: run 'make setup' (starts it with ovs-ctl)")
        return found


def probe() -> Capabilities:
    return Capabilities(
        kernel=platform.release(),
        python=platform.python_version() + f" ({sys.executable})",
        qdiscs=probe_qdiscs(),
        ovs_kernel_module=ovs_kernel_module(),
        ovs_running=ovs_running(),
        cgroup_v2=cgroup_controllers(),
        mininet=mininet_version(),
        controller=controller_framework(),
        cpu_emulated=cpu_emulated(),
        ovs_af_xdp=ovs_af_xdp(),
        tools={name: tool_version(command) for name, command in TOOLS.items()},
    )
