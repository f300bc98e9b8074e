"""ai_access's fluid cluster model and its experiment kind."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agents.ai_access.formats import AI_DATA
from controller.policies.ai_access.access import MODEL_ALLOCATORS
from controller.policies.ai_access.model import (PACKET_OVERHEAD, Receiver, Traffic,
                                                 period_outcome, simulate)
from controller.policies.ai_access.resources import Port, ServerSpec
from experiments.kinds.ai_access.model import (KIND, POLICIES, Parameters, run_cell,
                                               simulate_cell, split, trigger_table)
from experiments.sweeps.experiment import loads, repetition_seed
from experiments.sweeps.kinds import Cell

TRAFFIC = Traffic(unit_bytes=711 * 100, size_spread=0, drift=0)
WIRE = 100 * (711 + PACKET_OVERHEAD)  # bytes of one unit on the wire


def receiver(rate, cpu=1e9, queue=0, memory=1e9):
    return Receiver(ServerSpec("r", (Port("6100", rate),), memory), cpu, queue)


def test_the_models_unit_is_the_ai_terminals():
    from agents.ai_access import ai_terminal
    from controller.policies.ai_access import resources
    assert (resources.SPEC_FRAGMENTS, resources.SPEC_FRAGMENT_PAYLOAD) == (
        ai_terminal.SPEC_FRAGMENTS, ai_terminal.SPEC_FRAGMENT_PAYLOAD)


def test_the_packet_overhead_is_the_agents_header_udp_ip_and_ethernet():
    assert PACKET_OVERHEAD == AI_DATA.header_size + 8 + 20 + 14


def test_a_port_within_its_rate_loses_nothing_and_reports_the_paced_rate():
    rate = 10 * WIRE * 8 / 0.5  # ten units in the half-period window
    outcome = period_outcome(receiver(rate), TRAFFIC, {"6100": np.full(10, 71100.0)})
    assert outcome.lost == 0 and outcome.packets == 1000
    assert outcome.measurement.bandwidth["6100"] == pytest.approx(rate)
    assert outcome.measurement.memory["6100"] == pytest.approx(10 * 71100 * 2)


def test_a_port_over_its_rate_loses_the_excess_and_retransmits_in_the_rest_of_the_period():
    rate = 10 * WIRE * 8 / 0.5
    outcome = period_outcome(receiver(rate), TRAFFIC, {"6100": np.full(12, 71100.0)})
    assert outcome.lost == pytest.approx(200)
    assert outcome.residual == 0  # the second half of the period carries the 200 again
    assert outcome.measurement.bandwidth["6100"] == pytest.approx(rate)


def test_the_processing_budget_drops_what_the_receiver_cannot_take():
    outcome = period_outcome(receiver(1e12, cpu=1000, queue=100), TRAFFIC,
                             {"6100": np.full(10, 71100.0)})
    # 500 packets processed in the window plus 100 queued; 400 lost, 500 repaired after.
    assert outcome.lost == pytest.approx(400)
    assert outcome.residual == 0
    assert outcome.measurement.cpu == 1.0


def test_without_drift_and_within_capacity_nothing_is_lost_or_migrated():
    servers = [Receiver(ServerSpec(f"r{i}", (Port("6100", 1e9),), 1e9), 1e6) for i in range(3)]
    run = simulate("ai_adga", servers, Traffic(size_spread=0, drift=0), 30, 5, migrate=True)
    assert run.placed == 30
    assert all(sum(p.lost.values()) == 0 and p.migrations == 0 for p in run.periods)


def test_migration_evens_out_an_unbalanced_cluster_in_the_kind():
    parameters = Parameters(flows=300, periods=20)
    cell = lambda policy: Cell("e", "s", "flows", "300", policy, 0, 7, parameters)
    without = run_cell(cell("ai_adga_grouped"))
    with_migration = run_cell(cell("ai_adga_grouped+migration"))
    assert len(without) == 20 and set(without[0]) <= {m.name for m in KIND.metrics}
    assert sum(row["migrations"] for row in with_migration) > 0
    mean = lambda rows, key: np.mean([row[key] for row in rows[5:]])
    assert mean(with_migration, "load_cv") < mean(without, "load_cv")
    assert mean(with_migration, "loss") <= mean(without, "loss")


def test_the_kind_refuses_unknown_servers():
    with pytest.raises(ValueError, match="R1"):
        Parameters(servers={"X9": {"ports": [100], "memory": 10, "cpu": 1}})


def test_policy_names_split_into_access_and_forecast():
    assert split("ai_lc") == ("ai_lc", None)
    assert split("ai_adga_grouped+migration") == ("ai_adga_grouped", "double")
    assert split("ai_adga+reactive") == ("ai_adga", "last")
    assert set(POLICIES) == {name + suffix for name in MODEL_ALLOCATORS
                             for suffix in ("", "+migration", "+reactive")}


def test_at_400_flows_the_papers_least_connections_overloads_the_weak_server_adga_does_not():
    parameters = Parameters(flows=400, periods=1)
    placed = {policy: simulate_cell(parameters, policy, 3) for policy in ("ai_lc", "ai_adga")}
    assert placed["ai_lc"].placed == placed["ai_adga"].placed == 400
    # R4 (one 800 Mbit/s port) takes 67 of the requested 11.8 Mbit/s flows; LC gives it 100.
    lc, adga = (placed[name].periods[0].packets["R4"] for name in ("ai_lc", "ai_adga"))
    assert lc > adga
    assert placed["ai_lc"].periods[0].lost["R4"] > placed["ai_adga"].periods[0].lost["R4"]


def test_the_papers_trigger_fires_under_least_connections_at_400_flows_and_loss_falls():
    parameters = Parameters(flows=400, periods=20)
    rows = {policy: run_cell(Cell("e", "s", "flows", "400", policy, 0, 5, parameters))
            for policy in ("ai_lc", "ai_lc+migration", "ai_lc+reactive")}
    assert all(row["triggered"] == (row["spread"] > parameters.theta)
               for row in rows["ai_lc+migration"])
    assert sum(row["migrations"] for row in rows["ai_lc+migration"]) > 0
    loss = {policy: np.mean([row["loss"] for row in found[5:]]) for policy, found in rows.items()}
    assert loss["ai_lc+migration"] < loss["ai_lc"]
    assert loss["ai_lc+reactive"] < loss["ai_lc"]


def trigger_rows(fired_at: dict[float, int]):
    """Rows of a theta sweep with one period per run: ai_adga with and without migration,
    two repetitions; at each theta the repetitions listed in ``fired_at`` fire."""
    rows = []
    for theta, firing in fired_at.items():
        for repetition in range(2):
            for policy in ("ai_adga", "ai_adga+migration", "ai_adga+reactive"):
                fired = policy == "ai_adga+migration" and repetition < firing
                rows.append({"sweep": "trigger", "parameter": "theta", "value": theta,
                             "policy": policy, "repetition": repetition,
                             "loss": 0.02 if fired else 0.05, "migrations": 3 * fired,
                             "triggered": float(fired), "spread": 0.08 if fired else 0.06})
    return pd.DataFrame(rows)


def test_the_trigger_table_says_when_the_first_theta_never_fires_and_the_nearest_that_does():
    table = trigger_table(trigger_rows({0.1: 0, 0.08: 1, 0.05: 2}))
    assert "ai_adga+migration at theta = 0.1: the trigger fired in 0 of 2 periods" in \
        table.caption
    assert "peaking at 0.060; loss 5.00% without migration, 5.00% with" in table.caption
    assert "The nearest theta at which it fired in every repetition: 0.05." in table.caption
    assert [row[:3] for row in table.rows] == [("0.1", "ai_adga", "0 of 2"),
                                               ("0.08", "ai_adga", "1 of 2"),
                                               ("0.05", "ai_adga", "2 of 2")]
    assert table.rows[1][3] == "1 of 2"
    assert table.rows[1][6:] == ("5.00%", "5.00%", "3.50%")


def test_the_trigger_table_says_when_no_theta_fires_in_every_repetition():
    table = trigger_table(trigger_rows({0.1: 0, 0.05: 1}))
    assert "At no theta of the sweep did it fire in every repetition." in table.caption


def test_figures_over_time_are_the_repetitions_means_per_server():
    experiment = loads("""
name: tiny
kind: ai_access_model
seed: 4
repetitions: 2
policies: [ai_lc, ai_lc+migration]
base: {periods: 3}
sweeps:
  - {name: concurrency, vary: flows, values: [40]}
""")
    [figure] = KIND.figures(experiment)
    sweep = experiment.sweeps[0]
    seeds = [repetition_seed(4, "concurrency", "40", repetition) for repetition in range(2)]
    runs = [simulate_cell(sweep.parameters[0], "ai_lc+migration", seed) for seed in seeds]
    loads_with = figure.panels[1]
    assert loads_with.title == "load degree L_i, ai_lc+migration"
    periods, r4 = loads_with.lines["R4"]
    assert list(periods) == [1, 2, 3]
    assert r4 == pytest.approx(np.mean([[p.load["R4"] for p in run.periods] for run in runs],
                                       axis=0))
    assert len(figure.panels) == 4 and set(loads_with.lines) == {"R1", "R2", "R3", "R4"}


def test_the_reason_for_no_change_names_the_values_where_migration_stayed_idle():
    why = KIND.claims["migration_loss"].why
    cells = pd.DataFrame([
        {"parameter": "flows", "value": value, "policy": "ai_adga_grouped+migration",
         "repetition": repetition, "migrations": moved, "triggered": moved / 10,
         "spread": spread}
        for value, moved, spread in (("300", 2.0, 0.12), ("400", 0.0, 0.06))
        for repetition in range(2)])
    reason = why(None, cells)
    assert reason.startswith("ai_adga_grouped+migration migrated nothing at flows = 400: "
                             "trigger fired in 0% of periods, mean LSD of the forecasts 0.060.")
    assert "300" not in reason
    assert why(None, cells[cells["value"] == "300"]) == ""
