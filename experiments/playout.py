"""What a viewer would have seen: a player's playout of the frames that arrived, for any
scheme's runs (the ``frames`` table every agent metering media writes, agents.media).

The player starts on the first I frame that arrived whole and shows one frame a slot, at the
stream's rate, ``buffer_s`` after that I frame arrived. A frame is shown in its slot only if
it arrived whole by then and every frame since its GOP's I frame was shown in its own (a P
frame is decoded from the one before it, and a frame not there in time is dropped), all of
one encoding. Each frame carries a key naming its encoding, by default its rung: the same
rung relayed by another node carries the same frames, so a chain goes on across nodes; a
scheme whose nodes encode a rung each their own way keys a frame by its node as well
(:func:`viewer_playouts`). Another encoding's P frames cannot be decoded from this one's, so
after a change of encoding the picture freezes until an I frame of the new one arrives whole
in time. The player decodes every encoding that arrives (frames of the old one still coming
after a switch show until they stop): it moves to the new one at its I frame, as a player
switching at a GOP boundary does. A frame missing or late at its slot breaks its chain: the
picture freezes until an I frame arrives whole in time. The frame types are the ones the
frames carry, not a GOP length: a GOP is restarted when a push is refused (agents.streamer).
When nothing of the slot's frame or a later one has arrived whole, in any encoding, the
buffer has run dry: the player stalls until a frame comes, and every later slot moves by the
stall."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
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
    arrived (epoch seconds), whether it is an I frame, whether it arrived whole and the
    encoding it was sent in (any key telling encodings apart, such as a rung)."""

    frame: int
    arrived_s: float
    key: bool
    whole: bool = True
    encoding: Hashable = 0


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
    and of encoding 0 unless said), at ``fps`` with ``buffer_s`` of playout delay;
    ``requested_s`` is when the viewer asked for the stream."""
    # A frame got twice (from two nodes while the viewer moved) counts when it first came
    # whole, in each encoding.
    earliest: dict[tuple[Hashable, int], float] = {}  # (encoding, frame) -> first whole arrival
    keys: set[tuple[Hashable, int]] = set()
    for number, arrival, key, whole, encoding in (Arrival(*frame) for frame in frames):
        if key:
            keys.add((encoding, number))
        if whole and arrival < earliest.get((encoding, number), np.inf):
            earliest[(encoding, number)] = arrival
    first_s = min(earliest.values(), default=None)
    start = min((number for _, number in earliest.keys() & keys), default=None)
    if start is None:
        return Playout(fps, requested_s, first_s, None)
    # In the order first seen: keys of different types (a rung, a node and a rung) do not sort.
    encodings = list(dict.fromkeys(encoding for encoding, _ in earliest))
    numbers = np.arange(start, max(number for _, number in earliest) + 1)
    # Rows: encodings; columns: the slots' frames.
    arrived = np.array([[earliest.get((encoding, int(number)), np.inf) for number in numbers]
                        for encoding in encodings])
    is_key = np.array([[(encoding, int(number)) in keys for number in numbers]
                       for encoding in encodings])
    # The first whole arrival of this frame or any later one, in any encoding: what the buffer
    # holds by then.
    buffered = np.minimum.accumulate(arrived.min(axis=0)[::-1])[::-1]
    shown_s = arrived[is_key[:, 0], 0].min() + buffer_s
    clock = shown_s  # when slot 0 is due; each stall moves it later
    stalls: list[Span] = []
    freezes: list[list[float]] = []  # [first slot's due time, slots]
    counts: Counter[str] = Counter()
    # Per encoding: whether its chain since its latest I frame is whole and in time.
    decoding = np.zeros(len(encodings), dtype=bool)
    was_shown = True
    for slot in range(len(numbers)):
        due = clock + slot / fps
        if buffered[slot] > due + SAME_TIME_S:
            stalls.append(Span(float(due), float(buffered[slot] - due)))
            clock += buffered[slot] - due
            due = buffered[slot]
        in_time = arrived[:, slot] <= due + SAME_TIME_S
        decoding = in_time & (decoding | is_key[:, slot])
        if decoding.any():
            fate = "shown"
        elif in_time.any():
            fate = "undecodable"
        else:
            fate = "lost" if np.isinf(arrived[:, slot]).all() else "late"
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


def by_rung(row: dict) -> int:
    """A ``frames`` row's encoding when every node relays a rung as it got it: its rung."""
    return int(row["rung"])


def viewer_playouts(run_dir, viewers: Iterable[str], fps: float, buffer_s: float,
                    encoding: Callable[[dict], Hashable] = by_rung) -> dict[str, Playout]:
    """Each of ``viewers``' :func:`playout` from a run's ``frames`` table, each frame in the
    encoding ``encoding`` gives its row, and, for its request, the earliest ``requested_s`` of
    its ``decisions_followed`` (its join)."""
    viewers = set(viewers)
    frames: dict[str, list[Arrival]] = {viewer: [] for viewer in viewers}
    for row in read_table(run_dir, "frames"):
        if row["node"] in viewers:
            frames[row["node"]].append(Arrival(int(row["frame"]), float(row["arrived_s"]),
                                               row["frame_type"] == "I",
                                               row["complete"] == "True", encoding(row)))
    requested: dict[str, float] = {}
    for row in read_table(run_dir, "decisions_followed"):
        if row["node"] in viewers and row.get("requested_s"):
            at = float(row["requested_s"])
            requested[row["node"]] = min(at, requested.get(row["node"], at))
    return {viewer: playout(frames[viewer], fps, buffer_s, requested.get(viewer))
            for viewer in sorted(viewers)}
