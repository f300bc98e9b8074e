"""The dispatch_lookup kind: what a cell sets in the scenario, and what ``measure`` makes of a
hand-made run directory (the asking centers' lookups and replies) against the pure model (a
cell's run is the experiment's)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.kinds import registered
from experiments.kinds.dispatch.lookup import METRICS, Parameters, measure, remarks, variables
from experiments.sweeps import experiment
from experiments.sweeps.kinds import EMULATED_METRICS, Cell

ROOT = Path(__file__).resolve().parents[3]
# The centers' addresses as topologies/dispatch/dispatch.yaml resolves them.
DCN, DUS, DEU = "10.0.0.3", "10.0.0.4", "10.0.0.5"
CENTERS = {"dcn": ("cn", DCN), "dus": ("us", DUS), "deu": ("eu", DEU)}
MEDIA = "10.0.0.6"
# Round trips (ms) measured between every pair, each center asking: cn-us 160 (the median; the
# mean is 160.7), cn-eu 180, us-eu 70.
REPLIES = [("dcn", DUS, 150), ("dus", DCN, 172), ("dcn", DUS, 160),
           ("dcn", DEU, 180), ("deu", DCN, 180),
           ("dus", DEU, 70), ("deu", DUS, 70)]


def lookup(node: str, mode: str, owner: str, seconds: float | None, messages: int,
           hint: str = "", outcome: str = "found", retransmissions: int = 0,
           fell_back: bool = False) -> dict[str, object]:
    """One row of the agent's ``lookups`` table."""
    return {"node": node, "agent": "dispatch_center", "lookup": 0, "stream": f"s-{owner}",
            "mode": mode, "owner": owner, "hint": hint, "stale": hint not in ("", owner),
            "started_s": 1000.0, "seconds": "" if seconds is None else seconds,
            "messages": messages, "retransmissions": retransmissions, "fell_back": fell_back,
            "outcome": outcome, "center": owner if outcome == "found" else "",
            "found_node": MEDIA if outcome == "found" else ""}


def write_run(run_dir: Path, lookups: list[dict], replies=REPLIES) -> Path:
    """A run directory holding what :func:`measure` reads: the resolved scenario's nodes (the
    three centers and a media node) and the tables ``lookups`` and ``lookup_replies``."""
    nodes = {name: {"role": "dispatch", "kind": None, "labels": {"region": region},
                    "interfaces": {"eth1": f"{address}/24"}}
             for name, (region, address) in CENTERS.items()}
    nodes["cn1"] = {"role": "edge", "kind": "media", "labels": {"region": "cn"},
                    "interfaces": {"eth1": f"{MEDIA}/24"}}
    (run_dir / "tables").mkdir(parents=True)
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump({"topology": {"nodes": nodes}}))
    with open(run_dir / "tables" / "lookups.csv", "w", newline="") as stream:
        table = csv.DictWriter(stream, fieldnames=list(lookup("dcn", "hint", DUS, 0, 0)))
        table.writeheader()
        table.writerows(lookups)
    with open(run_dir / "tables" / "lookup_replies.csv", "w", newline="") as stream:
        table = csv.writer(stream)
        table.writerow(["node", "agent", "lookup", "center", "attempt", "found", "rtt_ms",
                        "late"])
        table.writerows([node, "dispatch_center", 0, center, 0, False, rtt, False]
                        for node, center, rtt in replies)
    return run_dir


def test_the_cell_sets_the_mode_rate_stale_share_loss_and_duration():
    cell = Cell("dispatch-lookup", "stale", "stale_share", "0.3", "hint", 0, 7,
                Parameters(stale_share=0.3, rate=2.5, border_loss_p="3%"))
    assert variables(cell) == {"EDGEBED_LOOKUP_MODES": "hint", "EDGEBED_LOOKUP_RATE": "2.5",
                               "EDGEBED_LOOKUP_STALE": "0.3", "EDGEBED_BORDER_LOSS_P": "3%",
                               "EDGEBED_DURATION": "14s",
                               # the scenario's cn-eu cut moved to the run's end
                               "EDGEBED_CUT_AT": "14s"}
    defaults = variables(Cell("dispatch-lookup", "border", "border_loss_p", "0.5%",
                              "broadcast", 0, 7, Parameters()))
    assert defaults["EDGEBED_LOOKUP_MODES"] == "broadcast"
    assert (defaults["EDGEBED_LOOKUP_RATE"], defaults["EDGEBED_LOOKUP_STALE"]) == ("4", "0")
    assert registered()["dispatch_lookup"].emulated


def test_a_fresh_hint_at_the_pairs_round_trip_is_the_models_lookup(tmp_path):
    row = measure(write_run(tmp_path, [lookup("dcn", "hint", DUS, 0.1605, 2, hint=DUS)]))
    assert row["model_messages_per_lookup"] == row["messages_per_lookup"] == 2
    assert row["model_ms_mean"] == pytest.approx(160)  # the median of 150, 172 and 160
    assert row["over_model_ms_mean"] == pytest.approx(0.5)
    assert row["within_10ms_share"] == 1.0 and row["fallback_share"] == 0.0
    assert (row["rtt_cn_us_ms"], row["rtt_cn_eu_ms"], row["rtt_us_eu_ms"]) == (160, 180, 70)
    # Every metric but the run's record, which the cell's run adds from the run's summary.
    assert set(row) == {metric.name for metric in METRICS} - {m.name for m in EMULATED_METRICS}
    # 25 ms slower than the model is not within 10 ms of it.
    late = measure(write_run(tmp_path / "late", [lookup("dcn", "hint", DUS, 0.185, 2,
                                                        hint=DUS)]))
    assert late["over_model_ms_mean"] == pytest.approx(25) and late["within_10ms_share"] == 0


def test_a_broadcasts_model_time_is_the_owners_round_trip(tmp_path):
    # dus asks both: the owner deu answers found after 70 ms, before dcn's "not here" (160).
    near = measure(write_run(tmp_path / "near", [lookup("dus", "broadcast", DEU, 0.072, 4)]))
    assert near["model_ms_mean"] == pytest.approx(70)
    # Two queries, two replies: the late "not here" counts too.
    assert near["model_messages_per_lookup"] == 4
    # deu asks both: the owner dcn is the slower (180 against dus's 70).
    far = measure(write_run(tmp_path / "far", [lookup("deu", "broadcast", DCN, 0.181, 4)]))
    assert far["model_ms_mean"] == pytest.approx(180)
    assert far["within_10ms_share"] == 1.0


def test_a_stale_hint_costs_the_wrong_centers_round_trip_then_the_broadcast(tmp_path):
    # dcn follows a hint to deu (180 ms: not here), then asks dus, the owner (160 ms).
    row = measure(write_run(tmp_path, [lookup("dcn", "hint", DUS, 0.345, 4, hint=DEU,
                                              fell_back=True)]))
    assert row["model_ms_mean"] == pytest.approx(180 + 160)
    assert row["model_messages_per_lookup"] == 4
    assert row["over_model_ms_mean"] == pytest.approx(5)
    assert row["fallback_share"] == 1.0


def test_failed_and_unfinished_lookups_are_counted_not_timed(tmp_path):
    row = measure(write_run(tmp_path, [
        lookup("dcn", "hint", DUS, 0.160, 2, hint=DUS),
        # Three retransmissions to dus, none answered.
        lookup("dcn", "hint", DUS, None, 4, hint=DUS, outcome="failed", retransmissions=3),
        lookup("deu", "broadcast", DUS, None, 2, outcome="unfinished"),
        lookup("dus", "broadcast", DEU, 0.075, 4, outcome="nowhere")]))
    assert (row["lookups_finished"], row["lookups_failed"], row["lookups_unfinished"],
            row["lookups_nowhere"]) == (2, 1, 1, 1)
    # Timed: the found one and the nowhere one; the failed one costs messages.
    assert row["lookup_ms_mean"] == pytest.approx((160 + 75) / 2)
    assert row["lookup_ms_p50"] == pytest.approx((160 + 75) / 2)
    assert row["messages_per_lookup"] == pytest.approx((2 + 4 + 4) / 3)
    assert row["retransmissions_per_lookup"] == pytest.approx(1.0)
    # The model asked the two answered lookups (it finds the stream at its owner).
    assert row["model_ms_mean"] == pytest.approx((160 + 70) / 2)
    assert row["model_messages_per_lookup"] == pytest.approx((2 + 4) / 2)


def test_without_every_pairs_round_trip_there_is_no_model(tmp_path):
    replies = [reply for reply in REPLIES if {reply[0], reply[1]} != {"dus", DEU}
               and {reply[0], reply[1]} != {"deu", DUS}]
    row = measure(write_run(tmp_path, [lookup("dcn", "hint", DUS, 0.160, 2, hint=DUS)],
                            replies))
    assert math.isnan(row["rtt_us_eu_ms"]) and row["rtt_cn_us_ms"] == 160
    assert math.isnan(row["model_ms_mean"]) and math.isnan(row["within_10ms_share"])
    assert row["lookup_ms_mean"] == pytest.approx(160)
    # A run with no lookup at all measures nothing, and says so.
    empty = measure(write_run(tmp_path / "empty", [], []))
    assert empty["lookups_finished"] == 0 and math.isnan(empty["lookup_ms_mean"])


def test_the_remarks_compare_the_hint_with_the_broadcast_per_value():
    base = {name: 0.0 for name in (metric.name for metric in METRICS)}
    base.update(rtt_cn_us_ms=160.0, rtt_cn_eu_ms=180.0, rtt_us_eu_ms=70.0,
                lookups_finished=150.0)
    rows = [base | dict(sweep="stale", parameter="stale_share", value=value, policy=policy,
                        repetition=repetition, messages_per_lookup=messages,
                        lookup_ms_mean=ms, fallback_share=fallback)
            for value, hint_messages, fallback in (("0.3", 2.6, 0.3), ("0", 2.0, 0.0))
            for policy, messages, ms in (("hint", hint_messages, 150.0),
                                         ("broadcast", 4.0, 140.0))
            for repetition in (0, 1)]
    found = remarks(pd.DataFrame(rows))
    assert len(found) == 2 and found[0].startswith("stale, stale_share = 0, ")
    assert "2.60 against 4.00 messages per lookup" in found[1]
    assert "150 against 140 ms on average" in found[1] and "30% of the hints" in found[1]
    assert "means of 2 and 2 runs" in found[0] and "cn-us 160, cn-eu 180, us-eu 70" in found[0]


def test_the_experiment_file_sweeps_stale_hints_and_border_loss():
    loaded = experiment.load(ROOT / "experiments" / "dispatch" / "lookup.yaml")
    cells = list(loaded.cells())
    assert len(cells) == 2 * 2 * 2 * 2  # sweeps x values x policies x repetitions
    stale = {c.parameters.stale_share for c in cells if c.sweep == "stale"}
    border = {(c.parameters.border_loss_p, c.parameters.stale_share) for c in cells
              if c.sweep == "border"}
    assert stale == {0.0, 0.3} and border == {("0.5%", 0.0), ("3%", 0.0)}
    assert {c.policy for c in cells} == {"broadcast", "hint"}
