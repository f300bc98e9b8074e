"""How drops are attributed (topologies.impairments.drops) and when emulator-made loss makes
a run's fidelity verdict invalid (experiments.measurements)."""

import json

from experiments import measurements
from topologies import switch_sockets
from topologies.impairments import drops
from topologies.model import BurstLoss, EmulatorLossLimit, Impairment


def test_root_qdisc_counters_include_what_their_children_dropped():
    output = json.dumps([
        {"kind": "htb", "handle": "1:", "root": True, "packets": 900, "drops": 12},
        {"kind": "pfifo", "handle": "10:", "parent": "1:1", "packets": 900, "drops": 12},
        {"kind": "clsact", "handle": "ffff:", "parent": "ffff:fff1", "packets": 0, "drops": 0}])
    assert drops.root_qdisc(output) == (900, 12)
    assert drops.root_qdisc("") == (0, 0)
    assert drops.root_qdisc("Cannot find device") == (0, 0)


def test_interface_counters_are_what_each_veth_sent_and_dropped():
    output = json.dumps([{"ifname": "wa", "stats64": {"tx": {"packets": 10, "dropped": 3}}},
                         {"ifname": "lo", "stats64": {"tx": {"packets": 0, "dropped": 0}}}])
    assert drops.interface_counters(output) == {"wa": (10, 3), "lo": (0, 0)}


# ``ss -0 -a -m -p`` (and with ``-e``, which wraps the details) on this machine during a run,
# drop counts edited in.
SS_PACKET_SOCKETS = """\
Netid  State  Recv-Q Send-Q Local Address:Port   Peer Address:PortProcess
p_raw  UNCONN 0      0               [0]:*                  *     users:(("ovs-vswitchd",pid=25014,fd=70)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)
p_raw  UNCONN 0      0     *:eb5c20s2p10                    *     users:(("ovs-vswitchd",pid=25014,fd=40)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o176,bl0,d13)
p_raw  UNCONN 0      0      *:eb5c20s2p3                    *     users:(("ovs-vswitchd",pid=25014,fd=41)) ino:86602073 sk:13
\tver:0 cpy_thresh:0 flags( running auxdata ) skmem:(r0,rb212992,t0,tb212992,f0,w0,o176,bl0,d2)
p_raw  UNCONN 0      0      *:eb5c20s2p1                    *     users:(("ovs-vswitchd",pid=25014,fd=42)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o176,bl0,d0)
p_raw  UNCONN 0      0      *:eb5c20h1-eth0                 *     users:(("tcpdump",pid=7,fd=3)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d99)
"""


def test_the_userspace_switchs_sockets_by_port():
    sockets = switch_sockets.parse(SS_PACKET_SOCKETS)
    assert {name: found.drops for name, found in sockets.items()} == {
        "eb5c20s2p10": 13, "eb5c20s2p3": 2, "eb5c20s2p1": 0}  # not tcpdump's, not unbound
    assert sockets["eb5c20s2p3"] == switch_sockets.SwitchSocket("eb5c20s2p3", 25014, 41,
                                                                212992, 2)
    assert switch_sockets.parse("") == {}
    direction = drops.DirectionDrops(switch=13)
    assert direction.emulator_made == 13 and direction.record()["switch"] == 13


def test_qdisc_drops_under_a_rate_are_congestion_others_are_emulator_made():
    direction = drops.DirectionDrops()
    drops.add_qdisc_drops(direction, 5, Impairment(bw=1e6), "fallback")
    drops.add_qdisc_drops(direction, 7, Impairment(queue=10), "fallback")
    drops.add_qdisc_drops(direction, 11, Impairment(loss=0.1), "netem")
    drops.add_qdisc_drops(direction, 13, Impairment(delay=0.1), "netem")
    assert (direction.rate_limit, direction.configured, direction.qdisc) == (5, 11, 20)
    assert direction.emulator_made == 20


def test_relay_drops_by_cause():
    direction = drops.DirectionDrops()
    drops.add_relay_statistics(direction, {"dropped_receive_queue": 40, "dropped_queue_full": 2,
                                           "dropped_oversize": 1, "dropped_loss": 9,
                                           "dropped_down": 3})
    assert direction.emulator_made == 43 and direction.configured == 12


def test_mean_configured_loss():
    assert drops.mean_loss(Impairment(loss=0.02)) == 0.02
    assert drops.mean_loss(Impairment(burst=BurstLoss(p=0.01, r=0.09))) == 0.1
    assert drops.mean_loss(Impairment(delay=0.1)) == 0


def entry(offered: int, emulator_made: int, configured_loss: float) -> dict:
    figures = drops.DirectionDrops(offered=offered, receive_queue=emulator_made,
                                   configured_loss=configured_loss).record()
    return {"link": 3, "endpoints": ["e1:eth2", "e2:eth2"], "direction": "reverse", **figures}


def test_emulator_made_loss_past_the_limit_flags_the_run():
    limit = EmulatorLossLimit()  # 10 % of the configured loss, at least 0.1 %
    losses = [entry(10_000, 10, 0.0), entry(10_000, 11, 0.0), entry(10_000, 50, 0.05),
              entry(10_000, 51, 0.05)]
    flags = measurements.emulator_loss_flags(losses, limit)
    assert [e["over_limit"] for e in losses] == [False, True, False, True]
    assert len(flags) == 2
    assert flags[0].startswith("emulator-made loss on link 3 (e2:eth2 -> e1:eth2): 11 of "
                               "10000 frames (0.11%: receive queue 11), above the limit of "
                               "0.10%")
    assert "configured loss 5.00%" in flags[1]


def test_the_limit_is_the_scenarios():
    strict = EmulatorLossLimit(relative=0, absolute=0)
    losses = [entry(10_000, 1, 0.0)]
    assert measurements.emulator_loss_flags(losses, strict)
    assert not measurements.emulator_loss_flags(losses, EmulatorLossLimit(absolute="1%"))
