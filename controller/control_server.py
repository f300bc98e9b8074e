"""The controller's side of the control protocol: one thread serving already-bound UDP sockets."""

from __future__ import annotations

import collections
import logging
import selectors
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from edgebed import clock, protocol

logger = logging.getLogger("edgebed.controller.control")

ERROR_RATE = 10.0
ERROR_BURST = 20.0
# Requests remembered for answering retransmissions: far more than the hosts of a scenario
# have in flight during a client's retry window (seconds).
EXCHANGES = 4096
# Sources remembered for push routes and error budgets; a flood of spoofed sources evicts
# the oldest, which costs a budget reset or a push from the first socket, nothing worse.
SOURCES = 65536
# Messages handled every time they come: loads carry no id, and queries change nothing.
UNREMEMBERED = ("load", "query")
RECENT_MALFORMED = 8
# Datagrams taken from one socket before the others, and the stop flag, get a look: what a
# burst of joins leaves in a socket's buffer (hundreds) is read in one pass and so decided
# together, in one policy call with one barrier per switch.
BATCH = 1024
COUNTERS = ("received", "handled", "duplicates", "malformed", "handler_errors", "replies",
            "pushes", "errors_sent", "errors_suppressed", "send_errors", "receive_errors")

Reply = Callable[[protocol.Message], None]


class Handler(Protocol):
    """What the controller app supplies: called in the server's thread for each valid
    host-to-controller message (a retransmitted request only once)."""

    def __call__(self, message: protocol.Message, reply: Reply, source: tuple) -> None: ...


@dataclass
class _Exchange:
    """A request and the datagrams sent back for it so far."""

    request: protocol.Message
    replies: list[bytes] = field(default_factory=list)


def _remember(table: collections.OrderedDict, key, value, limit: int) -> None:
    table[key] = value
    table.move_to_end(key)
    if len(table) > limit:
        table.popitem(last=False)


class ControlServer:
    """Serves the control protocol on ``sockets`` (bound UDP sockets; the server makes them
    non-blocking but does not close them) with ``handler``, in one thread (:meth:`start`) or
    in the caller's (:meth:`run`). ``drained``, if given, is called once what arrived together
    has been handed to ``handler`` (every ready socket read until empty, or BATCH datagrams
    each): a handler may hold requests back and answer them there, all in one pass. It returns
    None, or the seconds after which it is to be called again though nothing more arrives (a
    handler that gathers requests for a while before answering them together)."""

    def __init__(self, sockets: list[socket.socket], handler: Handler,
                 drained: Callable[[], float | None] | None = None):
        self.sockets = list(sockets)
        self.handler = handler
        self.drained = drained
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._recent: collections.deque[str] = collections.deque(maxlen=RECENT_MALFORMED)
        self._exchanges: collections.OrderedDict[tuple, _Exchange] = collections.OrderedDict()
        self._routes: collections.OrderedDict[tuple, socket.socket] = collections.OrderedDict()
        self._budgets: collections.OrderedDict[str, tuple[float, float]] = \
            collections.OrderedDict()
        # stop() wakes the selector through this pair instead of the loop polling a flag.
        self._wake_receiver, self._wake_sender = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_receiver, selectors.EVENT_READ)
        for sock in self.sockets:
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)

    def start(self) -> ControlServer:
        """Serve in a daemon thread; returns the server."""
        self._thread = threading.Thread(target=self.run, name="edgebed-control", daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        """Serve until :meth:`stop`."""
        logger.info("control protocol on %s",
                    ", ".join("%s:%s" % sock.getsockname()[:2] for sock in self.sockets))
        again = None  # when ``drained`` asked to be called again (seconds from now)
        try:
            while not self._stopping.is_set():
                for key, _ in self._selector.select(clock.real_timeout(again)):
                    if key.fileobj is not self._wake_receiver:
                        self._drain(key.fileobj)
                again = None
                if self.drained is not None and not self._stopping.is_set():
                    try:
                        again = self.drained()
                    except Exception:
                        self._count("handler_errors")
                        logger.exception("control handler failed after a batch")
        finally:
            with self._lock:
                self._selector.close()
                self._wake_receiver.close()
                self._wake_sender.close()

    def stop(self, timeout: float = 5.0) -> None:
        """End serving; waits up to ``timeout`` seconds for the thread :meth:`start` made."""
        self._stopping.set()
        with self._lock:
            if self._wake_sender.fileno() != -1:
                self._wake_sender.send(b"\0")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("control server thread still running %.1f s after stop()",
                               timeout)

    def __enter__(self) -> ControlServer:
        return self.start()

    def __exit__(self, *_exception) -> None:
        self.stop()

    def counters(self) -> dict[str, int]:
        """What the server has seen and done so far, by counter name (COUNTERS)."""
        with self._lock:
            return dict(self._counts)

    @property
    def recent_malformed(self) -> list[str]:
        """The reasons of the last few malformed datagrams, with their sources."""
        with self._lock:
            return list(self._recent)

    def push(self, address: tuple, message: protocol.Message) -> None:
        """Send ``message`` unasked to ``address`` (a subscriber's source address), from the
        socket that address last sent a valid message to (the first socket if none)."""
        with self._lock:
            sock = self._routes.get(address, self.sockets[0])
        self._send(sock, address, protocol.encode(message), "pushes")

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _drain(self, sock: socket.socket) -> None:
        for _ in range(BATCH):
            try:
                # One byte more than the limit, so that an oversize datagram shows as such.
                data, address = sock.recvfrom(protocol.MAX_DATAGRAM + 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                self._count("receive_errors")
                logger.warning("control socket %s: %s", sock.getsockname(), error)
                return
            self._count("received")
            self._serve(sock, data, address)

    def _serve(self, sock: socket.socket, data: bytes, address: tuple) -> None:
        try:
            message = protocol.decode(data, protocol.TO_CONTROLLER)
        except protocol.ProtocolError as error:
            self._malformed(sock, address, error)
            return
        exchange = replies = None
        with self._lock:
            _remember(self._routes, address, sock, SOURCES)
            if message.type not in UNREMEMBERED:
                key = (address, message.id)
                known = self._exchanges.get(key)
                if known is not None and known.request == message:
                    self._counts["duplicates"] += 1
                    replies = list(known.replies)
                else:
                    exchange = _Exchange(message)
                    _remember(self._exchanges, key, exchange, EXCHANGES)
        if replies is not None:
            for reply in replies:
                self._send(sock, address, reply, "replies")
            return
        self._count("handled")

        def reply(answer: protocol.Message) -> None:
            encoded = protocol.encode(answer)
            if exchange is not None:
                with self._lock:
                    exchange.replies.append(encoded)
            self._send(sock, address, encoded, "replies")

        try:
            self.handler(message, reply, address)
        except Exception:
            self._count("handler_errors")
            logger.exception("control handler failed on %s from %s", message.type, address)
            if message.type != "load":
                reply(protocol.Error(id=message.id,
                                     reason=f"the controller failed to handle {message.type}"))

    def _malformed(self, sock: socket.socket, address: tuple,
                   error: protocol.ProtocolError) -> None:
        with self._lock:
            count = self._counts["malformed"] = self._counts["malformed"] + 1
            self._recent.append(f"{address[0]}:{address[1]}: {error.reason}")
            allowed = error.answerable and address[1] != 0 and self._spend(address[0])
        # Logged at 1, 2, 4, 8, ... so a flood shows without flooding the log.
        log = logger.warning if count & (count - 1) == 0 else logger.debug
        log("malformed control datagram #%d from %s:%s: %s", count, address[0], address[1],
            error.reason)
        if allowed:
            self._send(sock, address, protocol.encode(
                protocol.Error(id=error.request_id, reason=error.reason)), "errors_sent")
        elif error.answerable:
            self._count("errors_suppressed")

    def _spend(self, host: str) -> bool:
        """Take one error reply from ``host``'s budget (a token bucket); call with the lock."""
        now = clock.monotonic()
        tokens, then = self._budgets.get(host, (ERROR_BURST, now))
        tokens = min(ERROR_BURST, tokens + (now - then) * ERROR_RATE)
        _remember(self._budgets, host, (tokens - (tokens >= 1), now), SOURCES)
        return tokens >= 1

    def _send(self, sock: socket.socket, address: tuple, data: bytes, counter: str) -> None:
        try:
            sock.sendto(data, address)
        except OSError as error:
            self._count("send_errors")
            logger.warning("control message to %s:%s not sent: %s", address[0], address[1],
                           error)
            return
        self._count(counter)
