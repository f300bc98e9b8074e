"""Media as received: the packets of each stream measured as a flow, and gathered into the
frames they are fragments of."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from agents.agent import Agent, epoch_seconds
from agents.flows import FlowStats, MalformedLog, percentile
from agents.formats import FRAME_TYPES, MEDIA
from agents.wire import MAGIC, VERSION
from agents.flows import flow_name

# Written by every agent that meters a media stream with MediaMeter (the viewer,
# agents.edge_forwarder, agents.edge_server): one row per frame of each stream received.
# arrived_s: when the frame's last fragment so far arrived (CLOCK_REALTIME seconds, the clock of
# the run's timeline origin), so a frame's arrival lines up with a scheduled event (a link cut).
MEDIA_TABLES = {
    "frames": ("node", "agent", "flow", "frame", "frame_type", "rung", "fragments", "received",
               "complete", "delay_ms", "arrived_s"),
}


@dataclass(slots=True)
class FrameArrival:
    """What arrived of one frame."""

    frame_type: int
    rung: int
    fragments: int
    received: int  # distinct fragments
    first_send_ns: int
    last_arrival_ns: int

    @property
    def complete(self) -> bool:
        return self.received >= self.fragments


@dataclass
class StreamMeter:
    """One media stream as received: its packets and its frames."""

    flow: FlowStats
    frames: dict[int, FrameArrival] = field(default_factory=dict)

    def write(self, agent: Agent, sent: int | None) -> dict:
        """The stream's rows of ``flows``, ``flow_seconds`` and ``frames``; returns its
        summary."""
        summary = self.flow.write(agent, sent)
        delays_ms = []
        for number, frame in sorted(self.frames.items()):
            delay_ms = None
            if frame.complete:
                delay_ms = (frame.last_arrival_ns - frame.first_send_ns) / 1e6
                delays_ms.append(delay_ms)
            agent.row("frames", self.flow.flow, number, FRAME_TYPES[frame.frame_type],
                      frame.rung, frame.fragments, frame.received, frame.complete, delay_ms,
                      epoch_seconds(frame.last_arrival_ns))
        delays_ms.sort()
        numbers = self.frames.keys()
        return summary | {
            "frames_complete": len(delays_ms),
            "frames_incomplete": len(self.frames) - len(delays_ms),
            # Frame numbers between the first and last seen of which no fragment arrived.
            "frames_missing": (max(numbers) - min(numbers) + 1 - len(self.frames)
                               if self.frames else 0),
            "frame_delay_mean_ms": statistics.fmean(delays_ms) if delays_ms else None,
            "frame_delay_p50_ms": percentile(delays_ms, 50) if delays_ms else None,
            "frame_delay_p99_ms": percentile(delays_ms, 99) if delays_ms else None,
        }


class MediaMeter:
    """The media packets arriving on one port, measured per stream and per frame. Anything else
    is logged as malformed: too short for a media header, another magic, version or message
    type, an unknown frame type, or a fragment index not below the fragment count."""

    def __init__(self, port: int):
        self.port = port
        self.streams: dict[int, StreamMeter] = {}
        self.unique = 0  # distinct packets, all streams together
        self.malformed = MalformedLog()

    def add(self, buffer: bytearray, size: int, received_ns: int, address: tuple) -> int | None:
        """Measure the datagram of ``size`` bytes in ``buffer``; returns its stream id, or None
        when it is not a media packet."""
        if size < MEDIA.header_size:
            self.malformed.add(self.port, memoryview(buffer)[:size])
            return None
        (magic, version, kind, stream, sequence, send_ns, frame, frame_type, rung, fragment,
         fragments, _) = MEDIA.struct.unpack_from(buffer)
        if (magic != MAGIC or version != VERSION or kind != MEDIA.type
                or frame_type not in FRAME_TYPES or fragment >= fragments):
            self.malformed.add(self.port, memoryview(buffer)[:size])
            return None
        meter = self.streams.get(stream)
        if meter is None:
            meter = self.streams[stream] = StreamMeter(FlowStats(flow_name(stream), address[0]))
        duplicate = sequence in meter.flow.seen
        meter.flow.add(sequence, send_ns, received_ns, size)
        if duplicate:
            return stream
        self.unique += 1
        arrival = meter.frames.get(frame)
        if arrival is None:
            meter.frames[frame] = FrameArrival(frame_type, rung, fragments, 1, send_ns,
                                               received_ns)
        else:
            arrival.received += 1
            arrival.first_send_ns = min(arrival.first_send_ns, send_ns)
            arrival.last_arrival_ns = max(arrival.last_arrival_ns, received_ns)
        return stream

    def write(self, agent: Agent, expect: int | None = None) -> dict:
        """Every stream's rows and the malformed datagrams' row; returns the summary. With one
        stream, its loss counts against ``expect`` (so a lost tail counts too)."""
        sent = expect if len(self.streams) == 1 else None
        streams = [meter.write(agent, sent) for _, meter in sorted(self.streams.items())]
        self.malformed.write(agent)
        return {"port": self.port, "packets": sum(s["packets"] for s in streams),
                "unique": self.unique, "malformed": self.malformed.count, "streams": streams}
