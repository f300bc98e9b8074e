"""ai_access's rotation of AI data units over the GPU servers (the cluster manager's, pure code in agents/ai_access/ai_gpu.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from agents.ai_access.ai_gpu import Grant, GpuRotation


def test_units_go_to_the_gpu_servers_in_turn_whoever_completed_them():
    rotation = GpuRotation(["g1", "g2", "g3"])
    grants = [rotation.grant(stream, unit) for unit in range(3) for stream in (4, 1)]
    assert grants == [Grant(0, "g1"), Grant(1, "g2"), Grant(2, "g3"), Grant(3, "g1"),
                      Grant(4, "g2"), Grant(5, "g3")]
    assert rotation.counts() == {"g1": 2, "g2": 2, "g3": 2}


def test_a_repeated_request_gets_its_grant_again_and_costs_no_gpu_its_turn():
    rotation = GpuRotation(["g1", "g2"])
    first = rotation.grant(7, 0)
    assert rotation.grant(7, 0) == first and rotation.repeated == 1
    assert rotation.grant(7, 1) == Grant(1, "g2")  # the rotation did not move for the repeat
    assert rotation.counts() == {"g1": 1, "g2": 1}


def test_per_gpu_the_grants_stay_within_one_of_each_other_under_any_request_order():
    rng = random.Random(3)
    rotation = GpuRotation(["a", "b", "c"])
    requests = [(rng.randrange(20), rng.randrange(30)) for _ in range(500)]
    seen: dict[tuple[int, int], Grant] = {}
    for step, request in enumerate(requests):
        grant = rotation.grant(*request)
        assert seen.setdefault(request, grant) == grant  # one unit, one GPU server
        counts = Counter(g.gpu for g in seen.values())
        assert max(counts.values()) - min(counts.get(gpu, 0) for gpu in "abc") <= 1, step
        assert grant.gpu == rotation.gpu_of(grant.sequence)
    assert sorted(g.sequence for g in seen.values()) == list(range(len(seen)))
    assert rotation.repeated == len(requests) - len(seen)


def test_only_the_remembered_grants_are_kept():
    rotation = GpuRotation(["g1", "g2"], remembered=2)
    for unit in range(3):
        rotation.grant(1, unit)
    assert list(rotation.granted) == [(1, 1), (1, 2)]
    assert rotation.grant(1, 0) == Grant(3, "g2")  # forgotten: a new grant


@pytest.mark.parametrize("gpus, remembered", [([], 10), (["g1", "g1"], 10), (["g1"], 0)])
def test_a_rotation_without_distinct_gpu_servers_is_refused(gpus, remembered):
    with pytest.raises(ValueError):
        GpuRotation(gpus, remembered)
