"""The tc commands and relay settings behind impairments, and which links get wires.

The netem backend cannot run on a kernel without sch_netem; these tests pin down what it would
run, and the integration tests run it where the kernel has netem.
"""

import pytest

from experiments import scenarios
from topologies.impairments import tc
from topologies.impairments.backends import FallbackBackend, NetemBackend, needs_relay
from topologies.impairments.control import choose_backend, wired_links
from topologies.impairments.relay import relay_direction
from topologies.model import BurstLoss, Impairment


def test_loss_threshold_is_exact():
    assert tc.loss_threshold(0.2) == round(0.2 * 2**32)
    assert tc.loss_threshold(0.0) == 0
    assert tc.loss_threshold(1.0) == 2**32 - 1
    code = tc.loss_bytecode(0.05)
    # ld random; jge threshold -> pass; return STOLEN; return UNSPEC
    assert code == f"4,32 0 0 4294963256,53 1 0 {round(0.05 * 2**32)},6 0 0 4,6 0 0 4294967295,"


def test_shaping_with_rate_and_queue():
    commands = tc.shaping("eth1", 10e6, 50)
    assert commands[0] == "tc qdisc add dev eth1 root handle 1: htb default 1"
    assert "rate 10000000bit ceil 10000000bit burst 15000b cburst 15000b quantum 12500" in commands[1]
    assert commands[2] == "tc qdisc add dev eth1 parent 1:1 handle 10: pfifo limit 50"


def test_shaping_without_rate_puts_the_leaf_at_the_root():
    assert tc.shaping("eth1", None, 20) == ["tc qdisc add dev eth1 root handle 10: pfifo limit 20"]
    assert tc.shaping("eth1", 0, None) == []
    assert tc.shaping("eth1", None, None, leaf="netem delay 1us") == [
        "tc qdisc add dev eth1 root handle 10: netem delay 1us"]


def test_quantum_and_burst_stay_in_htb_range():
    assert tc.htb_quantum(1e9) == 200_000
    assert tc.htb_quantum(1e3) == 1514
    assert tc.htb_burst_bytes(1e9) == 1_500_000  # 12 ms at 1 Gbit/s
    assert tc.htb_burst_bytes(1e6) == 15_000  # ten frames


def test_netem_spec():
    spec = tc.netem_spec(Impairment(delay=0.05, jitter=0.01, distribution="pareto", loss=0.01))
    assert spec.startswith("netem delay 50000us 10000us distribution pareto loss random 1% ")
    assert "rate" not in spec
    ordered = tc.netem_spec(Impairment(delay=0.05, jitter=0.01, reorder=False, bw=5e6))
    assert "rate 5000000bit" in ordered
    burst = tc.netem_spec(Impairment(burst=BurstLoss(p=0.02, r=0.25)))
    assert "loss gemodel 2% 25% 100% 0%" in burst
    assert tc.netem_spec(Impairment(bw=1e6)) is None
    assert tc.netem_spec(Impairment(burst=BurstLoss(p=0, r=0))) is None


def test_netem_limit_holds_what_is_in_flight():
    # Unlimited: 10 Gbit/s of 1514-byte frames for 150 ms is ~124k frames on top of the queue.
    assert tc.netem_limit(Impairment(delay=0.15)) == 1000 + 123_845  # ceil(1e10 / 8 / 1514 * 0.15)
    assert tc.netem_limit(Impairment(delay=0.05, bw=10e6, queue=100)) == 100 + 42


def test_relay_settings():
    settings = relay_direction(Impairment(delay=0.02, jitter=0.005, reorder=False,
                                          burst=BurstLoss(p=0.1, r=0.5), loss=0.3, bw=1e6))
    assert settings == {"delay": 0.02, "jitter": 0.005, "distribution": "normal",
                        "reorder": False, "burst": {"p": 0.1, "r": 0.5, "bad_loss": 1.0,
                                                    "good_loss": 0.0},
                        # Room for 40 ms (delay + 4 jitter) at 10 Gbit/s in full frames: the
                        # rate limit (bw) sits after the relay.
                        "limit": 1000 + 33_026}
    cleared = relay_direction(Impairment(delay=0, burst=BurstLoss(p=0, r=0)))
    assert cleared["delay"] == 0 and cleared["burst"] is None and cleared["reorder"] is True


def test_which_impairments_need_the_relay():
    assert needs_relay(Impairment(delay=0.001))
    assert needs_relay(Impairment(burst=BurstLoss(p=0.1, r=0.5)))
    assert not needs_relay(Impairment(bw=1e6, loss=0.5, queue=10))
    assert not needs_relay(Impairment(delay=0, burst=BurstLoss(p=0, r=0.5)))
    assert not NetemBackend().needs_wire(Impairment(delay=1))
    assert FallbackBackend().needs_wire(Impairment(jitter=0.001, delay=0.002))


def test_merged_replaces_only_what_changes_and_zero_clears():
    start = Impairment(delay=0.05, loss=0.01, bw=5e6)
    changed = start.merged(Impairment(delay=0, bw=0))
    assert (changed.delay, changed.loss, changed.bw) == (0, 0.01, 0)
    assert changed.merged(Impairment(loss=0)).is_empty()
    assert Impairment(burst=BurstLoss(p=0, r=0.3)).is_empty()


WIRES = """
name: wires
duration: 10s
topology:
  nodes:
    a: {role: viewer}
    b: {role: edge}
    c: {role: edge}
    s1: {role: switch}
  links:
    - {endpoints: ["a:eth1", "s1:eth1"], reverse: {delay: 5ms}}
    - {endpoints: ["b:eth1", "s1:eth2"], bw: 10Mbps, loss: 1%}
    - {endpoints: ["c:eth1", "s1:eth3"]}
schedule:
  - {at: 2s, action: set, link: "c:eth1", direction: forward, set: {jitter: 1ms, delay: 2ms}}
  - {at: 3s, action: set, link: "b:eth1", set: {bw: 0}}
  - {at: 4s, action: node_down, node: c}
"""


def test_links_get_wires_for_what_they_start_with_or_are_scheduled_to_get():
    loaded = scenarios.loads(WIRES, "wires.yaml", {})
    assert wired_links(loaded, FallbackBackend()) == {0, 2}
    assert wired_links(loaded, NetemBackend()) == frozenset()


def test_schedule_events_are_resolved():
    events = scenarios.loads(WIRES, "wires.yaml", {}).schedule
    assert [(e.at, e.action, e.link, e.node, e.directions) for e in events] == [
        (2.0, "set", 2, None, ("forward",)), (3.0, "set", 1, None, ("forward", "reverse")),
        (4.0, "node_down", None, "c", ())]


def test_backend_choice():
    assert choose_backend("auto", True).name == "netem"
    assert choose_backend("auto", False).name == "fallback"
    assert choose_backend("fallback", True).name == "fallback"
    with pytest.raises(RuntimeError, match="no sch_netem"):
        choose_backend("netem", False)
