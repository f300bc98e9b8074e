"""A live video stream at one rung of a bitrate ladder: frames in GOPs of one I frame and P
frames, sized by a statistical model, cut into media packets and paced on absolute deadlines,
by the compiled send engine (:mod:`agents.send_engine`) when it is built, else from Python."""

from __future__ import annotations

import math
import random
import socket
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from pydantic import Field, model_validator

from agents.agent import Agent, AgentParams, NodeRef
from agents.pacing import Pacer, report_lateness
from agents.send_engine import LOOKAHEAD_NS, SendEngine, engine_binary, record_format
from agents.flows import flow_name
from agents.formats import MEDIA
from agents.nack import RETRANSMISSION_TABLES, NackParams, SendBuffer, answer_waiting
from agents.wire import MAGIC, VERSION
from edgebed.quantities import Duration, Fraction, Rate, Size
from edgebed import clock

I_FRAME, P_FRAME = 1, 2  # formats.FRAME_TYPES
MAX_PAYLOAD = 1500 - 20 - 8  # an Ethernet MTU less the IPv4 and UDP headers
MIN_FRAME_SIZE = MEDIA.header_size + 1
# The fields that change from packet to packet are contiguous in a media header (rung, between
# them, is packed along with its constant value), so one pack_into patches them all: sequence,
# send_ns, frame, frame_type, rung, fragment, fragments.
PER_PACKET = struct.Struct("!IQIBBHH")
PER_PACKET_OFFSET = MEDIA.field_offset("sequence")
ENGINE_RECORD = record_format(MEDIA.struct)
TABLES = RETRANSMISSION_TABLES


class Params(NackParams, AgentParams):
    """What a stream is: where it goes, its rung and bitrate, its frame structure, whether it
    keeps a send buffer to answer NACKs (:class:`agents.nack.NackParams`; the stream is then
    sent from Python, which reads them)."""

    to: NodeRef
    port: int = Field(5004, ge=1, le=65535)
    stream: int = Field(0, ge=0, lt=2**32, description="stream id, carried in every packet")
    bitrate: Rate = Field(2.5e6, gt=0, description="long-run UDP payload rate, headers included")
    rung: int = Field(0, ge=0, le=255, description="index in the bitrate ladder, carried in "
                                                   "every packet")
    fps: float = Field(30.0, gt=0, le=10_000, description="frames per second")
    gop: int = Field(60, ge=1, description="frames per GOP; frame 0 of each GOP is an I frame "
                                            "(a refused push starts a GOP afresh)")
    i_to_p: float = Field(5.0, ge=1, description="mean size of an I frame over a P frame's")
    noise: Fraction = Field(0.1, description="relative standard deviation of frame sizes")
    payload: Size = Field(1200, description=f"largest UDP payload of a packet, "
                                            f"{2 * MEDIA.header_size} to {MAX_PAYLOAD} bytes")
    duration: Optional[Duration] = Field(None, description="how long to stream; default: "
                                                           "until stopped")
    spread: bool = Field(True, description="pace a frame's packets evenly over the frame "
                                           "interval; false sends them as a burst")

    @model_validator(mode="after")
    def _packets_fit(self) -> "Params":
        # Twice the header: a frame split in two or more packets then never yields a packet
        # smaller than its own header (each is more than half of ``payload``).
        if not 2 * MEDIA.header_size <= self.payload <= MAX_PAYLOAD:
            raise ValueError(f"payload must be {2 * MEDIA.header_size} to {MAX_PAYLOAD} bytes, "
                             f"not {self.payload:g}")
        if self.mean_frame_sizes[1] < MIN_FRAME_SIZE:
            raise ValueError(f"bitrate {self.bitrate:g} bit/s is too low for {self.fps:g} fps: "
                             f"P frames would be smaller than a {MIN_FRAME_SIZE}-byte packet")
        return self

    @property
    def mean_frame_sizes(self) -> tuple[float, float]:
        """Mean sizes in bytes of I and P frames."""
        gop_bytes = self.bitrate / 8 * self.gop / self.fps
        p_mean = gop_bytes / (self.i_to_p + self.gop - 1)
        return self.i_to_p * p_mean, p_mean

    @property
    def frame_count(self) -> float:
        """How many frames the stream has: ``duration * fps`` rounded up, or unbounded."""
        if self.duration is None:
            return math.inf
        # Rounded first so that 0.1 s at 30 fps is 3 frames, not 4.
        return math.ceil(round(self.duration * self.fps, 6))


class FrameSizes:
    """The frame-size model: frame type and size in bytes of each frame of a stream."""

    def __init__(self, params: Params, rng: random.Random):
        self.i_mean, self.p_mean = params.mean_frame_sizes
        self.gop = params.gop
        # A lognormal factor exp(N(mu, sigma)) has mean 1 when mu = -sigma^2 / 2 and relative
        # standard deviation sqrt(exp(sigma^2) - 1), which is ``noise`` for this sigma.
        self._sigma = math.sqrt(math.log1p(params.noise ** 2))
        self._rng = rng
        self._gop_start = 0  # the frame number of the current GOP's I frame
        self._restart = False

    def restart(self) -> None:
        """The next frame starts a GOP (an I frame), and GOPs count on from it."""
        self._restart = True

    def frame(self, number: int) -> tuple[int, int]:
        """(frame type, size in bytes) of frame ``number``; call in frame order."""
        if self._restart:
            self._gop_start, self._restart = number, False
        frame_type = I_FRAME if (number - self._gop_start) % self.gop == 0 else P_FRAME
        size = self.i_mean if frame_type == I_FRAME else self.p_mean
        if self._sigma:
            size *= self._rng.lognormvariate(-self._sigma ** 2 / 2, self._sigma)
        return frame_type, max(MIN_FRAME_SIZE, round(size))


def fragment_sizes(frame_size: int, payload: int) -> list[int]:
    """UDP payload sizes of the packets carrying a frame of ``frame_size`` bytes: as few as
    ``payload`` allows, of near-equal size, the longer ones first."""
    count = -(-frame_size // payload)
    base, longer = divmod(frame_size, count)
    return [base + 1] * longer + [base] * (count - longer)


class MediaPackets:
    """A stream's packets as its frames are cut: one header buffer, its per-packet fields
    patched in place, and each packet's due time on the frames' schedule."""

    def __init__(self, params: Params, start_ns: int):
        self.params = params
        self.start_ns = start_ns
        self.frame_ns = 1e9 / params.fps
        self.bitrate_kbps = round(params.bitrate / 1e3)
        self.packet = bytearray(int(params.payload))
        MEDIA.struct.pack_into(self.packet, 0, MAGIC, VERSION, MEDIA.type, params.stream, 0, 0,
                               0, 0, params.rung, 0, 0, self.bitrate_kbps)
        self.view = memoryview(self.packet)

    def frame_due_ns(self, frame: int) -> int:
        return self.start_ns + round(frame * self.frame_ns)

    def due_ns(self, frame: int, fragment: int, count: int) -> int:
        """When fragment ``fragment`` of ``count`` of ``frame`` is due: spread evenly over the
        frame interval, or all at the frame's time."""
        due = self.frame_due_ns(frame)
        return due + round(fragment * self.frame_ns / count) if self.params.spread else due

    def patch(self, sequence: int, send_ns: int, frame: int, frame_type: int, fragment: int,
              count: int) -> None:
        PER_PACKET.pack_into(self.packet, PER_PACKET_OFFSET, sequence, send_ns, frame,
                             frame_type, self.params.rung, fragment, count)

    def engine_records(self, frame: int, frame_type: int, fragments: list[int]) -> bytes:
        """The send engine's records of a frame's packets: each one's due time, the frame as
        its group, its size and its header (the engine stamps sequence and send time)."""
        count, stream, rung = len(fragments), self.params.stream, self.params.rung
        return b"".join(ENGINE_RECORD.pack(self.due_ns(frame, fragment, count), frame, size,
                                           MEDIA.header_size, MAGIC, VERSION, MEDIA.type,
                                           stream, 0, 0, frame, frame_type, rung, fragment,
                                           count, self.bitrate_kbps)
                        for fragment, size in enumerate(fragments))


@dataclass
class Sent:
    """What a stream sent: frames begun, datagrams and bytes sent, failed sends, GOP restarts,
    the last send on the monotonic clock, and every packet's lateness."""

    frames: int = 0
    packets: int = 0
    bytes: int = 0
    send_errors: int = 0
    gop_restarts: int = 0
    last_send_ns: int | None = None
    lateness_ns: Sequence[int] = field(default_factory=list)


def send_from_python(agent: Agent, params: Params, sizes: FrameSizes, sock: socket.socket,
                     packets: MediaPackets, buffer: SendBuffer | None = None) -> Sent:
    """Pace and send the stream from Python; with a send ``buffer``, answering NACKs between
    packets."""
    pacer = Pacer()
    incoming = bytearray(2048)
    peer = sock.getpeername()
    sent = Sent(lateness_ns=pacer.lateness_ns)
    sequence = 0
    while sent.frames < params.frame_count and not agent.stopping:
        frame = sent.frames
        frame_type, frame_size = sizes.frame(frame)
        fragments = fragment_sizes(frame_size, int(params.payload))
        count = len(fragments)
        refused = False
        for fragment, size in enumerate(fragments):
            if agent.stopping:
                break
            if buffer is not None:
                try:
                    sent.send_errors += answer_waiting(sock, buffer, incoming)
                except ConnectionRefusedError:
                    refused = True  # an earlier packet found nobody listening, as below
            pacer.wait_until(packets.due_ns(frame, fragment, count))
            packets.patch(sequence, clock.time_ns(), frame, frame_type, fragment, count)
            sequence += 1
            try:
                sock.send(packets.view[:size])
                if buffer is not None:
                    buffer.add(peer, params.stream, sequence - 1,
                               bytes(packets.view[:size]), clock.time_ns())
            except ConnectionRefusedError:
                # Nobody was listening for an earlier packet: this one is lost, and the
                # frame with it; the receiver gets a key frame to start on next.
                sent.send_errors += 1
                refused = True
                continue
            except OSError:
                # A full queue: this packet is lost, and a receiver sees the gap.
                sent.send_errors += 1
                continue
            sent.packets += 1
            sent.bytes += size
            sent.last_send_ns = clock.monotonic_ns()
        if refused:
            sizes.restart()
            sent.gop_restarts += 1
        sent.frames += 1
    return sent


def send_from_engine(agent: Agent, params: Params, sizes: FrameSizes, engine: SendEngine,
                     packets: MediaPackets) -> Sent:
    """Hand the stream's packets to the compiled engine ahead of their due times; a frame
    with a refused send restarts the GOP from the next frame on, as from Python."""
    frame = gop_restarts = 0
    while engine.running and not agent.stopping:
        last = frame >= params.frame_count
        # Past the last frame, refusals are waited for until the last frame is due.
        refused = engine.wait_until(packets.frame_due_ns(params.frame_count - 1) if last
                                    else packets.frame_due_ns(frame) - LOOKAHEAD_NS,
                                    lambda: agent.stopping)
        if refused:
            gop_restarts += len(refused)
            sizes.restart()
            frame = refused[-1] + 1
            engine.resume()
            continue
        if last:
            break
        # Woken when the next frame is a lookahead away: the frames of another lookahead go
        # along, so the agent wakes a few times a second, not once a frame.
        horizon_ns = packets.frame_due_ns(frame) + LOOKAHEAD_NS
        while (frame < params.frame_count and packets.frame_due_ns(frame) <= horizon_ns
               and not agent.stopping):
            frame_type, frame_size = sizes.frame(frame)
            engine.add(packets.engine_records(frame, frame_type,
                                              fragment_sizes(frame_size, int(params.payload))))
            frame += 1
    result = engine.finish(stop=agent.stopping)
    return Sent(result.last_group + 1, result.sent, result.bytes, result.send_errors,
                gop_restarts + result.refusals, result.last_send_ns, result.lateness_ns)


def stream(agent: Agent, params: Params) -> dict:
    """Send the stream until it ends or the agent is stopped; returns the summary."""
    sizes = FrameSizes(params, random.Random(agent.seed))
    engine_path = engine_binary(agent.name)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((params.to, params.port))
        buffer = params.send_buffer()
        engine = (engine_path and buffer is None
                  and SendEngine(engine_path, sock, MEDIA.field_offset("sequence"),
                                 MEDIA.field_offset("send_ns")))
        packets = MediaPackets(params, clock.monotonic_ns())
        sent = (send_from_engine(agent, params, sizes, engine, packets) if engine
                else send_from_python(agent, params, sizes, sock, packets, buffer))
    agent.row("sent", flow_name(params.stream), params.to, sent.packets, sent.send_errors)
    # The frames' own time, or longer when the sender fell behind its schedule.
    span_s = max(sent.frames / params.fps,
                 (sent.last_send_ns - packets.start_ns) / 1e9
                 if sent.last_send_ns is not None else 0.0)
    return {"stream": params.stream, "rung": params.rung, "bitrate_bps": params.bitrate,
            "frames": sent.frames, "packets": sent.packets, "bytes": sent.bytes,
            "send_errors": sent.send_errors, "gop_restarts": sent.gop_restarts,
            "duration_s": span_s,
            "achieved_bps": sent.bytes * 8 / span_s if span_s > 0 else None,
            "lateness": report_lateness(agent, flow_name(params.stream), sent.lateness_ns),
            "nack": buffer.write(agent) if buffer is not None else None}


def run(name: str, params_model: type[Params], argv: list[str] | None) -> int:
    """The agent ``name`` streaming with parameters read by ``params_model``."""
    agent = Agent(name, argv, TABLES)
    params = params_model.model_validate(agent.params)
    agent.finish(stream(agent, params))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run("streamer", Params, argv)


if __name__ == "__main__":
    sys.exit(main())
