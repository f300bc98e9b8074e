"""The control protocol: its messages (edgebed.protocol), the controller's server
(controller.control_server) and the agents' client (agents.control), over loopback (no root).

Nothing here is timed: waits on sockets end early only as guards against a hang, and the
server's order of service (one thread, datagrams in arrival order) is what synchronises.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import subprocess
import sys
import threading

import pytest

from agents.control import ControlClient, ControlError, ControlTimeout
from controller import control_server
from edgebed import protocol
from controller.control_server import ControlServer
from tests.conftest import ROOT

LOOPBACK = "127.0.0.1"
HANG_GUARD = 30.0
EDGE_ADDRESSES = {"edge1": "10.0.0.1", "edge2": "10.0.0.2"}
PLACEMENT = {"flow": "viewer1/live", "client": "viewer1", "server": "edge1", "bitrate": 1e6,
             "demand": 2500000, "path": ["viewer1", "s1", "edge1"], "migrated": False,
             "note": None}

SAMPLES = [
    protocol.Load(node="edge1", service="live", load=12.5, ts=1.7e9, seq=4, urgent=True,
                  metrics={"cpu": 0.25, "sessions": 3, "port.edge1-eth0.bw_in": 2.5e6,
                           "queue_delay": -0.5}),
    protocol.Load(node="edge1", load=0, ts=0),
    protocol.Join(id=1, node="viewer1", service="live", demand=2.5e6, bitrates=(2.5e6, 1e6)),
    protocol.Join(id=protocol.MAX_ID, node="viewer1", service="live", flow="viewer1/live#2"),
    protocol.Leave(id=2, node="viewer1", flow="viewer1/live"),
    protocol.Steer(id=3, flow="viewer1/live", server="edge2"),
    protocol.Path(id=4, flow="viewer1/live", via=("viewer1", "s1", "s2", "edge2")),
    protocol.Subscribe(id=5, node="viewer1"),
    protocol.Query(id=6),
    protocol.Decision(id=1, flow="viewer1/live", client="viewer1", service="live",
                      server="edge1", address="10.0.0.1", bitrate=1e6,
                      path=("viewer1", "s1", "edge1")),
    protocol.Decision(id=0, flow="viewer1/live", client="viewer1", service="live",
                      server="edge2", address="2001:db8::2", migrated=True),
    protocol.Decision(id=0, flow="cams/ai:41000", client="cams", service="ai", port=41000,
                      server="node2", address="10.0.0.7", bitrate=4e6,
                      candidates=(protocol.Hop(name="node2", address="10.0.0.7"),
                                  protocol.Hop(name="node1", address="10.0.0.6")),
                      via=(protocol.Hop(name="relay1", address="10.0.0.9"),),
                      attributes={"tier": "gold", "hops": 2, "shared": False, "w": 0.5,
                                  "none": None}),
    protocol.Join(id=9, node="cams", service="ai", port=41000, demand=4e6),
    protocol.Rejected(id=1, flow="viewer1/live", reason="no server of live has room"),
    protocol.Ack(id=2),
    protocol.Error(reason="bad join: node: Field required"),
    protocol.Error(id=7, reason="the controller failed to handle join"),
    protocol.State(id=6, placements=(PLACEMENT,),
                   servers=({"name": "edge1", "capacity": None, "load": 3.5},)),
    protocol.Link(id=8, link=4, delay_forward=0.04),
]

LOAD = '{"v":1,"type":"load","node":"edge1","ts":1,"load":%s}'
JOIN = '{"v":1,"type":"join","id":7,"node":"viewer1","service":"live"%s}'
# (datagram, words the reason must contain, answerable, request id the error carries)
INVALID = {
    "empty": (b"", "empty", False, None),
    "oversize": (JOIN.encode() + b" " * protocol.MAX_DATAGRAM, "exceeds 16384", False, None),
    "not UTF-8": (b'{"v":1,"type":"\xff"}', "not UTF-8", False, None),
    "not JSON": (b'{"v":1,', "not JSON", False, None),
    "truncated": (JOIN.encode()[:-1], "not JSON", False, None),
    "not an object": (b"[1, 2]", "not a JSON object but list", False, None),
    "a number": (b"7", "not a JSON object but int", False, None),
    "NaN": ((LOAD % "NaN").encode(), "NaN is not a JSON number", False, None),
    "Infinity": ((LOAD % "-Infinity").encode(), "-Infinity is not a JSON number", False, None),
    "overflowing float": ((LOAD % "1e999").encode(), "load: Input should be a finite number",
                          True, None),
    "long integer": ((LOAD % ("9" * 5000)).encode(), "number too long", False, None),
    "deep nesting": (b"[" * 5000 + b"]" * 5000, "nested too deeply", False, None),
    "duplicate key": (b'{"v":1,"v":2}', "duplicate key", False, None),
    "no version": (b'{"type":"query","id":3}', "missing v", True, 3),
    "other version": (b'{"v":2,"type":"query","id":3}', "unsupported protocol version 2",
                      True, 3),
    "version as string": (b'{"v":"1","type":"query","id":3}', "version '1'", True, 3),
    "version as bool": (b'{"v":true,"type":"query","id":3}', "version True", True, 3),
    "no type": (b'{"v":1,"id":3}', "missing type", True, 3),
    "unknown type": (b'{"v":1,"type":"frob\\u001b[31m","id":3}', r"unknown type 'frob\x1b[31m'",
                     True, 3),
    "reply sent to controller": (b'{"v":1,"type":"ack","id":3}', "ack messages do not go",
                                 True, 3),
    "missing field": (b'{"v":1,"type":"join","id":7}', "bad join: node: Field required (and",
                      True, 7),
    "extra key": (JOIN.replace("%s", ',"k%s":1' % ("x" * 500)).encode(),
                  "Extra inputs are not permitted", True, 7),
    "escape in key": (b'{"v":1,"type":"query","id":3,"\\u001b[2J":1}',
                      "bad query: ?[2J: Extra inputs", True, 3),
    "string for number": ((LOAD % '"1"').encode(), "load: Input should be a valid number",
                          True, None),
    "bool for number": ((LOAD % "true").encode(), "load: Input should be a valid number",
                        True, None),
    "negative load": ((LOAD % "-1").encode(), "greater than or equal to 0", True, None),
    "path loss over 1": ((LOAD % '0,"metrics":{"path.10-0-0-2.loss":1.5}').encode(),
                         "metric path.10-0-0-2.loss is a fraction", True, None),
    "negative round trip": ((LOAD % '0,"metrics":{"path.10-0-0-2.rtt":-0.1}').encode(),
                            "metric path.10-0-0-2.rtt must be at least 0", True, None),
    "bool id": (b'{"v":1,"type":"query","id":true}', "id: Input should be a valid integer",
                True, None),
    "id 0": (b'{"v":1,"type":"query","id":0}', "id: Input should be greater than", True, None),
    "id too big": (b'{"v":1,"type":"query","id":4294967296}', "id: Input should be less",
                   True, None),
    "cpu over 1": ((LOAD % '1,"metrics":{"cpu":1.5}').encode(),
                   "metrics: Value error, metric cpu is a fraction", True, None),
    "port bandwidth below 0": ((LOAD % '1,"metrics":{"port.eth0.bw_out":-1}').encode(),
                               "metric port.eth0.bw_out must be at least 0", True, None),
    "fractional sessions": ((LOAD % '1,"metrics":{"sessions":2.5}').encode(),
                            "metric sessions is a count", True, None),
    "metric name with a space": ((LOAD % '1,"metrics":{"bw in":1}').encode(),
                                 "metrics.bw in.[key]: String should match pattern", True,
                                 None),
    "metric nested too deeply": ((LOAD % '1,"metrics":{"a.b.c.d.e":1}').encode(),
                                 "String should match pattern", True, None),
    "too many metrics": ((LOAD % ('1,"metrics":{%s}' % ",".join(
        f'"m{n}":1' for n in range(protocol.MAX_METRICS + 1)))).encode(),
                         "metrics: Dictionary should have at most 64 items", True, None),
    "metric as string": ((LOAD % '1,"metrics":{"cpu":"0.5"}').encode(),
                         "metrics.cpu: Input should be a valid number", True, None),
    "urgent as number": ((LOAD % '1,"urgent":1').encode(),
                         "urgent: Input should be a valid boolean", True, None),
    "too many bitrates": (JOIN.replace("%s", ',"bitrates":%s' % ([1.0] * 17)).encode(),
                          "bitrates: Tuple should have at most 16 items", True, 7),
    "space in flow": (JOIN.replace("%s", ',"flow":"a b"').encode(),
                      "flow: String should match pattern", True, 7),
    "empty path": (b'{"v":1,"type":"path","id":3,"flow":"f","via":[]}',
                   "via: Tuple should have at least 1 item", True, 3),
    "negative link delay": (b'{"v":1,"type":"link","id":3,"link":1,"delay_forward":-1}',
                            "delay_forward: Input should be greater than or equal to 0", True,
                            3),
    "long node name": (b'{"v":1,"type":"subscribe","id":3,"node":"%s"}' % (b"n" * 65),
                       "node: String should match pattern", True, 3),
}


def test_samples_cover_every_type():
    assert {message.type for message in SAMPLES} == set(protocol.TYPES)


@pytest.mark.parametrize("message", SAMPLES, ids=lambda message: message.type)
def test_every_message_round_trips(message):
    data = protocol.encode(message)
    assert list(json.loads(data))[:2] == ["v", "type"]
    assert protocol.decode(data) == message


def test_join_flow_defaults_to_node_and_service():
    join = protocol.decode(JOIN.replace("%s", "").encode())
    assert join.flow == "viewer1/live"
    assert json.loads(protocol.encode(join))["flow"] == "viewer1/live"
    assert protocol.Join(id=1, node="n" * 64, service="s" * 64).flow == f"{'n' * 64}/{'s' * 64}"


@pytest.mark.parametrize("data, words, answerable, request_id", INVALID.values(),
                         ids=INVALID.keys())
def test_invalid_datagrams_give_a_short_safe_reason(data, words, answerable, request_id):
    with pytest.raises(protocol.ProtocolError) as caught:
        protocol.decode(data, protocol.TO_CONTROLLER)
    reason = caught.value.reason
    assert words in reason
    assert len(reason) <= protocol.MAX_REASON and reason.isprintable()
    assert (caught.value.answerable, caught.value.request_id) == (answerable, request_id)
    if answerable:  # the reason must fit in the error reply sent back
        protocol.Error(id=request_id, reason=reason)


def test_largest_datagram_is_accepted():
    data = JOIN.replace("%s", "").encode()
    assert protocol.decode(data + b" " * (protocol.MAX_DATAGRAM - len(data))).type == "join"


def test_messages_are_kept_to_their_direction():
    with pytest.raises(protocol.ProtocolError, match="decision messages do not go this way"):
        protocol.decode(protocol.encode(SAMPLES[9]), protocol.TO_CONTROLLER)
    with pytest.raises(protocol.ProtocolError, match="join messages do not go this way"):
        protocol.decode(protocol.encode(SAMPLES[2]), protocol.TO_HOST)


def test_encode_refuses_what_does_not_fit_a_datagram():
    with pytest.raises(protocol.ProtocolError, match="exceeds 16384"):
        protocol.encode(protocol.State(id=1, placements=[{"note": "x" * 200}] * 100))


def test_state_replies_split_into_datagrams_and_keep_order():
    placements = [dict(PLACEMENT, flow=f"viewer{n}/live") for n in range(400)]
    servers = [{"name": f"edge{n}", "load": n / 3} for n in range(50)]
    parts = protocol.state_replies(9, placements, servers)
    assert len(parts) > 1 and [p.part for p in parts] == list(range(len(parts)))
    assert all(p.parts == len(parts) and p.id == 9 for p in parts)
    assert all(len(protocol.encode(p)) <= protocol.MAX_DATAGRAM for p in parts)
    assert [dict(e) for p in parts for e in p.placements] == placements
    assert [dict(e) for p in parts for e in p.servers] == servers
    assert protocol.state_replies(9, [], []) == [protocol.State(id=9)]


def test_client_imports_no_controller_stack():
    code = ("import sys, agents.control; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'os_ken', 'ryu', 'mininet'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    assert result.stdout.strip() == "[]"


class EdgeOne:
    """A controller in miniature: every flow goes to edge1, steers move flows, subscribers
    get the decisions about their flows pushed, and what it was given is kept."""

    def __init__(self):
        self.server: ControlServer | None = None
        self.seen: list[protocol.Message] = []
        self.placed: dict[str, protocol.Join] = {}
        self.subscribers: dict[str, tuple] = {}

    def decision(self, request_id: int, join: protocol.Join, server: str = "edge1",
                 migrated: bool = False) -> protocol.Decision:
        return protocol.Decision(id=request_id, flow=join.flow, client=join.node,
                                 service=join.service, server=server,
                                 address=EDGE_ADDRESSES.get(server, "10.0.0.9"),
                                 migrated=migrated)

    def __call__(self, message, reply, source):
        self.seen.append(message)
        if message.type == "join":
            self.placed[message.flow] = message
            reply(self.decision(message.id, message))
        elif message.type == "steer" and message.flow in self.placed:
            join = self.placed[message.flow]
            reply(self.decision(message.id, join, message.server, migrated=True))
            if join.node in self.subscribers:
                self.server.push(self.subscribers[join.node],
                                 self.decision(0, join, message.server, migrated=True))
        elif message.type == "steer":
            reply(protocol.Rejected(id=message.id, flow=message.flow, reason="no such flow"))
        elif message.type == "query":
            for part in protocol.state_replies(
                    message.id, [{"flow": flow, "server": "edge1"} for flow in self.placed],
                    [{"name": name, "address": address}
                     for name, address in EDGE_ADDRESSES.items()]):
                reply(part)
        elif message.type != "load":
            if message.type == "subscribe":
                self.subscribers[message.node] = source
            reply(protocol.Ack(id=message.id))

    def joins(self) -> int:
        return sum(message.type == "join" for message in self.seen)


@pytest.fixture
def serve():
    """Starts a ControlServer with a handler on a fresh loopback socket: (server, address)."""
    started = []

    def start(handler):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # The fuzzing test sends in bursts; a bigger buffer keeps the kernel from dropping.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind((LOOPBACK, 0))
        server = ControlServer([sock], handler).start()
        if isinstance(handler, EdgeOne):
            handler.server = server
        started.append((server, sock))
        return server, sock.getsockname()

    yield start
    for server, sock in started:
        server.stop()
        sock.close()


def client(address, node="viewer1", **options) -> ControlClient:
    return ControlClient(address, node, **({"timeout": HANG_GUARD, "tries": 1} | options))


def test_join_is_answered_with_a_decision(serve):
    handler = EdgeOne()
    _, address = serve(handler)
    with client(address) as viewer:
        decision = viewer.join("live", demand=2.5e6, bitrates=[2.5e6, 1e6])
    assert isinstance(decision, protocol.Decision)
    assert (decision.flow, decision.server, decision.address) == ("viewer1/live", "edge1",
                                                                 "10.0.0.1")
    assert handler.seen[0].bitrates == (2.5e6, 1e6)


def test_every_request_gets_its_reply(serve):
    handler = EdgeOne()
    server, address = serve(handler)
    with client(address, node="edge1") as edge, client(address) as viewer:
        edge.report_load(3.5, service="live", metrics={"cpu": 0.5, "sessions": 2})
        viewer.join("live")
        assert isinstance(viewer.leave("viewer1/live"), protocol.Ack)
        assert isinstance(viewer.path("viewer1/live", ["viewer1", "s1", "edge1"]), protocol.Ack)
        assert isinstance(viewer.steer("nobody/live", "edge2"), protocol.Rejected)
        assert viewer.steer("viewer1/live", "edge2").migrated
        state = viewer.query()
    assert state.placements == ({"flow": "viewer1/live", "server": "edge1"},)
    assert handler.seen[0] == protocol.Load(node="edge1", service="live", load=3.5,
                                            metrics={"cpu": 0.5, "sessions": 2},
                                            ts=handler.seen[0].ts)
    assert server.counters()["handled"] == 7


def test_client_without_a_node_only_operates(serve):
    _, address = serve(EdgeOne())
    with ControlClient(address, timeout=HANG_GUARD) as operator:
        assert operator.query().id > 0
        with pytest.raises(ValueError, match="without node"):
            operator.join("live")


def test_query_gathers_every_part(serve):
    handler = EdgeOne()
    server, address = serve(handler)
    handler.placed = {f"viewer{n}/live": None for n in range(1000)}
    with client(address) as viewer:
        state = viewer.query()
    assert [entry["flow"] for entry in state.placements] == list(handler.placed)
    assert len(state.servers) == 2
    assert server.counters()["replies"] > 1


class LossyRelay:
    """A UDP relay between clients and a server that loses the datagrams it is told to, by
    their order in each direction (0: the first request, or the first reply)."""

    def __init__(self, server: tuple, lose_requests=(), lose_replies=()):
        self.server = server
        self.lose = {"request": set(lose_requests), "reply": set(lose_replies)}
        self.passed = {"request": 0, "reply": 0}
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOOPBACK, 0))
        self.sock.settimeout(0.1)  # how soon close() is noticed
        self.address = self.sock.getsockname()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        client_address = None
        while not self._closing.is_set():
            try:
                data, source = self.sock.recvfrom(65536)
            except TimeoutError:
                continue
            direction = "reply" if source == self.server else "request"
            if direction == "request":
                client_address = source
            number = self.passed[direction]
            self.passed[direction] += 1
            if number not in self.lose[direction]:
                self.sock.sendto(data, self.server if direction == "request" else client_address)

    def close(self):
        self._closing.set()
        self._thread.join(HANG_GUARD)
        self.sock.close()


@pytest.mark.parametrize("lost", ["requests", "replies"])
def test_a_lost_datagram_is_retransmitted_and_acted_on_once(serve, lost):
    handler = EdgeOne()
    server, address = serve(handler)
    relay = LossyRelay(address, **{f"lose_{lost}": {0}})
    try:
        with client(relay.address, timeout=0.2, tries=8) as viewer:
            decision = viewer.join("live")
    finally:
        relay.close()
    assert decision.server == "edge1"
    assert relay.passed["request"] >= 2
    assert handler.joins() == 1
    if lost == "replies":  # the server saw the retransmission and answered it from memory
        assert server.counters()["duplicates"] >= 1


def test_a_repeated_id_is_answered_again_only_for_the_same_request(serve):
    handler = EdgeOne()
    _, address = serve(handler)
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.settimeout(HANG_GUARD)
    raw.connect(address)
    first = protocol.Join(id=5, node="viewer1", service="live")
    for request in (first, first, first.model_copy(update={"flow": "viewer1/live#2"})):
        raw.send(protocol.encode(request))
    replies = [protocol.decode(raw.recv(65536)) for _ in range(3)]
    raw.close()
    assert replies[0] == replies[1] and replies[2].flow == "viewer1/live#2"
    assert [message.flow for message in handler.seen] == ["viewer1/live", "viewer1/live#2"]


def test_silence_ends_in_a_timeout_after_the_last_try(serve):
    def queries_only(message, reply, source):
        if message.type == "query":
            reply(protocol.State(id=message.id))

    server, address = serve(queries_only)
    with client(address, timeout=0.02, tries=3) as viewer:
        with pytest.raises(ControlTimeout, match=r"to join #\d+ after 3 tries"):
            viewer.join("live")
        viewer.timeout = HANG_GUARD
        viewer.query()  # a barrier: the server has taken every retransmission
    assert server.counters()["received"] == 4
    assert server.counters()["handled"] == 2  # the join once, the query


def test_nothing_listening_is_named_in_the_timeout():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((LOOPBACK, 0))
    address = sock.getsockname()
    sock.close()
    with client(address, timeout=0.02, tries=2) as viewer:
        with pytest.raises(ControlTimeout, match="connection refused"):
            viewer.query()


def test_subscribers_get_decisions_pushed(serve):
    _, address = serve(EdgeOne())
    with client(address) as viewer, client(address, node="operator") as operator:
        viewer.join("live")
        assert isinstance(viewer.subscribe(), protocol.Ack)
        moved = operator.steer("viewer1/live", "edge2")
        pushed = next(viewer.decisions(timeout=HANG_GUARD))
    assert (moved.id, moved.server, moved.migrated) == (moved.id, "edge2", True)
    assert pushed == moved.model_copy(update={"id": 0})


def test_a_push_during_a_request_is_kept_for_later(serve):
    handler = EdgeOne()
    server, address = serve(handler)
    with client(address) as viewer:
        viewer.subscribe()
        early = protocol.Rejected(id=0, flow="viewer1/old", reason="server edge3 failed")
        server.push(handler.subscribers["viewer1"], early)
        viewer.join("live")
        assert list(viewer.decisions(timeout=0.01)) == [early]


def test_invalid_objects_get_an_error_and_garbage_gets_nothing(serve):
    server, address = serve(EdgeOne())
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.settimeout(HANG_GUARD)
    raw.connect(address)
    for data in (b"\xff\xfegarbage", b"[1]", b'{"v":1,"type":"join","id":7}',
                 protocol.encode(protocol.Query(id=8))):
        raw.send(data)
    error = protocol.decode(raw.recv(65536))
    state = protocol.decode(raw.recv(65536))  # next: nothing came for the garbage
    raw.close()
    assert (error.type, error.id) == ("error", 7)
    assert error.reason.startswith("bad join: node: Field required")
    assert state.type == "state" and state.id == 8
    counters = server.counters()
    assert (counters["malformed"], counters["errors_sent"]) == (3, 1)
    assert [reason.split(": ", 1)[1] for reason in server.recent_malformed] == [
        "not UTF-8 (byte 0)", "not a JSON object but list", error.reason]


def test_error_replies_are_rationed_per_source(serve, monkeypatch):
    monkeypatch.setattr(control_server, "ERROR_RATE", 0.0)
    server, address = serve(EdgeOne())
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.connect(address)
    for _ in range(100):
        raw.send(b'{"v":1,"type":"join","id":7}')
    raw.close()
    with client(address) as viewer:
        viewer.query()
    counters = server.counters()
    assert (counters["errors_sent"], counters["errors_suppressed"]) == (
        control_server.ERROR_BURST, 100 - control_server.ERROR_BURST)


def test_a_failing_handler_is_logged_answered_and_survived(serve, caplog):
    handler = EdgeOne()

    def fragile(message, reply, source):
        if getattr(message, "service", None) == "boom":
            raise RuntimeError("policy bug")
        handler(message, reply, source)

    server, address = serve(fragile)
    with client(address) as viewer:
        with pytest.raises(ControlError, match="failed to handle join"):
            viewer.join("boom")
        assert viewer.join("live").server == "edge1"
    assert server.counters()["handler_errors"] == 1
    [record] = [r for r in caplog.records if r.name == "edgebed.controller.control"
                and r.levelno == logging.ERROR]
    assert record.exc_info[0] is RuntimeError


def test_stop_ends_the_thread(serve):
    server, _ = serve(EdgeOne())
    server.stop(timeout=HANG_GUARD)
    assert not server._thread.is_alive()
    server.stop()


ODD_VALUES = ["", " ", "x" * 300, "é", "\u0000", "a b", "1", -1, 0, 1, 2**32, 2**64, -2**63,
              0.5, -0.0, 1e308, True, False, None, [], {}, [1.5] * 17, [None], {"a": 1}]
HUGE_NUMBERS = [b"1e999", b"-1e999", b"1e-999", b"9" * 5000, b"1" * 4300, b"-" + b"9" * 400,
                b"18446744073709551616", b"1.7976931348623157e309"]
NON_FINITE = [b"NaN", b"Infinity", b"-Infinity"]


def fuzz_datagrams(rng: random.Random, count: int) -> list[bytes]:
    """``count`` hostile datagrams of many kinds, some of them valid by chance or on purpose
    (at the size limit)."""
    bases = [message.model_dump(mode="json") for message in SAMPLES
             if message.type in protocol.TO_CONTROLLER]

    def base() -> dict:
        return dict(rng.choice(bases))

    def with_raw(message: dict, raw: bytes) -> bytes:
        """``message`` with one of its numbers written as ``raw``."""
        key = rng.choice([k for k, v in message.items() if type(v) in (int, float)])
        return json.dumps(message | {key: "@@"}).encode().replace(b'"@@"', raw)

    def random_bytes():
        return rng.randbytes(rng.choice([0, 1, 2, 3, 8, 64, 600]))

    def truncated():
        data = json.dumps(base()).encode()
        return data[:rng.randrange(len(data))]

    def mutated():
        data = bytearray(json.dumps(base()).encode())
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.choice(b'{}[]",:0123456789.eE-+ tfn\\\x00\xff')
        return bytes(data)

    def wrong_type():
        message = base()
        message[rng.choice(list(message))] = rng.choice(ODD_VALUES)
        return json.dumps(message).encode()

    def extra_or_missing_key():
        message = base()
        if rng.random() < 0.5:
            message[rng.choice(["x", "ID", "type ", "\u0000", "k" * 100])] = 1
        else:
            del message[rng.choice(list(message))]
        return json.dumps(message).encode()

    def huge_number():
        return with_raw(base(), rng.choice(HUGE_NUMBERS))

    def non_finite():
        return with_raw(base(), rng.choice(NON_FINITE))

    def deep_nesting():
        depth = rng.choice([2, 50, 500, 990, 1000, 3000, 8000])
        start, end = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
        nested = start * depth + b"1" + end * depth
        return nested if rng.random() < 0.5 else with_raw(base(), nested)

    def near_the_limit():
        data = json.dumps(base()).encode()
        return data + b" " * (protocol.MAX_DATAGRAM + rng.randint(-2, 64) - len(data))

    def bad_envelope():
        message = base()
        if rng.random() < 0.4:
            message["v"] = rng.choice([0, 2, "1", 1.0, True, None, [1]])
        elif rng.random() < 0.7:
            message["type"] = rng.choice(["", "JOIN", "decision", "ack", "state", 7, None,
                                          "x" * 1000])
        else:
            return json.dumps(rng.choice([[message], json.dumps(message), 1, None])).encode()
        return json.dumps(message).encode()

    makers = [random_bytes, truncated, mutated, wrong_type, extra_or_missing_key, huge_number,
              non_finite, deep_nesting, near_the_limit, bad_envelope]
    return [rng.choice(makers)() for _ in range(count)]


def decodes(data: bytes) -> bool:
    try:
        protocol.decode(data, protocol.TO_CONTROLLER)
    except protocol.ProtocolError:
        return False
    return True


def bursts(datagrams: list[bytes], count: int = 32, size: int = 32 * 1024):
    """``datagrams`` in bursts small enough for a socket's receive buffer."""
    burst, burst_size = [], 0
    for data in datagrams:
        if burst and (len(burst) == count or burst_size + len(data) > size):
            yield burst
            burst, burst_size = [], 0
        burst.append(data)
        burst_size += len(data)
    yield burst


def test_server_survives_fuzzing(serve):
    handler = EdgeOne()
    server, address = serve(handler)
    datagrams = fuzz_datagrams(random.Random(6650), 10_000)
    valid = sum(map(decodes, datagrams))
    assert 0 < valid < len(datagrams) // 10
    fuzzer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fuzzer.connect(address)
    barriers = 0
    with client(address) as viewer:
        for burst in bursts(datagrams):
            for data in burst:
                fuzzer.send(data)
            # The server takes datagrams in order: once this is answered, the burst is in.
            viewer.query()
            barriers += 1
        assert viewer.join("live").server == "edge1"
    fuzzer.close()
    counters = server.counters()
    assert counters["received"] == len(datagrams) + barriers + 1, "datagrams were dropped"
    assert counters["malformed"] == len(datagrams) - valid
    assert counters["handler_errors"] == 0
    assert server._thread.is_alive()


def test_requests_held_back_are_answered_once_what_arrived_together_is_drained():
    """A handler may keep requests for the ``drained`` call: a burst already waiting in the
    socket is handed over whole, then answered in one pass, and retransmissions of a request
    answered there get its reply."""
    held, batches = [], []

    def handle(message, reply, source):
        held.append((message, reply))

    def drained():
        if held:
            batches.append([message.id for message, _ in held])
        for message, reply in held:
            reply(protocol.Ack(id=message.id))
        held.clear()

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((LOOPBACK, 0))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.settimeout(HANG_GUARD)
        for number in range(1, 11):  # all waiting before the server reads any
            sender.sendto(protocol.encode(protocol.Join(id=number, node="viewer1",
                                                        service="live")), sock.getsockname())
        with ControlServer([sock], handle, drained):
            answered = sorted(protocol.decode(sender.recv(65536), protocol.TO_HOST).id
                              for _ in range(10))
            sender.sendto(protocol.encode(protocol.Join(id=3, node="viewer1", service="live")),
                          sock.getsockname())
            again = protocol.decode(sender.recv(65536), protocol.TO_HOST)
    sock.close()
    assert answered == list(range(1, 11)) and batches == [list(range(1, 11))]
    assert again.type == "ack" and again.id == 3 and len(batches) == 1
