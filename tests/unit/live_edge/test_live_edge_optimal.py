"""Optimal with the paper's objective (sum of Y_v QoE_v, an unserved viewer at 0) and the
served-first variant, on instances whose optimum is worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controller.policies.live_edge.allocators import ALLOCATORS, optimal
from controller.policies.live_edge.model import (MBPS, EdgeServer, Instance, Viewer, evaluate,
                                                 generate)

# One server, rungs 1 and 2 Mbps from a 2 Mbps source, the default weights: a = 5, G = 50
# ms/Mbps, beta = 300 ms, gamma = 1, U = ln(min(R, R*) / 1 Mbps), alpha = 0.1.
# near (delay 100 ms, danmaku 1/s, gifts e - 1 so Y = 1.1, prefers 2 Mbps):
#   2 Mbps: L = 100 ms, Q = 2 (1 - 1/3) = 4/3, U = ln 2: QoE = 20/3 + ln 2
#   1 Mbps: L = 150 ms, Q = 2 (1 - 1/2) = 1, U = 0:     QoE = 5
# far (delay 500 ms, danmaku 1/s, no gifts so Y = 1, prefers 1 Mbps):
#   2 Mbps: L = 500 ms, Q = 2 (1 - 5/3) = -4/3, U = 0:  QoE = -20/3
#   1 Mbps: L = 550 ms, Q = 2 (1 - 11/6) = -5/3:        QoE = -25/3
NEAR_AT_TOP = 20 / 3 + math.log(2)
FAR_AT_TOP, FAR_AT_BOTTOM = -20 / 3, -25 / 3
NEAR_WEIGHT = 1.1


def instance(bandwidth_mbps: float) -> Instance:
    viewers = (Viewer("near", {"a": 0.1}, 2 * MBPS, danmaku_rate=1.0, gifts=math.e - 1),
               Viewer("far", {"a": 0.5}, 1 * MBPS, danmaku_rate=1.0))
    return Instance(viewers, (EdgeServer("a", bandwidth_mbps * MBPS, 100.0),),
                    ladder=(1 * MBPS, 2 * MBPS), source=2 * MBPS)


@pytest.mark.parametrize("bandwidth", [3.0, 4.0])
def test_the_papers_objective_leaves_out_a_viewer_whose_qoe_is_negative(bandwidth):
    problem = instance(bandwidth)
    allocation = optimal(problem, np.random.default_rng(0))
    assert allocation.solver.optimal
    assert dict(allocation.assignment) == {"near": ("a", 2 * MBPS)}
    assert allocation.unassigned == ("far",)
    assert evaluate(problem, allocation).objective == pytest.approx(NEAR_WEIGHT * NEAR_AT_TOP)


@pytest.mark.parametrize("bandwidth, far_rung, expected", [
    # 3 Mbps: both served only as 2 + 1; near at the top is worth more than far at the top.
    (3.0, 1 * MBPS, NEAR_WEIGHT * NEAR_AT_TOP + FAR_AT_BOTTOM),
    (4.0, 2 * MBPS, NEAR_WEIGHT * NEAR_AT_TOP + FAR_AT_TOP),
])
def test_served_first_serves_both_then_maximises_the_objective(bandwidth, far_rung, expected):
    problem = instance(bandwidth)
    allocation = ALLOCATORS["optimal_served_first"](problem, np.random.default_rng(0))
    assert allocation.solver.optimal
    assert dict(allocation.assignment) == {"near": ("a", 2 * MBPS), "far": ("a", far_rung)}
    assert evaluate(problem, allocation).objective == pytest.approx(expected)


def test_the_papers_optimum_is_at_least_every_allocators_objective():
    for seed in range(8):
        problem = generate(seed, 10 + seed, 2)
        best = optimal(problem, np.random.default_rng(0))
        assert best.solver.optimal
        top = evaluate(problem, best).objective
        for name in ("lua", "df", "mhcp", "random", "optimal_served_first"):
            other = evaluate(problem, ALLOCATORS[name](problem, np.random.default_rng(seed)))
            assert top >= other.objective - 1e-6 * max(1.0, abs(other.objective))


def test_an_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="objective"):
        optimal(instance(3.0), np.random.default_rng(0), objective="most")
