"""edgebed's SDN controller app: the Ryu-API adapter around :class:`controller.core.ControllerCore`.

It turns switch events into core calls and the core's desired switch states into OpenFlow 1.3
messages; it answers ARP for every host and service address; it places service flows when
their first packet arrives or when a host asks over the control protocol; it reroutes when a
port goes down (fast-failover groups have already switched by then, where a loop-free
alternate exists). Every decision is timed from the policy's answer to the switches' barrier
replies and written to the run's ``decisions`` table.

Configuration is a :class:`controller.config.ControllerConfig` read from the JSON file named by
``EDGEBED_CONTROLLER_CONFIG`` (written by the runner; see :mod:`controller.launcher`), so the app loads the same way under os-ken's
``AppManager`` and under ``ryu-manager``.

Takeover: placements are saved to ``state.json`` on every change; a restarted controller loads
them and re-installs every switch make-before-break (rules are re-added in place, then the
rules it no longer wants are deleted), so traffic keeps flowing through a restart.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from edgebed.tables import TableWriter
from edgebed import clock

from . import netns, openflow, policies, rules
from .config import ControllerConfig
from .control_handlers import ControlHandlers
from .control_server import ControlServer
from .core import ControllerCore, Outcome
from .launcher import CONFIG_ENVIRONMENT
from .records import TABLES, PendingInstall, Records
from .ryu_api import (DEAD_DISPATCHER, MAIN_DISPATCHER, App, arp, ethernet,
                      ipv4, ofp_event, ofproto_v1_3, packet, set_ev_cls)
from .view import NetworkView

LOG = logging.getLogger("edgebed.controller")


class EdgebedController(ControlHandlers, Records, App):
    """The controller app; one instance per controller process. Its control-protocol handlers
    are :class:`controller.control_handlers.ControlHandlers`, its records
    :class:`controller.records.Records`."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = ControllerConfig.read(Path(os.environ[CONFIG_ENVIRONMENT]))
        self.out = self.config.out
        self.started = clock.monotonic()
        self.view = NetworkView.from_json(self.config.view)
        self.core = ControllerCore(self.view, policies.create(self.config.policy,
                                                              self.config.policy_params),
                                   self.config.fast_failover)
        self.lock = threading.RLock()
        self.datapaths: dict[str, object] = {}
        self.installed: dict[str, rules.SwitchRules] = {}
        self.synced: set[str] = set()
        self.pending: dict[int, PendingInstall] = {}
        # Guards ``pending`` and the decisions table (taken inside ``lock``, never around it).
        self.installing = threading.Lock()
        self.subscribers: dict[str, tuple] = {}  # node -> control address
        # Joins held back until the control server has drained what arrived with them.
        self.joins: list[tuple] = []  # (message, request, reply)
        self.joins_since = 0.0  # when the first of them arrived (clock.monotonic())
        self._restore()
        # Appended to: a controller that takes over goes on with its predecessor's rows.
        self.tables = {name: TableWriter(
            self.out.parent / "records" / name / "controller-controller.csv", columns,
            append=True, flush=True) for name, columns in TABLES.items()}
        self.control = ControlServer(self._control_sockets(), self.handle_control,
                                     self.decide_joins)
        self.control.start()
        # When the first period ends, on CLOCK_REALTIME: the runner lines its timeline up with
        # the periods from it (status.json), so scheduled events fall at known phases of them.
        self.period_origin = None
        if self.config.period:
            first_due = clock.monotonic() + self.config.period
            self.period_origin = clock.time() + self.config.period
            threading.Thread(target=self._periods, args=(first_due,), name="periods",
                             daemon=True).start()
        self._write_status()

    def _periods(self, due: float) -> None:
        """Every period from ``due`` (monotonic) on, the policy decides every placed flow
        again (absolute deadlines, so periods do not drift by the time a decision takes)."""
        period = self.config.period
        while True:
            clock.sleep(max(0.0, due - clock.monotonic()))
            due += period
            with self.lock:
                started = clock.real_elapsed_ns()
                self._carry_out(self.core.reallocate(clock.monotonic() - self.started), "period",
                                started)

    # lifecycle

    def _control_sockets(self) -> list:
        """The control protocol listens on loopback (at a port of its own per run, as runs share
        the root namespace) and at the hosts' control endpoint, inside its namespace: the
        controller's management address (out-of-band) or the control host's data-plane
        address (in-band); nowhere else."""
        sockets = [netns.udp_socket("127.0.0.1", self.config.loopback_control_port)]
        endpoint = self.config.control_endpoint
        if endpoint:
            sockets.append(netns.udp_socket(endpoint.address, self.config.control_port,
                                            netns_pid=endpoint.netns_pid))
        return sockets

    def shutdown(self) -> None:
        """Stop serving and leave everything on disk (the switches keep their rules)."""
        with self.lock, self.installing:
            self.control.stop()
            self._save()
            for table in self.tables.values():
                table.close()
            self._write_status(stopped=True)

    # switches

    # On reaching MAIN, not on the features reply: the framework's own handler gives the
    # datapath its id from that reply in another thread, and only then moves it to MAIN, whose
    # handlers alone see the replies to what is sent here. Taken on the features reply, a
    # switch could still have no id (seen under load: ignored, never synced).
    @set_ev_cls(ofp_event.EventOFPStateChange, MAIN_DISPATCHER)
    def switch_ready(self, event) -> None:
        datapath = event.datapath
        switch = self.view.switch_of_dpid.get(datapath.id)
        if switch is None:
            LOG.warning("switch %016x is not in the scenario; ignoring it", datapath.id)
            return
        parser = datapath.ofproto_parser
        with self.lock:
            self.datapaths[switch] = datapath
            # What the switch still holds is unknown (a fresh switch, one that kept rules
            # through a controller restart, or one that lost them): install everything in
            # place, then ask which of our rules it holds that are no longer wanted.
            self.installed[switch] = rules.SwitchRules()
            openflow.send(datapath, openflow.clear_foreign(datapath), barrier=False)
            self._sync(switch, everything=True)
            datapath.send_msg(parser.OFPPortDescStatsRequest(datapath, 0))
            datapath.send_msg(parser.OFPFlowStatsRequest(
                datapath, 0, datapath.ofproto.OFPTT_ALL, datapath.ofproto.OFPP_ANY,
                datapath.ofproto.OFPG_ANY, rules.COOKIE_BASE, rules.COOKIE_MARK,
                parser.OFPMatch()))
        LOG.info("switch %s (%016x) connected", switch, datapath.id)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def switch_gone(self, event) -> None:
        datapath = event.datapath
        switch = self.view.switch_of_dpid.get(datapath.id)
        with self.lock:
            if switch is not None and self.datapaths.get(switch) is datapath:
                del self.datapaths[switch]
                self.synced.discard(switch)
                self.installed.pop(switch, None)
                LOG.info("switch %s disconnected", switch)
                self._write_status()

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def flows_held(self, event) -> None:
        """Delete our rules the switch holds that are no longer wanted (left by an earlier
        controller, or wanted before a change made while the switch was away)."""
        datapath = event.msg.datapath
        switch = self.view.switch_of_dpid.get(datapath.id)
        with self.lock:
            if switch not in self.installed:
                return
            wanted = self.installed[switch].rules
            stale = set()
            for held in event.msg.body:
                rule = rules.Rule(held.table_id, held.priority, rules.match(**dict(held.match.items())))
                if rule.key not in wanted:
                    stale.add(rule)
            if stale:
                openflow.send(datapath, [openflow.flow_delete(datapath, rule) for rule in stale],
                              barrier=False)
            self.synced.add(switch)
            if stale:
                LOG.info("switch %s: removed %d stale rules", switch, len(stale))
            self._write_status()

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def ports_described(self, event) -> None:
        datapath = event.msg.datapath
        for port in event.msg.body:
            self._port(datapath, port)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, event) -> None:
        self._port(event.msg.datapath, event.msg.desc)

    def _port(self, datapath, port) -> None:
        ofp = datapath.ofproto
        switch = self.view.switch_of_dpid.get(datapath.id)
        if switch is None or port.port_no > ofp.OFPP_MAX:
            return
        up = not (port.state & ofp.OFPPS_LINK_DOWN or port.config & ofp.OFPPC_PORT_DOWN)
        with self.lock:
            started = clock.real_elapsed_ns()
            affected = self.core.port_changed(switch, port.port_no, up)
            if affected:
                LOG.info("%s port %d %s: rerouting", switch, port.port_no,
                         "up" if up else "down")
                self._install(Outcome(switches=affected), "reroute", started, 0.0)
                self._write_status()

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier(self, event) -> None:
        xid = event.msg.xid
        # Not the app's lock: a barrier reply is recorded when it comes, not once the decision
        # that sent it has also saved the state and answered its hosts.
        with self.installing:
            for key, pending in list(self.pending.items()):
                if xid in pending.waiting:
                    pending.waiting.discard(xid)
                    if not pending.waiting:
                        del self.pending[key]
                        self._record(pending, clock.real_elapsed_ns())

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def switch_error(self, event) -> None:
        message = event.msg
        LOG.warning("switch %016x error type %d code %d (xid %d)", message.datapath.id,
                    message.type, message.code, message.xid)

    # packets sent to the controller

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, event) -> None:
        message = event.msg
        datapath = message.datapath
        frame = packet.Packet(message.data)
        request = frame.get_protocol(arp.arp)
        if request is not None:
            self._answer_arp(datapath, message.match["in_port"], frame, request)
            return
        header = frame.get_protocol(ipv4.ipv4)
        if header is None or header.dst not in self.view.service_by_address:
            return
        service = self.view.service_by_address[header.dst]
        with self.lock:
            client = self.core.client_of(header.src)
            if client is None:
                return
            flow = f"{client}/{service.name}"
            if flow not in self.core.flows:
                self._place([self.core.request_for(client, service.name)])
            if flow in self.core.flows:
                self._send_through_table(datapath, message)

    def _answer_arp(self, datapath, in_port: int, frame, request) -> None:
        """Proxy ARP: hosts and service addresses are known, so no request is ever flooded."""
        if request.opcode != arp.ARP_REQUEST:
            return
        target = self.view.by_address.get(request.dst_ip)
        mac = target.mac if target else (self.view.service_by_address[request.dst_ip].mac
                                         if request.dst_ip in self.view.service_by_address
                                         else None)
        if mac is None:
            return
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(ethertype=ethernet.ether.ETH_TYPE_ARP,
                                             dst=request.src_mac, src=mac))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=mac, src_ip=request.dst_ip,
                                   dst_mac=request.src_mac, dst_ip=request.src_ip))
        reply.serialize()
        ofp, parser = datapath.ofproto, datapath.ofproto_parser
        datapath.send_msg(parser.OFPPacketOut(datapath, ofp.OFP_NO_BUFFER, ofp.OFPP_CONTROLLER,
                                              [parser.OFPActionOutput(in_port)], reply.data))

    def _send_through_table(self, datapath, message) -> None:
        """Send a packet that waited for its flow's rules back through the pipeline. The rules
        went out before it on the same connection, and a switch processes messages in order."""
        ofp, parser = datapath.ofproto, datapath.ofproto_parser
        datapath.send_msg(parser.OFPPacketOut(datapath, ofp.OFP_NO_BUFFER,
                                              message.match["in_port"],
                                              [parser.OFPActionOutput(ofp.OFPP_TABLE)],
                                              message.data))

    # decisions

    def _place(self, requests) -> Outcome:
        started = clock.real_elapsed_ns()
        outcome = self.core.place(requests, clock.monotonic() - self.started)
        self._carry_out(outcome, "place", started)
        return outcome

    def _carry_out(self, outcome: Outcome, kind: str, started_ns: int) -> None:
        """Install an outcome, save the state, tell subscribers."""
        policy_ms = (clock.real_elapsed_ns() - started_ns) / 1e6
        self._write_traces()
        for rejection in outcome.decision.rejections:
            LOG.info("policy rejected %s: %s", rejection.flow, rejection.reason)
        self._install(outcome, kind, clock.real_elapsed_ns(), policy_ms)
        if outcome.placed:
            self._save()
        for flow in outcome.placed:
            self._notify(flow, migrated=kind != "place")

    def _install(self, outcome: Outcome, kind: str, decided_ns: int, policy_ms: float) -> None:
        sent = 0
        waiting = set()
        switches = {s for s in outcome.switches if s in self.datapaths}
        # Held from the first message sent until the decision waits for its barriers, so that
        # a reply coming back in between finds it.
        with self.installing:
            for switch in switches:
                count, xid = self._sync(switch)
                sent += count
                if xid is not None:
                    waiting.add(xid)
            # A leave's row names the flow that left and the server it was on.
            pending = PendingInstall(kind, dict(outcome.placed or outcome.left), decided_ns,
                                     policy_ms, switches, sent, clock.real_elapsed_ns(), waiting)
            if waiting:
                self.pending[min(waiting)] = pending
            else:
                self._record(pending, clock.real_elapsed_ns())

    def _sync(self, switch: str, everything: bool = False) -> tuple[int, int | None]:
        """Send a switch what it lacks (``everything``: compare all it should hold, not only
        what changed since the last sync); returns the message count and the barrier's xid."""
        datapath = self.datapaths.get(switch)
        if datapath is None:
            return 0, None
        installed = self.installed.setdefault(switch, rules.SwitchRules())
        changes = self.core.changes(switch, installed, everything)
        if not changes:
            return 0, None
        xid = openflow.send(datapath, openflow.messages(datapath, changes))
        installed.apply(changes)
        return changes.count(), xid
