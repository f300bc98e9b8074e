"""The controller's flows on a fake flow table (in the style of Faucet's ``fakeoftable``): the
rules :class:`controller.core.ControllerCore` wants, sent as real os-ken OpenFlow 1.3 messages
by :mod:`controller.openflow`, applied to fake switches cabled like the scenario, and packets
traced through them. No root, no OVS.

The network is the ring of ``topologies/edge-services.yaml`` (dispatch's scenario for its gray
failover): viewers on s1, edges on s3, the short way through s2 (2 + 2 ms), the long way
through s4 (5 + 5 ms).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import openflow, rules
from controller.core import ControllerCore, Outcome
from controller.policies import create
from controller.view import NetworkView
from tests.unit.fakeoftable import FakeDatapath, FakeNetwork
from experiments.scenarios import load

VIDEO = "10.0.0.200"
UDP = 17


def view(scenario: str = "topologies/edge-services.yaml") -> NetworkView:
    return NetworkView.from_scenario(load(scenario))


class Bed:
    """A core, fake switches cabled as its view says, and the switches' installed state."""

    def __init__(self, policy: str = "least_loaded", fast_failover: bool = True,
                 scenario: str = "topologies/edge-services.yaml", **policy_params):
        self.view = view(scenario)
        self.core = ControllerCore(self.view, create(policy, policy_params), fast_failover)
        links = {}
        for trunk in self.view.trunks:
            links[self.view.switches[trunk.a], trunk.a_port] = (
                "switch", self.view.switches[trunk.b], trunk.b_port)
        for attachment in self.view.attachments:
            links[self.view.switches[attachment.switch], attachment.port] = (
                "host", attachment.host)
        self.network = FakeNetwork(links)
        self.installed = {name: rules.SwitchRules() for name in self.view.switches}
        self.sync(self.view.switches)

    def datapath(self, switch: str):
        return self.network.datapaths[self.view.switches[switch]]

    def sync(self, switches) -> int:
        """Send the switches what the core wants them to hold, as the app does (only what
        changed since the last sync); returns the message count. Each switch then holds what
        a whole recomputation says it should."""
        count = 0
        for switch in switches:
            changes = self.core.changes(switch, self.installed[switch])
            wire = openflow.messages(self.datapath(switch), changes)
            if wire:
                openflow.send(self.datapath(switch), wire)
            count += len(wire)
            self.installed[switch].apply(changes)
            assert not self.datapath(switch).table.errors, self.datapath(switch).table
            assert self.installed[switch] == self.core.desired(switch)
        return count

    def send(self, host: str, **packet) -> list[tuple[str, dict]]:
        """What the hosts receive when ``host`` sends ``packet`` (source fields filled in)."""
        attachment = self.view.attachment(host)
        packet = {"eth_src": attachment.mac, "ipv4_src": attachment.address} | packet
        return self.network.trace((self.view.switches[attachment.switch], attachment.port),
                                  packet)

    def udp(self, host: str, to: str, source_port: int = 40000, dest_port: int = 5004):
        target = self.view.by_address.get(to)
        eth_dst = target.mac if target else self.view.service_by_address[to].mac
        return self.send(host, eth_type=0x0800, ip_proto=UDP, ipv4_dst=to, eth_dst=eth_dst,
                         udp_src=source_port, udp_dst=dest_port)

    def cut(self, switch: str, port: int, tell_controller: bool = True) -> None:
        self.network.set_link_live(self.view.switches[switch], port, False)
        if tell_controller:
            peer = self.network.links[self.view.switches[switch], port]
            self.sync(self.core.port_changed(switch, port, False)
                      | self.core.port_changed(self.view.switch_of_dpid[peer[1]], peer[2], False))

    def place(self, client: str, service: str = "video") -> str:
        outcome = self.core.place([self.core.request_for(client, service)])
        self.sync(outcome.switches)
        return outcome.placed[f"{client}/{service}"]


def test_every_host_reaches_every_other_host_by_the_shortest_path():
    bed = Bed()
    hosts = [a.host for a in bed.view.attachments]
    for source in hosts:
        for target in hosts:
            if source != target:
                address = bed.view.attachment(target).address
                assert [host for host, _ in bed.udp(source, address)] == [target]


def test_arp_goes_to_the_controller_and_ipv6_is_dropped():
    bed = Bed()
    arp = bed.send("viewer1", eth_type=0x0806, eth_dst="ff:ff:ff:ff:ff:ff", arp_op=1,
                   arp_tpa="10.0.0.4")
    assert arp == [] and len(bed.datapath("s1").table.packet_ins) == 1
    assert bed.send("viewer1", eth_type=0x86DD, eth_dst="33:33:00:00:00:02") == []


def test_a_service_flow_is_punted_until_placed_then_rewritten_both_ways():
    bed = Bed()
    assert bed.udp("viewer1", VIDEO) == []
    assert len(bed.datapath("s1").table.packet_ins) == 1  # the controller will place it
    server = bed.place("viewer1")
    server_end = bed.view.attachment(server)
    [(host, delivered)] = bed.udp("viewer1", VIDEO)
    assert host == server
    assert delivered["ipv4_dst"] == server_end.address and delivered["eth_dst"] == server_end.mac
    assert delivered["ipv4_src"] == bed.view.attachment("viewer1").address
    # the server answers from port 5004: the client sees the service address
    client = bed.view.attachment("viewer1")
    [(host, answer)] = bed.send(server, eth_type=0x0800, ip_proto=UDP, ipv4_dst=client.address,
                                eth_dst=client.mac, udp_src=5004, udp_dst=40000)
    assert host == "viewer1"
    assert answer["ipv4_src"] == VIDEO and answer["eth_src"] == bed.view.services["video"].mac
    # other ports of the service address are not the service's
    assert bed.udp("viewer1", VIDEO, dest_port=5005) == []


def test_least_loaded_spreads_viewers_and_round_robin_takes_turns():
    bed = Bed()
    assert sorted(bed.place(v) for v in ("viewer1", "viewer2", "viewer3")) == [
        "edge1", "edge2", "edge3"]
    turns = Bed("round_robin")
    assert [turns.place(v) for v in ("viewer1", "viewer2", "viewer3")] == [
        "edge1", "edge2", "edge3"]


def test_a_migrated_flow_reaches_its_new_server_and_only_its_switch_changes():
    bed = Bed()
    first = bed.place("viewer1")
    target = "edge3" if first != "edge3" else "edge2"
    outcome = bed.core.steer("viewer1/video", target)
    assert outcome.switches == {"s1"}  # steering lives on the client's switch
    # the outbound rewrite replaced in place; the new server's answers get a rule of their own
    # and the old server's keeps its (its packets in flight still come from the service)
    assert bed.sync(outcome.switches) == 2
    [(host, _)] = bed.udp("viewer1", VIDEO)
    assert host == target
    client = bed.view.attachment("viewer1")
    for server in (first, target):
        [(host, answer)] = bed.send(server, eth_type=0x0800, ip_proto=UDP,
                                    ipv4_dst=client.address, eth_dst=client.mac, udp_src=5004,
                                    udp_dst=40000)
        assert (host, answer["ipv4_src"]) == ("viewer1", VIDEO)
    # leaving removes them all
    bed.sync(bed.core.leave("viewer1/video").switches)
    assert not [f for f in bed.datapath("s1").table.flows() if f.priority == rules.PRIORITY_STEER]


def link_index(bed: Bed, switch: str, port: int) -> int:
    return next(t.link for t in bed.view.trunks if (switch, port) in ((t.a, t.a_port),
                                                                      (t.b, t.b_port)))


def test_fast_failover_moves_traffic_before_the_controller_hears_of_the_cut():
    bed = Bed(fast_failover=True)
    viewer1, edge1 = (bed.view.attachment(h).address for h in ("viewer1", "edge1"))
    bed.cut("s1", 10, tell_controller=False)  # s1 - s2, the short way
    assert [h for h, _ in bed.udp("viewer1", edge1)] == ["edge1"]
    # Loop-free alternates protect against failures next to the switch only: s3 still sends
    # toward s1 through s2, which has no alternate that would not come back (RFC 5286's
    # coverage limit), so that direction waits for the controller.
    assert bed.udp("edge1", viewer1) == []
    bed.cut("s1", 10)
    assert [h for h, _ in bed.udp("edge1", viewer1)] == ["viewer1"]


def test_without_fast_failover_the_cut_drops_until_the_controller_reroutes():
    bed = Bed(fast_failover=False)
    edge1 = bed.view.attachment("edge1").address
    bed.cut("s1", 10, tell_controller=False)
    assert bed.udp("viewer1", edge1) == []
    changed = bed.core.port_changed("s1", 10, False)
    assert changed == set(bed.view.switches)
    assert bed.core.down == frozenset({link_index(bed, "s1", 10)})
    bed.sync(changed)
    assert [h for h, _ in bed.udp("viewer1", edge1)] == ["edge1"]
    assert bed.core.port_changed("s2", 10, False) == set()  # the same link: nothing new


def test_loop_free_alternates_only_where_the_neighbour_does_not_come_back():
    forwarding = rules.forwarding(view())
    groups = {switch: {group_id: [bucket.watch_port for bucket in group.buckets]
                       for group_id, group in state.groups.items()}
              for switch, state in forwarding.items()}
    ids = {name: index + 1 for index, name in enumerate(sorted(view().switches))}
    # s1 reaches s3 via s2 (4 ms) and falls back on s4 (10 ms); s4 would send s1's traffic
    # for s2 back through s1 (a tie), so s1 has no alternate toward s2 or s4.
    assert groups["s1"] == {ids["s3"]: [10, 13]}
    assert groups["s3"] == {ids["s1"]: [11, 12]}
    assert rules.forwarding(view(), fast_failover=False)["s1"].groups == {}


def test_a_pinned_path_survives_a_cut_of_the_path_it_left():
    bed = Bed(fast_failover=False)
    server = bed.place("viewer1")
    outcome = bed.core.pin("viewer1/video", ("s4",))
    bed.sync(outcome.switches)
    bed.cut("s1", 10, tell_controller=False)  # the shortest path is gone, the pinned one not
    [(host, _)] = bed.udp("viewer1", VIDEO)
    assert host == server
    with pytest.raises(ValueError, match="not a switch"):
        bed.core.pin("viewer1/video", ("viewer2",))


def test_leaving_removes_the_flow_rules_and_nothing_else():
    bed = Bed()
    bed.place("viewer1")
    before = {s: len(bed.datapath(s).table.flows()) for s in bed.view.switches}
    bed.sync(bed.core.leave("viewer1/video").switches)
    after = {s: len(bed.datapath(s).table.flows()) for s in bed.view.switches}
    assert before["s1"] - after["s1"] == 2 and all(
        before[s] == after[s] for s in ("s2", "s3", "s4"))
    assert bed.udp("viewer1", VIDEO) == []


def test_resynchronising_an_unchanged_network_sends_nothing():
    bed = Bed()
    bed.place("viewer1")
    assert bed.sync(bed.view.switches) == 0


def test_a_restarted_controller_wants_exactly_what_the_switches_hold():
    bed = Bed()
    for viewer in ("viewer1", "viewer2"):
        bed.place(viewer)
    bed.core.steer("viewer1/video", "edge3")
    bed.sync(bed.view.switches)
    successor = ControllerCore(bed.view, create("least_loaded", {}))
    successor.restore(bed.core.snapshot())
    for switch in bed.view.switches:
        assert not rules.diff(bed.installed[switch], successor.desired(switch))


def test_a_policy_decision_for_a_server_outside_the_service_is_refused():
    bed = Bed()
    bed.place("viewer1")
    with pytest.raises(ValueError, match="does not serve"):
        bed.core.steer("viewer1/video", "viewer2")


def test_a_steer_the_policy_refuses_changes_nothing():
    bed = Bed()
    bed.place("viewer1")
    placed = bed.core.flows["viewer1/video"].placement.server
    target = next(s for s in ("edge1", "edge2", "edge3") if s != placed)
    asked = []

    def refuse_steer(state, flow, server):
        asked.append((flow, server, len(state.placements)))
        return f"{server} is full"

    bed.core.policy.refuse_steer = refuse_steer
    desired = {switch: bed.core.desired(switch) for switch in bed.view.switches}
    with pytest.raises(ValueError, match=f"{target} is full"):
        bed.core.steer("viewer1/video", target)
    assert asked == [("viewer1/video", target, 1)]
    assert bed.core.flows["viewer1/video"].placement.server == placed
    assert all(not rules.diff(desired[switch], bed.core.desired(switch))
               for switch in bed.view.switches)


def test_a_client_has_one_flow_per_service():
    bed = Bed()
    bed.place("viewer1")
    outcome = bed.core.place([bed.core.request_for("viewer1", "video", flow="viewer1/second")])
    [rejection] = outcome.decision.rejections
    assert "already has flow viewer1/video" in rejection.reason and not outcome.placed


def test_a_server_reporting_overload_loses_a_flow_to_the_least_loaded_one():
    bed = Bed(rebalance_threshold=0.3)
    placed = {viewer: bed.place(viewer) for viewer in ("viewer1", "viewer2", "viewer3")}
    assert not bed.core.rebalance().placed  # balanced: 3 of 20 Mbit/s each
    busy = placed["viewer1"]
    bed.core.report_load(busy, 18e6)  # something else loads it: 90%
    outcome = bed.core.rebalance()
    assert list(outcome.placed) == ["viewer1/video"] and outcome.placed["viewer1/video"] != busy
    bed.sync(outcome.switches)
    [(host, _)] = bed.udp("viewer1", VIDEO)
    assert host == outcome.placed["viewer1/video"]


def test_a_new_period_decides_every_flow_again_with_the_last_as_previous_state():
    bed = Bed()
    for viewer in ("viewer1", "viewer2", "viewer3"):
        bed.place(viewer)
    seen = []
    decide = bed.core.policy.decide
    bed.core.policy.decide = lambda state: seen.append(state) or decide(state)
    assert not bed.core.reallocate().placed  # nothing changed: nothing moves
    [state] = seen
    assert len(state.requests) == 3 and state.placements == () and len(state.previous) == 3
    bed.core.report_load("edge1", 18e6)  # edge1 is busy with something else now
    outcome = bed.core.reallocate()
    bed.sync(outcome.switches)
    assert "edge1" not in {r.placement.server for r in bed.core.flows.values()}
    for viewer in ("viewer1", "viewer2", "viewer3"):
        [(host, _)] = bed.udp(viewer, VIDEO)
        assert host == bed.core.flows[f"{viewer}/video"].placement.server


# several flows per client and service, steered by the client's transport port


def join_from(bed: Bed, client: str, port: int | None, flow: str | None = None):
    outcome = bed.core.place([bed.core.request_for(client, "video", flow=flow, port=port)])
    bed.sync(outcome.switches)
    return outcome


def test_one_host_has_a_flow_per_port_each_on_its_own_server():
    bed = Bed()  # least loaded: the second flow goes to another edge
    first = join_from(bed, "viewer1", 40001).placed["viewer1/video:40001"]
    second = join_from(bed, "viewer1", 40002).placed["viewer1/video:40002"]
    assert first != second
    client = bed.view.attachment("viewer1")
    for port, server in ((40001, first), (40002, second)):
        [(host, delivered)] = bed.udp("viewer1", VIDEO, source_port=port)
        assert host == server and delivered["udp_src"] == port
        # the server's answer to that port comes back from the service address
        [(host, answer)] = bed.send(server, eth_type=0x0800, ip_proto=UDP,
                                    ipv4_dst=client.address, eth_dst=client.mac, udp_src=5004,
                                    udp_dst=port)
        assert (host, answer["ipv4_src"]) == ("viewer1", VIDEO)
    # a port nobody joined from is no placed flow: the controller hears of it
    assert bed.udp("viewer1", VIDEO, source_port=40003) == []
    # answers from one flow's server to the other flow's port are not rewritten
    [(host, answer)] = bed.send(first, eth_type=0x0800, ip_proto=UDP, ipv4_dst=client.address,
                                eth_dst=client.mac, udp_src=5004, udp_dst=40002)
    assert answer["ipv4_src"] == bed.view.attachment(first).address


def test_port_flows_clash_with_the_same_port_and_with_a_whole_host_flow():
    bed = Bed()
    join_from(bed, "viewer1", 40001)
    assert not join_from(bed, "viewer1", 40001).decision.rejections  # the same flow: placed
    [again] = join_from(bed, "viewer1", 40001, "viewer1/camera7").decision.rejections
    assert "already has flow viewer1/video:40001 for video from port 40001" in again.reason
    [whole] = join_from(bed, "viewer1", None).decision.rejections
    assert "already has flow viewer1/video:40001" in whole.reason
    assert join_from(bed, "viewer1", 40002).placed  # another port is another flow
    other = Bed()
    join_from(other, "viewer1", None)
    [port_flow] = join_from(other, "viewer1", 40001).decision.rejections
    assert "already has flow viewer1/video" in port_flow.reason
    # two ports asked for at once are both placed; two flows from one port are not
    core = Bed().core
    outcome = core.place([core.request_for("viewer2", "video", port=1),
                          core.request_for("viewer2", "video", port=2),
                          core.request_for("viewer2", "video", flow="viewer2/b", port=2)])
    assert sorted(outcome.placed) == ["viewer2/video:1", "viewer2/video:2"]
    assert [r.flow for r in outcome.decision.rejections] == ["viewer2/b"]


def test_steering_one_port_flow_leaves_the_other_and_leaving_removes_only_its_rules():
    bed = Bed()
    first = join_from(bed, "viewer1", 40001).placed["viewer1/video:40001"]
    second = join_from(bed, "viewer1", 40002).placed["viewer1/video:40002"]
    target = next(edge for edge in ("edge1", "edge2", "edge3") if edge not in (first, second))
    bed.sync(bed.core.steer("viewer1/video:40001", target).switches)
    assert [h for h, _ in bed.udp("viewer1", VIDEO, source_port=40001)] == [target]
    assert [h for h, _ in bed.udp("viewer1", VIDEO, source_port=40002)] == [second]
    bed.sync(bed.core.leave("viewer1/video:40001").switches)
    assert bed.udp("viewer1", VIDEO, source_port=40001) == []
    assert [h for h, _ in bed.udp("viewer1", VIDEO, source_port=40002)] == [second]


def test_port_flows_survive_a_controller_restart():
    bed = Bed()
    join_from(bed, "viewer1", 40001)
    join_from(bed, "viewer1", 40002)
    successor = ControllerCore(bed.view, create("least_loaded", {}))
    successor.restore(bed.core.snapshot())
    assert successor.flows["viewer1/video:40002"].placement.request.client_port == 40002
    for switch in bed.view.switches:
        assert not rules.diff(bed.installed[switch], successor.desired(switch))


def test_switches_kept_in_step_by_changes_alone_hold_what_a_whole_recomputation_wants():
    """Joins, a burst decided at once, moves, pins, leaves, cuts and delay changes: after each,
    every switch synced with only what changed holds what a controller computing everything
    afresh from the same flows (a successor restoring the snapshot) wants, and each flow's
    packets reach its server through the fake switches."""
    bed = Bed()
    cut = ("s1", bed.view.trunks[0].a_port)
    down = set()

    def set_port(up: bool) -> Outcome:
        (down.discard if up else down.add)(cut)
        return Outcome(switches=bed.core.port_changed(*cut, up))

    steps = [
        lambda: bed.core.place([bed.core.request_for("viewer1", "video")]),
        lambda: bed.core.place([bed.core.request_for(v, "video", port=p)
                                for v in ("viewer2", "viewer3") for p in (1, 2, 3)]),
        lambda: bed.core.steer("viewer1/video", "edge3"),
        lambda: bed.core.pin("viewer2/video:1", ("s4",)),
        lambda: bed.core.steer("viewer1/video", "edge1"),
        lambda: bed.core.leave("viewer3/video:2"),
        lambda: set_port(up=False),
        lambda: bed.core.steer("viewer2/video:1", "edge2"),
        lambda: set_port(up=True),
        lambda: Outcome(switches=bed.core.link_delay_changed(bed.view.trunks[0].link, 0.009)),
        lambda: bed.core.leave("viewer1/video"),
    ]
    for step in steps:
        bed.sync(step().switches)
        successor = ControllerCore(bed.view, create("least_loaded", {}))
        for switch, number in down:  # a successor hears of the ports down as it connects
            successor.port_changed(switch, number, False)
        successor.restore(bed.core.snapshot())
        for switch in bed.view.switches:
            assert bed.installed[switch] == successor.desired(switch), switch
        for flow, record in bed.core.flows.items():
            port = record.placement.request.client_port or 40000
            assert [h for h, _ in bed.udp(record.placement.request.client, VIDEO,
                                          source_port=port)] == [record.placement.server]


def recomputed(core: ControllerCore) -> dict[str, rules.SwitchRules]:
    """Every switch's state computed afresh, as the controller did before it kept it per rule
    key: base rules, forwarding for the links as they are now, then each placed flow's rules."""
    forwarding = rules.forwarding(core.view, core.down, core.fast_failover)
    wanted = {switch: rules.base_rules(core.view).merged(forwarding[switch])
              for switch in core.view.switches}
    for flow, record in core.flows.items():
        for switch, rule in core.switch_rules.flow_rules(record):
            wanted[switch].add(rule)
    return wanted


VIEWERS, EDGES, PORTS = ("viewer1", "viewer2", "viewer3"), ("edge1", "edge2", "edge3"), (None, 1, 2)
# One step of a controller's life: (what, which flow or trunk, which server/port/switch, ...).
STEPS = st.one_of(
    st.tuples(st.just("place"), st.lists(st.tuples(st.sampled_from(VIEWERS),
                                                   st.sampled_from(PORTS)), max_size=6)),
    st.tuples(st.just("steer"), st.integers(0, 20), st.sampled_from(EDGES)),
    st.tuples(st.just("pin"), st.integers(0, 20), st.sampled_from(("s2", "s4"))),
    st.tuples(st.just("leave"), st.integers(0, 20)),
    st.tuples(st.just("port"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("delay"), st.integers(0, 3), st.sampled_from((0.001, 0.002, 0.009))),
    st.tuples(st.just("reallocate")))


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(STEPS, min_size=1, max_size=12))
def test_the_rules_a_decision_touches_keep_every_switch_as_a_recomputation_wants(steps):
    """Any sequence of joins (bursts decided at once, with and without client ports, clashing
    ones refused), moves, pins, leaves, cuts, repairs, delay changes and new periods: after each,
    every switch synced with only the rules changed since its last sync (and only the switches
    the step named) holds exactly what computing every switch afresh wants."""
    bed = Bed()
    core = bed.core
    for kind, *arguments in steps:
        flows = sorted(core.flows)
        chosen = flows[arguments[0] % len(flows)] if flows and kind in (
            "steer", "pin", "leave") else None
        if kind == "place":
            outcome = core.place([core.request_for(viewer, "video", port=port)
                                  for viewer, port in arguments[0]])
        elif kind == "steer" and chosen:
            outcome = core.steer(chosen, arguments[1])
        elif kind == "pin" and chosen:
            try:
                outcome = core.pin(chosen, (arguments[1],))
            except ValueError:
                continue  # no path through that waypoint while links are down: nothing changed
        elif kind == "leave" and chosen:
            outcome = core.leave(chosen)
        elif kind == "port":
            trunk = bed.view.trunks[arguments[0]]
            outcome = Outcome(switches=core.port_changed(trunk.a, trunk.a_port, arguments[1]))
        elif kind == "delay":
            outcome = Outcome(switches=core.link_delay_changed(bed.view.trunks[arguments[0]].link,
                                                               arguments[1]))
        elif kind == "reallocate":
            outcome = core.reallocate()
        else:
            continue  # nothing placed to act on
        bed.sync(outcome.switches)
        assert bed.installed == recomputed(core), (kind, arguments)


MATCH_FIELDS = st.fixed_dictionaries({}, optional={
    "in_port": st.integers(1, 2**16), "eth_dst": st.sampled_from(
        ["00:00:00:00:00:01", "0a:1B:00:00:ff:02"]),
    "eth_type": st.sampled_from([0x0800, 0x0806, 0x86DD]), "ip_proto": st.sampled_from([6, 17]),
    "ipv4_src": st.sampled_from(["10.0.0.1", "10.20.255.1"]),
    "ipv4_dst": st.sampled_from(["10.0.0.200", "192.168.3.4"]),
    "udp_src": st.integers(0, 65535), "udp_dst": st.integers(0, 65535),
    "tcp_dst": st.integers(0, 65535)})
ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("output"), st.integers(1, 2**16)), st.tuples(st.just("group"),
                                                                   st.integers(1, 64)),
    st.tuples(st.just("set_field"), st.just("eth_dst"), st.just("00:00:00:00:0A:01")),
    st.tuples(st.just("set_field"), st.sampled_from(["ipv4_src", "ipv4_dst"]),
              st.just("10.0.0.9")),
    st.just(("controller",))), max_size=3).map(tuple)
RULES = st.builds(rules.Rule, table=st.integers(0, 1), priority=st.integers(0, 65535),
                  match=MATCH_FIELDS.map(lambda fields: rules.match(**fields)), actions=ACTIONS,
                  goto=st.sampled_from([None, 1]), layer=st.sampled_from(sorted(rules.COOKIES)))


def os_ken_bytes(message) -> bytes:
    """What os-ken's own ``send_msg`` would put on the wire (with transaction id 0)."""
    message.xid = 0
    message.serialize()
    return bytes(message.buf)


@settings(max_examples=150, deadline=None)
@given(rule=RULES, group=st.builds(rules.Group, group_id=st.integers(1, 64), buckets=st.lists(
    st.builds(rules.Bucket, watch_port=st.one_of(st.none(), st.integers(1, 64)),
              actions=ACTIONS), max_size=3).map(tuple)))
def test_messages_are_the_bytes_os_ken_would_send(rule, group):
    """controller.openflow builds flow mods from pieces it encodes once; each message is the
    same bytes as os-ken's own OFPFlowMod (the match given by keywords, normalised by os-ken)."""
    datapath = FakeDatapath(1)
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    instructions = ([parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                                  openflow.actions(datapath, rule.actions))]
                    if rule.actions else []) + ([parser.OFPInstructionGotoTable(rule.goto)]
                                                if rule.goto is not None else [])
    match = parser.OFPMatch(**dict(rule.match))
    assert openflow.flow_add(datapath, rule) == os_ken_bytes(parser.OFPFlowMod(
        datapath, cookie=rule.cookie, table_id=rule.table, command=ofp.OFPFC_ADD,
        priority=rule.priority, match=match, instructions=instructions))
    assert openflow.flow_delete(datapath, rule) == os_ken_bytes(parser.OFPFlowMod(
        datapath, table_id=rule.table, command=ofp.OFPFC_DELETE_STRICT, priority=rule.priority,
        match=parser.OFPMatch(**dict(rule.match)), out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY))
    assert openflow.clear_foreign(datapath) == [os_ken_bytes(parser.OFPFlowMod(
        datapath, table_id=ofp.OFPTT_ALL, command=ofp.OFPFC_DELETE, cookie=0,
        cookie_mask=rules.COOKIE_MARK, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch()))]
    # and os-ken reads the flow mod back as the rule it was built from
    datapath.send(openflow.flow_add(datapath, rule))
    [parsed] = datapath.sent
    assert (parsed.table_id, parsed.priority, parsed.cookie) == (rule.table, rule.priority,
                                                                 rule.cookie)
    assert rules.match(**dict(parsed.match.items())) == rules.match(
        **dict(parser.OFPMatch(**dict(rule.match)).items()))
    sent = openflow.send(datapath, [openflow.group_mod(datapath, group)])
    assert datapath.sent[-1].group_id == group.group_id and datapath.barriers == [sent]


def test_a_sync_is_one_write_closed_by_one_barrier_whose_id_every_message_carries():
    bed = Bed()
    datapath = bed.datapath("s1")
    writes, sent_before = [], len(datapath.sent)
    original = datapath.send
    datapath.send = lambda data: (writes.append(data), original(data))
    bed.core.place([bed.core.request_for(viewer, "video") for viewer in ("viewer1", "viewer2")])
    assert bed.sync(["s1"]) == 4  # two steering rules a flow, both on the viewers' switch
    [write] = writes
    barrier = datapath.barriers[-1]
    assert [message.xid for message in datapath.sent[sent_before:]] == [barrier] * 4
    assert len(datapath.barriers) == 2  # the first sync's and this one's, the write's last
    assert write[-datapath.ofproto.OFP_HEADER_SIZE:][1] == datapath.ofproto.OFPT_BARRIER_REQUEST


def test_gray_failover_re_steers_a_stalled_nodes_viewer_once_its_reports_stop():
    """dispatch's scenario with gray failover: cnv1 pulls from cn1; when cn1's load reports
    stop (its programs stalled) while the other nodes' go on, the center moves cnv1 after the
    detection time, and the service address takes its packets to the new node."""
    bed = Bed("dispatch", scenario="topologies/dispatch/dispatch.yaml",
              centers={"dcn": "cn", "dus": "us", "deu": "eu"}, error_share=0.0, candidates=1,
              origin="cn0", gray_failover=True, detection_time=3.0)
    assert bed.place("cnv1", "live") == "cn1"
    media = bed.view.services["live"].servers
    assert "cn1" in media and len(media) > 1
    moved = {}
    for now in range(8):
        for node in media:
            if node != "cn1" or now <= 1:  # cn1 stalls after its report at t=1
                bed.core.report_load(node, 0.0, metrics={"sessions": 0}, now=float(now))
        outcome = bed.core.react_to_load(float(now))
        bed.sync(outcome.switches)
        if outcome.placed:
            moved[now] = outcome.placed
        [(host, _)] = bed.udp("cnv1", "10.0.0.200")
        assert host == ("cn1" if now < 4 else moved[4]["cnv1/live"]), (now, host)
    assert list(moved) == [4] and moved[4]["cnv1/live"] != "cn1"
