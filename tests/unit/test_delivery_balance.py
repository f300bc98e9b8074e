"""The fidelity monitor's balance of sent against received, per flow, on fake tables."""

from experiments import delivery
from topologies.scenario import Endpoint, Link

ADDRESSES = {"v1": ["10.0.0.1"], "v2": ["10.0.0.2"], "c": ["10.0.0.9"]}


def _link(index, a, b):
    return Link(index, Endpoint(*a.split(":")), Endpoint(*b.split(":")), None, None, None)


# v1, v2 on s1; c on s2; link 0 is the trunk s1 - s2.
LINKS = [_link(0, "s1:eth1", "s2:eth1"), _link(1, "v1:eth1", "s1:eth2"),
         _link(2, "v2:eth1", "s1:eth3"), _link(3, "c:eth1", "s2:eth2")]


def _sent(node, flow, datagrams, errors=0, to="10.0.0.9"):
    return {"node": node, "agent": "viewer", "flow": flow, "to": to,
            "datagrams": str(datagrams), "send_errors": str(errors)}


def _received(flow, peer, unique, node="c"):
    return {"node": node, "agent": "chat_collector", "flow": flow, "peer": peer,
            "unique": str(unique)}


def _balances(sent, received, loss=0.0):
    return delivery.balances(sent, received, ADDRESSES, LINKS, {(0, "forward"): loss})


def test_the_path_crosses_the_trunk_forward_and_names_its_switch_ports():
    steps = delivery.path(LINKS, set(ADDRESSES), "v1", "c")
    assert [(step.link, step.direction) for step in steps] == [
        (1, "forward"), (0, "forward"), (3, "reverse")]
    assert steps[1].ports == ("s1:eth1", "s2:eth1")
    assert delivery.path(LINKS, set(ADDRESSES), "c", "v1")[0].direction == "forward"


def test_a_flow_that_lost_what_was_configured_is_balanced():
    [balance] = _balances([_sent("v1", "danmaku-1", 1000)],
                          [_received("danmaku-1", "10.0.0.1", 985)], loss=0.01)
    assert balance.receiver == "c" and round(balance.configured_loss, 9) == 0.01
    assert not balance.short


def test_a_flow_that_lost_more_than_configured_is_short():
    [balance] = _balances([_sent("v1", "danmaku-1", 1000)],
                          [_received("danmaku-1", "10.0.0.1", 900)], loss=0.01)
    assert balance.short and balance.missing == 100


def test_a_receiver_that_got_nothing_has_no_row_and_is_short():
    found = _balances([_sent("v1", "danmaku-1", 50), _sent("v2", "danmaku-2", 50)], [])
    assert [balance.received for balance in found] == [0, 0]
    assert all(balance.short for balance in found)


def test_the_same_flow_name_from_another_sender_does_not_count():
    [balance] = _balances([_sent("v1", "stream-1", 100)],
                          [_received("stream-1", "10.0.0.2", 100)])
    assert balance.received == 0 and balance.short


def test_small_flows_get_a_slack_for_what_was_in_flight():
    [balance] = _balances([_sent("v1", "gift-1", 5)], [_received("gift-1", "10.0.0.1", 3)])
    assert not balance.short


def test_the_flag_names_where_frames_were_lost():
    found = _balances([_sent("v1", "danmaku-1", 50, errors=2)], [])
    losses = [{"link": 0, "direction": "forward", "offered": 40, "configured": 0,
               "emulator_made": 38}]
    hosts = {"v1": {"unresolved_neighbours": 1}, "c": {"RcvbufErrors": 4, "NoPorts": 7}}
    ports = {"s2:eth1": {"rx_dropped": 3, "tx_dropped": 0}}
    [flag] = delivery.delivery_flags(found, hosts, losses, ports)
    assert "danmaku-1 from v1 to c: 0 of 50" in flag
    assert "sender v1: 2 send errors, 1 unresolved neighbours" in flag
    assert "link 0 forward: 40 frames offered, 0 dropped as configured, 38 emulator-made" in flag
    assert "switch port s2:eth1: 3 received" in flag
    assert "receiver c: 4 receive buffer errors, 7 to no listening port" in flag


def test_many_short_flows_are_summed_up_after_the_first_few():
    found = _balances([_sent(f"v{1 + i % 2}", f"danmaku-{i}", 50) for i in range(8)], [])
    flags = delivery.delivery_flags(found, {}, [], {}, shown=3)
    assert len(flags) == 4
    assert flags[-1] == "5 more flows arrived short: 8 of 8 flows, 400 datagrams missing in all"


def test_a_service_address_is_balanced_against_any_receiver_of_the_flow():
    [balance] = _balances([_sent("v1", "stream-1", 100, to="10.9.9.9")],
                          [_received("stream-1", "10.0.0.1", 100, node="v2")])
    assert balance.receiver is None and not balance.short
