"""dispatch's passive transcoding (topologies/dispatch/transcoding.yaml) on a real Mininet
network: the transcoder tc1 is fed only while the webrtc viewer webv1 is in the room under
``passive``, and from the start under ``always``. Checked on what the agents measured (the
frames tc1 got, the bytes it pulled, webv1's frames, the nodes' sessions) and the decision
webv1 followed.

Two runs of 14 s: webv1 joins at 6 s and leaves at 10 s; the stream starts at 0.5 s.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml

from experiments.kinds.dispatch.emulation_measures import serving_nodes
from experiments.kinds.dispatch.transcoding import measure
from experiments.measurements import host_addresses, read_table
from tests.conftest import ROOT
from tests.integration.conftest import assert_nothing_left, edgebed, only_run_dir
from tests.integration.dispatch.test_dispatch_runs import rows_of, state_before_module  # noqa: F401

SCENARIO = ROOT / "topologies" / "dispatch" / "transcoding.yaml"
LATE_JOIN_S, STAY_S = 6.0, 4.0
# After webv1's last frame, tc1's session for it ends a pull timeout (1 s) after its last
# pull, tc1 stops pulling, and the origin's session for tc1 ends a pull timeout after that:
# the stream stops within two timeouts and a few pull intervals.
STOPS_WITHIN_S = 2 * 1.0 + 0.6


def run(tmp_path, transcoding: str):
    runs = tmp_path / transcoding
    env = {**os.environ, "EDGEBED_TRANSCODING": transcoding,
           "EDGEBED_LATE_JOIN": f"{LATE_JOIN_S:g}s", "EDGEBED_DURATION": "14s"}
    result = edgebed("run", str(SCENARIO), "--runs-dir", str(runs), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(runs)
    return run_dir, json.loads((run_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory, state_before_module):  # noqa: F811
    tmp_path = tmp_path_factory.mktemp("transcoding")
    made = {}
    for transcoding in ("passive", "always"):
        run_dir, summary = run(tmp_path, transcoding)
        assert_nothing_left(state_before_module, summary["prefix"])
        made[transcoding] = run_dir
    return made


def arrivals(run_dir, node: str) -> list[float]:
    return sorted(float(row["arrived_s"]) for row in rows_of(run_dir, "frames", node)
                  if row.get("arrived_s"))


def joined(run_dir, viewer: str) -> tuple[float, dict]:
    """When ``viewer`` asked to join, and the attributes of the decision it followed."""
    [first] = sorted(rows_of(run_dir, "decisions_followed", viewer),
                     key=lambda row: float(row["time_s"]))[:1]
    return float(first["requested_s"]), json.loads(first["attributes"])


def served(run_dir) -> dict[str, str]:
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    by_address = {v: k for k, v in host_addresses(resolved["topology"]["nodes"]).items()}
    return serving_nodes(run_dir, by_address)


def test_passive_feeds_the_transcoder_only_while_the_other_protocol_is_there(runs):
    run_dir = runs["passive"]
    join_s, attributes = joined(run_dir, "webv1")
    assert attributes["transcoder_started"] is True
    assert attributes["transcode"] == "rtmp->webrtc"
    # The controller's own record of the placement says so too.
    placed = [row for row in read_table(run_dir, "decisions")
              if row["kind"] == "place" and row["flow"] == "webv1/live"]
    assert placed and placed[0]["server"] == "tc1"
    assert json.loads(placed[0]["attributes"])["transcoder_started"] is True
    got = arrivals(run_dir, "tc1")
    # Nothing before webv1 asked; then the stream, which webv1 got from tc1.
    assert got and got[0] > join_s, (got[:1], join_s)
    who = served(run_dir)
    assert who["webv1"] == "tc1" and who["tc1"] == "cn1"
    viewer = arrivals(run_dir, "webv1")
    assert len(viewer) > 0.8 * 25 * (STAY_S - 1.0)  # most of its stay's frames
    # After webv1 left, tc1 stopped getting the stream, well before the run ended.
    assert got[-1] < viewer[-1] + STOPS_WITHIN_S
    row = measure(run_dir)
    assert row["transcoder_before_join_s"] == 0.0
    assert row["transcoder_mb"] > 0 and row["late_on_transcoder"] == 1
    assert row["same_on_transcoder"] == 0
    # No rtmp viewer was placed on the transcoder, and each of them got the stream.
    assert all(who.get(v) in {"cn1", "cn2"} for v in ("rtmpv1", "rtmpv2", "rtmpv3"))


def test_always_feeds_the_transcoder_from_the_start(runs):
    run_dir = runs["always"]
    join_s, attributes = joined(run_dir, "webv1")
    assert attributes["transcoder_started"] is False  # it was running
    got = arrivals(run_dir, "tc1")
    # From the stream's start at 0.5 s: seconds of frames before webv1 joined at 6 s.
    assert got and got[0] < join_s - 4.0, (got[:1], join_s)
    assert served(run_dir)["webv1"] == "tc1"
    row = measure(run_dir)
    passive = measure(runs["passive"])
    assert row["transcoder_before_join_s"] > 4.0
    assert row["transcoder_wasted_s"] > passive["transcoder_wasted_s"] + 4.0
    assert row["transcoder_mb"] > passive["transcoder_mb"]
