"""A GPU server of ai_access's cluster, and the hand-over of AI data units to the GPU servers."""

from __future__ import annotations

import ipaddress
import queue
import select
import socket
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Callable, ClassVar, Hashable, NamedTuple

from pydantic import Field

from agents.agent import Agent, AgentParams, epoch_seconds
from agents.flows import MalformedLog
from agents.sockets import POLL_S
from agents.ai_access.formats import AI_UNIT, GPU_GRANT, GPU_REQUEST
from edgebed import clock

GPU_PORT = 6104
MANAGER_PORT = 6103
TIMEOUT = 0.2  # the first wait for a grant; the side band's round trip is well under 1 ms
LONGEST_WAIT = 1.6
RECEIVE_CHUNK = 1 << 16
CONNECT_TIMEOUT = 1.0

# The rotation. The access servers "hand the flows in rotation to GPU servers G1..Gn", coordinated by the cluster manager
# (one access server doubling as coordinator).
#
# The reconstruction: every access server asks the cluster manager, over the side band, where a
# unit it completed goes; the manager answers with the next GPU server in turn (unit after unit,
# whichever access server completed it), numbering its grants 0, 1, 2, ... so that grant ``s``
# goes to ``gpus[s % n]``. A request the manager already answered (the requester did not get the
# grant and asks again) gets the same grant and does not advance the rotation: a lost reply
# costs no GPU server its turn, and no unit reaches two GPU servers. Per GPU server the grants
# are then within one of each other at every moment.
REMEMBERED = 65536  # grants kept for answering repeated requests: far more than are in flight


class Grant(NamedTuple):
    """Where one unit goes: the grant's number in the rotation and the GPU server."""

    sequence: int
    gpu: Hashable


class GpuRotation:
    """The cluster manager's rotation over ``gpus`` (any distinct labels: names, addresses)."""

    def __init__(self, gpus: Sequence[Hashable], remembered: int = REMEMBERED):
        if not gpus:
            raise ValueError("a rotation needs at least one GPU server")
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"GPU servers named twice: {list(gpus)}")
        if remembered < 1:
            raise ValueError("remembered must be at least 1")
        self.gpus = tuple(gpus)
        self.remembered = remembered
        self.granted: OrderedDict[tuple[int, int], Grant] = OrderedDict()
        self.next_sequence = 0
        self.repeated = 0  # requests answered again

    def gpu_of(self, sequence: int) -> Hashable:
        """The GPU server whose turn grant ``sequence`` is."""
        return self.gpus[sequence % len(self.gpus)]

    def grant(self, stream: int, unit: int) -> Grant:
        """Where unit ``unit`` of stream ``stream`` goes: the next GPU server in turn, or the
        grant it already had."""
        key = (stream, unit)
        if (known := self.granted.get(key)) is not None:
            self.repeated += 1
            return known
        grant = Grant(self.next_sequence, self.gpu_of(self.next_sequence))
        self.next_sequence += 1
        self.granted[key] = grant
        if len(self.granted) > self.remembered:
            self.granted.popitem(last=False)  # the oldest: long since handed over
        return grant

    def counts(self) -> dict[Hashable, int]:
        """Grants per GPU server so far."""
        n = len(self.gpus)
        return {gpu: self.next_sequence // n + (index < self.next_sequence % n)
                for index, gpu in enumerate(self.gpus)}


TABLES = {
    # One row per unit a GPU server received whole.
    "gpu_units": ("node", "agent", "time_s", "source", "stream", "unit", "sequence", "bytes"),
    # One row per unit an access server handed over (written by agents.ai_access.ai_receiver).
    "gpu_handoffs": ("node", "agent", "time_s", "stream", "unit", "sequence", "gpu", "bytes",
                     "requests"),
}


class Params(AgentParams):
    """Where the GPU server listens and when it stops."""

    undilatable: ClassVar[str | None] = ("the units reach it over kernel TCP, whose timers "
                                         "(retransmission, delayed ACKs) run in real time")

    port: int = Field(GPU_PORT, ge=0, le=65535, description="TCP port for the units; 0: any")


class Connection:
    """One access server's TCP connection: the bytes not yet a whole message."""

    def __init__(self, sock: socket.socket, source: str):
        self.sock, self.source = sock, source
        self.pending = bytearray()


class GpuServer:
    """The GPU server's connections and the units they brought."""

    def __init__(self, agent: Agent, listener: socket.socket):
        self.agent, self.listener = agent, listener
        self.connections: dict[socket.socket, Connection] = {}
        self.malformed = MalformedLog()
        self.port = listener.getsockname()[1]
        self.units = 0
        self.bytes = 0
        self.by_source: dict[str, int] = {}

    def step(self, wait_s: float) -> None:
        """Accept connections and read what waits, waiting up to ``wait_s`` for something."""
        readable, _, _ = select.select([self.listener, *self.connections], [], [],
                                         clock.real_seconds(wait_s))
        for sock in readable:
            if sock is self.listener:
                connection, address = self.listener.accept()
                self.connections[connection] = Connection(connection, address[0])
            else:
                self.read(self.connections[sock])

    def read(self, connection: Connection) -> None:
        try:
            data = connection.sock.recv(RECEIVE_CHUNK)
        except OSError:
            data = b""
        if not data:
            self.close(connection)
            return
        connection.pending += data
        while len(connection.pending) >= AI_UNIT.header_size:
            try:
                header = AI_UNIT.unpack(connection.pending)
            except ValueError:
                self.malformed.add(self.port, bytes(connection.pending[:32]))
                self.close(connection)  # no message boundary to find again in a byte stream
                return
            end = AI_UNIT.header_size + header["length"]
            if len(connection.pending) < end:
                return
            del connection.pending[:end]
            self.units += 1
            self.bytes += header["length"]
            self.by_source[connection.source] = self.by_source.get(connection.source, 0) + 1
            self.agent.row("gpu_units", epoch_seconds(clock.time_ns()), connection.source,
                           header["stream"], header["unit"], header["sequence"],
                           header["length"])

    def close(self, connection: Connection) -> None:
        connection.sock.close()
        del self.connections[connection.sock]

    def drain(self) -> None:
        """What already waits on the connections (at the stop)."""
        while self.connections:
            readable, _, _ = select.select(list(self.connections), [], [], 0)
            if not readable:
                return
            for sock in readable:
                self.read(self.connections[sock])

    def summary(self) -> dict:
        for connection in list(self.connections.values()):
            self.close(connection)
        self.malformed.write(self.agent)
        return {"port": self.port, "units": self.units, "bytes": self.bytes,
                "by_source": self.by_source, "malformed": self.malformed.count}


class ClusterManager:
    """The cluster manager's side-band service: grants in rotation over the GPU servers at
    ``gpus`` ((address, port) on the data plane), answered from a thread of its own."""

    def __init__(self, sock: socket.socket, gpus: list[tuple[str, int]]):
        self.sock = sock
        self.rotation = GpuRotation(gpus)
        self.malformed = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.serve, name="cluster-manager", daemon=True)

    def answer(self, message: bytes) -> bytes:
        """The grant answering a request (ValueError for anything else)."""
        if len(message) != GPU_REQUEST.header_size:
            raise ValueError("not a GPU request")
        request = GPU_REQUEST.unpack(message)
        grant = self.rotation.grant(request["stream"], request["unit"])
        address, port = grant.gpu
        return GPU_GRANT.pack(stream=request["stream"], unit=request["unit"],
                              sequence=grant.sequence,
                              gpu=int(ipaddress.IPv4Address(address)), gpu_port=port)

    def serve(self) -> None:
        self.sock.settimeout(POLL_S)
        while not self.stopped.is_set():
            try:
                message, sender = self.sock.recvfrom(RECEIVE_CHUNK)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                reply = self.answer(message)
            except ValueError:
                self.malformed += 1
                continue
            try:
                self.sock.sendto(reply, sender)
            except OSError:
                pass  # the requester asks again

    def start(self) -> "ClusterManager":
        self.thread.start()
        return self

    def close(self) -> dict:
        self.stopped.set()
        self.thread.join()
        return {"grants": self.rotation.next_sequence, "repeated": self.rotation.repeated,
                "per_gpu": {f"{address}:{port}": count
                            for (address, port), count in self.rotation.counts().items()},
                "malformed": self.malformed}


class Unit(NamedTuple):
    stream: int
    unit: int
    data: bytes


class Handoff:
    """An access server's hand-over of its completed units: a grant from the manager at
    ``manager`` (side band), then the unit to the granted GPU server over TCP; rows of
    ``gpu_handoffs`` through ``row``."""

    def __init__(self, manager: tuple[str, int], row: Callable[..., None],
                 timeout: float = TIMEOUT):
        self.manager, self.row, self.timeout = manager, row, timeout
        self.side_band = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.side_band.connect(manager)
        self.units: queue.Queue[Unit] = queue.Queue()
        self.connections: dict[tuple[str, int], socket.socket] = {}
        self.stopped = threading.Event()
        self.sent = self.requests = self.send_errors = self.malformed_grants = 0
        self.pending_at_stop = 0
        self.thread = threading.Thread(target=self.serve, name="gpu-handoff", daemon=True)

    def put(self, stream: int, unit: int, data: bytes) -> None:
        self.units.put(Unit(stream, unit, data))

    def grant(self, unit: Unit) -> tuple[int, tuple[str, int], int] | None:
        """(sequence, GPU server, requests sent), or None when stopped before the grant."""
        request = GPU_REQUEST.pack(stream=unit.stream, unit=unit.unit, unit_bytes=len(unit.data))
        wait, sent = self.timeout, 0
        while not self.stopped.is_set():
            try:
                self.side_band.send(request)
                sent += 1
                self.requests += 1
            except OSError:
                pass  # asked again after the wait
            deadline = clock.monotonic() + wait
            while (left := deadline - clock.monotonic()) > 0:
                if not select.select([self.side_band], [], [], clock.real_seconds(left))[0]:
                    break
                try:
                    reply = self.side_band.recv(RECEIVE_CHUNK)
                    grant = GPU_GRANT.unpack(reply)
                except (OSError, ValueError):
                    self.malformed_grants += 1
                    continue
                if (grant["stream"], grant["unit"]) == (unit.stream, unit.unit):
                    return grant["sequence"], (str(ipaddress.IPv4Address(grant["gpu"])),
                                               grant["gpu_port"]), sent
                # A late grant for an earlier unit's repeated request: not this one's.
            wait = min(2 * wait, LONGEST_WAIT)
        return None

    def send(self, gpu: tuple[str, int], message: bytes) -> bool:
        try:
            if gpu not in self.connections:
                self.connections[gpu] = socket.create_connection(gpu, CONNECT_TIMEOUT)
            self.connections[gpu].sendall(message)
            return True
        except OSError:
            self.send_errors += 1
            if (sock := self.connections.pop(gpu, None)) is not None:
                sock.close()
            return False

    def serve(self) -> None:
        while not self.stopped.is_set():
            try:
                unit = self.units.get(timeout=POLL_S)
            except queue.Empty:
                continue
            granted = self.grant(unit)
            if granted is None:
                self.pending_at_stop += 1
                break
            sequence, gpu, requests = granted
            message = AI_UNIT.pack(stream=unit.stream, unit=unit.unit, sequence=sequence,
                                   length=len(unit.data)) + unit.data
            # The grant is the unit's: a failed connection is made again, to the same server.
            while not self.send(gpu, message):
                if self.stopped.wait(POLL_S):
                    self.pending_at_stop += 1
                    return
            self.sent += 1
            self.row("gpu_handoffs", epoch_seconds(clock.time_ns()), unit.stream, unit.unit,
                     sequence, f"{gpu[0]}:{gpu[1]}", len(unit.data), requests)

    def start(self) -> "Handoff":
        self.thread.start()
        return self

    def close(self) -> dict:
        self.stopped.set()
        self.thread.join()
        self.pending_at_stop += self.units.qsize()
        for sock in [self.side_band, *self.connections.values()]:
            sock.close()
        return {"sent": self.sent, "requests": self.requests,
                "pending_at_stop": self.pending_at_stop, "send_errors": self.send_errors,
                "malformed_grants": self.malformed_grants}


def main(argv: list[str] | None = None) -> int:
    agent = Agent("ai_gpu", argv, TABLES)
    params = Params.model_validate(agent.params)
    listener = socket.create_server(("", params.port), backlog=16)
    print(f"listening on {listener.getsockname()[1]}", file=sys.stderr, flush=True)
    try:
        server = GpuServer(agent, listener)
        while not agent.stopping:
            server.step(POLL_S)
        server.drain()
        summary = server.summary()
    finally:
        listener.close()
    agent.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
