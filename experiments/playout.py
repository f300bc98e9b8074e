"""What a viewer would have seen: a player's playout of the frames that arrived, for any
scheme's runs (the ``frames`` table every agent metering media writes, agents.media).

The player starts on the first I frame that arrived whole and shows one frame a slot, at the
stream's rate, ``buffer_s`` after that I frame arrived. A frame is shown in its slot only if
it arrived whole by then and every frame since its GOP's I frame was shown in its own (a P
frame is decoded from the one before it, and a frame not there in time is dropped). A frame
missing or late at its slot breaks that chain: the picture freezes until an I frame arrives
whole in time. The frame types are the ones the frames
carry, not a GOP length: a GOP is restarted when a push is refused (agents.streamer). When
nothing of the slot's frame or a later one has arrived whole, the buffer has run dry: the
player stalls until a frame comes, and every later slot moves by the stall."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from experiments.measurements import read_table

# Times this close are one: epoch seconds in a float resolve about a quarter of a microsecond,
# and a slot computed after a stall may land that far from the arrival it was set by.
SAME_TIME_S = 1e-6


class Span(NamedTuple):
    """A stretch of a viewer's playback: when it began (epoch seconds) and how long it
    lasted (s)."""

    start_s: float
    length_s: float


class Arrival(NamedTuple):
    """What a viewer got of one frame: its source frame number, when its last fragment
    arrived (epoch seconds), whether it is an I frame and whether it arrived whole."""

    frame: int
    arrived_s: float
    key: bool
    whole: bool = True


@dataclass(frozen=True)
class Playout:
    """One viewer's playout: when it asked, when its first whole frame of any kind arrived and
    when its first frame showed (epoch seconds; None when no frame, or no I frame, arrived
    whole), each of its stalls and freezes, and what became of each frame it watched, from the
    frame it started on to the last it got whole."""

    fps: float  # the stream's frames a second, one slot each
    requested_s: float | None
    first_s: float | None
    shown_s: float | None
    # Each time the buffer ran dry: from the slot it came due to the frame's arrival.
    stall_spans: tuple[Span, ...] = ()
    # Each run of slots whose frame was not shown: from its first slot, its slots' time.
    freeze_spans: tuple[Span, ...] = ()
    frames_shown: int = 0
    frames_lost: int = 0  # never arrived whole
    frames_late: int = 0  # arrived whole after its slot
    frames_undecodable: int = 0  # arrived whole in time, a frame it is decoded from did not
    start_frame: int | None = None  # the frame number playback started on

    @property
    def stalls(self) -> int:
        """How many times the buffer ran dry."""
        return len(self.stall_spans)

    @property
    def stall_s(self) -> float:
        """All stalls together."""
        return sum(span.length_s for span in self.stall_spans)

    @property
    def first_stall_s(self) -> float | None:
        """When the buffer first ran dry (epoch seconds); None when it never did."""
        return self.stall_spans[0].start_s if self.stall_spans else None

    @property
    def freezes(self) -> int:
        """Runs of slots whose frame was not shown."""
        return len(self.freeze_spans)

    @property
    def startup_s(self) -> float | None:
        """Request to first frame shown; None when either is unknown."""
        if self.requested_s is None or self.shown_s is None:
            return None
        return self.shown_s - self.requested_s

    @property
    def frames_watched(self) -> int:
        """The slots played: every frame from the first shown to the last that arrived whole."""
        return (self.frames_shown + self.frames_lost + self.frames_late
                + self.frames_undecodable)

    @property
    def freeze_s(self) -> float:
        """The picture frozen while playing: the slots whose frame was not shown."""
        return (self.frames_watched - self.frames_shown) / self.fps

    @property
    def watch_s(self) -> float:
        """First frame shown to the end of the last slot, stalls included."""
        return self.frames_watched / self.fps + self.stall_s

    def began_after(self, at_s: float, window_s: float) -> tuple[tuple[Span, ...],
                                                                 tuple[Span, ...]]:
        """The stalls and the freezes that began within ``window_s`` after ``at_s`` (epoch
        seconds)."""
        def within(spans: tuple[Span, ...]) -> tuple[Span, ...]:
            return tuple(span for span in spans if at_s <= span.start_s <= at_s + window_s)
        return within(self.stall_spans), within(self.freeze_spans)


def playout(frames: Iterable[tuple], fps: float, buffer_s: float,
            requested_s: float | None = None) -> Playout:
    """The playout of ``frames``, what a viewer got of each (:class:`Arrival` fields; whole
    unless said), at ``fps`` with ``buffer_s`` of playout delay; ``requested_s`` is when the
    viewer asked for the stream."""
    # A frame got twice (from two nodes while the viewer moved) counts when it first came whole.
    earliest: dict[int, float] = {}
    keys: set[int] = set()
    for number, arrival, key, whole in (Arrival(*frame) for frame in frames):
        if key:
            keys.add(number)
        if whole and arrival < earliest.get(number, np.inf):
            earliest[number] = arrival
    first_s = min(earliest.values(), default=None)
    start = min((number for number in earliest if number in keys), default=None)
    if start is None:
        return Playout(fps, requested_s, first_s, None)
    numbers = np.arange(start, max(earliest) + 1)
    arrived = np.array([earliest.get(int(number), np.inf) for number in numbers])
    # The first whole arrival of this frame or any later one: what the buffer holds by then.
    buffered = np.minimum.accumulate(arrived[::-1])[::-1]
    shown_s = arrived[0] + buffer_s
    clock = shown_s  # when slot 0 is due; each stall moves it later
    stalls: list[Span] = []
    freezes: list[list[float]] = []  # [first slot's due time, slots]
    counts: Counter[str] = Counter()
    decoding, was_shown = False, True
    for slot, number in enumerate(numbers):
        due = clock + slot / fps
        if buffered[slot] > due + SAME_TIME_S:
            stalls.append(Span(float(due), float(buffered[slot] - due)))
            clock += buffered[slot] - due
            due = buffered[slot]
        if arrived[slot] <= due + SAME_TIME_S:
            decoding = decoding or int(number) in keys
            fate = "shown" if decoding else "undecodable"
        else:
            decoding = False
            fate = "lost" if np.isinf(arrived[slot]) else "late"
        counts[fate] += 1
        if fate != "shown":
            if was_shown:
                freezes.append([float(due), 0])
            freezes[-1][1] += 1
        was_shown = fate == "shown"
    return Playout(fps, requested_s, first_s, float(shown_s), tuple(stalls),
                   tuple(Span(start, slots / fps) for start, slots in freezes),
                   counts["shown"], counts["lost"], counts["late"], counts["undecodable"],
                   start)


def viewer_playouts(run_dir, viewers: Iterable[str], fps: float,
                    buffer_s: float) -> dict[str, Playout]:
    """Each of ``viewers``' :func:`playout` from a run's ``frames`` table and, for its
    request, the earliest ``requested_s`` of its ``decisions_followed`` (its join)."""
    viewers = set(viewers)
    frames: dict[str, list[Arrival]] = {viewer: [] for viewer in viewers}
    for row in read_table(run_dir, "frames"):
        if row["node"] in viewers:
            frames[row["node"]].append(Arrival(int(row["frame"]), float(row["arrived_s"]),
                                               row["frame_type"] == "I",
                                               row["complete"] == "True"))
    requested: dict[str, float] = {}
    for row in read_table(run_dir, "decisions_followed"):
        if row["node"] in viewers and row.get("requested_s"):
            at = float(row["requested_s"])
            requested[row["node"]] = min(at, requested.get(row["node"], at))
    return {viewer: playout(frames[viewer], fps, buffer_s, requested.get(viewer))
            for viewer in sorted(viewers)}
