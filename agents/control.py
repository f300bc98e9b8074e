"""The control protocol's client: how agents, experiments and tests talk to the controller."""

from __future__ import annotations

import collections
import os
import random
import re
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import BaseModel, Field

from agents.agent import NodeRef
from agents.echo import PathMeter
from edgebed import clock, protocol
from edgebed.quantities import PositiveDuration
from topologies.naming import MANAGEMENT_INTERFACE

TIMEOUT = 0.5
TRIES = 4
PUSHED = 1024
# Receive buffer of a client that asks many things at once: a burst of hundreds of decisions
# coming back must not overflow the default of ~200 KiB.
BURST_BUFFER = 4 * 1024 * 1024
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)


class ControlError(Exception):
    """The controller answered a request with ``error``, or with a reply that does not fit
    it."""


class ControlTimeout(ControlError, TimeoutError):
    """No reply to a request after the last try."""


@dataclass(frozen=True)
class Answer:
    """What came of one request of an exchange: the controller's ``reply`` or the ``error``
    that stands for it, when the request was first sent (``requested_ns``, CLOCK_REALTIME,
    comparable with the other hosts' tables), how long its answer took (``response_ns``, on
    the monotonic clock; None: none came) and how many times it was sent."""

    reply: protocol.Message | None
    error: ControlError | None
    requested_ns: int
    response_ns: int | None
    sends: int


class ControlClient:
    """A UDP socket connected to the controller at ``controller`` (host, port), speaking for
    ``node`` (needed for load reports, joins, leaves and subscriptions; operators steering,
    routing and querying may leave it out)."""

    def __init__(self, controller: tuple[str, int], node: str | None = None, *,
                 timeout: float = TIMEOUT, tries: int = TRIES):
        if timeout <= 0 or tries < 1:
            raise ValueError("timeout must be positive and tries at least 1")
        self.controller = controller
        self.node = node
        self.timeout = timeout
        self.tries = tries
        self.malformed = 0  # datagrams from the controller that were not valid messages
        family, kind, _, _, address = socket.getaddrinfo(*controller, type=socket.SOCK_DGRAM)[0]
        self._sock = socket.socket(family, kind)
        # Connected: the kernel drops datagrams from anyone but the controller.
        self._sock.connect(address)
        # A random start keeps a restarted agent's ids apart from those the controller
        # remembers from its previous run.
        self._next_id = random.SystemRandom().randint(1, protocol.MAX_ID)
        self._pushed: collections.deque[protocol.Decision | protocol.Rejected] = \
            collections.deque(maxlen=PUSHED)
        self._refused = False

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *_exception) -> None:
        self.close()

    def report_load(self, load: float, *, service: str | None = None,
                    metrics: Mapping[str, float] | None = None, ts: float | None = None,
                    seq: int = 0, urgent: bool = False) -> None:
        """Send a load report (``ts`` defaults to now); nothing comes back. ``metrics`` are
        named figures (:data:`edgebed.protocol.METRIC_KINDS`)."""
        self._send(protocol.encode(protocol.Load(
            node=self._own_node(), service=service, load=load, metrics=dict(metrics or {}),
            ts=clock.time() if ts is None else ts, seq=seq, urgent=urgent)))

    def join(self, service: str, demand: float = 0.0, bitrates: Sequence[float] = (),
             flow: str | None = None, port: int | None = None
             ) -> protocol.Decision | protocol.Rejected:
        """Ask for ``service``; the flow is ``node/service`` (``node/service:port``) unless
        named. With ``port`` the flow is only what this host sends from that transport port,
        steered apart from its other flows (one host standing for many terminals)."""
        return self._request(protocol.Join, JOIN_REPLIES, node=self._own_node(),
                             service=service, port=port, flow=flow, demand=demand,
                             bitrates=tuple(bitrates))

    def join_all(self, joins: Sequence[Mapping[str, Any]]) -> list[Answer]:
        """Ask for every join of ``joins`` (each the keyword arguments of :meth:`join`) at
        once: every request is sent before any answer is awaited, so that they reach the
        controller together and are decided in one call, and those left unanswered are sent
        again together. The answers, in the order of ``joins``."""
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BURST_BUFFER)
        except PermissionError:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BURST_BUFFER)
        requests = [self._message(protocol.Join, node=self._own_node(),
                                  **{**join, "bitrates": tuple(join.get("bitrates", ()))})
                    for join in joins]
        return self._exchange(requests, JOIN_REPLIES)

    def leave(self, flow: str, tries: int | None = None) -> protocol.Ack | protocol.Rejected:
        """Say that ``flow`` ended, so that the controller releases its placement; ``tries``
        sends (default: the client's)."""
        return self._request(protocol.Leave, (protocol.Ack, protocol.Rejected),
                             node=self._own_node(), flow=flow, tries=tries)

    def steer(self, flow: str, server: str) -> protocol.Decision | protocol.Rejected:
        """Move a placed flow to ``server``."""
        return self._request(protocol.Steer, (protocol.Decision, protocol.Rejected),
                             flow=flow, server=server)

    def link(self, link: int, delay_forward: float | None = None,
             delay_reverse: float | None = None) -> protocol.Ack:
        """Tell the controller link ``link``'s one-way delays changed (seconds; None: that
        direction did not)."""
        return self._request(protocol.Link, (protocol.Ack,), link=link,
                             delay_forward=delay_forward, delay_reverse=delay_reverse)

    def path(self, flow: str, via: Sequence[str]) -> protocol.Ack | protocol.Rejected:
        """Route ``flow`` along ``via``: node names from client to server, switches
        included."""
        return self._request(protocol.Path, (protocol.Ack, protocol.Rejected), flow=flow,
                             via=tuple(via))

    def subscribe(self) -> protocol.Ack:
        """Have decisions about this node's flows, and flows on its servers, pushed here."""
        return self._request(protocol.Subscribe, (protocol.Ack,), node=self._own_node())

    def query(self) -> protocol.State:
        """The controller's placements and servers (its parts gathered into one)."""
        return self._request(protocol.Query, (protocol.State,))

    def decisions(self, timeout: float | None = None
                  ) -> Iterator[protocol.Decision | protocol.Rejected]:
        """Pushed decisions and rejections as they come; ends once ``timeout`` seconds pass
        without one (None: never)."""
        while True:
            if self._pushed:
                yield self._pushed.popleft()
                continue
            deadline = None if timeout is None else clock.monotonic() + timeout
            while not self._pushed:
                if self._receive(deadline) is None:
                    return

    def fileno(self) -> int:
        """The socket's descriptor, for an agent's own select loop: readable when the
        controller sent something, which :meth:`pending` then takes without waiting."""
        return self._sock.fileno()

    def pending(self) -> list[protocol.Decision | protocol.Rejected]:
        """The pushed decisions and rejections received so far, without waiting for more."""
        while self._receive(None, block=False) is not None:
            pass
        taken = list(self._pushed)
        self._pushed.clear()
        return taken

    def _own_node(self) -> str:
        if self.node is None:
            raise ValueError("this ControlClient was made without node=...")
        return self.node

    def _message(self, kind: type[protocol.Message], **fields) -> protocol.Message:
        """A request of ``kind`` with the next id."""
        request = kind(id=self._next_id, **fields)
        self._next_id = self._next_id % protocol.MAX_ID + 1
        return request

    def _request(self, kind: type[protocol.Message], expected: tuple[type, ...],
                 tries: int | None = None, **fields) -> protocol.Message:
        [answer] = self._exchange([self._message(kind, **fields)], expected, tries)
        if answer.error is not None:
            raise answer.error
        return answer.reply

    def _exchange(self, requests: Sequence[protocol.Message], expected: tuple[type, ...],
                  tries: int | None = None) -> list[Answer]:
        """Send ``requests`` and gather their replies; those unanswered after a wait are sent
        again (the wait doubling each time), ``tries`` sends at most. The answers in the
        order of ``requests``."""
        tries = self.tries if tries is None else tries
        waiting = {request.id: request for request in requests}
        data = {request.id: protocol.encode(request) for request in requests}
        parts: dict[int, dict[int, protocol.State]] = collections.defaultdict(dict)
        sent: dict[int, tuple[int, int]] = {}  # id -> first send (realtime, monotonic ns)
        answers: dict[int, Answer] = {}
        wait = self.timeout
        self._refused = False
        for send in range(1, tries + 1):
            for number in waiting:
                sent.setdefault(number, (clock.time_ns(), clock.monotonic_ns()))
                self._send(data[number])
            deadline = clock.monotonic() + wait
            wait *= 2
            while waiting and (reply := self._receive(deadline)) is not None:
                request = waiting.get(reply.id)
                if request is None:
                    continue  # a pushed message (kept) or a late reply to an earlier request
                outcome = _reply_to(request, reply, expected, parts[reply.id])
                if outcome is None:
                    continue  # a part of a state still missing others
                requested_ns, asked_ns = sent[reply.id]
                answers[reply.id] = Answer(
                    None if isinstance(outcome, ControlError) else outcome,
                    outcome if isinstance(outcome, ControlError) else None,
                    requested_ns, clock.monotonic_ns() - asked_ns, send)
                del waiting[reply.id]
            if not waiting:
                break
        where = "%s:%s" % self.controller
        for number, request in waiting.items():
            answers[number] = Answer(None, ControlTimeout(
                f"no reply from the controller at {where} to {request.type} #{request.id} "
                f"after {tries} tries over {self.timeout * (2 ** tries - 1):.1f} s"
                + (" (connection refused: nothing listens there)" if self._refused else "")),
                sent[number][0], None, tries)
        return [answers[request.id] for request in requests]

    def _send(self, data: bytes) -> None:
        try:
            self._sock.send(data)
        except ConnectionRefusedError:
            # An earlier datagram found no listener; the controller may be starting.
            self._refused = True

    def _receive(self, deadline: float | None, block: bool = True) -> protocol.Message | None:
        """The next valid message from the controller, pushed ones also queued; None once
        ``deadline`` (monotonic) passes, or at once when nothing is there and not ``block``."""
        while True:
            remaining = None if deadline is None else deadline - clock.monotonic()
            if block and remaining is not None and remaining <= 0:
                return None
            self._sock.settimeout(clock.real_timeout(remaining) if block else 0.0)
            try:
                data = self._sock.recv(protocol.MAX_DATAGRAM + 1)
            except (TimeoutError, BlockingIOError):
                return None
            except ConnectionRefusedError:
                self._refused = True
                continue
            try:
                message = protocol.decode(data, protocol.TO_HOST)
            except protocol.ProtocolError:
                self.malformed += 1
                continue
            if message.id == 0 and isinstance(message, (protocol.Decision, protocol.Rejected)):
                self._pushed.append(message)
            return message


JOIN_REPLIES = (protocol.Decision, protocol.Rejected)


def _reply_to(request: protocol.Message, reply: protocol.Message, expected: tuple[type, ...],
              parts: dict[int, protocol.State]) -> protocol.Message | ControlError | None:
    """What ``reply`` makes of ``request``'s answer: the reply, the error it stands for, or
    None while a state's ``parts`` gathered so far are not all there."""
    if isinstance(reply, protocol.Error):
        return ControlError(f"controller refused {request.type} #{request.id}: "
                            f"{reply.reason}")
    if not isinstance(reply, expected):
        return ControlError(f"controller answered {request.type} #{request.id} "
                            f"with {reply.type}")
    if not isinstance(reply, protocol.State):
        return reply
    parts[reply.part] = reply
    if len(parts) < reply.parts:
        return None
    ordered = [parts[number] for number in sorted(parts)]
    return protocol.State(id=request.id, parts=1,
                          placements=[p for part in ordered for p in part.placements],
                          servers=[s for part in ordered for s in part.servers])


def controller_client(node: str) -> ControlClient | None:
    """A control-protocol client of the controller ``$EDGEBED_CONTROLLER`` (``host:port``)
    speaking for ``node``, or None when the run has no controller."""
    where = os.environ.get("EDGEBED_CONTROLLER")
    if not where:
        return None
    host, port = where.rsplit(":", 1)
    return ControlClient((host, int(port)), node=node)


SIDE_BAND_VARIABLE = "EDGEBED_SIDE_BAND"  # host=address,... on the management network


def side_band_address(node: str) -> str | None:
    """``node``'s address on the side band, the out-of-band management network that carries
    the control messages (``$EDGEBED_SIDE_BAND``, set by the runner), or None when the run has
    no side band or no such host."""
    entries = os.environ.get(SIDE_BAND_VARIABLE, "")
    addresses = dict(entry.split("=", 1) for entry in entries.split(",") if "=" in entry)
    return addresses.get(node)


# What an interface name may not carry into a metric name's segment.
_METRIC_SEGMENT = re.compile(r"[^A-Za-z0-9_-]")


class HostMeter:
    """Load figures of the host an agent runs on, measured by the kernel: the agent process's
    CPU use (``process_cpu``, cores: CPU seconds of all its threads per second), its resident
    memory (``memory``, bytes, from /proc/self/statm) and the traffic of the interfaces of its
    network namespace (/proc/self/net/dev, which shows the reader's namespace): each as
    ``port.<interface>.bw_in`` / ``bw_out`` (bit/s), summed as ``bw_in`` / ``bw_out`` and
    ``packets_in`` / ``packets_out`` (packets/s). Loopback and the management interface carry
    no data-plane traffic and are left out. With a ``cpu_budget`` (cores the node may use) it
    also gives ``cpu``, the process CPU over it, at most 1 (the protocol's fraction; a budget is
    what the node is sized for, not a limit the kernel enforces, so the process may use more);
    per-interface figures stop at PER_PORT_LIMIT
    interfaces (in name order) so a report stays within the protocol's metric count. Rates are
    over a window of the readings kept (see :meth:`read`; the first read gives none)."""

    PER_PORT_LIMIT = 24

    def __init__(self, exclude: Sequence[str] = ("lo", MANAGEMENT_INTERFACE),
                 proc: str = "/proc/self", cpu_budget: float | None = None):
        if cpu_budget is not None and cpu_budget <= 0:
            raise ValueError("a CPU budget must be positive")
        self.exclude = frozenset(exclude)
        self.proc = proc
        self.cpu_budget = cpu_budget
        self._page = os.sysconf("SC_PAGE_SIZE")
        # The readings rates can be measured from, oldest first: time, CPU time, interface
        # counters; kept as long as the longest window asked for needs them.
        self._readings: collections.deque[tuple[float, float, dict[str, tuple[int, ...]]]] = \
            collections.deque()
        self._span = 0.0

    def counters(self) -> dict[str, tuple[int, int, int, int]]:
        """Each interface's (bytes in, packets in, bytes out, packets out) since it came up."""
        result = {}
        with open(f"{self.proc}/net/dev") as table:
            for line in table.readlines()[2:]:
                name, _, numbers = line.partition(":")
                name = name.strip()
                if name in self.exclude:
                    continue
                values = [int(value) for value in numbers.split()]
                result[name] = (values[0], values[1], values[8], values[9])
        return result

    def read(self, now: float | None = None, over: float = 0.0) -> dict[str, float]:
        """The figures now (``now``: clock.monotonic(), for tests), rates over the last
        ``over`` seconds: since the oldest earlier reading at most that old, or the latest
        one when none is that recent (0: since the previous reading). A reporter measures its
        periodic reports over the period and its threshold checks over the check interval,
        or both over one longer window that smooths bursts out (its ``window``)."""
        now = clock.monotonic() if now is None else now
        cpu = time.process_time()
        with open(f"{self.proc}/statm") as statm:
            resident_pages = int(statm.read().split()[1])
        counters = self.counters()
        figures = {"memory": float(resident_pages * self._page)}
        self._span = max(self._span, over)
        earlier = [reading for reading in self._readings if reading[0] < now]
        start = next((reading for reading in earlier if now - reading[0] <= over),
                     earlier[-1] if earlier else None)
        if start is not None:
            then, cpu_then, counters_then = start
            elapsed = now - then
            figures["process_cpu"] = max(0.0, (cpu - cpu_then) / elapsed)
            if self.cpu_budget is not None:
                figures["cpu"] = min(1.0, figures["process_cpu"] / self.cpu_budget)
            totals = [0.0] * 4
            ports = 0
            for name, values in sorted(counters.items()):
                if name not in counters_then:
                    continue  # came up since: no rate yet
                # A counter that went back was reset (the interface was recreated).
                rates = [max(0, new - old) / elapsed
                         for new, old in zip(values, counters_then[name])]
                totals = [total + rate for total, rate in zip(totals, rates)]
                if ports < self.PER_PORT_LIMIT:
                    port = _METRIC_SEGMENT.sub("_", name)[:32]
                    figures[f"port.{port}.bw_in"] = rates[0] * 8
                    figures[f"port.{port}.bw_out"] = rates[2] * 8
                    ports += 1
            figures |= {"bw_in": totals[0] * 8, "packets_in": totals[1],
                        "bw_out": totals[2] * 8, "packets_out": totals[3]}
        self._readings.append((now, cpu, counters))
        # Older than the longest window: no rate starts there any more (the latest stays).
        while len(self._readings) > 1 and now - self._readings[0][0] > self._span:
            self._readings.popleft()
        return figures


class ReportingParams(BaseModel):
    """What an agent that reports its load takes (its ``Params`` derive from this too)."""

    service: Optional[protocol.Name] = Field(None, description="the controller service the "
                                                              "load reports are about")
    report_period: PositiveDuration = Field(1.0, description="how often to report the load to "
                                                             "the controller")
    report_thresholds: dict[protocol.MetricName, float] = Field(
        {}, description="metric (or load) -> level: a report goes at once when the value "
                        "crosses the level, either way, besides the periodic ones")
    report_host: bool = Field(True, description="add what the host measures: process CPU, "
                                                "memory, interface traffic")
    report_paths: list[NodeRef] = Field(
        [], description="peers whose paths every report gives, probed by echo all along: "
                        "path.<peer address, dashes for dots>.rtt, .loss, .jitter")
    report_window: Optional[PositiveDuration] = Field(
        None, description="the host's rates in every report and threshold check over this "
                          "long (sliding); default: a report's over the period, a check's over "
                          "the check interval (a tenth of it). For video, a GOP or more: an I "
                          "frame's burst then crosses no level")
    cpu_budget: Optional[float] = Field(None, gt=0, description="cores the node may use: "
                                                                "with report_host, cpu is the "
                                                                "process CPU over it")
    report_load: bool = Field(True, description="false: send no load reports (an agent that "
                                                "serves no controller service)")


class LoadReporter:
    """Sends an agent's load reports through ``client`` (None: the run has no controller, and
    nothing is sent): one every ``period`` seconds, on absolute deadlines, and one at once
    (``urgent``) when a value named in ``thresholds`` has crossed its level, either way, since
    the last report (surveillance's active notification: a node turning heavy says so without
    waiting). The agent calls :meth:`tick` often (every poll of its loop) with what it knows
    itself (``load`` in the service's demand unit and ``metrics``); a ``host`` meter adds the
    host's figures to every report (a periodic report's rates over the period) and, when
    thresholds name them, is read every ``check_period`` (an urgent report's rates over that
    check interval). With a ``window`` every report's and check's rates are over the last
    ``window`` seconds instead: traffic that comes in bursts (a video's I frames, several
    P frames' worth of bytes once a GOP) crosses a level over a short check interval at every
    burst and falls back at the next check, so a node would flap between queues; a window of
    a GOP or more smooths the bursts out, and a lasting change still crosses the level, though
    only part of the window after it began. Urgent reports are at least ``min_gap`` apart, so a value hovering at a
    level cannot flood the controller. A send that fails (the management network down) is
    counted; the next report may pass. A ``paths`` meter adds the paths to the node's peers
    as it last measured them (:class:`agents.echo.PathMeter`)."""

    def __init__(self, client: ControlClient | None, *, service: str | None = None,
                 period: float = 1.0, thresholds: Mapping[str, float] | None = None,
                 host: HostMeter | None = None, check_period: float | None = None,
                 min_gap: float | None = None, paths: PathMeter | None = None,
                 window: float | None = None):
        if period <= 0:
            raise ValueError("the report period must be positive")
        if window is not None and window <= 0:
            raise ValueError("the rates' window must be positive")
        self.client = client
        self.service = service
        self.period = period
        self.thresholds = dict(thresholds or {})
        self.host = host
        self.paths = paths
        self.check_period = period / 10 if check_period is None else check_period
        self.window = window
        self.min_gap = period / 10 if min_gap is None else min_gap
        self.sent = self.urgent = self.errors = 0
        self._due = None
        self._last_sent = -float("inf")
        self._sides: dict[str, bool] = {}  # metric -> at or above its level, at the last report
        self._host_figures: dict[str, float] = {}
        self._host_read = -float("inf")

    @classmethod
    def for_agent(cls, node: str, params: ReportingParams) -> LoadReporter:
        """The reporter of an agent on ``node`` with ``params``, to ``$EDGEBED_CONTROLLER``."""
        return cls(controller_client(node) if params.report_load else None,
                   service=params.service, period=params.report_period,
                   thresholds=params.report_thresholds,
                   host=HostMeter(cpu_budget=params.cpu_budget) if params.report_host else None,
                   paths=PathMeter(params.report_paths) if params.report_paths else None,
                   window=params.report_window)

    def tick(self, load: float = 0.0, metrics: Mapping[str, float] | None = None,
             now: float | None = None) -> bool:
        """Report if a report is due or a threshold was crossed; returns whether one went."""
        if self.client is None:
            return False
        now = clock.monotonic() if now is None else now
        if self._due is None:
            self._due = now
        periodic = now >= self._due
        if self.host is not None and periodic:
            # Over the period: a check's short window would make the report a burst's.
            self._host_figures = self.host.read(now, over=self.window or self.period)
            self._host_read = now
        elif self.host is not None and self.thresholds and (
                now - self._host_read >= self.check_period):
            self._host_figures = self.host.read(now, over=self.window or self.check_period)
            self._host_read = now
        figures = self._host_figures | (self.paths.figures() if self.paths else {}) | dict(
            metrics or {})
        crossed = [name for name, side in self._sides_of(load, figures).items()
                   if self._sides.get(name, side) != side]
        # A report is urgent when it announces a crossing: sent at once, or the periodic one
        # when the period fell due at the check that found it (either way the controller
        # learns of it then, and the record says which report told it).
        urgent = bool(crossed) and (periodic or now - self._last_sent >= self.min_gap)
        if not (periodic or urgent):
            return False
        if periodic:
            # Absolute deadlines: reports do not drift by the time a loop pass takes; after a
            # stall the next one is a period from now, not a burst to catch up.
            following = self._due + self.period
            self._due = following if following > now else now + self.period
        self._sides |= self._sides_of(load, figures)
        self._last_sent = now
        try:
            self.client.report_load(load, service=self.service, metrics=figures,
                                    seq=self.sent + self.errors + 1,
                                    urgent=urgent)
        except OSError:
            self.errors += 1
            return False
        self.sent += 1
        self.urgent += urgent
        return True

    def _sides_of(self, load: float, figures: Mapping[str, float]) -> dict[str, bool]:
        values = {"load": load} | dict(figures)
        return {name: values[name] >= level for name, level in self.thresholds.items()
                if name in values}

    def close(self) -> dict:
        """Close the client; returns the summary: reports sent, of them urgent, failed, and
        the paths as last measured (with a path meter)."""
        paths = {}
        if self.paths is not None:
            self.paths.close()
            paths = {"paths": self.paths.figures()}
        if self.client is not None:
            self.client.close()
        return {"sent": self.sent, "urgent": self.urgent, "errors": self.errors} | paths

    def write(self, agent) -> None:
        """The path meter's rows (``path_probes``: the agent's ``TABLES`` add
        :data:`agents.echo.PATH_TABLES`), after :meth:`close`."""
        if self.paths is not None:
            self.paths.write(agent)
