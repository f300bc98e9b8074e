"""Desired switch state (:mod:`controller.rules`) as OpenFlow 1.3 messages.

Everything here works on a ``datapath`` object only through ``datapath.ofproto`` and
``datapath.ofproto_parser``, so the same code feeds a real switch connection (os-ken or Ryu)
and the fake flow table of the unit tests.
"""

from __future__ import annotations

from .rules import COOKIE_MARK, Bucket, Changes, Group, Rule

# Open vSwitch's "add or modify" group command (OFPGC11_ADD_OR_MOD, accepted in OpenFlow
# 1.1-1.4): a reconnecting switch may or may not still hold a group, and plain ADD fails on
# one it holds while MODIFY fails on one it lost.
GROUP_ADD_OR_MODIFY = 0x8000


def actions(datapath, wanted: tuple) -> list:
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    built = []
    for action in wanted:
        kind = action[0]
        if kind == "output":
            built.append(parser.OFPActionOutput(action[1]))
        elif kind == "group":
            built.append(parser.OFPActionGroup(action[1]))
        elif kind == "set_field":
            built.append(parser.OFPActionSetField(**{action[1]: action[2]}))
        elif kind == "controller":
            built.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER))
        else:
            raise ValueError(f"unknown action {action!r}")
    return built


def flow_add(datapath, rule: Rule):
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    instructions = []
    if rule.actions:
        instructions.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                                         actions(datapath, rule.actions)))
    if rule.goto is not None:
        instructions.append(parser.OFPInstructionGotoTable(rule.goto))
    return parser.OFPFlowMod(datapath, cookie=rule.cookie, table_id=rule.table,
                             command=ofp.OFPFC_ADD, priority=rule.priority,
                             match=parser.OFPMatch(**dict(rule.match)),
                             instructions=instructions)


def flow_delete(datapath, rule: Rule):
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowMod(datapath, table_id=rule.table, command=ofp.OFPFC_DELETE_STRICT,
                             priority=rule.priority, match=parser.OFPMatch(**dict(rule.match)),
                             out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)


def group_mod(datapath, group: Group, command: int = GROUP_ADD_OR_MODIFY):
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPGroupMod(datapath, command, ofp.OFPGT_FF, group.group_id,
                              [_bucket(datapath, bucket) for bucket in group.buckets])


def _bucket(datapath, bucket: Bucket):
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPBucket(watch_port=ofp.OFPP_ANY if bucket.watch_port is None
                            else bucket.watch_port, watch_group=ofp.OFPG_ANY,
                            actions=actions(datapath, bucket.actions))


def group_delete(datapath, group_id: int):
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPGroupMod(datapath, ofp.OFPGC_DELETE, ofp.OFPGT_FF, group_id, [])


def messages(datapath, changes: Changes) -> list:
    """The messages for ``changes``, in the order :class:`controller.rules.Changes` gives."""
    return ([group_mod(datapath, g) for g in changes.groups_added + changes.groups_modified]
            + [flow_add(datapath, rule) for rule in changes.rules_added]
            + [flow_delete(datapath, rule) for rule in changes.rules_deleted]
            + [group_delete(datapath, g) for g in changes.groups_deleted])


def clear_foreign(datapath) -> list:
    """Messages removing every rule edgebed did not install (a switch that comes to us with
    someone else's rules, or rules of a version it no longer wants): flows whose cookie lacks
    edgebed's mark."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return [parser.OFPFlowMod(datapath, table_id=ofp.OFPTT_ALL, command=ofp.OFPFC_DELETE,
                              cookie=0, cookie_mask=COOKIE_MARK, out_port=ofp.OFPP_ANY,
                              out_group=ofp.OFPG_ANY, match=parser.OFPMatch())]

