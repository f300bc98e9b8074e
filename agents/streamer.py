"""A live video stream at one rung of a bitrate ladder: frames in GOPs of one I frame and P
frames, sized by a statistical model, cut into media packets and paced on absolute deadlines."""

from __future__ import annotations

import math
import random
import socket
import struct
import sys
import time
from typing import Optional

from pydantic import Field, model_validator

from agents.agent import Agent, AgentParams, NodeRef
from agents.pacing import Pacer
from agents.formats import MEDIA
from agents.wire import MAGIC, VERSION
from edgebed.quantities import Duration, Fraction, Rate, Size

I_FRAME, P_FRAME = 1, 2  # formats.FRAME_TYPES
MAX_PAYLOAD = 1500 - 20 - 8  # an Ethernet MTU less the IPv4 and UDP headers
MIN_FRAME_SIZE = MEDIA.header_size + 1
# The fields that change from packet to packet are contiguous in a media header (rung, between
# them, is packed along with its constant value), so one pack_into patches them all: sequence,
# send_ns, frame, frame_type, rung, fragment, fragments.
PER_PACKET = struct.Struct("!IQIBBHH")
PER_PACKET_OFFSET = MEDIA.field_offset("sequence")


def flow_name(stream: int) -> str:
    """The name of a media stream in the tables of every agent that sends or measures it."""
    return f"stream-{stream}"


class Params(AgentParams):
    """What a stream is: where it goes, its rung and bitrate, its frame structure."""

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


def stream(agent: Agent, params: Params) -> dict:
    """Send the stream until it ends or the agent is stopped; returns the summary."""
    payload = int(params.payload)
    sizes = FrameSizes(params, random.Random(agent.seed))
    packet = bytearray(payload)
    MEDIA.struct.pack_into(packet, 0, MAGIC, VERSION, MEDIA.type, params.stream, 0, 0, 0, 0,
                           params.rung, 0, 0, round(params.bitrate / 1e3))
    packet_view = memoryview(packet)
    frame_ns = 1e9 / params.fps
    pacer = Pacer()
    frames = sequence = packets = sent_bytes = send_errors = gop_restarts = 0
    last_send_ns = None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((params.to, params.port))
        start_ns = time.monotonic_ns()
        while frames < params.frame_count and not agent.stopping:
            frame_type, frame_size = sizes.frame(frames)
            frame_due_ns = start_ns + round(frames * frame_ns)
            fragments = fragment_sizes(frame_size, payload)
            count = len(fragments)
            refused = False
            for fragment, size in enumerate(fragments):
                if agent.stopping:
                    break
                pacer.wait_until(frame_due_ns + round(fragment * frame_ns / count)
                                 if params.spread else frame_due_ns)
                PER_PACKET.pack_into(packet, PER_PACKET_OFFSET, sequence, time.time_ns(), frames,
                                     frame_type, params.rung, fragment, count)
                sequence += 1
                try:
                    sock.send(packet_view[:size])
                except ConnectionRefusedError:
                    # Nobody was listening for an earlier packet: this one is lost, and the
                    # frame with it; the receiver gets a key frame to start on next.
                    send_errors += 1
                    refused = True
                    continue
                except OSError:
                    # A full queue: this packet is lost, and a receiver sees the gap.
                    send_errors += 1
                    continue
                packets += 1
                sent_bytes += size
                last_send_ns = time.monotonic_ns()
            if refused:
                sizes.restart()
                gop_restarts += 1
            frames += 1
    agent.row("sent", flow_name(params.stream), params.to, packets, send_errors)
    # The frames' own time, or longer when the sender fell behind its schedule.
    span_s = max(frames / params.fps,
                 (last_send_ns - start_ns) / 1e9 if last_send_ns is not None else 0.0)
    return {"stream": params.stream, "rung": params.rung, "bitrate_bps": params.bitrate,
            "frames": frames, "packets": packets, "bytes": sent_bytes,
            "send_errors": send_errors, "gop_restarts": gop_restarts, "duration_s": span_s,
            "achieved_bps": sent_bytes * 8 / span_s if span_s > 0 else None,
            "lateness": pacer.report(agent, flow_name(params.stream))}


def run(name: str, params_model: type[Params], argv: list[str] | None) -> int:
    """The agent ``name`` streaming with parameters read by ``params_model``."""
    agent = Agent(name, argv)
    params = params_model.model_validate(agent.params)
    agent.finish(stream(agent, params))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run("streamer", Params, argv)


if __name__ == "__main__":
    sys.exit(main())
