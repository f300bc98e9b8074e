"""The fake OpenFlow 1.3 switch behaves as a switch would, driven by real os-ken messages."""

from __future__ import annotations

import struct

import pytest
from os_ken.lib.packet import ethernet, ipv4, packet, udp
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from tests.unit.fakeoftable import (OFPGC_ADD_OR_MOD, FakeDatapath, FakeNetwork,
                                    ForwardingLoop, packet_from_bytes)

MAC1, MAC2, MAC3 = "00:00:00:00:00:01", "00:00:00:00:00:02", "00:00:00:00:00:03"
UDP = {"eth_src": MAC1, "eth_dst": MAC2, "eth_type": 0x0800, "ipv4_src": "10.0.0.1",
       "ipv4_dst": "10.0.0.2", "ip_proto": 17, "udp_src": 5000, "udp_dst": 6000}


def flow(match: dict, apply=(), *, write=None, goto=None, extra=(), table_id=0, priority=100,
         cookie=0, command=ofp.OFPFC_ADD, **options) -> parser.OFPFlowMod:
    instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, list(apply)), *extra]
    if write is not None:
        instructions.append(parser.OFPInstructionActions(ofp.OFPIT_WRITE_ACTIONS, write))
    if goto is not None:
        instructions.append(parser.OFPInstructionGotoTable(goto))
    return parser.OFPFlowMod(None, table_id=table_id, priority=priority, cookie=cookie,
                             command=command, match=parser.OFPMatch(**match),
                             instructions=instructions, **options)


def delete(match: dict, **options) -> parser.OFPFlowMod:
    options = {"out_port": ofp.OFPP_ANY, "out_group": ofp.OFPG_ANY,
               "table_id": ofp.OFPTT_ALL, "command": ofp.OFPFC_DELETE, **options}
    return flow(match, **options)


def out(port: int) -> parser.OFPActionOutput:
    return parser.OFPActionOutput(port)


def group_mod(group_id: int, buckets: list, type_=ofp.OFPGT_FF,
              command=ofp.OFPGC_ADD) -> parser.OFPGroupMod:
    return parser.OFPGroupMod(None, command, type_, group_id, buckets)


def ff_bucket(port: int, *actions) -> parser.OFPBucket:
    return parser.OFPBucket(watch_port=port, actions=[*actions, out(port)])


def send(dp: FakeDatapath, *msgs) -> FakeDatapath:
    for msg in msgs:
        msg.datapath = dp  # as the controller builds them with the switch's datapath
        dp.send_msg(msg)
    return dp


def switch(*msgs, ports=(1, 2, 3, 4)) -> FakeDatapath:
    return send(FakeDatapath(1, ports), *msgs)


def lookup(dp: FakeDatapath, in_port: int = 1, **fields) -> list:
    return dp.table.lookup({**UDP, **fields, "in_port": in_port})


def test_the_highest_priority_matching_entry_wins_whatever_the_install_order():
    dp = switch(flow({"in_port": 1}, [out(2)], priority=10),
                flow({"in_port": 1, "eth_type": 0x0800, "ipv4_dst": "10.0.0.2"}, [out(3)],
                     priority=20),
                flow({"in_port": 1, "eth_dst": MAC2}, [out(4)], priority=5))
    assert lookup(dp) == [(3, UDP)], dp.table
    assert lookup(dp, ipv4_dst="10.0.0.9") == [(2, {**UDP, "ipv4_dst": "10.0.0.9"})]
    assert lookup(dp, in_port=2) == []  # a miss without a table-miss entry drops


def test_add_with_the_same_match_and_priority_replaces_the_entry_and_its_cookie():
    dp = switch(flow({"in_port": 1}, [out(2)], cookie=7),
                flow({"in_port": 1}, [out(3)], cookie=8),
                flow({"in_port": 1}, [out(4)], priority=1))
    assert [(e.priority, e.cookie) for e in dp.table.flows()] == [(100, 8), (1, 0)]
    assert lookup(dp) == [(3, UDP)]


def test_overlap_checking_add_is_refused_for_an_overlapping_entry_of_equal_priority():
    dp = switch(flow({"in_port": 1}, [out(2)]),
                flow({"eth_dst": MAC2}, [out(3)], flags=ofp.OFPFF_CHECK_OVERLAP),
                flow({"eth_dst": MAC2}, [out(3)], priority=5, flags=ofp.OFPFF_CHECK_OVERLAP))
    assert [reason for _, reason in dp.table.errors] == ["OFPFMFC_OVERLAP"]
    assert len(dp.table.flows()) == 2


def test_delete_by_cookie_mask_removes_only_the_flows_of_that_owner():
    dp = switch(flow({"in_port": 1}, [out(2)], cookie=0x1_0001),
                flow({"in_port": 2}, [out(1)], cookie=0x1_0002),
                flow({"in_port": 3}, [out(1)], cookie=0x2_0001),
                delete({}, cookie=0x1_0000, cookie_mask=0xFFFF_0000))
    assert [e.match for e in dp.table.flows()] == [{"in_port": 3}]


def test_delete_without_out_port_any_deletes_nothing_as_on_open_vswitch():
    dp = switch(flow({"in_port": 1}, [out(2)]),
                flow({}, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL))
    assert len(dp.table.flows()) == 1
    send(dp, delete({}, out_port=3))
    assert len(dp.table.flows()) == 1
    send(dp, delete({}, out_port=2))
    assert dp.table.flows() == []


def test_strict_delete_needs_the_exact_match_and_priority_but_loose_takes_narrower_ones():
    dp = switch(flow({"in_port": 1, "eth_dst": MAC2}, [out(2)]),
                flow({"in_port": 1}, [out(3)]),
                delete({"in_port": 1}, command=ofp.OFPFC_DELETE_STRICT, priority=99))
    assert len(dp.table.flows()) == 2
    send(dp, delete({"in_port": 1}, command=ofp.OFPFC_DELETE_STRICT))
    assert [e.match for e in dp.table.flows()] == [{"in_port": 1, "eth_dst": MAC2}]
    send(dp, delete({"in_port": 1}))
    assert dp.table.flows() == []


def test_modify_replaces_instructions_keeps_cookies_and_adds_nothing_when_unmatched():
    dp = switch(flow({"in_port": 1, "eth_dst": MAC2}, [out(2)], cookie=5),
                flow({"in_port": 1}, [out(4)], command=ofp.OFPFC_MODIFY, cookie=9),
                flow({"in_port": 2}, [out(4)], command=ofp.OFPFC_MODIFY))
    assert [e.cookie for e in dp.table.flows()] == [5]
    assert lookup(dp) == [(4, UDP)]
    send(dp, flow({"in_port": 1}, [out(3)], command=ofp.OFPFC_MODIFY_STRICT))
    assert lookup(dp) == [(4, UDP)]


def test_set_field_rewrites_what_later_outputs_carry_and_masked_matches_select():
    dp = switch(flow({"eth_type": 0x0800, "ipv4_dst": ("10.0.0.0", "255.255.255.0"),
                      "eth_src": ("00:00:00:00:00:00", "ff:ff:ff:00:00:00")},
                     [out(2), parser.OFPActionSetField(eth_dst=MAC3),
                      parser.OFPActionSetField(ipv4_dst="10.0.1.3"), out(3)]))
    assert lookup(dp) == [(2, UDP), (3, {**UDP, "eth_dst": MAC3, "ipv4_dst": "10.0.1.3"})]
    assert lookup(dp, ipv4_dst="10.0.1.2") == []
    assert lookup(dp, eth_src="02:00:00:00:00:01") == []


def test_goto_table_carries_rewrites_and_the_action_set_runs_at_the_end():
    udp_match = {"eth_type": 0x0800, "ip_proto": 17}
    dp = switch(flow(udp_match, [parser.OFPActionSetField(udp_dst=7000)], write=[out(4)], goto=1),
                flow({**udp_match, "udp_dst": 7000}, [out(2)], write=[out(3)], table_id=1))
    rewritten = {**UDP, "udp_dst": 7000}
    assert lookup(dp) == [(2, rewritten), (3, rewritten)]
    send(dp, flow({}, table_id=1, priority=200,
                  extra=[parser.OFPInstructionActions(ofp.OFPIT_CLEAR_ACTIONS, [])]))
    assert lookup(dp) == []


def test_write_metadata_is_matched_by_later_tables():
    dp = switch(flow({"in_port": 1}, goto=1, extra=[parser.OFPInstructionWriteMetadata(5, 0xFF)]),
                flow({"metadata": 5}, [out(3)], table_id=1))
    assert lookup(dp) == [(3, UDP)]
    assert lookup(dp, in_port=2) == []


@pytest.mark.parametrize("msg, reason", [
    (flow({"ipv4_dst": "10.0.0.2"}, [out(2)]), "OFPBMC_BAD_PREREQ"),
    (flow({"eth_type": 0x0800, "udp_dst": 53}, [out(2)]), "OFPBMC_BAD_PREREQ"),
    (flow({"eth_type": 0x0800}, [parser.OFPActionSetField(udp_dst=53)]),
     "OFPBAC_MATCH_INCONSISTENT"),
    (flow({}, [parser.OFPActionGroup(9)]), "OFPBAC_BAD_OUT_GROUP"),
    (flow({}, table_id=2, goto=1), "OFPBIC_BAD_TABLE_ID"),
    (flow({}, [out(2)], table_id=ofp.OFPTT_ALL), "OFPFMFC_BAD_TABLE_ID"),
])
def test_flow_mods_a_switch_refuses_are_recorded_as_errors_and_not_installed(msg, reason):
    dp = switch(msg)
    assert dp.table.errors == [(msg, reason)]
    assert dp.table.flows() == []


def test_output_to_the_ingress_port_needs_ofpp_in_port_and_dead_ports_drop():
    dp = switch(flow({}, [out(1), out(ofp.OFPP_IN_PORT), out(2)]))
    assert lookup(dp) == [(1, UDP), (2, UDP)]
    dp.set_port_live(2, False)
    assert lookup(dp) == [(1, UDP)]
    assert switch(flow({}, [out(ofp.OFPP_FLOOD)])).table.lookup({"in_port": 2}) == [
        (1, {}), (3, {}), (4, {})]


def test_outputs_to_the_controller_are_packet_ins():
    dp = switch(flow({"in_port": 1}, [out(ofp.OFPP_CONTROLLER)]))
    assert lookup(dp) == [(ofp.OFPP_CONTROLLER, UDP)]
    assert dp.table.packet_ins == [UDP]


def test_untagged_packets_match_ofpvid_none_and_vlan_push_pop_tag_them():
    push = [parser.OFPActionPushVlan(),
            parser.OFPActionSetField(vlan_vid=ofp.OFPVID_PRESENT | 10), out(2)]
    dp = switch(flow({"in_port": 1, "vlan_vid": ofp.OFPVID_NONE}, push),
                flow({"in_port": 2, "vlan_vid": ofp.OFPVID_PRESENT | 10},
                     [parser.OFPActionPopVlan(), out(1)]))
    tagged = {**UDP, "vlan_vid": ofp.OFPVID_PRESENT | 10, "vlan_pcp": 0}
    assert lookup(dp) == [(2, tagged)]
    assert dp.table.lookup({**tagged, "in_port": 2}) == [(1, UDP)]
    assert lookup(dp, in_port=2) == []


def test_fast_failover_uses_the_first_bucket_whose_port_is_live():
    dp = switch(group_mod(1, [ff_bucket(2), ff_bucket(3, parser.OFPActionSetField(eth_dst=MAC3)),
                              ff_bucket(4)]),
                flow({"in_port": 1}, [parser.OFPActionGroup(1)]))
    assert lookup(dp) == [(2, UDP)]
    dp.set_port_live(2, False)
    assert lookup(dp) == [(3, {**UDP, "eth_dst": MAC3})]
    dp.set_port_live(3, False)
    assert lookup(dp) == [(4, UDP)]
    dp.set_port_live(4, False)
    assert lookup(dp) == []


def test_all_groups_copy_to_every_bucket_and_select_picks_its_first_live_one():
    buckets = [ff_bucket(2, parser.OFPActionSetField(eth_dst=MAC3)), ff_bucket(3)]
    dp = switch(group_mod(1, buckets, ofp.OFPGT_ALL), group_mod(2, buckets, ofp.OFPGT_SELECT),
                flow({"in_port": 1}, [parser.OFPActionGroup(1)]),
                flow({"in_port": 4}, [parser.OFPActionGroup(2)]))
    assert lookup(dp) == [(2, {**UDP, "eth_dst": MAC3}), (3, UDP)]
    assert lookup(dp, in_port=4) == [(2, {**UDP, "eth_dst": MAC3})]
    dp.set_port_live(2, False)
    assert lookup(dp, in_port=4) == [(3, UDP)]


def test_a_group_action_in_the_action_set_overrides_its_output():
    dp = switch(group_mod(1, [parser.OFPBucket(actions=[out(3)])], ofp.OFPGT_INDIRECT),
                flow({}, write=[out(2), parser.OFPActionGroup(1)]))
    assert lookup(dp) == [(3, UDP)]


def test_deleting_a_group_deletes_the_flows_that_use_it():
    dp = switch(group_mod(1, [ff_bucket(2)]), group_mod(2, [ff_bucket(3)]),
                flow({"in_port": 1}, [parser.OFPActionGroup(1)]),
                flow({"in_port": 2}, write=[parser.OFPActionGroup(1)]),
                flow({"in_port": 3}, [parser.OFPActionGroup(2)]),
                group_mod(1, [], command=ofp.OFPGC_DELETE))
    assert sorted(dp.table.groups) == [2]
    assert [e.match for e in dp.table.flows()] == [{"in_port": 3}]


def test_group_add_modify_and_the_ovs_add_or_modify_extension():
    first = group_mod(1, [ff_bucket(2)])
    again = group_mod(1, [ff_bucket(3)])
    missing = group_mod(2, [ff_bucket(3)], command=ofp.OFPGC_MODIFY)
    unwatched = group_mod(3, [parser.OFPBucket(actions=[out(2)])])
    dp = switch(first, again, missing, unwatched, flow({}, [parser.OFPActionGroup(1)]))
    assert [(m, r) for m, r in dp.table.errors] == [
        (again, "OFPGMFC_GROUP_EXISTS"), (missing, "OFPGMFC_UNKNOWN_GROUP"),
        (unwatched, "OFPGMFC_BAD_WATCH")]
    assert lookup(dp) == [(2, UDP)]
    send(dp, group_mod(1, [ff_bucket(4)], command=OFPGC_ADD_OR_MOD),
         group_mod(5, [ff_bucket(3)], command=OFPGC_ADD_OR_MOD))
    assert lookup(dp) == [(4, UDP)]
    assert sorted(dp.table.groups) == [1, 5]
    assert len(dp.table.errors) == 3


def frame(**fields) -> bytes:
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=fields["eth_dst"], src=fields["eth_src"],
                                       ethertype=0x0800))
    pkt.add_protocol(ipv4.ipv4(src=fields["ipv4_src"], dst=fields["ipv4_dst"], proto=17))
    pkt.add_protocol(udp.udp(src_port=fields["udp_src"], dst_port=fields["udp_dst"]))
    pkt.serialize()
    return bytes(pkt.data)


def test_packet_outs_run_their_actions_and_ofpp_table_runs_the_pipeline():
    dp = switch(flow({"in_port": 3}, [out(4)]))
    assert packet_from_bytes(frame(**UDP)) == UDP
    send(dp, parser.OFPPacketOut(None, ofp.OFP_NO_BUFFER, ofp.OFPP_CONTROLLER,
                                 [parser.OFPActionSetField(eth_dst=MAC3), out(1)], frame(**UDP)),
         parser.OFPPacketOut(None, ofp.OFP_NO_BUFFER, 3, [out(ofp.OFPP_TABLE)], frame(**UDP)),
         parser.OFPBarrierRequest(None))
    assert dp.packet_outs == [(1, {**UDP, "eth_dst": MAC3}), (4, UDP)]
    assert [type(m).__name__ for m in dp.sent] == ["OFPFlowMod", "OFPPacketOut",
                                                   "OFPPacketOut", "OFPBarrierRequest"]


def test_what_the_fake_cannot_model_fails_loudly_instead_of_dropping():
    with pytest.raises(NotImplementedError):
        lookup(switch(flow({}, [out(ofp.OFPP_NORMAL)])))
    with pytest.raises(NotImplementedError):
        lookup(switch(flow({}, [parser.OFPActionDecNwTtl(), out(2)])))


def test_send_msg_serializes_so_messages_os_ken_cannot_encode_fail_here_too():
    with pytest.raises(struct.error):
        switch(flow({"in_port": 1}, [out("2")]))


def test_the_table_prints_its_flows_groups_and_errors_for_assertion_messages():
    dp = switch(group_mod(1, [ff_bucket(2)]),
                flow({"in_port": 1, "eth_dst": MAC2}, [parser.OFPActionGroup(1)], cookie=0xA,
                     write=[out(ofp.OFPP_CONTROLLER)], goto=3),
                flow({"ipv4_dst": "10.0.0.1"}, [out(2)]))
    text = str(dp)
    assert ("table=0 priority=100 cookie=0xa match[in_port=1,eth_dst=00:00:00:00:00:02] "
            "apply(group:1) write(output:CONTROLLER) goto:3") in text
    assert "group=1 type=3 buckets=watch_port=2 [output:2]" in text
    assert "error: OFPBMC_BAD_PREREQ" in text


def three_switches() -> FakeNetwork:
    """h1 - s1 - s2 - s3 - h3, with a second s1 - s3 link as a backup path."""
    return FakeNetwork({(1, 1): ("host", "h1"), (1, 2): ("switch", 2, 1),
                        (2, 2): ("switch", 3, 1), (3, 2): ("host", "h3"),
                        (1, 3): ("switch", 3, 3)})


def test_a_trace_follows_the_packet_across_switches_with_the_first_hop_rewrite():
    net = three_switches()
    rewrite = [parser.OFPActionSetField(ipv4_dst="10.0.0.3"),
               parser.OFPActionSetField(eth_dst=MAC3)]
    send(net.datapaths[1], flow({"in_port": 1, "eth_type": 0x0800, "ipv4_dst": "10.0.0.2"},
                                [*rewrite, out(2)]))
    send(net.datapaths[2], flow({"in_port": 1}, [out(2)]))
    send(net.datapaths[3], flow({"eth_dst": MAC3}, [out(2)]))
    assert net.trace((1, 1), UDP) == [("h3", {**UDP, "ipv4_dst": "10.0.0.3", "eth_dst": MAC3})]
    assert net.trace((1, 1), {**UDP, "ipv4_dst": "10.0.0.9"}) == []


def test_a_dead_link_fails_over_to_the_backup_path_and_drops_what_is_sent_on_it():
    net = three_switches()
    send(net.datapaths[1], group_mod(1, [ff_bucket(2), ff_bucket(3)]),
         flow({"in_port": 1}, [parser.OFPActionGroup(1)]),
         flow({"in_port": 2}, [out(3)]))
    send(net.datapaths[2], flow({"in_port": 1}, [out(2)]))
    send(net.datapaths[3], flow({}, [out(2)]))
    assert net.trace((1, 1), UDP) == [("h3", UDP)]
    assert net.datapaths[1].table.lookup({**UDP, "in_port": 1}) == [(2, UDP)]
    net.set_link_live(3, 1, False)
    assert net.datapaths[2].table.lookup({**UDP, "in_port": 1}) == []
    net.set_link_live(2, 1, False)
    assert net.datapaths[1].table.lookup({**UDP, "in_port": 1}) == [(3, UDP)]
    assert net.trace((1, 1), UDP) == [("h3", UDP)]


def test_packet_outs_are_delivered_across_the_network():
    net = three_switches()
    send(net.datapaths[3], flow({"in_port": 3}, [out(2)]))
    send(net.datapaths[1], parser.OFPPacketOut(None, ofp.OFP_NO_BUFFER, ofp.OFPP_CONTROLLER,
                                               [out(1), out(3)], frame(**UDP)))
    assert net.deliver_packet_outs() == [("h1", UDP), ("h3", UDP)]
    assert net.deliver_packet_outs() == []


def test_a_forwarding_loop_is_reported_with_its_path():
    net = three_switches()
    send(net.datapaths[1], flow({"in_port": 1}, [out(2)]), flow({"in_port": 3}, [out(2)]))
    send(net.datapaths[2], flow({"in_port": 1}, [out(2)]))
    send(net.datapaths[3], flow({"in_port": 1}, [out(3)]))
    with pytest.raises(ForwardingLoop) as loop:
        net.trace((1, 1), UDP)
    assert str(loop.value) == (
        "looped: dp1:port1 -> dp2:port1 -> dp3:port1 -> dp1:port3 -> dp2:port1")


def test_a_path_longer_than_max_hops_is_refused():
    net = three_switches()
    net.max_hops = 2
    send(net.datapaths[1], flow({"in_port": 1}, [out(2)]))
    send(net.datapaths[2], flow({"in_port": 1}, [out(2)]))
    with pytest.raises(ForwardingLoop, match="^too many hops: dp1:port1 -> dp2:port1 -> dp3:port1$"):
        net.trace((1, 1), UDP)


def test_a_flood_in_a_ring_is_caught_too():
    net = three_switches()
    for dp in net.datapaths.values():
        send(dp, flow({}, [out(ofp.OFPP_FLOOD)]))
    with pytest.raises(ForwardingLoop):
        net.trace((1, 1), UDP)


def test_links_are_symmetric_and_must_agree():
    net = three_switches()
    assert net.links[(3, 3)] == ("switch", 1, 3)
    assert sorted(net.datapaths[1].table.ports) == [1, 2, 3]
    with pytest.raises(ValueError):
        FakeNetwork({(1, 1): ("switch", 2, 1), (2, 1): ("switch", 1, 2)})
