"""The surveillance_emulation kind: the scenario a cell runs (its clients replaced by the
request trace) and the figures read off a run's records (a cell's run is the experiment's;
tests/integration/surveillance/test_surveillance_runs.py runs the scenario itself)."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import yaml

from experiments import scenarios
from experiments.kinds import registered
from experiments.kinds.surveillance.emulation import (Parameters, heavy_spells,
                                                      traced_scenario)


def test_the_trace_becomes_one_client_per_request_asking_for_its_camera(tmp_path):
    parameters = Parameters(requests=12, cameras=6, hot=1, horizon_s=30, duration=40)
    document = traced_scenario(parameters, 7)
    assert document == traced_scenario(parameters, 7)  # the same trace for every policy
    trace = parameters.trace(7)
    viewers = [entry for entry in document["workload"] if entry["agent"] == "viewer"]
    assert len(viewers) == 12
    for i, (viewer, camera, at) in enumerate(zip(viewers, trace.camera, trace.arrival_s), 1):
        assert viewer["nodes"] == [f"client{i}"]
        assert viewer["params"]["pull_stream"] == camera + 1
        assert document["topology"]["nodes"][f"client{i}"]["labels"]["camera"] == camera + 1
        assert abs(float(viewer["start"][:-1]) - (1 + at)) < 1e-3
    # Every camera streams, from exactly one host, and the hot one is asked for most.
    streamed = Counter(entry["params"]["stream"] for entry in document["workload"]
                       if entry["agent"] == "camera")
    assert streamed == Counter(range(1, 7))
    assert Counter(v["params"]["pull_stream"] for v in viewers).most_common(1)[0][0] == 1
    # ... and it is a valid scenario: 12 clients, the nodes and camera hosts kept.
    path = tmp_path / "traced.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    hosts = scenarios.load(path).document.topology.nodes
    assert sum(str(name).startswith("client") for name in hosts) == 12
    assert {"camA", "camB", "node1", "node2", "node3"} <= set(map(str, hosts))
    assert registered()["surveillance_emulation"].emulated


def test_a_heavy_spell_is_counted_once_with_its_length():
    samples = pd.DataFrame({"time_s": [0, 1, 2, 3, 4, 0, 1, 2, 3, 4],
                            "node": ["a"] * 5 + ["b"] * 5,
                            "load": [0.95, 0.95, 0.5, 0.92, 0.1, 0.1, 0.2, 0.3, 0.95, 0.99]})
    assert sorted(heavy_spells(samples, 0.9)) == [1, 2, 2]
