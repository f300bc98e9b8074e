"""The control protocol's client: how agents, experiments and tests talk to the controller.

::

    with ControlClient(("172.30.0.1", protocol.PORT), node="viewer1") as control:
        decision = control.join("live", demand=2.5e6, bitrates=[2.5e6, 1e6])
        control.report_load(0.4, service="live")
        control.subscribe()
        for pushed in control.decisions(timeout=0.1):
            ...

Requests are retransmitted with the same id when no reply comes (``tries`` sends, the wait
doubling from ``timeout`` seconds each time), since the controller answers a retransmission
without acting twice. Pushed decisions that arrive while a request waits for its reply are
kept (up to PUSHED) for :meth:`ControlClient.decisions`.

Only pydantic is needed (through :mod:`controller.protocol`): no os-ken, Ryu or Mininet, which
the emulated hosts' programs do without. One thread at a time may use a client, except for
:meth:`ControlClient.report_load`, which only sends.
"""

from __future__ import annotations

import collections
import random
import socket
import time
from collections.abc import Iterator, Sequence

from controller import protocol

TIMEOUT = 0.5
TRIES = 4
PUSHED = 1024


class ControlError(Exception):
    """The controller answered a request with ``error``, or with a reply that does not fit
    it."""


class ControlTimeout(ControlError, TimeoutError):
    """No reply to a request after the last try."""


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
                    cpu: float | None = None, sessions: int | None = None,
                    ts: float | None = None) -> None:
        """Send a load report (``ts`` defaults to now); nothing comes back."""
        self._send(protocol.encode(protocol.Load(
            node=self._own_node(), service=service, load=load, cpu=cpu, sessions=sessions,
            ts=time.time() if ts is None else ts)))

    def join(self, service: str, demand: float = 0.0, bitrates: Sequence[float] = (),
             flow: str | None = None) -> protocol.Decision | protocol.Rejected:
        """Ask for ``service``; the flow is ``node/service`` unless named."""
        return self._request(protocol.Join, (protocol.Decision, protocol.Rejected),
                             node=self._own_node(), service=service, flow=flow, demand=demand,
                             bitrates=tuple(bitrates))

    def leave(self, flow: str) -> protocol.Ack | protocol.Rejected:
        return self._request(protocol.Leave, (protocol.Ack, protocol.Rejected),
                             node=self._own_node(), flow=flow)

    def steer(self, flow: str, server: str) -> protocol.Decision | protocol.Rejected:
        """Move a placed flow to ``server``."""
        return self._request(protocol.Steer, (protocol.Decision, protocol.Rejected),
                             flow=flow, server=server)

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
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._pushed:
                if self._receive(deadline) is None:
                    return

    def _own_node(self) -> str:
        if self.node is None:
            raise ValueError("this ControlClient was made without node=...")
        return self.node

    def _request(self, kind: type[protocol.Message], expected: tuple[type, ...],
                 **fields) -> protocol.Message:
        request = kind(id=self._next_id, **fields)
        self._next_id = self._next_id % protocol.MAX_ID + 1
        data = protocol.encode(request)
        parts: dict[int, protocol.State] = {}
        wait = self.timeout
        self._refused = False
        for _ in range(self.tries):
            self._send(data)
            deadline = time.monotonic() + wait
            wait *= 2
            while (reply := self._receive(deadline)) is not None:
                if reply.id != request.id:
                    continue  # a pushed message (kept) or a late reply to an earlier request
                if isinstance(reply, protocol.Error):
                    raise ControlError(f"controller refused {request.type} #{request.id}: "
                                       f"{reply.reason}")
                if not isinstance(reply, expected):
                    raise ControlError(f"controller answered {request.type} #{request.id} "
                                       f"with {reply.type}")
                if not isinstance(reply, protocol.State):
                    return reply
                parts[reply.part] = reply
                if len(parts) == reply.parts:
                    ordered = [parts[number] for number in sorted(parts)]
                    return protocol.State(
                        id=request.id, parts=1,
                        placements=[p for part in ordered for p in part.placements],
                        servers=[s for part in ordered for s in part.servers])
        where = "%s:%s" % self.controller
        raise ControlTimeout(
            f"no reply from the controller at {where} to {request.type} #{request.id} after "
            f"{self.tries} tries over {self.timeout * (2 ** self.tries - 1):.1f} s"
            + (" (connection refused: nothing listens there)" if self._refused else ""))

    def _send(self, data: bytes) -> None:
        try:
            self._sock.send(data)
        except ConnectionRefusedError:
            # An earlier datagram found no listener; the controller may be starting.
            self._refused = True

    def _receive(self, deadline: float | None) -> protocol.Message | None:
        """The next valid message from the controller, pushed ones also queued; None once
        ``deadline`` (monotonic) passes."""
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            self._sock.settimeout(remaining)
            try:
                data = self._sock.recv(protocol.MAX_DATAGRAM + 1)
            except TimeoutError:
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
