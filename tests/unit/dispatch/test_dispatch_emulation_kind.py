"""The dispatch_emulation kind: which scenario variables each policy sets (a cell's run is the
experiment's; tests/integration/dispatch/test_dispatch_runs.py runs the scenario itself)."""

from __future__ import annotations

import csv
import json

import pandas as pd
import pytest

from experiments.kinds import registered
from experiments.kinds.dispatch.emulation import Parameters, variables
from experiments.kinds.dispatch.emulation_measures import (PRE_CUT_S, STALL_S,
                                                           early_stall_viewers, failover)
from experiments.kinds.dispatch.emulation_remarks import (fixed_rows, freeze_table,
                                                          goals_tables, remarks, verdict)
from experiments.playout import playout
from experiments.playout_columns import FRAME_FATES, playout_metrics
from experiments.sweeps.kinds import Cell, Table


def cell(policy: str, **parameters) -> Cell:
    return Cell("dispatch-test", "sweep", "database_error", "0.3", policy, 0, 7,
                Parameters(**parameters))


def test_each_policy_switches_one_mechanism_against_its_absence():
    database, probe = (variables(cell(p, database_error=0.3)) for p in ("database", "probe"))
    assert (database["EDGEBED_CANDIDATES"], probe["EDGEBED_CANDIDATES"]) == ("1", "3")
    assert database["EDGEBED_DATABASE_ERROR"] == probe["EDGEBED_DATABASE_ERROR_ABROAD"] == "0.3"
    assert database["EDGEBED_RELAYS"] == probe["EDGEBED_RELAYS"] == "false"
    direct, relay = (variables(cell(p, database_error=0.3, border_loss_p="1.5%"))
                     for p in ("direct", "relay"))
    assert (direct["EDGEBED_RELAYS"], relay["EDGEBED_RELAYS"]) == ("false", "true")
    # The relay comparison probes with a right database: only the back-source path differs.
    assert direct["EDGEBED_DATABASE_ERROR"] == relay["EDGEBED_DATABASE_ERROR_ABROAD"] == "0"
    assert direct["EDGEBED_BORDER_LOSS_P"] == "1.5%" and direct["EDGEBED_DATABASE_SEED"] == "7"
    assert registered()["dispatch_emulation"].emulated
    recompute, hot = (variables(cell(p)) for p in ("recompute", "hot_standby"))
    assert (recompute["EDGEBED_FAST_FAILOVER"], hot["EDGEBED_FAST_FAILOVER"]) == ("false", "true")
    assert probe["EDGEBED_FAST_FAILOVER"] == relay["EDGEBED_FAST_FAILOVER"] == "true"
    assert recompute["EDGEBED_RELAYS"] == hot["EDGEBED_RELAYS"] == "false"
    # Loss recovery is a parameter of any cell, off unless asked for.
    assert probe["EDGEBED_NACK"] == "false"
    assert variables(cell("relay", nack=True))["EDGEBED_NACK"] == "true"


def write_run(run_dir, arrivals: dict[str, dict[int, float]], cut_at: str = "9s",
              origin: float = 1000.0) -> None:
    """A run directory holding what :func:`failover` reads: the resolved scenario's schedule,
    the timeline origin and the frames table (every frame listed arrived whole)."""
    (run_dir / "tables").mkdir(parents=True)
    (run_dir / "scenario.yaml").write_text(
        f"schedule:\n  - {{at: {cut_at}, action: link_down, link: 3}}\n")
    (run_dir / "summary.json").write_text(json.dumps({"timeline_origin_s": origin}))
    with open(run_dir / "tables" / "frames.csv", "w", newline="") as stream:
        table = csv.writer(stream)
        table.writerow(["node", "frame", "complete", "arrived_s"])
        for node, frames in arrivals.items():
            table.writerows([node, frame, True, f"{origin + t:.6f}"]
                            for frame, t in frames.items())


def test_failover_measures_the_viewers_outage_across_the_cut(tmp_path):
    # 25 frames a second at the ingest node from 7 s to 13 s, 90 ms later at the viewer over
    # the direct link until the cut at 9 s kills frames 48-50 (at cn0 8.92-9.0 s, in flight);
    # from frame ``back`` on they come over the standby route, 115 ms.
    ingest = {n: 7 + n / 25 for n in range(151)}
    for name, back in (("hot", 51), ("recomputed", 63)):
        viewer = {n: t + (0.09 if n < 48 else 0.115) for n, t in ingest.items()
                  if not 48 <= n < back}
        write_run(tmp_path / name, {"cn0": ingest, "euv1": viewer})
        cut = failover(tmp_path / name)
        # From frame 47's arrival (8.97 s) to frame back's; cn0 got frames 48 on from 8.9 s.
        assert abs(cut.gap_s - (7 + back / 25 + 0.115 - 8.97)) < 1e-6, (name, cut)
        assert cut.frames_lost == back - 48, (name, cut)
        # Receiving every 40 ms before the cut (the last frame 30 ms before it), the ingest
        # node all along: a clean run.
        assert abs(cut.viewer_wait_before_s - 0.04) < 1e-6, cut
        assert abs(cut.ingest_wait_s - 0.04) < 1e-6 and cut.invalid is None, cut
    # A viewer that never gets another frame waits to the window's end (4 s after the cut).
    write_run(tmp_path / "dead", {"cn0": ingest, "euv1": {n: ingest[n] + 0.09 for n in range(48)}})
    cut = failover(tmp_path / "dead")
    assert abs(cut.gap_s - (13 - 8.97)) < 1e-6 and cut.frames_lost == 151 - 48
    assert cut.invalid is None  # it was receiving before the cut: this is the failover's


def test_a_viewer_stalled_before_the_cut_makes_the_run_invalid(tmp_path):
    # The run in reports/dispatch/failover that read 4271 ms: the viewer's last whole frame
    # came 2.9 s before the cut (the emulator's relays held frames up to 1.4 s), so its wait
    # across the cut starts long before the link went down.
    ingest = {n: 6 + n / 25 for n in range(176)}
    viewer = {n: t + (0.09 if t < 9 else 0.115) for n, t in ingest.items()
              if t < 6.1 or t > 10.3}
    write_run(tmp_path / "stalled", {"cn0": ingest, "euv1": viewer})
    cut = failover(tmp_path / "stalled")
    assert cut.viewer_wait_before_s == pytest.approx(PRE_CUT_S), cut
    assert cut.invalid and "euv1 got no whole frame for 1000 ms" in cut.invalid, cut
    assert "cn0" not in cut.invalid, cut  # the ingest node received all along
    # The ingest node stalling (upstream of the cut, which cannot cause it) flags it too,
    # though the viewer got every frame the ingest node did.
    gap = {n: t for n, t in ingest.items() if not 9.5 < t < 10.0}
    write_run(tmp_path / "source", {"cn0": gap, "euv1": {n: t + 0.09 for n, t in gap.items()}})
    cut = failover(tmp_path / "source")
    assert cut.frames_lost == 0 and cut.viewer_wait_before_s == pytest.approx(0.04), cut
    assert cut.invalid and cut.invalid.startswith("cn0, the ingest node, got no whole frame "
                                                   "for 520 ms"), cut
    assert cut.ingest_wait_s > STALL_S


def test_the_remarks_leave_flagged_runs_out_of_the_means_and_say_why():
    row = dict(sweep="cut", parameter="border_loss_p", value="0.5%", seed=7,
               uninterrupted_viewers=6, stalls=0, stall_ms=0.0, startups_under_1s=5,
               startup_max_ms=1200.0, startup_mean_ms=1000.0, first_frame_mean_ms=450.0,
               viewers=6)
    valid = dict(failover_valid=1, failover_wait_before_ms=50.0, failover_ingest_wait_ms=60.0,
                 failover_reroute_ms=30.0)
    results = pd.DataFrame([
        row | valid | dict(policy="recompute", repetition=0, failover_gap_ms=150.0,
                           failover_frames_lost=6, failover_measured_gap_ms=150.0,
                           failover_measured_frames_lost=6),
        row | valid | dict(policy="hot_standby", repetition=0, failover_gap_ms=130.0,
                           failover_frames_lost=2, failover_measured_gap_ms=130.0,
                           failover_measured_frames_lost=2),
        row | dict(policy="hot_standby", repetition=1, failover_valid=0,
                   failover_gap_ms=float("nan"), failover_frames_lost=float("nan"),
                   failover_measured_gap_ms=4271.0, failover_measured_frames_lost=33,
                   failover_wait_before_ms=1000.0, failover_ingest_wait_ms=110.0,
                   failover_reroute_ms=90.0)])
    [played, goals, startup, summary, compared, runs] = remarks(results)
    assert all(isinstance(table, Table) for table in (played, goals, startup, summary, runs))
    # Per policy over its runs, every run counted, flagged or not.
    at = "cut: border_loss_p = 0.5%"
    assert played.rows[1] == (at, "hot_standby", "2", "12", "12", "0", "0", "10", "1200",
                              "450"), played.rows
    assert goals.rows[2][:6] == (at, "hot_standby", "never stalled or froze", "12", "12",
                                 "100%"), goals.rows
    # The failover over the valid runs only, the flagged one counted apart.
    assert summary.rows == (
        ("border_loss_p = 0.5%", "hot_standby", "1", "1", "130", "130", "130", "2", "30-30"),
        ("border_loss_p = 0.5%", "recompute", "1", "0", "150", "150", "150", "6", "30-30")), \
        summary.rows
    assert compared == ("At border_loss_p = 0.5%: too few valid runs to compare hot standby "
                        "with recomputation."), compared
    assert len(runs.rows) == 3 and sum(row[-1] != "valid" for row in runs.rows) == 1, runs
    [flagged] = [row for row in runs.rows if row[-1] != "valid"]
    assert flagged[1:6] == ("hot_standby", "1", "7", "4271", "33"), flagged
    assert "euv1 got no whole frame for 1000 ms in the 1 s before the cut" in flagged[-1]


def test_the_verdict_says_whether_hot_standby_is_faster_beyond_the_runs_spread():
    def runs(hot, recomputed):
        return pd.DataFrame([dict(policy=policy, failover_valid=1, failover_gap_ms=gap)
                             for policy, gaps in (("hot_standby", hot), ("recompute", recomputed))
                             for gap in gaps])
    assert verdict(runs([120, 125, 130], [400, 450, 500])).startswith(
        "hot standby re-sources faster: mean gap 125 ± 12 ms with hot standby against 450 ± 124 "
        "ms recomputed")
    assert verdict(runs([134, 141, 150], [133, 139, 167])).startswith(
        "hot standby is not shown faster than recomputation at this scale")


def test_the_goals_give_the_shares_of_views_against_livenets_and_where_startup_went():
    def runs(uninterrupted, started, startup_ms=(900.0, 1100.0), first_ms=(400.0, 350.0)):
        return pd.DataFrame([dict(sweep="border-loss", parameter="border_loss_p", value="1.5%",
                                  policy="relay", viewers=6, uninterrupted_viewers=free,
                                  startups_under_1s=fast, startup_mean_ms=startup,
                                  first_frame_mean_ms=first)
                             for free, fast, startup, first in zip(uninterrupted, started,
                                                                    startup_ms, first_ms)])
    shares, startup = goals_tables(runs((6, 5), (6, 6)))
    # 11 of 12 is 92%, under 98%; 12 of 12 meets 95% though its interval reaches down to 74%.
    assert shares.rows == (
        ("border-loss: border_loss_p = 1.5%", "relay", "never stalled or froze", "11", "12", "92%", "62-100%", "98%",
         "not met"),
        ("border-loss: border_loss_p = 1.5%", "relay", "started within 1 s", "12", "12", "100%", "74-100%",
         "95%", "met")), shares.rows
    # Startup 1000 ms a mean: first whole frame 375 ms, then 125 ms to the I frame, 500 ms
    # of playout delay.
    assert startup.rows == (("border-loss: border_loss_p = 1.5%", "relay", "1000", "375", "125", "500"),)
    # Exactly at the goal counts as met, one view short of it does not; no startup recorded,
    # no account of it.
    [shares] = goals_tables(pd.DataFrame([dict(sweep="s", parameter="p", value="0",
                                               policy="relay", viewers=50,
                                               uninterrupted_viewers=49, startups_under_1s=47,
                                               startup_mean_ms=float("nan"),
                                               first_frame_mean_ms=float("nan"))]))
    assert shares.rows == (
        ("s: p = 0", "relay", "never stalled or froze", "49", "50", "98%", "89-100%", "98%", "met"),
        ("s: p = 0", "relay", "started within 1 s", "47", "50", "94%", "83-99%", "95%",
         "not met")), shares.rows


def test_the_playout_columns_count_views_from_what_each_viewer_got():
    def frames(numbers, late=lambda n: 0.1):
        # 25 frames a second from 100 s, every 50th an I frame.
        return [(n, 100 + n / 25 + late(n), n % 50 == 0) for n in numbers]
    steady = playout(frames(range(0, 200)), 25, 0.5, requested_s=99.8)  # starts in 0.8 s
    # Joined at 100.5 s, its first I frame (50) at 102.1 s: startup 2.1 s. Frame 120 0.3 s
    # late, the buffer 0.5 s: in time; from frame 150 on 0.7 s late, nothing there at 150's
    # slot: a stall of 0.2 s.
    late = playout(frames(range(20, 200),
                          lambda n: 0.4 if n == 120 else 0.8 if n >= 150 else 0.1), 25, 0.5,
                   requested_s=100.5)
    # Frame 60 lost: 61-99 undecodable, 40 slots (1.6 s) frozen.
    frozen = playout(frames([n for n in range(200) if n != 60]), 25, 0.5, requested_s=99.8)
    no_key = playout(frames(range(1, 40)), 25, 0.5, requested_s=100.0)  # no I frame came
    columns = playout_metrics([steady, late, frozen, no_key])
    assert (late.stalls, late.stall_s, late.freezes) == (1, pytest.approx(0.2), 0)
    # Neither stalled nor froze: steady alone (a view never shown is not stall-free).
    assert columns["uninterrupted_viewers"] == 1
    assert (columns["stalls"], columns["stall_ms"]) == (1, pytest.approx(200))
    assert (columns["freezes"], columns["freeze_ms"]) == (1, pytest.approx(1600))
    # Watched: steady 8 s, late 150 frames (6 s) and its 0.2 s stall, frozen 8 s.
    assert columns["watch_ms"] == pytest.approx(8000 + 6200 + 8000)
    assert columns["freeze_share_pct"] == pytest.approx(100 * 1600 / 22200)
    assert [columns[f"frames_{fate}"] for fate in FRAME_FATES] == [550, 510, 1, 0, 39]
    assert columns["startups_under_1s"] == 2
    assert columns["startup_max_ms"] == pytest.approx(2100)
    assert columns["startup_mean_ms"] == pytest.approx((800 + 2100 + 800) / 3)
    # First whole frames: 0.3 s, 0.4 s, 0.3 s and 0.14 s after the joins.
    assert columns["first_frame_mean_ms"] == pytest.approx((300 + 400 + 300 + 140) / 4)
    assert playout_metrics([])["uninterrupted_viewers"] == 0
    # Stalls right after startup (what a GOP cache's burst could cause): late's comes 4 s
    # after its first frame showed, a view whose frames from 60 on are 0.7 s late 0.4 s after.
    early = playout(frames(range(20, 200), lambda n: 0.8 if n >= 60 else 0.1), 25, 0.5,
                    requested_s=100.5)
    assert early.first_stall_s - early.shown_s == pytest.approx(0.4)
    assert early_stall_viewers([steady, late, no_key]) == 0
    assert early_stall_viewers([steady, late, early]) == 1


def test_the_freeze_table_gives_shares_over_the_runs_with_their_intervals():
    def run(policy, share, freezes, freeze_ms, lost, late, undecodable):
        return dict(sweep="border-loss", parameter="border_loss_p", value="1.5%",
                    policy=policy, viewers=6, freezes=freezes, freeze_ms=freeze_ms,
                    freeze_share_pct=share, frames_watched=1000, frames_lost=lost,
                    frames_late=late, frames_undecodable=undecodable)
    [table] = freeze_table(pd.DataFrame([run("relay", 2.0, 1, 1000.0, 10, 0, 40),
                                         run("relay", 4.0, 3, 2000.0, 30, 2, 60),
                                         run("direct", 5.0, 2, 3000.0, 50, 0, 70)]))
    # Two runs: the Student-t quantile at 1 degree of freedom is 12.706 and the standard
    # error of 2% and 4% is 1%, so 3% ± 12.7%, cut at 0; the frames lost, 1% and 3%, the same.
    assert table.rows == (
        ("border-loss: border_loss_p = 1.5%", "relay", "2", "12", "4", "3.0", "3.0% (0.0-15.7%)", "2000",
         "40", "2", "100", "2.0% (0.0-14.7%)"),
        ("border-loss: border_loss_p = 1.5%", "direct", "1", "6", "2", "3.0", "5.0% (one run)", "1000",
         "50", "0", "70", "5.0% (one run)")), table.rows
    # Rows measured before the player decoded have no freezes: no table.
    assert freeze_table(pd.DataFrame([run("relay", *[float("nan")] * 6)])) == []


def test_the_relays_fixed_share_of_poor_viewers_is_put_against_half_with_and_without_flags():
    """Fails if the runs whose emulator fell behind are not told apart, or the share is taken
    of totals over unequal numbers of runs."""
    def run(policy, poor, ok):
        return dict(policy=policy, poor_viewers=poor, network_kept_up=ok)
    # Direct: 2 poor viewers a run; relay: 1, but 6 in a run whose impairment relays fell
    # behind.
    group = pd.DataFrame([run("direct", 2, 1), run("direct", 2, 1), run("direct", 2, 1),
                          run("relay", 1, 1), run("relay", 6, 0), run("relay", 1, 1)])
    rows = fixed_rows("x = 1", group, "direct", "relay")
    # Over every run 2.67 a run against 2 is none fixed; over the clean runs 1 against 2,
    # half (per run: the clean relay runs are two, the direct three).
    assert rows == [("x = 1", "every run", "3", "3", "2.67", "2.00", "-33%", "not met"),
                    ("x = 1", "the runs whose network kept up", "2", "3", "1.00", "2.00", "50%",
                     "met")], rows
    # Under half is not met; no second row when every run kept up; nothing poor to start
    # with is said as such.
    assert fixed_rows("x = 1", pd.DataFrame([run("direct", 3, 1), run("relay", 2, 1)]),
                      "direct", "relay") == [("x = 1", "every run", "1", "1", "2.00", "3.00",
                                              "33%", "not met")]
    [(*_, nothing, anchor)] = fixed_rows(
        "x = 1", pd.DataFrame([run("direct", 0, 1), run("relay", 0, 1)]), "direct", "relay")
    assert (nothing, anchor) == ("no poor viewer with direct", "–")
