"""ai_access's fluid cluster model and its experiment kind."""

from __future__ import annotations

import numpy as np
import pytest

from agents.ai_access.formats import AI_DATA
from controller.policies.ai_access.model import (PACKET_OVERHEAD, Receiver, Traffic,
                                                 period_outcome, simulate)
from controller.policies.ai_access.resources import Port, ServerSpec
from experiments.kinds.ai_access.model import KIND, Parameters, run_cell
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
