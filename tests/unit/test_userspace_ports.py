"""How the userspace switch reads its ports: AF_XDP ports refused where they cannot run (no
AF_XDP in this Open vSwitch, or too little memory to lock) before anything is built, and their
rings' drops read from the interface statistics."""

from __future__ import annotations

import textwrap

import pytest

from experiments import runner, scenarios
from topologies import capabilities, network
from topologies.naming import RunNames

SCENARIO = """
name: two-hosts
topology:
  subnet: 10.0.0.0/24
  nodes:
    h1: {role: viewer}
    h2: {role: edge}
    s1: {role: switch}
    s2: {role: switch}
  links:
    - endpoints: ["h1:eth1", "s1:eth1"]
    - endpoints: ["s1:eth2", "s2:eth1"]
    - endpoints: ["h2:eth1", "s2:eth2"]
emulation: {userspace_ports: PORTS}
"""


def _load(directory, ports: str):
    path = directory / f"two-hosts-{ports}.yaml"
    path.write_text(textwrap.dedent(SCENARIO.replace("PORTS", ports)))
    return scenarios.load(path, {})


@pytest.fixture
def scenario(tmp_path):
    return _load(tmp_path, "af_xdp")


def test_only_the_queues_receive_drops_count():
    statistics = {"rx_packets": 900, "rx_dropped": 4, "tx_dropped": 2,
                  "xsk_queue_0_rx_dropped": 7, "xsk_queue_1_rx_dropped": 5,
                  "xsk_queue_0_rx_invalid_descs": 3, "xsk_queue_0_tx_invalid_descs": 1}
    assert network.af_xdp_receive_drops(statistics) == 12
    assert network.af_xdp_receive_drops({"rx_packets": 10}) == 0


def test_ports_that_would_lock_most_of_the_memory_are_refused_before_building(scenario,
                                                                              monkeypatch):
    four_ports = 4 * network.AF_XDP_PORT_MEMORY
    monkeypatch.setattr(network, "available_memory", lambda: int(four_ports / 0.75) - 1)

    def build(*arguments, **options):
        raise AssertionError("Mininet was asked to build a network the memory cannot hold")

    monkeypatch.setattr(network, "Mininet", build)
    run_network = network.ScenarioNetwork(scenario, RunNames("eb12ab"), "user",
                                          userspace_ports="af_xdp")
    with pytest.raises(RuntimeError) as refused:
        run_network.start()
    message = str(refused.value)
    assert message.startswith(f"{scenario.source}: emulation.userspace_ports: af_xdp")
    assert f"{four_ports >> 20} MiB for this scenario's 4 ports" in message


def test_the_memory_a_scenario_may_lock_passes(scenario, monkeypatch):
    monkeypatch.setattr(network, "available_memory",
                        lambda: int(4 * network.AF_XDP_PORT_MEMORY / 0.75) + 1)
    network.ScenarioNetwork(scenario, RunNames("eb12ab"), "user",
                            userspace_ports="af_xdp")._check_af_xdp_memory()


def test_the_kernel_datapath_ignores_the_setting(scenario):
    assert not network.ScenarioNetwork(scenario, RunNames("eb12ab"), "kernel",
                                       userspace_ports="af_xdp").af_xdp


def _machine(af_xdp: bool) -> capabilities.Capabilities:
    return capabilities.Capabilities(kernel="6", python="3", qdiscs={}, ovs_kernel_module=False,
                                     ovs_running=True, cgroup_v2=None, mininet="2.3.0",
                                     ovs_af_xdp=af_xdp)


def test_af_xdp_without_it_in_open_vswitch_is_refused_with_the_file_and_field(scenario,
                                                                              tmp_path):
    with pytest.raises(RuntimeError, match="emulation.userspace_ports: af_xdp, but this Open "
                                           "vSwitch has no AF_XDP ports") as refused:
        runner._check_userspace_ports(scenario, "user", _machine(af_xdp=False))
    assert str(refused.value).startswith(str(scenario.source))
    runner._check_userspace_ports(scenario, "user", _machine(af_xdp=True))
    runner._check_userspace_ports(scenario, "kernel", _machine(af_xdp=False))
    runner._check_userspace_ports(_load(tmp_path, "packet_socket"), "user",
                                  _machine(af_xdp=False))
