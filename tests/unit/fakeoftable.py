"""A fake OpenFlow 1.3 switch for unit tests: flow tables, groups and a network of them.

The controller emits real os-ken messages; `FakeDatapath.send_msg` applies them to a
`FakeOFTable`, and `lookup` / `FakeNetwork.trace` then say what the switches would do
with a packet, without root or Open vSwitch.

Packets are dicts of OXM field names (as os-ken spells them) to values in os-ken's user
form: MACs and IP addresses as strings ('00:00:00:00:00:01', '10.0.0.1'), everything else
as ints (eth_type, ip_proto, udp_dst, ...). A tagged packet carries `vlan_vid` with
OFPVID_PRESENT set; an untagged one has no `vlan_vid`. `lookup` also needs `in_port`;
outputs never carry `in_port` or `metadata`, which belong to the pipeline, not the packet.
Keys that are not OXM fields are carried through unchanged (handy for labelling packets).

Behaviour worth knowing (OpenFlow 1.3, and Open vSwitch where the spec leaves room):
  * OFPFC_ADD replaces an entry with the same match and priority; the new entry takes the
    ADD's cookie and instructions. Equal-priority overlapping entries match in the order
    they were added.
  * DELETE filters on out_port/out_group unless they are OFPP_ANY/OFPG_ANY. os-ken's
    OFPFlowMod defaults both to 0, so a delete built without them removes nothing.
  * MODIFY with no matching entry does nothing (OF1.2+); it keeps cookies.
  * Output to the ingress port is dropped unless it goes through OFPP_IN_PORT; output to a
    port that is down or was never declared is dropped.
  * Match prerequisites (ipv4_* needs eth_type=0x0800, tcp_* needs ip_proto=6, ...) are
    checked per field family, for matches and for set_field actions.
  * A SELECT group uses its first live bucket, a deterministic stand-in for OVS's hash;
    FAST_FAILOVER does the same by definition. Bucket actions run in order, as in OVS.
  * A table miss without a table-miss entry drops the packet, action set included.
Not modelled: timeouts, counters, queues, buffered packets, QinQ, the vlan_vid-needs-a-tag
check on set_field and the ipv6_nd_* prerequisites. Meter instructions let everything
through. Actions other than output, set_field, group, push_vlan and pop_vlan (TTL, MPLS,
output to OFPP_NORMAL, ...) raise NotImplementedError when a packet meets them.
"""

from __future__ import annotations

import struct
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Iterator

from os_ken.lib.packet import arp, ethernet, icmp, ipv4, ipv6, packet as packet_lib, tcp, udp, vlan
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_parser
from os_ken.ofproto import ofproto_v1_3_parser as parser

Packet = dict[str, Any]
Output = tuple[int, Packet]

# Open vSwitch's "add or modify" group command (OFPGC11_ADD_OR_MOD), accepted in OF1.1-1.4.
OFPGC_ADD_OR_MOD = 0x8000

_OXM_FIELDS = frozenset(f.name for f in ofp.oxm_types)
_PIPELINE_FIELDS = ("in_port", "metadata")

# (field-name prefix, field the match must pin, values it may take). Chains such as
# tcp_dst -> ip_proto -> eth_type hold because ip_proto is checked in its own right.
_PREREQUISITES = (
    ("ipv4_", "eth_type", {0x0800}), ("arp_", "eth_type", {0x0806}),
    ("ipv6_", "eth_type", {0x86DD}), ("ip_", "eth_type", {0x0800, 0x86DD}),
    ("mpls_", "eth_type", {0x8847, 0x8848}), ("tcp_", "ip_proto", {6}),
    ("udp_", "ip_proto", {17}), ("sctp_", "ip_proto", {132}),
    ("icmpv4_", "ip_proto", {1}), ("icmpv6_", "ip_proto", {58}),
)

# Spec order of instruction execution and of the action set.
_INSTRUCTION_ORDER = {ofp.OFPIT_METER: 0, ofp.OFPIT_APPLY_ACTIONS: 1, ofp.OFPIT_CLEAR_ACTIONS: 2,
                      ofp.OFPIT_WRITE_ACTIONS: 3, ofp.OFPIT_WRITE_METADATA: 4,
                      ofp.OFPIT_GOTO_TABLE: 5}
_ACTION_SET_ORDER = {ofp.OFPAT_POP_VLAN: 0, ofp.OFPAT_PUSH_VLAN: 1, ofp.OFPAT_SET_FIELD: 2,
                     ofp.OFPAT_GROUP: 3, ofp.OFPAT_OUTPUT: 4}

_RESERVED_PORTS = {value: name.removeprefix("OFPP_") for name, value in vars(ofp).items()
                   if name.startswith("OFPP_") and value > ofp.OFPP_MAX}
_ACTION_LISTS = {ofp.OFPIT_APPLY_ACTIONS: "apply", ofp.OFPIT_WRITE_ACTIONS: "write",
                 ofp.OFPIT_CLEAR_ACTIONS: "clear"}


def _masked(name: str, value: Any) -> tuple[int, int]:
    """An OXM value in os-ken user form as (value & mask, mask) integers."""
    _, raw, mask = ofp.oxm_from_user(name, value)
    bits = int.from_bytes(mask, "big") if mask else (1 << 8 * len(raw)) - 1
    return int.from_bytes(raw, "big") & bits, bits


def _match_fields(match: Any) -> dict[str, tuple[int, int]]:
    return {name: _masked(name, value) for name, value in match.items()}


def _canonical(packet: Packet) -> Packet:
    """The packet with OXM values spelled as os-ken prints them (lower-case MACs, ...)."""
    return {k: ofp.oxm_to_user(*ofp.oxm_from_user(k, v))[1] if k in _OXM_FIELDS else v
            for k, v in packet.items()}


def _lacks_prerequisite(name: str, fields: dict[str, tuple[int, int]]) -> bool:
    return any(name.startswith(prefix) and fields.get(needed, (None,))[0] not in values
               for prefix, needed, values in _PREREQUISITES)


def _covers(general: dict, specific: dict) -> bool:
    """Whether every packet matching `specific` also matches `general` (non-strict mods)."""
    return all(name in specific and specific[name][1] & mask == mask
               and specific[name][0] & mask == value
               for name, (value, mask) in general.items())


def _overlap(a: dict, b: dict) -> bool:
    return all((a[n][0] ^ b[n][0]) & a[n][1] & b[n][1] == 0 for n in a.keys() & b.keys())


def _describe(item: Any) -> str:
    """An action or instruction in a short ovs-ofctl-like form."""
    if isinstance(item, parser.OFPActionOutput):
        return f"output:{_RESERVED_PORTS.get(item.port, item.port)}"
    if isinstance(item, parser.OFPActionSetField):
        return f"set_field:{item.key}={item.value}"
    if isinstance(item, parser.OFPActionGroup):
        return f"group:{item.group_id}"
    if isinstance(item, parser.OFPInstructionActions):
        return f"{_ACTION_LISTS[item.type]}({', '.join(map(_describe, item.actions))})"
    if isinstance(item, parser.OFPInstructionGotoTable):
        return f"goto:{item.table_id}"
    if isinstance(item, parser.OFPInstructionWriteMetadata):
        return f"metadata:{item.metadata:#x}/{item.metadata_mask:#x}"
    return type(item).__name__.removeprefix("OFP")


@dataclass
class FlowEntry:
    """One flow table entry, as installed by a flow mod."""

    table_id: int
    priority: int
    match: dict[str, Any]
    instructions: list
    cookie: int
    fields: dict[str, tuple[int, int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.fields = _match_fields(self.match)

    def actions(self) -> Iterator[Any]:
        for inst in self.instructions:
            yield from getattr(inst, "actions", ())

    def outputs_to(self, port: int) -> bool:
        return any(isinstance(a, parser.OFPActionOutput) and a.port == port
                   for a in self.actions())

    def uses_group(self, group_id: int) -> bool:
        return any(isinstance(a, parser.OFPActionGroup) and a.group_id == group_id
                   for a in self.actions())

    def __str__(self) -> str:
        match = ",".join(f"{k}={v}" for k, v in self.match.items()) or "*"
        return (f"table={self.table_id} priority={self.priority} cookie={self.cookie:#x} "
                f"match[{match}] {' '.join(map(_describe, self.instructions))}")


class FakeOFTable:
    """The flow tables, group table and ports of one OpenFlow 1.3 switch.

    Messages that a switch would refuse are recorded in `errors` as (message, OpenFlow
    error name) pairs and otherwise ignored, as a switch replies with an error message.
    Outputs to OFPP_CONTROLLER are returned by `lookup` and also kept in `packet_ins`.
    """

    def __init__(self, ports: tuple[int, ...] | list[int] = ()) -> None:
        self.ports = {port: True for port in ports}
        self.tables: dict[int, list[FlowEntry]] = defaultdict(list)
        self.groups: dict[int, Any] = {}  # group id -> the OFPGroupMod that set it
        self.errors: list[tuple[Any, str]] = []
        self.packet_ins: list[Packet] = []

    def set_port_live(self, port: int, live: bool) -> None:
        if port not in self.ports:
            raise KeyError(f"no port {port}; ports are {sorted(self.ports)}")
        self.ports[port] = live

    def flows(self, table_id: int | None = None) -> list[FlowEntry]:
        ids = sorted(self.tables) if table_id is None else [table_id]
        return [entry for i in ids for entry in self.tables.get(i, ())]

    def __str__(self) -> str:
        lines = [str(entry) for entry in self.flows()]
        lines += [f"group={gid} type={g.type} buckets=" + "; ".join(
            f"watch_port={b.watch_port} [{', '.join(map(_describe, b.actions))}]"
            for b in g.buckets) for gid, g in sorted(self.groups.items())]
        lines += [f"error: {reason} for {msg}" for msg, reason in self.errors]
        return "\n".join(lines) or "(empty)"

    def apply(self, msg: Any) -> list[Output]:
        """Apply one controller message; returns what a packet-out sent, else []."""
        out: list[Output] = []
        reason = None
        if isinstance(msg, parser.OFPFlowMod):
            reason = self._flow_mod(msg)
        elif isinstance(msg, parser.OFPGroupMod):
            reason = self._group_mod(msg)
        elif isinstance(msg, parser.OFPPacketOut):
            reason = self._packet_out(msg, out)
        if reason:
            self.errors.append((msg, reason))
        return out

    def lookup(self, packet: Packet) -> list[Output]:
        """Run `packet` (with its `in_port`) through the pipeline from table 0."""
        packet = _canonical(packet)
        in_port = packet.pop("in_port")
        out: list[Output] = []
        self._pipeline(packet, in_port, out)
        return out

    def _flow_mod(self, msg: Any) -> str | None:
        deleting = msg.command in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT)
        fields = _match_fields(msg.match)
        if msg.command not in (ofp.OFPFC_ADD, ofp.OFPFC_MODIFY, ofp.OFPFC_MODIFY_STRICT,
                               ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT):
            return "OFPFMFC_BAD_COMMAND"
        if msg.table_id > ofp.OFPTT_MAX and not (deleting and msg.table_id == ofp.OFPTT_ALL):
            return "OFPFMFC_BAD_TABLE_ID"
        if any(_lacks_prerequisite(name, fields) for name in fields):
            return "OFPBMC_BAD_PREREQ"
        if not deleting and (reason := self._instructions_error(msg, fields)):
            return reason
        if msg.command == ofp.OFPFC_ADD:
            return self._add(msg)
        strict = msg.command in (ofp.OFPFC_MODIFY_STRICT, ofp.OFPFC_DELETE_STRICT)
        tables = list(self.tables) if msg.table_id == ofp.OFPTT_ALL else [msg.table_id]
        for table_id in tables:
            hits = [e for e in self.tables[table_id]
                    if (e.fields == fields and e.priority == msg.priority if strict
                        else _covers(fields, e.fields))
                    and e.cookie & msg.cookie_mask == msg.cookie & msg.cookie_mask
                    and (not deleting or self._passes_out_filters(e, msg))]
            for entry in hits:
                if deleting:
                    self.tables[table_id].remove(entry)
                else:
                    entry.instructions = list(msg.instructions)
        return None

    @staticmethod
    def _passes_out_filters(entry: FlowEntry, msg: Any) -> bool:
        return ((msg.out_port == ofp.OFPP_ANY or entry.outputs_to(msg.out_port))
                and (msg.out_group == ofp.OFPG_ANY or entry.uses_group(msg.out_group)))

    def _instructions_error(self, msg: Any, fields: dict) -> str | None:
        for inst in msg.instructions:
            if isinstance(inst, parser.OFPInstructionGotoTable) and inst.table_id <= msg.table_id:
                return "OFPBIC_BAD_TABLE_ID"  # the pipeline may only go forward
            for action in getattr(inst, "actions", ()):
                if isinstance(action, parser.OFPActionGroup) and action.group_id not in self.groups:
                    return "OFPBAC_BAD_OUT_GROUP"
                if (isinstance(action, parser.OFPActionSetField)
                        and _lacks_prerequisite(action.key, fields)):
                    return "OFPBAC_MATCH_INCONSISTENT"
        return None

    def _add(self, msg: Any) -> str | None:
        new = FlowEntry(msg.table_id, msg.priority, dict(msg.match.items()),
                        list(msg.instructions), msg.cookie)
        table = self.tables[msg.table_id]
        same_priority = [e for e in table if e.priority == new.priority]
        if msg.flags & ofp.OFPFF_CHECK_OVERLAP and any(
                _overlap(e.fields, new.fields) for e in same_priority):
            return "OFPFMFC_OVERLAP"
        for i, entry in enumerate(table):
            if entry.priority == new.priority and entry.fields == new.fields:
                table[i] = new
                return None
        table.insert(next((i for i, e in enumerate(table) if e.priority < new.priority),
                          len(table)), new)
        return None

    def _group_mod(self, msg: Any) -> str | None:
        gid, exists = msg.group_id, msg.group_id in self.groups
        if msg.command == ofp.OFPGC_DELETE:
            doomed = set(self.groups) if gid == ofp.OFPG_ALL else {gid}
            for table in self.tables.values():
                table[:] = [e for e in table if not any(map(e.uses_group, doomed))]
            for doomed_id in doomed:
                self.groups.pop(doomed_id, None)
            return None
        if msg.command not in (ofp.OFPGC_ADD, ofp.OFPGC_MODIFY, OFPGC_ADD_OR_MOD):
            return "OFPGMFC_BAD_COMMAND"
        if gid > ofp.OFPG_MAX:
            return "OFPGMFC_INVALID_GROUP"
        if msg.type not in (ofp.OFPGT_ALL, ofp.OFPGT_SELECT, ofp.OFPGT_INDIRECT, ofp.OFPGT_FF):
            return "OFPGMFC_BAD_TYPE"
        if msg.type == ofp.OFPGT_FF and any(
                b.watch_port == ofp.OFPP_ANY and b.watch_group == ofp.OFPG_ANY
                for b in msg.buckets):
            return "OFPGMFC_BAD_WATCH"
        if msg.command == ofp.OFPGC_ADD and exists:
            return "OFPGMFC_GROUP_EXISTS"
        if msg.command == ofp.OFPGC_MODIFY and not exists:
            return "OFPGMFC_UNKNOWN_GROUP"
        self.groups[gid] = msg
        return None

    def _packet_out(self, msg: Any, out: list[Output]) -> str | None:
        if msg.buffer_id != ofp.OFP_NO_BUFFER:
            return "OFPBRC_BUFFER_UNKNOWN"  # this switch buffers nothing
        self._run_actions(msg.actions, packet_from_bytes(msg.data), msg.in_port, out)
        return None

    def _pipeline(self, packet: Packet, in_port: int, out: list[Output]) -> None:
        action_set: dict[Any, Any] = {}
        metadata, table_id = 0, 0
        while table_id is not None:
            entry = self._best_entry(table_id, packet, in_port, metadata)
            if entry is None:
                return
            table_id = None
            for inst in sorted(entry.instructions, key=lambda i: _INSTRUCTION_ORDER[i.type]):
                if inst.type == ofp.OFPIT_APPLY_ACTIONS:
                    self._run_actions(inst.actions, packet, in_port, out)
                elif inst.type == ofp.OFPIT_CLEAR_ACTIONS:
                    action_set.clear()
                elif inst.type == ofp.OFPIT_WRITE_ACTIONS:
                    action_set.update(((a.type, getattr(a, "key", None)), a) for a in inst.actions)
                elif inst.type == ofp.OFPIT_WRITE_METADATA:
                    mask = inst.metadata_mask
                    metadata = metadata & ~mask | inst.metadata & mask
                elif inst.type == ofp.OFPIT_GOTO_TABLE:
                    table_id = inst.table_id
        # Unsupported actions fail in _run_actions wherever they sort.
        actions = sorted(action_set.values(), key=lambda a: _ACTION_SET_ORDER.get(a.type, -1))
        if any(a.type == ofp.OFPAT_GROUP for a in actions):
            actions = [a for a in actions if a.type != ofp.OFPAT_OUTPUT]  # group wins (spec)
        self._run_actions(actions, packet, in_port, out)

    def _best_entry(self, table_id: int, packet: Packet, in_port: int,
                    metadata: int) -> FlowEntry | None:
        values = {name: _masked(name, value)[0] for name, value in packet.items()
                  if name in _OXM_FIELDS}
        values.setdefault("vlan_vid", ofp.OFPVID_NONE)  # what untagged packets match
        values.update(in_port=in_port, metadata=metadata)
        return next((e for e in self.tables.get(table_id, ())
                     if all(name in values and values[name] & mask == value
                            for name, (value, mask) in e.fields.items())), None)

    def _run_actions(self, actions: list, packet: Packet, in_port: int,
                     out: list[Output]) -> None:
        for action in actions:
            if isinstance(action, parser.OFPActionOutput):
                self._output(action.port, packet, in_port, out)
            elif isinstance(action, parser.OFPActionSetField):
                packet.update(_canonical({action.key: action.value}))
            elif isinstance(action, parser.OFPActionGroup):
                self._run_group(action.group_id, packet, in_port, out)
            elif isinstance(action, parser.OFPActionPushVlan):
                if "vlan_vid" in packet:
                    raise NotImplementedError("the fake table models one VLAN tag, not QinQ")
                packet.update(vlan_vid=ofp.OFPVID_PRESENT, vlan_pcp=0)
            elif isinstance(action, parser.OFPActionPopVlan):
                packet.pop("vlan_vid", None)
                packet.pop("vlan_pcp", None)
            else:
                raise NotImplementedError(f"the fake table cannot execute {action}")

    def _run_group(self, group_id: int, packet: Packet, in_port: int,
                   out: list[Output]) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        buckets = (group.buckets if group.type == ofp.OFPGT_ALL
                   else [b for b in group.buckets if self._bucket_live(b)][:1])
        for bucket in buckets:
            self._run_actions(bucket.actions, dict(packet), in_port, out)

    def _bucket_live(self, bucket: Any) -> bool:
        watched = []
        if bucket.watch_port != ofp.OFPP_ANY:
            watched.append(self.ports.get(bucket.watch_port, False))
        if bucket.watch_group != ofp.OFPG_ANY:
            group = self.groups.get(bucket.watch_group)
            watched.append(group is not None and any(map(self._bucket_live, group.buckets)))
        return not watched or any(watched)

    def _output(self, port: int, packet: Packet, in_port: int, out: list[Output]) -> None:
        if port == ofp.OFPP_NORMAL:
            raise NotImplementedError("the fake table has no L2 learning for OFPP_NORMAL")
        if port == ofp.OFPP_TABLE:
            self._pipeline(dict(packet), in_port, out)
            return
        if port == ofp.OFPP_IN_PORT:
            targets = [in_port]
        elif port in (ofp.OFPP_FLOOD, ofp.OFPP_ALL):
            targets = [p for p in self.ports if p != in_port]
        elif port == in_port:
            targets = []  # switches never hairpin unless told to with OFPP_IN_PORT
        else:
            targets = [port]
        for target in targets:
            sent = {k: v for k, v in packet.items() if k not in _PIPELINE_FIELDS}
            if target == ofp.OFPP_CONTROLLER:
                self.packet_ins.append(sent)
            elif not self.ports.get(target, False):
                continue
            out.append((target, sent))


# os-ken header attributes that carry each OXM field; later headers override earlier ones,
# so eth_type ends up as the type inside any VLAN tag, as OpenFlow matches it.
_HEADER_FIELDS = {
    ethernet.ethernet: {"dst": "eth_dst", "src": "eth_src", "ethertype": "eth_type"},
    vlan.vlan: {"vid": "vlan_vid", "pcp": "vlan_pcp", "ethertype": "eth_type"},
    arp.arp: {"opcode": "arp_op", "src_ip": "arp_spa", "dst_ip": "arp_tpa",
              "src_mac": "arp_sha", "dst_mac": "arp_tha"},
    ipv4.ipv4: {"src": "ipv4_src", "dst": "ipv4_dst", "proto": "ip_proto"},
    ipv6.ipv6: {"src": "ipv6_src", "dst": "ipv6_dst", "nxt": "ip_proto"},
    tcp.tcp: {"src_port": "tcp_src", "dst_port": "tcp_dst"},
    udp.udp: {"src_port": "udp_src", "dst_port": "udp_dst"},
    icmp.icmp: {"type": "icmpv4_type", "code": "icmpv4_code"},
}


def packet_from_bytes(data: bytes) -> Packet:
    """The packet dict for raw frame bytes, e.g. a packet-out's data."""
    result: Packet = {}
    for header in packet_lib.Packet(data).protocols:
        for attr, name in _HEADER_FIELDS.get(type(header), {}).items():
            result[name] = getattr(header, attr)
    if "vlan_vid" in result:
        result["vlan_vid"] |= ofp.OFPVID_PRESENT
    return _canonical(result)


class FakeDatapath:
    """Stands in for os-ken's Datapath: messages sent to it are applied to its `table`.

    Like the real one, `send_msg` serializes each message, so one that os-ken could not
    encode fails here too. Outputs of packet-outs accumulate in `packet_outs`.
    """

    def __init__(self, dpid: int, ports: tuple[int, ...] | list[int] = ()) -> None:
        self.id = dpid
        self.ofproto = ofp
        self.ofproto_parser = parser
        self.xid = 0
        self.table = FakeOFTable(ports)
        self.sent: list[Any] = []
        self.barriers: list[int] = []  # the transaction ids of the barrier requests sent
        self.packet_outs: list[Output] = []

    def set_xid(self, msg: Any) -> int:
        self.xid = (self.xid + 1) & ofp.MAX_XID
        msg.set_xid(self.xid)
        return self.xid

    def send_msg(self, msg: Any) -> None:
        if msg.xid is None:
            self.set_xid(msg)
        msg.serialize()
        self.sent.append(msg)
        self.packet_outs.extend(self.table.apply(msg))

    def send(self, data: bytes) -> None:
        """Raw bytes, as the real one takes them: OpenFlow messages back to back, each parsed
        (os-ken's parser for flow mods, :func:`parse_group_mod` for group mods; barriers are
        counted in `barriers`) and applied in turn. Bytes os-ken cannot parse fail here."""
        offset = 0
        while offset < len(data):
            version, msg_type, length, xid = struct.unpack_from(ofp.OFP_HEADER_PACK_STR, data,
                                                                offset)
            assert version == ofp.OFP_VERSION and length >= ofp.OFP_HEADER_SIZE, data[offset:]
            message = data[offset:offset + length]
            assert len(message) == length, f"truncated message at {offset}"
            offset += length
            if msg_type == ofp.OFPT_BARRIER_REQUEST:
                self.barriers.append(xid)
                continue
            if msg_type == ofp.OFPT_GROUP_MOD:
                msg = parse_group_mod(self, xid, message)
            else:
                msg = ofproto_parser.msg(self, version, msg_type, length, xid, message)
                assert msg is not None, f"os-ken could not parse message type {msg_type}"
            self.sent.append(msg)
            self.packet_outs.extend(self.table.apply(msg))

    def set_port_live(self, port: int, live: bool) -> None:
        self.table.set_port_live(port, live)

    def __str__(self) -> str:
        return f"datapath {self.id}:\n{self.table}"


def parse_group_mod(datapath: Any, xid: int, data: bytes) -> Any:
    """An OFPT_GROUP_MOD's bytes as os-ken's message (os-ken parses its buckets, not the
    message: switches never send one)."""
    command, group_type, group_id = struct.unpack_from(ofp.OFP_GROUP_MOD_PACK_STR, data,
                                                       ofp.OFP_HEADER_SIZE)
    buckets, offset = [], ofp.OFP_GROUP_MOD_SIZE
    while offset < len(data):
        buckets.append(parser.OFPBucket.parser(data, offset))
        offset += buckets[-1].len
    msg = parser.OFPGroupMod(datapath, command, group_type, group_id, buckets)
    msg.xid = xid
    return msg


class ForwardingLoop(RuntimeError):
    """A packet came back to a switch port as it was there before, or went max_hops."""


class FakeNetwork:
    """FakeDatapaths joined by links, to follow a packet from switch to switch to hosts.

    `links` maps (dpid, port) to ("switch", dpid, port) or ("host", name); a switch link
    given in one direction is added in the other. A switch's ports are its linked ports.
    """

    def __init__(self, links: dict[tuple[int, int], tuple], max_hops: int = 64) -> None:
        self.links = dict(links)
        for end, peer in links.items():
            if peer[0] == "switch":
                reverse = ("switch", *end)
                if self.links.setdefault(peer[1:], reverse) != reverse:
                    raise ValueError(f"link {end} -> {peer} conflicts with {self.links[peer[1:]]}")
        ports = defaultdict(list)
        for dpid, port in self.links:
            ports[dpid].append(port)
        self.datapaths = {dpid: FakeDatapath(dpid, sorted(p)) for dpid, p in ports.items()}
        self.max_hops = max_hops

    def set_link_live(self, dpid: int, port: int, live: bool) -> None:
        """Take a link up or down at both ends."""
        peer = self.links[(dpid, port)]
        for end in [(dpid, port)] + ([peer[1:]] if peer[0] == "switch" else []):
            self.datapaths[end[0]].set_port_live(end[1], live)

    def trace(self, start: tuple[int, int], packet: Packet) -> list[tuple[str, Packet]]:
        """Which hosts receive `packet` arriving at (dpid, in_port), and as what."""
        dpid, in_port = start
        arrival = (dpid, in_port, _freeze(packet))
        outputs = self.datapaths[dpid].table.lookup({**packet, "in_port": in_port})
        return self._propagate([(dpid, port, out, (arrival,)) for port, out in outputs])

    def deliver_packet_outs(self) -> list[tuple[str, Packet]]:
        """Carry every pending packet-out output to the hosts, clearing them."""
        emitted = [(dpid, port, out, ()) for dpid, dp in self.datapaths.items()
                   for port, out in dp.packet_outs]
        for dp in self.datapaths.values():
            dp.packet_outs.clear()
        return self._propagate(emitted)

    def _propagate(self, emitted: list) -> list[tuple[str, Packet]]:
        pending, delivered = deque(emitted), []
        while pending:
            dpid, port, packet, path = pending.popleft()
            peer = self.links.get((dpid, port))
            if peer is None:
                continue  # to the controller: the switch's table kept it in packet_ins
            if peer[0] == "host":
                delivered.append((peer[1], packet))
                continue
            _, next_dpid, in_port = peer
            arrival = (next_dpid, in_port, _freeze(packet))
            if arrival in path or len(path) >= self.max_hops:
                hops = " -> ".join(f"dp{d}:port{p}" for d, p, _ in path + (arrival,))
                raise ForwardingLoop(f"{'looped' if arrival in path else 'too many hops'}: {hops}")
            path += (arrival,)
            outputs = self.datapaths[next_dpid].table.lookup({**packet, "in_port": in_port})
            pending.extend((next_dpid, p, out, path) for p, out in outputs)
        return delivered


def _freeze(packet: Packet) -> tuple:
    return tuple(sorted(_canonical(packet).items()))
