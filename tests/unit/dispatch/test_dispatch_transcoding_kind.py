"""The dispatch_transcoding kind's pure measurements: when a transcoder was getting the stream
and how much of it no viewer of another protocol was there, on hand-made arrivals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from experiments.kinds.dispatch.transcoding import (Parameters, overlap, stretches,
                                                    transcoder_time, variables)


def frames(start: float, end: float, fps: float = 25) -> list[float]:
    return [start + n / fps for n in range(round((end - start) * fps))]


def test_frames_close_together_are_one_stretch_and_a_silence_splits_them():
    arrivals = frames(1.0, 3.0) + frames(5.0, 6.0)
    assert stretches(arrivals) == [pytest.approx((1.0, 3.0)), pytest.approx((5.0, 6.0))]
    assert stretches([]) == []


def test_overlap_counts_seconds_inside_the_other_intervals():
    assert overlap([(0, 4), (6, 8)], [(3, 7)]) == pytest.approx(2.0)
    assert overlap([(0, 4)], []) == 0.0


def test_an_always_on_transcoder_wastes_what_lies_outside_the_viewers_stay():
    # Pulling 0.5-14 s; the webrtc viewer there 7-11 s.
    time_at = transcoder_time(frames(0.5, 14.0), [(7.0, 11.0)])
    assert time_at["pulling_s"] == pytest.approx(13.5, abs=0.05)
    assert time_at["wasted_s"] == pytest.approx(9.5, abs=0.05)
    assert time_at["before_s"] == pytest.approx(6.5, abs=0.05)
    assert time_at["after_s"] == pytest.approx(3.0, abs=0.05)


def test_a_passive_transcoder_wastes_only_its_tail():
    # Pulling from the first frame after the join (7.1 s) to 2 s after the leave.
    time_at = transcoder_time(frames(7.1, 13.0), [(7.0, 11.0)])
    assert time_at["before_s"] == 0.0
    assert time_at["wasted_s"] == pytest.approx(2.0, abs=0.05)
    # Nobody of another protocol came: all of its pulling is wasted.
    assert transcoder_time(frames(1.0, 2.0), [])["wasted_s"] == pytest.approx(1.0, abs=0.05)


def test_the_cell_sets_the_mechanism_and_the_join():
    cell = SimpleNamespace(policy="passive", parameters=Parameters(late_join=6.5))
    assert variables(cell) == {"EDGEBED_TRANSCODING": "passive", "EDGEBED_LATE_JOIN": "6.5s",
                               "EDGEBED_DURATION": "14s"}


def test_the_models_timeline_is_the_scenarios():
    import yaml

    from experiments.kinds.dispatch.transcoding import STAY_S, STREAM_AT_S, predicted
    from tests.conftest import ROOT
    scenario = yaml.safe_load((ROOT / "topologies" / "dispatch" / "transcoding.yaml").read_text())
    [web] = [w for w in scenario["workload"] if w.get("nodes") == ["webv1"]]
    [streamer] = [w for w in scenario["workload"] if w["agent"] == "streamer"]
    assert web["params"]["duration"] == f"{STAY_S:g}s"
    assert streamer["start"] == f"{STREAM_AT_S:g}s"
    assert predicted(7.0, 14.0) == {"always": pytest.approx(13.5), "passive": pytest.approx(4.0)}


def test_the_remarks_put_always_on_against_passive_and_the_model():
    import pandas as pd

    from experiments.kinds.dispatch.transcoding import METRICS, remarks
    rows = []
    for policy, pulling, wasted, started in (("always", 13.4, 9.5, 0), ("passive", 5.9, 2.0, 1)):
        row = {m.name: 1.0 for m in METRICS}
        row.update(policy=policy, value="7", parameter="late_join",
                   transcoder_pulling_s=pulling, transcoder_wasted_s=wasted,
                   transcoder_started_joins=started, same_uninterrupted=3, same_viewers=3,
                   network_kept_up=1)
        rows += [row, row]
    [compared, counts, model] = remarks(pd.DataFrame(rows))
    assert "13.4 against 5.9 s pulling" in compared
    assert "9.5 against 2.0 s pulling with no webrtc viewer" in compared
    # Per policy: runs, runs whose network kept up, decisions that started the transcoder,
    # rtmp views never stalled of how many.
    assert counts.rows == (("always", "2", "2", "0", "6", "6"),
                           ("passive", "2", "2", "2", "6", "6")), counts.rows
    assert model.rows == (("always", "13.5", "13.4"), ("passive", "4.0", "5.9")), model.rows
    assert remarks(pd.DataFrame(rows[:2])) == []  # one policy only: nothing to compare
