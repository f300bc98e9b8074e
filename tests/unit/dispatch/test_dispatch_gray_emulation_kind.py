"""The dispatch_gray_emulation kind: each degradation's schedule is a valid one of the scenario,
the policy switches gray failover alone, and the rows' figures come from the viewers' playout,
struck viewers apart (tests/integration/dispatch/test_dispatch_gray_failover_runs.py runs the
scenario itself)."""

from __future__ import annotations

import csv

import pandas as pd
import pytest
import yaml

from experiments import scenarios
from experiments.kinds import registered
from experiments.kinds.dispatch.gray_emulation import (DEGRADATIONS, Parameters, changes,
                                                       degraded_nodes, measure, remarks,
                                                       variables)
from experiments.sweeps.kinds import Cell
from tests.conftest import ROOT


def cell(policy: str, **parameters) -> Cell:
    return Cell("dispatch-gray-test", "degradation", "degradation", "node_stall", policy, 0, 7,
                Parameters(**parameters))


def test_each_degradation_is_a_schedule_the_scenario_accepts(tmp_path):
    for degradation in DEGRADATIONS:
        on = cell("on", degradation=degradation)
        loaded = scenarios.derive(ROOT / on.parameters.scenario, tmp_path / f"{degradation}.yaml",
                                  changes(on), variables(on))
        actions = [event.action for event in loaded.schedule]
        assert actions == {"node_stall": ["node_stall", "node_resume"],
                           "loss_ramp": ["set"] * 3, "delay_jump": ["set"]}[degradation]
        assert loaded.schedule[0].at == 5.0
    ramp = changes(cell("on", degradation="loss_ramp"))["schedule"]
    assert [event["set"]["burst"]["p"] for event in ramp] == ["1%", "3%", "5%"]
    assert [event["at"] for event in ramp] == ["5s", "6s", "7s"]
    assert degraded_nodes(changes(cell("on"))["schedule"]) == {"cn1"}
    assert degraded_nodes(ramp) == {"us1", "us2"}


def test_the_policy_switches_gray_failover_alone():
    off, on = variables(cell("off")), variables(cell("on"))
    assert (off.pop("EDGEBED_GRAY_FAILOVER"), on.pop("EDGEBED_GRAY_FAILOVER")) == ("false", "true")
    assert off == on
    assert on["EDGEBED_RELAYS"] == "false" and on["EDGEBED_CANDIDATES"] == "1"
    assert registered()["dispatch_gray_emulation"].emulated


def write_table(run_dir, name: str, rows: list[dict]) -> None:
    with open(run_dir / "tables" / f"{name}.csv", "w", newline="") as stream:
        table = csv.DictWriter(stream, fieldnames=list(rows[0]))
        table.writeheader()
        table.writerows(rows)


def test_the_struck_viewers_are_those_placed_on_the_stalled_node(tmp_path):
    # cnv1 on cn1 gets frames 0-149 at 25 a second from 100 s, then nothing for 3 s (the
    # stall), then 225 on from its new node; cnv2 on cn2 gets every frame. Every 50th is an I
    # frame; both joined at 99.8 s.
    (tmp_path / "tables").mkdir()
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump({
        "topology": {"nodes": {"cnv1": {"role": "viewer"}, "cnv2": {"role": "viewer"},
                               "cn1": {"role": "edge"}, "cn2": {"role": "edge"}}},
        "workload": [{"agent": "streamer", "params": {"fps": 25}}],
        "schedule": changes(cell("on"))["schedule"]}))
    got = {"cnv1": [*range(150), *range(225, 400)], "cnv2": range(400)}
    write_table(tmp_path, "frames", [
        {"node": viewer, "frame": n, "arrived_s": f"{100 + n / 25 + 0.05:.6f}",
         "frame_type": "I" if n % 50 == 0 else "P", "rung": "0", "complete": "True"}
        for viewer, numbers in got.items() for n in numbers])
    write_table(tmp_path, "decisions", [
        {"time": "99.9", "kind": "place", "flow": "cnv1/live", "server": "cn1"},
        {"time": "99.9", "kind": "place", "flow": "cnv2/live", "server": "cn2"},
        {"time": "109", "kind": "place", "flow": "cnv1/live", "server": "cn3"}])
    write_table(tmp_path, "decisions_followed", [
        {"node": viewer, "requested_s": "99.8"} for viewer in got])
    write_table(tmp_path, "policy_trace", [{"migrated": ""}, {"migrated": "cnv1/live@cn3"}])
    row = measure(tmp_path)
    assert (row["struck_viewers"], row["viewers"], row["moved_flows"]) == (1, 2, 1)
    # cnv1's buffer runs dry at frame 150's slot until 225 comes; then the 75 slots of the
    # frames it never got are frozen (3 s), and 225-249, P frames without their I frame,
    # undecodable (1 s), until the I frame 250 shows.
    assert row["struck_frames_lost"] == 75
    assert row["struck_freeze_ms"] == pytest.approx(4000)
    assert row["all_freeze_ms"] == pytest.approx(4000)
    assert row["struck_stall_ms"] == row["all_stall_ms"] > 0
    assert row["all_freeze_share_pct"] < row["struck_freeze_share_pct"]
    # Joined at 99.8 s, the first I frame at 100.05 s shown 0.5 s after it.
    assert row["struck_startup_mean_ms"] == pytest.approx(750)


def test_the_remarks_table_sums_each_degradations_freezes_per_policy():
    def run(policy, struck_ms, all_ms, moved):
        return {"sweep": "degradation", "parameter": "degradation", "value": "node_stall",
                "policy": policy,
                "degradation": "node_stall", "struck_viewers": 2, "struck_freeze_ms": struck_ms,
                "struck_freeze_share_pct": struck_ms / 100, "all_freeze_ms": all_ms,
                "all_freeze_share_pct": all_ms / 400, "moved_flows": moved}
    results = pd.DataFrame([run("off", 9000, 9500, 0), run("off", 11000, 11500, 0),
                            run("on", 3000, 3600, 2), run("on", 5000, 5600, 2)])
    [table] = remarks(results)
    off, on = table.rows
    assert off[1:5] == ("off", "2", "4", "20.0") and on[1:5] == ("on", "2", "4", "8.0")
    assert off[5].startswith("100.0% (") and on[5].startswith("40.0% (")
    assert (off[6], on[6], on[8]) == ("21.0", "9.2", "4")
