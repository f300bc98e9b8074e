"""Emulated-CPU detection (topologies.capabilities.cpu_emulated), which selects the fidelity
tests' bounds for qemu's TCG: from the VM lane's variable or from qemu's TCG CPU model."""

from __future__ import annotations

from topologies.capabilities import cpu_emulated

TCG_CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: QEMU TCG CPU version 2.5+\n"
HOST_CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU\nflags\t\t: fpu hypervisor\n"


def test_tcg_cpu_model_is_emulated(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGEBED_CPU_EMULATED", raising=False)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(TCG_CPUINFO)
    assert cpu_emulated(cpuinfo)


def test_hardware_cpu_in_a_hypervisor_is_not_emulated(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGEBED_CPU_EMULATED", raising=False)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(HOST_CPUINFO)
    assert not cpu_emulated(cpuinfo)
    assert not cpu_emulated(tmp_path / "missing")


def test_the_vm_lanes_variable_says_emulated(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEBED_CPU_EMULATED", "1")
    assert cpu_emulated(tmp_path / "missing")
