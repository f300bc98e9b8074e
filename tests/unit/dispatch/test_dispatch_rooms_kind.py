"""The dispatch_rooms kind's pure measurements: frames lost end to end and media Mbit/s
across borders, on hand-made tables."""

from __future__ import annotations

import pytest

from experiments.kinds.dispatch.rooms import cross_border, frame_loss, variables


def test_frames_lost_count_only_inside_the_viewers_own_window():
    origin = {n: 10.0 + 0.04 * n for n in range(100)}  # frames 0-99, 40 ms apart
    # The viewer joined at frame 20 and got every frame to 80 but 40 and 41.
    got = {n: t + 0.1 for n, t in origin.items() if 20 <= n <= 80 and n not in (40, 41)}
    lost, of = frame_loss(origin, got, edge_s=0.2)
    # Counted: the origin's frames from 0.2 s after the viewer's first to 0.2 s before its last.
    start, end = min(got.values()) + 0.2, max(got.values()) - 0.2
    expected = [n for n, t in origin.items() if start <= t <= end]
    assert of == len(expected) and lost == 2
    assert frame_loss(origin, {}) == (0, 0)


def test_cross_border_counts_flows_whose_sender_is_in_another_region():
    regions = {"o": "cn", "n1": "us", "v1": "us", "v2": "us", "v3": "cn"}
    flows = [
        {"node": "n1", "peer": "10.0.0.1", "bytes": "1000000", "duration_s": "8"},  # o -> n1
        {"node": "v1", "peer": "10.0.0.200", "bytes": "500000", "duration_s": "4"},  # n1 -> v1
        {"node": "v2", "peer": "10.0.0.200", "bytes": "250000", "duration_s": "2"},  # o -> v2
        {"node": "v3", "peer": "10.0.0.200", "bytes": "900000", "duration_s": "3"},  # o -> v3
        {"node": "v1", "peer": "10.0.0.9", "bytes": "1", "duration_s": "0"},  # no duration
    ]
    served = {"v1": "n1", "v2": "o", "v3": "o"}
    assert cross_border(regions, flows, served, {"10.0.0.1": "o"}) == pytest.approx(1.0 + 1.0)


def test_the_cell_sets_the_scheduling_and_the_room():
    from types import SimpleNamespace

    from experiments.kinds.dispatch.rooms import Parameters
    cell = SimpleNamespace(policy="single", parameters=Parameters(room="border"))
    assert variables(cell) == {"EDGEBED_SCHEDULING": "single", "EDGEBED_ROOM": "border",
                               "EDGEBED_BORDER_LOSS_P": "0.5%", "EDGEBED_DURATION": "12s"}
