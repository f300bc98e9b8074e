"""Desired switch state (:mod:`controller.rules`) as OpenFlow 1.3 messages on the wire."""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from .rules import COOKIE_MARK, Bucket, Changes, Group, Rule

# Open vSwitch's "add or modify" group command (OFPGC11_ADD_OR_MOD, accepted in OpenFlow
# 1.1-1.4): a reconnecting switch may or may not still hold a group, and plain ADD fails on
# one it holds while MODIFY fails on one it lost.
GROUP_ADD_OR_MODIFY = 0x8000
# Distinct match field values and instruction lists remembered (far more than the hosts,
# servers and client ports of a scenario); beyond, the least recently used are encoded again.
REMEMBERED = 1 << 16
_XID = struct.Struct("!I")
XID_OFFSET = 4  # of the transaction id in the OpenFlow header (version, type, length, xid)


@dataclass(frozen=True)
class _Parts:
    """A datapath's protocol modules, hashable: encoded pieces are remembered per protocol."""

    ofproto: object
    ofproto_parser: object

    @classmethod
    def of(cls, datapath) -> _Parts:
        return cls(datapath.ofproto, datapath.ofproto_parser)


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


@functools.lru_cache(maxsize=REMEMBERED)
def _field(parts: _Parts, name: str, value) -> tuple[int, bytes]:
    """One match field as os-ken encodes it (normalised as ``OFPMatch(name=value)`` does),
    with the number os-ken orders a match's fields by."""
    ofp = parts.ofproto
    name, value = ofp.oxm_normalize_user(name, value)
    number, raw, mask = ofp.oxm_from_user(name, value)
    encoded = bytearray()
    ofp.oxm_serialize(number, raw, mask, encoded, 0)
    return number[0] if isinstance(number, tuple) else number, bytes(encoded)


def _match(parts: _Parts, fields) -> bytes:
    """An OXM match (ofp_match with its padding) of ``fields`` (name, value pairs)."""
    encoded = b"".join(tlv for _, tlv in sorted(_field(parts, name, value)
                                                for name, value in fields))
    length = 4 + len(encoded)  # the padding is not counted
    return struct.pack("!HH", parts.ofproto.OFPMT_OXM, length) + encoded + bytes(-length % 8)


@functools.lru_cache(maxsize=REMEMBERED)
def _instructions(parts: _Parts, wanted: tuple, goto: int | None) -> bytes:
    """A rule's instructions: apply ``wanted`` (actions), then go to table ``goto``."""
    ofp, parser = parts.ofproto, parts.ofproto_parser
    built = []
    if wanted:
        built.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                                  actions(parts, wanted)))
    if goto is not None:
        built.append(parser.OFPInstructionGotoTable(goto))
    encoded = bytearray()
    for instruction in built:
        instruction.serialize(encoded, len(encoded))
    return bytes(encoded)


def _flow_mod(datapath, command: int, table: int, priority: int, fields, cookie: int = 0,
              cookie_mask: int = 0, out_port: int = 0, out_group: int = 0,
              instructions: bytes = b"") -> bytes:
    """An OFPT_FLOW_MOD with os-ken's defaults (no timeouts, no buffer, no flags)."""
    parts = _Parts.of(datapath)
    ofp = parts.ofproto
    body = struct.pack(ofp.OFP_FLOW_MOD_PACK_STR0, cookie, cookie_mask, table, command, 0, 0,
                       priority, ofp.OFP_NO_BUFFER, out_port, out_group, 0)
    body += _match(parts, fields) + instructions
    return struct.pack(ofp.OFP_HEADER_PACK_STR, ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD,
                       ofp.OFP_HEADER_SIZE + len(body), 0) + body


def flow_add(datapath, rule: Rule) -> bytes:
    ofp = datapath.ofproto
    return _flow_mod(datapath, ofp.OFPFC_ADD, rule.table, rule.priority, rule.match,
                     cookie=rule.cookie,
                     instructions=_instructions(_Parts.of(datapath), rule.actions, rule.goto))


def flow_delete(datapath, rule: Rule) -> bytes:
    ofp = datapath.ofproto
    return _flow_mod(datapath, ofp.OFPFC_DELETE_STRICT, rule.table, rule.priority, rule.match,
                     out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)


def _encoded(message) -> bytes:
    """An os-ken message's bytes (its transaction id is filled in by :func:`send`)."""
    message.xid = 0
    message.serialize()
    return bytes(message.buf)


def group_mod(datapath, group: Group, command: int = GROUP_ADD_OR_MODIFY) -> bytes:
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return _encoded(parser.OFPGroupMod(datapath, command, ofp.OFPGT_FF, group.group_id,
                                       [_bucket(datapath, bucket) for bucket in group.buckets]))


def _bucket(datapath, bucket: Bucket):
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPBucket(watch_port=ofp.OFPP_ANY if bucket.watch_port is None
                            else bucket.watch_port, watch_group=ofp.OFPG_ANY,
                            actions=actions(datapath, bucket.actions))


def group_delete(datapath, group_id: int) -> bytes:
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return _encoded(parser.OFPGroupMod(datapath, ofp.OFPGC_DELETE, ofp.OFPGT_FF, group_id, []))


def messages(datapath, changes: Changes) -> list[bytes]:
    """The messages for ``changes``, in the order :class:`controller.rules.Changes` gives."""
    return ([group_mod(datapath, g) for g in changes.groups_added + changes.groups_modified]
            + [flow_add(datapath, rule) for rule in changes.rules_added]
            + [flow_delete(datapath, rule) for rule in changes.rules_deleted]
            + [group_delete(datapath, g) for g in changes.groups_deleted])


def clear_foreign(datapath) -> list[bytes]:
    """Messages removing every rule edgebed did not install (a switch that comes to us with
    someone else's rules, or rules of a version it no longer wants): flows whose cookie lacks
    edgebed's mark."""
    ofp = datapath.ofproto
    return [_flow_mod(datapath, ofp.OFPFC_DELETE, ofp.OFPTT_ALL, ofp.OFP_DEFAULT_PRIORITY, (),
                      cookie_mask=COOKIE_MARK, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)]


def send(datapath, messages: list[bytes], barrier: bool = True) -> int | None:
    """Hand ``messages`` to the switch connection in one write, followed by a barrier
    request if ``barrier``; returns the barrier's transaction id (None without one). The
    messages carry that id too (one id a batch, taken even without a barrier): an error the
    switch sends back names the batch, and its data the message. One write instead of one
    per message: os-ken's ``send_msg`` serialises and queues each message on its own, and its
    queue of 16 makes a large batch wait on the sending thread again and again."""
    request = datapath.ofproto_parser.OFPBarrierRequest(datapath)
    xid = datapath.set_xid(request)
    batch = bytearray()
    for message in messages:
        start = len(batch)
        batch += message
        _XID.pack_into(batch, start + XID_OFFSET, xid)
    if barrier:
        request.serialize()
        batch += request.buf
    if batch:
        datapath.send(bytes(batch))
    return xid if barrier else None
