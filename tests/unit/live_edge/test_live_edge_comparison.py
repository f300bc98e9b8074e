"""The live_edge emulated report's comparison of policies, without Mininet: where a run left each
viewer (from its tables, built here by hand: no network runs in a unit test), and the remarks
drawn from results rows (placements compared pair by pair, the predicted and measured
orderings, what the emulation adds to the model's latency)."""

from __future__ import annotations

import csv
import json

import pandas as pd

from experiments.kinds.live_edge.emulation import KIND
from experiments.kinds.live_edge.emulation_measures import (placement, placement_text,
                                                            read_placement)
from experiments.kinds.live_edge.emulation_remarks import remarks
from experiments.sweeps.runner import columns, read_results


def write_table(run_dir, name, header, rows):
    (run_dir / "tables").mkdir(parents=True, exist_ok=True)
    with open(run_dir / "tables" / f"{name}.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(header)
        writer.writerows(rows)


def test_a_placement_is_confirmed_by_the_controllers_last_row_about_its_flow(tmp_path):
    (tmp_path / "controller").mkdir()
    (tmp_path / "controller" / "state.json").write_text(json.dumps({"flows": [
        {"flow": f"{viewer}/live", "client": viewer} for viewer in ("v1", "v2", "v3")]}))
    header = ("node", "agent", "time", "kind", "flow", "server")
    write_table(tmp_path, "decisions", header, [
        ("controller", "controller", "10.0", "place", "v1/live", "edge1"),
        ("controller", "controller", "11.0", "place", "v2/live", "edge1"),
        ("controller", "controller", "12.0", "place", "v3/live", "edge2"),
        # A period moving two flows to two edges: one row, both flows, both edges.
        ("controller", "controller", "15.0", "period", "v1/live,v2/live", "edge2,edge3")])
    rows = [{"viewer": "v1", "server": "edge3", "bitrate_bps": 1e6},
            {"viewer": "v2", "server": "edge2", "bitrate_bps": 0.625e6},
            # v3 still follows edge1, which the controller never sent it to.
            {"viewer": "v3", "server": "edge1", "bitrate_bps": 1e6}]
    placed, unconfirmed = placement(tmp_path, rows)
    assert placed == {"v1": ("edge3", 1e6), "v2": ("edge2", 0.625e6), "v3": ("edge1", 1e6)}
    assert unconfirmed == 1
    assert read_placement(placement_text(placed)) == placed


def cell(policy, repetition, placed, model, measured, **figures):
    return {"experiment": "e", "sweep": "s", "parameter": "G", "value": "400",
            "policy": policy, "repetition": repetition, "seed": 7, "cell": f"{policy}{repetition}",
            "period": 1, "periods": 1, "objective_model": model, "objective_measured": measured,
            "latency_model_ms": 200.0, "latency_measured_ms": 250.0, "latency_p99_ms": 300.0,
            "loss": 0.01, "unconfirmed": 0, "placement": placement_text(placed)} | figures


def test_remarks_count_the_viewers_two_policies_placed_apart_and_compare_the_orderings():
    a = {"v1": ("edge1", 1e6), "v2": ("edge2", 1e6), "v3": ("edge3", 0.3125e6)}
    # b: v1 elsewhere, v2 at another rung on the same edge, v3 unserved, v4 served by b alone.
    b = {"v1": ("edge2", 1e6), "v2": ("edge2", 0.625e6), "v4": ("edge1", 1e6)}
    results = pd.DataFrame([
        cell("lua", 0, a, 10.0, 6.0), cell("df", 0, b, 8.0, 7.0),
        cell("lua", 1, a, 10.0, 5.0), cell("df", 1, a, 8.0, 7.5)])
    [pairs, rates, ordering, reversed_pairs, gap] = remarks(results)
    # Viewers on different edges (or served by one only), then on the same edge at another
    # rung, repetition by repetition, of the 4 some policy served.
    assert pairs.rows == (("s, G = 400", "lua and df", "4", "3, 0", "1, 0"),), pairs.rows
    assert rates.header == ("value", "policy", "edge1", "edge2", "edge3",
                            "unconfirmed placements")
    assert rates.rows == (("s, G = 400", "lua", "1", "1", "0.312", "0"),
                          ("s, G = 400", "df", "1", "1.31", "0.156", "0")), rates.rows
    assert "predicted lua 10 > df 8" in ordering and "measured df 7.25 > lua 5.5" in ordering
    assert "does not match" in ordering
    # df measured above lua by 1.75 a repetition (1 and 2.5): not resolved by two.
    assert reversed_pairs.rows == (("s, G = 400", "df", "lua", "1.75", "9.53",
                                    "no: within their spread"),), reversed_pairs.rows
    assert [row[4:] for row in gap.rows] == [("+50", "300", "1.00%")] * 2, gap.rows


def test_equal_predictions_order_either_way_and_the_measured_order_then_matches():
    same = {"v1": ("edge1", 1e6)}
    results = pd.DataFrame([cell("lua", 0, same, 5.0, 4.0), cell("df", 0, same, 5.0, 4.5),
                            cell("mhcp", 0, same, 9.0, 8.0)])
    [ordering] = [line for line in remarks(results)
                  if isinstance(line, str) and "objective" in line]
    assert "predicted mhcp 9 > lua 5 = df 5" in ordering
    assert "the measured ordering matches the predicted one" in ordering


def test_the_placement_travels_through_results_csv_as_text(tmp_path):
    row = cell("lua", 0, {"v1": ("edge1", 1e6)}, 1.0, 1.0)
    header = columns(KIND)
    assert header[-1] == "placement"
    path = tmp_path / "results.csv"
    pd.DataFrame([{name: row.get(name, "") for name in header}]).to_csv(path, index=False)
    [back] = read_results(path, KIND).to_dict("records")
    assert back["placement"] == "v1=edge1@1000000" and back["objective_model"] == 1.0


def test_a_last_stream_of_one_packet_counts_as_nothing_arrived_not_as_minus_infinity(tmp_path):
    # From a run of Random on live_edge-capacity: a viewer's last decision came as the run
    # ended and one packet of it arrived, with no duration and so no goodput (an empty field).
    import math
    import shutil
    from pathlib import Path

    from experiments.kinds.live_edge.emulation_measures import run_totals, viewer_qoe

    run_dir = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "recorded" / "unserved", run_dir)
    path = run_dir / "tables" / "flows.csv"
    with open(path, newline="") as stream:
        rows = list(csv.DictReader(stream))
    [last] = [row for row in rows if (row["node"], row["flow"]) == ("viewer1", "stream-5")]
    last.update(packets="1", unique="1", duration_s="0", goodput_bps="")
    with open(path, "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    served = {row["viewer"]: row for row in viewer_qoe(run_dir)}
    assert served["viewer1"]["qoe_measured"] == 0 and served["viewer1"]["goodput_bps"] == 0
    assert math.isnan(served["viewer1"]["latency_measured_ms"])
    assert math.isfinite(run_totals(list(served.values()))["objective_measured"])
