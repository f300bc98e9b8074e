"""The source frames an edge receives, the record of those it gave up incomplete, and its GOP
cache of them: what a joining viewer gets first, so that its player can start on an I frame."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from agents.streamer import I_FRAME


@dataclass(slots=True)
class SourceFrame:
    """What arrived of one source frame."""

    number: int
    frame_type: int
    fragments: int
    bitrate: float  # R, bit/s, as its packets say
    send_ns: int  # its first fragment's send time
    first_received_ns: int
    last_received_ns: int
    size: int = 0  # bytes received, media headers included
    seen: set[int] = field(default_factory=set)
    transcoded: bool = False

    def add(self, fragment: int, size: int, send_ns: int, received_ns: int) -> None:
        self.seen.add(fragment)
        self.size += size
        self.send_ns = min(self.send_ns, send_ns)
        self.first_received_ns = min(self.first_received_ns, received_ns)
        self.last_received_ns = max(self.last_received_ns, received_ns)

    def overdue(self, now_ns: int, wait_ns: int) -> bool:
        """Whether the packets still missing are lost: none of the frame's packets came for
        ``wait_ns``, or for twice their mean spacing so far when that is longer. A frame paced
        out over a while (an I frame), its packets interleaved with later frames', is still
        arriving."""
        spacing_ns = ((self.last_received_ns - self.first_received_ns) / (len(self.seen) - 1)
                      if len(self.seen) > 1 else 0.0)
        return now_ns - self.last_received_ns > max(wait_ns, 2 * spacing_ns)


# How many frames given up incomplete :class:`GivenUpFrames` remembers per stream, so that the
# record stays bounded over a long run with loss. A late packet goes uncounted only once this
# many later frames of its stream were given up too: at 60 frames/s with every frame cut, a
# packet over 17 s late, far longer than the edge's reorder and repair waits it came after.
GIVEN_UP_REMEMBERED = 1024


class GivenUpFrames:
    """Per source stream, the fragments still missing of the latest frames given up
    incomplete (at most :data:`GIVEN_UP_REMEMBERED`): a packet of one of them that comes later
    is loss the edge made, whether or not the frame is still held."""

    def __init__(self) -> None:
        self.missing: dict[int, OrderedDict[int, set[int]]] = {}

    def add(self, stream: int, frame: SourceFrame) -> None:
        """Remember ``frame`` when it is given up incomplete."""
        if len(frame.seen) >= frame.fragments:
            return
        given_up = self.missing.setdefault(stream, OrderedDict())
        given_up[frame.number] = set(range(frame.fragments)) - frame.seen
        if len(given_up) > GIVEN_UP_REMEMBERED:
            given_up.popitem(last=False)

    def came_late(self, stream: int, number: int, fragment: int) -> bool:
        """Whether ``fragment`` of frame ``number`` is a part its frame was given up without;
        each such part is late once, a copy of it after is a duplicate."""
        missing = self.missing.get(stream, {}).get(number)
        if missing is None or fragment not in missing:
            return False
        missing.remove(fragment)
        if not missing:
            del self.missing[stream][number]
        return True


class GopCache:
    """Each stream's frames since its latest I frame, in order (docs/schemes/live_edge.md):
    an I frame starts a stream's cache afresh, so it never holds more than one GOP; frames
    before a stream's first I frame are not kept, and a cache reaching ``limit`` frames (its
    next I frame lost) is dropped until the next I frame."""

    def __init__(self, limit: int):
        self.limit = limit
        self.held: dict[int, list[SourceFrame]] = {}

    def add(self, stream: int, frame: SourceFrame) -> None:
        if frame.frame_type == I_FRAME:
            self.held[stream] = [frame]
        elif stream in self.held:
            if len(self.held[stream]) >= self.limit:
                del self.held[stream]
            else:
                self.held[stream].append(frame)

    def gop(self, stream: int) -> list[SourceFrame]:
        """The frames a joining viewer of ``stream`` gets first, oldest (the I frame) first."""
        return list(self.held.get(stream, ()))
