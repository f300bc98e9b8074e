"""What a viewer would have seen: a player's playout of the frames that arrived, for any
scheme's runs (the ``frames`` table every agent metering media writes, agents.media)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from experiments.measurements import read_table


@dataclass(frozen=True)
class Playout:
    """One viewer's playout: when it asked, when its first whole frame of any kind arrived and
    when its first frame showed (epoch seconds; None when no frame, or no I frame, arrived
    whole), its stalls (and when the first began), and the frame it started on."""

    requested_s: float | None
    first_s: float | None
    shown_s: float | None
    stalls: int
    stall_s: float  # all stalls together
    played: int  # frames shown
    skipped: int  # frames between the first and last shown that never arrived whole
    start_frame: int | None = None  # the frame number playback started on
    first_stall_s: float | None = None  # when the buffer first ran dry (epoch seconds)

    @property
    def startup_s(self) -> float | None:
        """Request to first frame shown; None when either is unknown."""
        if self.requested_s is None or self.shown_s is None:
            return None
        return self.shown_s - self.requested_s


def playout(frames: Iterable[tuple[int, float, bool]], fps: float, buffer_s: float,
            requested_s: float | None = None) -> Playout:
    """The playout of ``frames``, the whole frames a viewer got (source frame number, arrival
    in epoch seconds, whether it is an I frame), at ``fps`` with ``buffer_s`` of playout
    delay; ``requested_s`` is when the viewer asked for the stream."""
    # A frame got twice (from two nodes while the viewer moved) counts when it first came.
    earliest: dict[int, tuple[float, bool]] = {}
    for number, arrival, key in frames:
        if number not in earliest or arrival < earliest[number][0]:
            earliest[number] = (arrival, key)
    arrived = sorted((number, arrival, key) for number, (arrival, key) in earliest.items())
    first_s = min((arrival for _, arrival, _ in arrived), default=None)
    first = next((index for index, (_, _, key) in enumerate(arrived) if key), None)
    if first is None:
        return Playout(requested_s, first_s, None, 0, 0.0, 0, 0)
    start_number, start_arrival, _ = arrived[first]
    shown = start_arrival + buffer_s
    clock = shown - start_number / fps  # the deadline of frame n is clock + n / fps
    stalls, stall_s, played, skipped, last = 0, 0.0, 1, 0, start_number
    first_stall = None
    for number, arrival, _ in arrived[first + 1:]:
        # The slot after the last frame shown: if the next whole frame was not there by then
        # (the one due, or a later one when the one due never came), the buffer ran dry.
        due = clock + (last + 1) / fps
        if arrival > due:
            first_stall = due if first_stall is None else first_stall
            stalls += 1
            stall_s += arrival - due
            # Shown on arrival, skipping what never came; later deadlines run from it.
            clock = arrival - number / fps
        skipped += number - last - 1
        played += 1
        last = number
    return Playout(requested_s, first_s, shown, stalls, stall_s, played, skipped, start_number,
                   first_stall)


def viewer_playouts(run_dir, viewers: Iterable[str], fps: float,
                    buffer_s: float) -> dict[str, Playout]:
    """Each of ``viewers``' :func:`playout` from a run's ``frames`` table and, for its
    request, the earliest ``requested_s`` of its ``decisions_followed`` (its join)."""
    viewers = set(viewers)
    frames: dict[str, list[tuple[int, float, bool]]] = {viewer: [] for viewer in viewers}
    for row in read_table(run_dir, "frames"):
        if row["node"] in viewers and row["complete"] == "True":
            frames[row["node"]].append((int(row["frame"]), float(row["arrived_s"]),
                                        row["frame_type"] == "I"))
    requested: dict[str, float] = {}
    for row in read_table(run_dir, "decisions_followed"):
        if row["node"] in viewers and row.get("requested_s"):
            at = float(row["requested_s"])
            requested[row["node"]] = min(at, requested.get(row["node"], at))
    return {viewer: playout(frames[viewer], fps, buffer_s, requested.get(viewer))
            for viewer in sorted(viewers)}
