"""The dispatch_emulation kind: which scenario variables each policy sets (a cell's run is the
experiment's; tests/integration/test_dispatch_runs.py runs the scenario itself)."""

from __future__ import annotations

import csv
import json

from experiments.kinds import registered
from experiments.kinds.dispatch_emulation import Parameters, failover, variables
from experiments.sweeps.kinds import Cell


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
    # 25 frames a second at the ingest node from 8 s to 13 s, 90 ms later at the viewer over
    # the direct link until the cut at 9 s kills frames 23-25 (at cn0 8.92-9.0 s, in flight);
    # from frame ``back`` on they come over the standby route, 115 ms.
    ingest = {n: 8 + n / 25 for n in range(126)}
    for name, back in (("hot", 26), ("recomputed", 38)):
        viewer = {n: t + (0.09 if n < 23 else 0.115) for n, t in ingest.items()
                  if not 23 <= n < back}
        write_run(tmp_path / name, {"cn0": ingest, "euv1": viewer})
        gap, lost = failover(tmp_path / name)
        # From frame 22's arrival (8.97 s) to frame back's; cn0 got frames 23 on from 8.9 s.
        assert abs(gap - (8 + back / 25 + 0.115 - 8.97)) < 1e-6, (name, gap)
        assert lost == back - 23, (name, lost)
    # A viewer that never gets another frame waits to the window's end (4 s after the cut).
    write_run(tmp_path / "dead", {"cn0": ingest, "euv1": {n: ingest[n] + 0.09 for n in range(23)}})
    gap, lost = failover(tmp_path / "dead")
    assert abs(gap - (13 - 8.97)) < 1e-6 and lost == 126 - 23
