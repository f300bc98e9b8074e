"""live_edge's live-edge agents over loopback (no root needed): the edge server (agents.edge_server)
serving pulls with transcoded frames, sessions expiring and refused over the compute budget,
load reports, hostile datagrams; the viewer's pull mode following a controller's decisions.

The test plays the source (media frames it builds), the viewers (sockets sending pulls) and the
controller (a socket speaking the control protocol) where it needs to see every byte. Bounds
come from the model (sizes, delays as lower bounds, the budget); none is a timing guess.
"""

from __future__ import annotations

import math
import os
import random
import socket
import subprocess
import time
import zlib

import pytest
from pydantic import ValidationError

from agents import back_source, catalog, edge_server, pcap, streamer, viewer
from agents.formats import MEDIA, PULL
from agents.wire import MAGIC, VERSION
from agents.protocols import fuzzed_datagrams, layer
from edgebed import protocol
from tests.conftest import ROOT, LoopbackRelay, wait_until
from tests.unit.test_agents_fuzz import DATAGRAMS, bound
from tests.unit.test_media_agents import (HANG_GUARD_S, LOOPBACK, agent_argv, listening_port,
                                          summary_of, table)
from tests.unit.test_media_agents import start as start_agent

SOURCE_KBPS = 8000  # R
FRAGMENT_BYTES = 1000
FRAGMENTS = 5
# How long a socket waits for a datagram that should not come: a finite wait can only miss a
# late one (the check then passes when it should not), never make one up. Datagrams that must
# come are waited for up to HANG_GUARD_S, which only catches a hung edge.
QUIET_S = 0.5


_running: list[subprocess.Popen] = []


def running(process: subprocess.Popen) -> subprocess.Popen:
    """``process``, killed after the test if it still runs then: a test that fails before it
    stops its agents must not leave them behind."""
    _running.append(process)
    return process


@pytest.fixture(autouse=True)
def no_agent_left_running():
    yield
    while _running:
        process = _running.pop()
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def start(*arguments, **options) -> subprocess.Popen:
    return running(start_agent(*arguments, **options))


class Source:
    """The source stream as the streamer-side edge would forward it: frames of FRAGMENTS
    packets of FRAGMENT_BYTES, numbered, to the edge's source port."""

    def __init__(self, port: int, stream: int = 3, gop: int = 0):
        self.address = (LOOPBACK, port)
        self.stream = stream
        self.gop = gop  # frames per GOP; 0: only frame 0 is an I frame
        self.frame = self.sequence = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def send(self, fragments=range(FRAGMENTS)) -> int:
        """Send the next frame (only ``fragments`` of it); returns its first send time."""
        send_ns = time.time_ns()
        self.send_part(self.frame, range(FRAGMENTS), send_ns, sent=fragments)
        self.frame += 1
        return send_ns

    def send_part(self, frame: int, fragments, send_ns: int, sent=range(FRAGMENTS)) -> None:
        """Send ``fragments`` of ``frame`` (first sent at ``send_ns``), the ones not in
        ``sent`` lost on the way: their sequence numbers skipped."""
        for fragment in fragments:
            if fragment in sent:
                header = MEDIA.pack(stream=self.stream, sequence=self.sequence,
                                    send_ns=send_ns + fragment, frame=frame,
                                    frame_type=1 if frame == 0 or (
                                        self.gop and frame % self.gop == 0) else 2,
                                    rung=3,
                                    fragment=fragment, fragments=FRAGMENTS,
                                    bitrate_kbps=SOURCE_KBPS)
                self.sock.sendto(header.ljust(FRAGMENT_BYTES, b"\0"), self.address)
            self.sequence += 1


class Viewer:
    """A viewer's socket: pulls from it, the edge's media come back to it. The media packets
    carry their source frame's number, so packets of frames asked for are told from those of
    earlier frames a slow edge sends late."""

    def __init__(self, edge_port: int, bitrate_kbps: int, delivered: int = 1, rung: int = 1):
        self.edge = (LOOPBACK, edge_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOOPBACK, 0))
        self.pull_bytes = PULL.pack(stream=3, delivered_stream=delivered, user=1, send_ns=0,
                                    bitrate_kbps=bitrate_kbps, rung=rung)
        self.pulls = 0
        self.last_pull_ns = 0  # just before the last pull was sent
        self.pulled_ns = 0  # just after: loopback delivers within the send, so by then the
        # edge's kernel had stamped it

    def pull(self) -> None:
        self.last_pull_ns = time.time_ns()
        self.sock.sendto(self.pull_bytes, self.edge)
        self.pulled_ns = time.time_ns()
        self.pulls += 1

    def receive(self, timeout_s: float) -> dict | None:
        """The next media packet, or None when none came within ``timeout_s``."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(2048)
        except TimeoutError:
            return None
        return MEDIA.unpack(data) | {"size": len(data), "arrived_ns": time.time_ns()}

    def frames(self, first: int, count: int = 1, arrived: tuple = ()) -> list[dict]:
        """The packets of source frames ``first`` to ``first + count - 1``, in arrival order
        (after those ``arrived`` already), once each of them is complete (as many packets as
        they say); packets of earlier frames are skipped."""
        arrived = list(arrived)
        deadline = time.monotonic() + HANG_GUARD_S
        while sum(sum(p["frame"] == packet["frame"] for p in arrived) == packet["fragments"]
                  for packet in {p["frame"]: p for p in arrived}.values()) < count:
            packet = self.receive(max(0.0, deadline - time.monotonic()))
            assert packet is not None, f"frames {first} to {first + count - 1}: only {arrived}"
            if packet["frame"] >= first:
                arrived.append(packet)
        return arrived

    def arrivals_from(self, first: int) -> list[dict]:
        """Packets of source frame ``first`` or later that come until none has for QUIET_S
        (for what must not come)."""
        arrived = []
        while (packet := self.receive(QUIET_S)) is not None:
            if packet["frame"] >= first:
                arrived.append(packet)
        return arrived

    def served(self, source: Source) -> list[dict]:
        """Pull, with a source frame after each pull, until media arrive (a session is admitted
        once the edge knows the source bitrate, or once the budget has room); returns the
        first frame that came, whole."""
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            self.pull()
            source.send()
            packet = self.receive(QUIET_S)
            if packet is not None:
                return self.frames(packet["frame"], arrived=(packet,))
        pytest.fail("the edge never served the pulls")


def start_edge(tmp_path, env=None, **params) -> tuple[subprocess.Popen, int, int]:
    """The edge_server agent on free ports: (process, service port, source port)."""
    process = running(subprocess.Popen(agent_argv("edge_server", "e", tmp_path,
                                                  {"port": 0, "source_port": 0} | params),
                                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env=env))
    return process, listening_port(process), listening_port(process)


def sessions(tmp_path) -> list[dict]:
    return table(tmp_path, "live_sessions", "e", "edge_server")


def test_the_agents_and_their_node_references_are_in_the_catalog():
    assert "edge_server" in catalog.available()
    # upstream: the always-on back-source's (passive transcoding's baseline) origin.
    assert catalog.node_reference_fields(catalog.params_model("edge_server")) == [
        "report_paths", "upstream"]
    assert "pull" in catalog.node_reference_fields(catalog.params_model("viewer"))


def test_a_pull_is_served_frame_by_frame_scaled_and_delayed(tmp_path):
    edge, port, source_port = start_edge(tmp_path, transcoding_delay="20ms", payload=1200)
    source = Source(source_port)
    watcher = Viewer(port, bitrate_kbps=2000, delivered=9, rung=1)
    watcher.served(source)
    watcher.pull()  # the session outlives the edge's pull timeout (1 s) through the test
    sent_ns = source.send()
    frame = watcher.frames(source.frame - 1)
    # 5000 bytes at a quarter of the bitrate: 1250 bytes, in two near-equal packets as the
    # streamer cuts frames
    assert [(p["fragment"], p["size"]) for p in frame] == [(0, 625), (1, 625)]
    assert {(p["stream"], p["frame"], p["frame_type"], p["rung"], p["fragments"],
             p["bitrate_kbps"], p["send_ns"]) for p in frame} == {
        (9, source.frame - 1, 2, 1, 2, 2000, sent_ns)}
    assert frame[1]["sequence"] == frame[0]["sequence"] + 1
    # Nothing leaves before the transcoding delay G * (R - R_v) = 20 ms * 6 has passed.
    assert min(p["arrived_ns"] for p in frame) - sent_ns >= 120e6

    # A frame missing a fragment goes out incomplete once no packet of it came for the reorder
    # wait: cut for its whole size (4000 bytes of 4 fragments in 5 make 5000), of its two
    # packets the share that came (one); nothing of the frame with one fragment in five.
    source.send(fragments={0, 1, 2, 4})
    watcher.pull()
    source.send(fragments={0})
    partial = watcher.arrivals_from(source.frame - 2)
    assert [(p["frame"], p["fragment"], p["fragments"], p["size"]) for p in partial] == [
        (source.frame - 2, 0, 2, 625)]
    summary = summary_of(edge, stop=True)
    assert (summary["sessions"], summary["refused"]) == (1, 0)
    [row] = sessions(tmp_path)
    assert (row["viewer"], int(row["port"]), row["flow"], float(row["bitrate_bps"])) == (
        LOOPBACK, watcher.sock.getsockname()[1], "stream-9", 2e6)
    assert int(row["packets"]) == summary["packets_sent"]


def test_an_incomplete_frame_goes_out_incomplete_with_the_share_that_came(tmp_path):
    edge, port, source_port = start_edge(tmp_path, transcoding_delay=0)
    source = Source(source_port)
    watcher = Viewer(port, bitrate_kbps=3000)
    watcher.served(source)
    first = source.frame
    for fragments in ({0, 1, 2, 3, 4}, {1, 3}, {0, 1, 2, 3}):
        source.send(fragments)
        watcher.pull()
    source.send({0})
    arrived = watcher.arrivals_from(first)
    summary_of(edge, stop=True)
    # Each frame cut for the whole frame's 5000 bytes scaled to 1875, in two packets: all of
    # the whole one's, none of the one with 2 of 5 fragments, one of the one with 4 of 5. The
    # packets not sent keep their sequence numbers, so the viewer sees them lost.
    whole = round(FRAGMENTS * FRAGMENT_BYTES * 3000 / SOURCE_KBPS)
    first_packet = -(-whole // 2)
    assert [(p["frame"] - first, p["fragment"], p["fragments"], p["size"])
            for p in arrived] == [(0, 0, 2, first_packet), (0, 1, 2, whole - first_packet),
                                  (2, 0, 2, first_packet)]
    sequences = [p["sequence"] for p in arrived]
    assert sequences == [sequences[0], sequences[0] + 1, sequences[0] + 4]


def edge_that_gave_up_a_frame(tmp_path) -> tuple[subprocess.Popen, Source, Viewer, int, int]:
    """An edge serving a viewer that gave up a frame its source sent four fragments of in
    five, once the frame went out incomplete: (edge, source, viewer, the frame, its send
    time ns)."""
    edge, port, source_port = start_edge(tmp_path, transcoding_delay=0)
    source = Source(source_port)
    watcher = Viewer(port, bitrate_kbps=3000)
    watcher.served(source)
    cut = source.frame
    send_ns = source.send({0, 1, 2, 3})
    watcher.pull()
    while (packet := watcher.receive(HANG_GUARD_S)) is not None and packet["frame"] != cut:
        pass
    assert packet is not None  # the frame went out incomplete: given up
    return edge, source, watcher, cut, send_ns


def test_a_packet_of_a_frame_given_up_already_is_counted_where_it_was_dropped(tmp_path):
    edge, source, watcher, cut, send_ns = edge_that_gave_up_a_frame(tmp_path)
    source.send_part(cut, [4], send_ns)
    # The source socket is read in order: once the next frame is out, the late part was taken.
    source.send()
    watcher.pull()
    watcher.frames(cut + 1)
    assert summary_of(edge, stop=True)["packets_after_cut"] == 1
    assert [(row["cause"], row["flow"], row["packets"])
            for row in table(tmp_path, "agent_drops", "e", "edge_server")
            if row["cause"] == "after_cut"] == [("after_cut", "stream-3", "1")]


def test_a_late_part_of_a_frame_given_up_and_forgotten_is_counted_once(tmp_path):
    edge, source, watcher, cut, send_ns = edge_that_gave_up_a_frame(tmp_path)
    source.send()
    watcher.pull()
    # The frame after the cut one went out whole: the edge holds no frame before it.
    watcher.frames(cut + 1)
    source.send_part(cut, [4, 4, 0], send_ns)
    source.send()
    watcher.pull()
    watcher.frames(cut + 2)
    # The late part is dropped once; its copy and the copy of a part that came are duplicates.
    assert summary_of(edge, stop=True)["packets_after_cut"] == 1


def test_copies_of_a_whole_frame_and_stragglers_from_before_the_first_frame_are_not_after_a_cut(
        tmp_path):
    edge, port, source_port = start_edge(tmp_path, transcoding_delay=0)
    source = Source(source_port)
    source.frame = 1  # frame 0 is late: the edge's first frame of the stream is a later one
    watcher = Viewer(port, bitrate_kbps=3000)
    whole = watcher.served(source)[0]["frame"]
    source.send()
    watcher.pull()
    watcher.frames(source.frame - 1)
    send_ns = time.time_ns()
    source.send_part(whole, range(FRAGMENTS), send_ns)
    source.send_part(0, range(FRAGMENTS), send_ns)
    source.send()
    watcher.pull()
    watcher.frames(source.frame - 1)
    assert summary_of(edge, stop=True)["packets_after_cut"] == 0


def test_a_frame_whose_packets_interleave_with_the_next_frames_goes_out_whole(tmp_path):
    # An upstream node paces an I frame out over longer than a frame interval: the next
    # frame's packets come between its last ones, which are not lost.
    edge, port, source_port = start_edge(tmp_path, transcoding_delay=0)
    source = Source(source_port)
    watcher = Viewer(port, bitrate_kbps=SOURCE_KBPS)
    watcher.served(source)
    first, send_ns = source.frame, time.time_ns()
    source.send_part(first, range(3), send_ns)
    source.frame += 1
    source.send()
    source.send_part(first, range(3, FRAGMENTS), send_ns)
    watcher.pull()
    arrived = watcher.frames(first, count=2)
    assert summary_of(edge, stop=True)["packets_after_cut"] == 0
    assert sorted((p["frame"] - first, p["fragment"]) for p in arrived) == [
        (frame, fragment) for frame in (0, 1) for fragment in range(FRAGMENTS)]


def test_a_session_ends_when_the_pulls_stop_and_a_new_pull_opens_another(tmp_path):
    timeout_s = 0.3
    edge, port, source_port = start_edge(tmp_path, pull_timeout=timeout_s, transcoding_delay=0)
    source = Source(source_port)
    watcher = Viewer(port, bitrate_kbps=4000)
    watcher.served(source)
    last_pull_ns = watcher.last_pull_ns
    # The next frame reaches the edge more than the timeout after the last pull did: the
    # session has ended when the edge has the frame, however late its housekeeping runs.
    while time.time_ns() <= watcher.pulled_ns + round(timeout_s * 1e9):
        time.sleep(0.01)
    source.send()
    assert watcher.arrivals_from(source.frame - 1) == []  # expired: nothing without a pull
    watcher.served(source)
    summary_of(edge, stop=True)
    # Sessions opened before the edge knew the source's bitrate waited and expired unserved.
    first, second = [row for row in sessions(tmp_path) if int(row["frames"])]
    assert first["flow"] == second["flow"] == "stream-1"
    assert float(first["ended_s"]) >= (last_pull_ns / 1e9 + timeout_s) - 1e-6
    assert float(second["started_s"]) > float(first["ended_s"])


@pytest.mark.parametrize("pulled_s_ago, served", [(1.0, False), (0.0, True)],
                         ids=["timed out", "pulled just now"])
def test_a_frame_goes_to_no_session_past_its_pull_timeout(pulled_s_ago, served):
    """In the edge itself, with no housekeeping running: a frame completed more than the pull
    timeout after a session's last pull finds it ended, at its timeout."""
    params = edge_server.Params.model_validate({"port": 0, "source_port": 0, "pull_timeout": 0.3,
                                              "transcoding_delay": 0})
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as service:
        service.bind((LOOPBACK, 0))
        edge = edge_server.EdgeServer(params, service)
        viewer = (LOOPBACK, 9)

        def media(frame: int, fragment: int) -> bytearray:
            return bytearray(MEDIA.pack(stream=3, sequence=frame * FRAGMENTS + fragment,
                                        send_ns=time.time_ns(), frame=frame, frame_type=2,
                                        rung=3, fragment=fragment, fragments=FRAGMENTS,
                                        bitrate_kbps=SOURCE_KBPS).ljust(FRAGMENT_BYTES, b"\0"))

        source = (LOOPBACK, 5008)
        edge.source_packet(media(0, 0), FRAGMENT_BYTES, time.time_ns(),
                           source)  # the bitrate is known
        pull = bytearray(PULL.pack(stream=3, delivered_stream=1, user=1, send_ns=0,
                                   bitrate_kbps=2000, rung=1))
        pulled_ns = time.time_ns() - round(pulled_s_ago * 1e9)
        edge.pull(pull, len(pull), pulled_ns, viewer)
        [session] = edge.sessions.values()
        assert session.admitted
        for fragment in range(FRAGMENTS):
            edge.source_packet(media(1, fragment), FRAGMENT_BYTES, time.time_ns(), source)
    assert (edge.next_due_ns() is not None) == served
    if not served:
        assert session.ended_ns == pulled_ns + round(params.pull_timeout * 1e9)


def test_a_session_over_the_compute_budget_is_refused_until_there_is_room(tmp_path):
    # R = 8 Mbit/s, H = 0.5 vCPU per Mbit/s: 2 Mbit/s costs 3 vCPU, all there is; 5 Mbit/s
    # would cost 1.5 more.
    edge, port, source_port = start_edge(tmp_path, vcpu=3, transcoding_vcpu=0.5,
                                         transcoding_delay=0, pull_timeout=1)
    source = Source(source_port)
    first = Viewer(port, bitrate_kbps=2000)
    first.served(source)
    second = Viewer(port, bitrate_kbps=5000)
    for _ in range(3):
        second.pull()
    source.send()
    assert second.arrivals_from(source.frame - 1) == []
    second.served(source)  # once the first's pulls stop and its session ends
    summary = summary_of(edge, stop=True)
    rows = {int(row["port"]): row for row in sessions(tmp_path)}
    served_first = rows[first.sock.getsockname()[1]]
    served_second = rows[second.sock.getsockname()[1]]
    assert int(served_first["refused"]) == 0 and int(served_first["frames"]) >= 1
    assert 3 <= int(served_second["refused"]) < second.pulls
    assert int(served_second["frames"]) >= 1
    assert summary["refused"] == int(served_second["refused"])


class FakeController:
    """A socket speaking the control protocol as the controller does, for one test."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOOPBACK, 0))
        self.sock.settimeout(HANG_GUARD_S)

    @property
    def environment(self) -> dict:
        return os.environ | {"EDGEBED_CONTROLLER": "%s:%d" % self.sock.getsockname()}

    def receive(self, kind: type[protocol.Message]) -> tuple[protocol.Message, tuple]:
        """The next message of ``kind`` and where it came from (others are skipped)."""
        while True:
            data, sender = self.sock.recvfrom(protocol.MAX_DATAGRAM)
            message = protocol.decode(data, protocol.TO_CONTROLLER)
            if isinstance(message, kind):
                return message, sender

    def send(self, message: protocol.Message, to: tuple) -> None:
        self.sock.sendto(protocol.encode(message), to)

    def waiting(self) -> list[protocol.Message]:
        """The messages that arrived and were not received yet, without waiting."""
        messages = []
        self.sock.setblocking(False)
        try:
            while True:
                messages.append(protocol.decode(self.sock.recv(protocol.MAX_DATAGRAM),
                                                protocol.TO_CONTROLLER))
        except BlockingIOError:
            return messages
        finally:
            self.sock.settimeout(HANG_GUARD_S)


def decision(request_id: int, server: str, bitrate: float | None,
             migrated: bool = False) -> protocol.Decision:
    return protocol.Decision(id=request_id, flow="v/live", client="v", service="live",
                             server=server, address="10.0.0.1", bitrate=bitrate,
                             migrated=migrated)


def pulls_until(edge: socket.socket, delivered: int) -> dict:
    """The first pull for ``delivered`` to arrive at ``edge``."""
    while True:
        pull = PULL.unpack(edge.recv(2048))
        if pull["delivered_stream"] == delivered:
            return pull


def test_the_viewer_joins_and_follows_pushed_decisions_in_its_pulls(tmp_path):
    controller = FakeController()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as edge:
        edge.bind((LOOPBACK, 0))
        edge.settimeout(HANG_GUARD_S)
        watching = running(subprocess.Popen(
            agent_argv("viewer", "v", tmp_path, {
                "port": 0, "pull": LOOPBACK, "pull_port": edge.getsockname()[1],
                "service": "live", "bitrates": ["8Mbps", "5Mbps", "2.5Mbps", "1Mbps"],
                "preferred_bitrate": "2.5Mbps", "pull_interval": "50ms"}),
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=controller.environment))
        subscribe, control_address = controller.receive(protocol.Subscribe)
        controller.send(protocol.Ack(id=subscribe.id), control_address)
        join, _ = controller.receive(protocol.Join)
        assert (join.node, join.service, join.demand, join.bitrates) == (
            "v", "live", 2.5e6, (2.5e6, 1e6))
        controller.send(decision(join.id, "edge1", 2.5e6), control_address)
        first = pulls_until(edge, 1)
        controller.send(decision(0, "edge2", None, migrated=True), control_address)
        moved = pulls_until(edge, 2)
        controller.send(decision(0, "edge2", 2.5e6), control_address)  # changes nothing
        controller.send(decision(0, "edge2", 1e6), control_address)
        lowered = pulls_until(edge, 3)
        pulled = summary_of(watching, stop=True)["pull"]

    user = zlib.crc32(b"v")
    assert [(p["user"], p["stream"], p["bitrate_kbps"], p["rung"]) for p in (
        first, moved, lowered)] == [(user, 0, 2500, 1), (user, 0, 2500, 1), (user, 0, 1000, 0)]
    rows = table(tmp_path, "live_decisions", "v", "viewer")
    assert [(r["server"], float(r["bitrate_bps"]), r["migrated"], r["flow"]) for r in rows] == [
        ("edge1", 2.5e6, "False", "stream-1"), ("edge2", 2.5e6, "True", "stream-2"),
        ("edge2", 1e6, "False", "stream-3")]
    heard = [float(row["time_s"]) for row in rows]
    assert heard == sorted(heard) and abs(heard[0] - time.time()) < HANG_GUARD_S
    assert (pulled["flow"], pulled["decisions"], pulled["migrations"]) == ("v/live", 3, 1)
    # Stopped by a signal (the run ending), the viewer did not leave.
    assert pulled["followed"]["left_s"] is None
    assert not any(isinstance(m, protocol.Leave) for m in controller.waiting())


def test_a_viewer_whose_session_ends_leaves_the_service(tmp_path):
    controller = FakeController()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as edge:
        edge.bind((LOOPBACK, 0))
        started = time.time()
        watching = running(subprocess.Popen(
            agent_argv("viewer", "v", tmp_path, {
                "port": 0, "pull": LOOPBACK, "pull_port": edge.getsockname()[1],
                "service": "live", "bitrates": ["1Mbps"], "duration": "1s"}),
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=controller.environment))
        subscribe, control_address = controller.receive(protocol.Subscribe)
        controller.send(protocol.Ack(id=subscribe.id), control_address)
        join, _ = controller.receive(protocol.Join)
        controller.send(decision(join.id, "edge1", 1e6), control_address)
        leave, _ = controller.receive(protocol.Leave)
        left = time.time()
        controller.send(protocol.Ack(id=leave.id), control_address)
        pulled = summary_of(watching)["pull"]
    assert (leave.node, leave.flow) == ("v", "v/live")
    assert left - started >= 1.0  # at the end of its session (1 s from its start), not at once
    assert pulled["followed"]["left_s"] >= left - 1 and pulled["followed"]["leave_error"] is None


class PullRelay(LoopbackRelay):
    """Sits between a pulling viewer and the edge: pulls go on to the edge, the edge's media
    back to the viewer, and the relay notes how many packets of each source frame it passed
    on, so the test sees when the edge has sent a frame whole."""

    def __init__(self, edge_port: int):
        super().__init__()
        self.edge = (LOOPBACK, edge_port)
        self.viewer: tuple | None = None
        self.passed: dict[int, list[int]] = {}  # source frame -> [packets, fragments]
        self.start()

    def relay(self, datagram: bytes, sender: tuple) -> None:
        if sender != self.edge:
            self.viewer = sender
            self.sock.sendto(datagram, self.edge)
        elif self.viewer is not None:
            self.sock.sendto(datagram, self.viewer)
            header = MEDIA.unpack(datagram)
            self.passed.setdefault(header["frame"], [0, header["fragments"]])[0] += 1

    def passed_whole(self, frame: int) -> bool:
        packets, fragments = self.passed.get(frame, (0, 1))
        return packets == fragments


def test_a_pulling_viewer_gets_the_streamers_frames_scaled_to_its_bitrate(tmp_path):
    edge, port, source_port = start_edge(tmp_path, transcoding_delay="20ms")
    relay = PullRelay(port)
    watching = start("viewer", "v", tmp_path, {
        "port": 0, "pull": LOOPBACK, "pull_port": relay.port,
        "pull_stream": 3, "bitrates": ["8Mbps", "5Mbps", "2.5Mbps", "1Mbps"],
        "preferred_bitrate": "2.5Mbps"})
    listening_port(watching)
    stream = {"bitrate": "8Mbps", "duration": 2, "stream": 3}
    params = streamer.Params.model_validate({"to": LOOPBACK} | stream)
    try:
        sent = summary_of(start("streamer", "s", tmp_path, {"to": LOOPBACK, "port": source_port}
                                | stream, seed=5))
        # The edge sends frames in the order they completed, each after its transcoding delay
        # (110 ms here): once the last one has left whole, it has sent everything.
        wait_until(lambda: relay.passed_whole(params.frame_count - 1),
                   "the edge's last transcoded frame", HANG_GUARD_S)
        served = summary_of(edge, stop=True)
        received = summary_of(watching, stop=True)
    finally:
        relay.close()

    [source] = served["input"]["streams"]
    assert (source["unique"], source["lost"]) == (sent["packets"], 0)
    [flow] = received["streams"]
    assert (flow["flow"], flow["lost"], flow["duplicates"]) == ("stream-1", 0, 0)
    assert flow["delay_p50_ms"] >= 20 * (8 - 2.5)
    frames = table(tmp_path, "frames", "v", "viewer")
    assert {row["rung"] for row in frames} == {"1"}
    assert all(row["complete"] == "True" for row in frames)
    # Every frame the viewer got is its source frame (the streamer's model, replayed) scaled.
    sizes = streamer.FrameSizes(params, random.Random(5))
    source_sizes = [sizes.frame(number)[1] for number in range(math.ceil(2 * params.fps))]
    assert flow["bytes"] == sum(max(streamer.MIN_FRAME_SIZE,
                                    round(source_sizes[int(row["frame"])] * 2.5 / 8))
                                for row in frames)
    [row] = sessions(tmp_path)
    assert (int(row["frames"]), int(row["packets"]), int(row["refused"])) == (
        len(frames), flow["unique"], 0)
    [decided] = table(tmp_path, "live_decisions", "v", "viewer")
    assert (decided["server"], float(decided["bitrate_bps"]), decided["flow"]) == (
        "", 2.5e6, "stream-1")


def test_the_edge_reports_what_it_serves_to_the_controller(tmp_path):
    controller = FakeController()
    edge, port, source_port = start_edge(tmp_path, env=controller.environment, service="live",
                                         report_period="100ms", transcoding_delay=0)
    source = Source(source_port)
    Viewer(port, bitrate_kbps=2000).served(source)
    while (report := controller.receive(protocol.Load)[0]).metrics.get("sessions") != 1:
        pass
    summary = summary_of(edge, stop=True)
    assert (report.node, report.service, report.load) == ("e", "live", 2e6)
    assert report.metrics["cpu"] == pytest.approx((8 - 2) * 0.5 / 15)
    assert report.metrics["streams"] == 1
    # What the host measured came along: the edge's own CPU and memory, and its traffic.
    assert report.metrics["process_cpu"] >= 0 and report.metrics["memory"] > 10e6
    assert report.metrics["bw_in"] >= 0 and report.seq >= 2 and not report.urgent
    assert summary["load_reports"]["sent"] >= 2 and summary["load_reports"]["errors"] == 0


def test_the_edge_survives_fuzzing_on_both_ports(tmp_path):
    ports = (47021, 47022)
    edge = start("edge_server", "fuzzed", tmp_path, {"port": ports[0], "source_port": ports[1]})
    try:
        assert listening_port(edge) == ports[0] and listening_port(edge) == ports[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for port in ports:
                for index, datagram in enumerate(fuzzed_datagrams(DATAGRAMS, seed=port)):
                    sender.sendto(datagram, (LOOPBACK, port))
                    if index % 500 == 0:
                        time.sleep(0.001)  # a burst larger than the receive buffer is not fuzz
        time.sleep(QUIET_S)  # for a crash to show; one later fails the summary's exit code
        assert edge.poll() is None, f"edge_server died under fuzzing: {edge.communicate()}"
        assert all(bound(port) for port in ports)
    finally:
        summary = summary_of(edge, stop=True)
    assert summary["malformed_pulls"] > 0 and summary["input"]["malformed"] > 0
    counted = table(tmp_path, "malformed", "fuzzed", "edge_server")
    assert {int(row["port"]) for row in counted} == set(ports)


@pytest.mark.parametrize("params, problem", [
    ({"service": "live"}, "need pull"),
    ({"bitrates": ["1Mbps"]}, "need pull"),
    ({"pull": "10.0.0.200"}, "needs preferred_bitrate or bitrates"),
    ({"pull": "10.0.0.200", "bitrates": ["1Mbps", "2Mbps"]}, "strictly descending"),
    ({"pull": "10.0.0.200", "preferred_bitrate": "500bps"}, "at least 1kbps"),
])
def test_the_viewer_refuses_an_incomplete_pull_mode(params, problem):
    with pytest.raises(ValidationError, match=problem):
        viewer.Params.model_validate(params)


def test_the_edge_refuses_packets_it_cannot_cut():
    with pytest.raises(ValidationError, match="payload must be"):
        edge_server.Params.model_validate({"payload": 30})


def test_captures_summarize_pulls_per_user():
    name, fields = pcap.message_fields(bytes(layer("pull")(stream=3, delivered_stream=2, user=77,
                                                  bitrate_kbps=2500, rung=1)))
    assert (name, fields[pcap.FLOW_KEYS[name]], fields["bitrate_kbps"]) == ("pull", 77, 2500)
    assert bytes(layer("pull")(stream=1))[:4] == MAGIC + bytes([VERSION, PULL.type])


class PushedOnly:
    """A control client that only hands over what the test pushed."""

    def __init__(self):
        self.pushed = []

    def pending(self):
        taken, self.pushed = self.pushed, []
        return taken


def pushed(flow: str, server: str, version: int, **attributes) -> protocol.Decision:
    return protocol.Decision(id=0, flow=flow, client=flow.split("/")[0], service="video",
                             server=server, address="10.0.0.1", attributes=attributes,
                             version=version)


def test_back_source_pulls_a_wanted_stream_from_the_upstream_its_decisions_name():
    upstream, source = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    for sock in (upstream, source):
        sock.bind((LOOPBACK, 0))
        sock.settimeout(HANG_GUARD_S)
    port = upstream.getsockname()[1]
    control = PushedOnly()
    back = back_source.BackSource("node2", control, source, port, interval=0.2)
    # A decision for another node, one without the attributes: nothing to pull from.
    control.pushed = [pushed("c1/video", "node1", 1, stream=1, upstream=LOOPBACK),
                      pushed("c2/video", "node2", 1, camera="1")]
    back.take_pushed()
    back.pull({1: 1e6}, now_ns=0)
    assert back.pulls == {} and back.upstreams == {}
    control.pushed = [pushed("c2/video", "node2", 2, stream=1, upstream=LOOPBACK, depth=1)]
    back.take_pushed()
    back.pull({1: 1e6, 2: 1e6}, now_ns=0)  # stream 2 has no upstream yet: not pulled
    data, sender = upstream.recvfrom(2048)
    fields = PULL.struct.unpack_from(data)
    assert sender == source.getsockname()
    # stream, delivered, user (one per stream: the upstream keeps a session each), kbit/s
    assert (fields[3], fields[4], fields[5], fields[7]) == (1, 1, 1, 1000)
    back.pull({1: 1e6}, now_ns=100_000_000)  # before the interval: no pull
    back.pull({1: 1e6}, now_ns=200_000_000)
    assert back.pulls == {1: 2}
    # A late push (an older version) changes nothing; nobody wanting the stream stops pulls.
    control.pushed = [pushed("c2/video", "node2", 1, stream=1, upstream="10.9.9.9")]
    back.take_pushed()
    back.pull({}, now_ns=10**10)
    assert back.upstreams == {1: LOOPBACK} and back.pulls == {1: 2}
    assert [c["to"] for c in back.changes] == [LOOPBACK]
    upstream.close()
    source.close()


def test_an_always_on_back_source_pulls_its_standing_stream_with_no_session():
    """back_source_mode always (passive transcoding's baseline): the standing stream is pulled
    from the configured upstream before any decision, with nobody wanting it, at its bitrate
    or the highest a session asks; a passive one pulls nothing then."""
    upstream, source = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    for sock in (upstream, source):
        sock.bind((LOOPBACK, 0))
        sock.settimeout(HANG_GUARD_S)
    port = upstream.getsockname()[1]
    passive = back_source.BackSource("t1", PushedOnly(), source, port, interval=0.2)
    passive.pull({}, now_ns=0)
    assert passive.pulls == {}
    always = back_source.BackSource("t1", PushedOnly(), source, port, interval=0.2,
                                  standing={0: 1e6}, upstreams={0: LOOPBACK})
    always.pull({}, now_ns=0)
    fields = PULL.struct.unpack_from(upstream.recvfrom(2048)[0])
    assert (fields[3], fields[7]) == (0, 1000)  # stream 0 at 1 Mbit/s
    always.pull({0: 2e6}, now_ns=200_000_000)  # a session asks more: pulled at its bitrate
    assert PULL.struct.unpack_from(upstream.recvfrom(2048)[0])[7] == 2000
    assert always.pulls == {0: 2}
    with pytest.raises(ValueError, match="needs back_source and an upstream"):
        edge_server.Params(back_source=True, back_source_mode="always")
    upstream.close()
    source.close()


def test_the_edge_says_how_long_each_wanted_stream_has_been_silent():
    edge = edge_server.EdgeServer(edge_server.Params(),
                                  socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    packet = bytearray(100)
    MEDIA.struct.pack_into(packet, 0, MAGIC, VERSION, MEDIA.type, 7, 0, 0, 0, 1, 0, 0, 1, 1000)
    edge.source_packet(packet, 100, 10**9, ("10.0.0.8", 5008))
    assert edge.silences(3 * 10**9) == {}  # no session asks for stream 7
    pull = PULL.pack(stream=7, delivered_stream=1, user=1, send_ns=0, bitrate_kbps=1000, rung=0)
    edge.pull(bytearray(pull), len(pull), 2 * 10**9, ("10.0.0.9", 5004))
    assert edge.silences(3 * 10**9) == {"stream.7.silent_s": 2.0}
    edge.service.close()
