"""The run warns about a wire whose traffic nears what its relay kind was measured to carry
accurately (topologies.impairments.relay.RELAY_LIMITS), one way or both ways."""

from types import SimpleNamespace

import pytest

from experiments import scenarios
from topologies.impairments.control import LinkControl
from topologies.impairments.relay import COMPILED, PYTHON, RELAY_LIMITS, RelayLimit

WIRED = """
name: wired
topology:
  nodes:
    a: {role: viewer}
    b: {role: edge}
  links:
    - {endpoints: ["a:eth1", "b:eth1"], delay: 5ms}
"""


def warnings_for(tmp_path, kind: str, forward_pps: float, reverse_pps: float) -> list[str]:
    links = LinkControl(scenarios.loads(WIRED), network=None, backend=None, log_dir=tmp_path)
    load = {"late_p99_us": None, "frames": 0}
    links.relays[0] = SimpleNamespace(kind=kind, load=lambda: {
        "forward": load | {"pps": forward_pps}, "reverse": load | {"pps": reverse_pps}})
    return links.load_warnings()


@pytest.mark.parametrize("kind", [COMPILED, PYTHON])
def test_one_way_traffic_is_warned_about_near_the_one_way_limit(tmp_path, kind):
    limit = RELAY_LIMITS[kind].one_way
    assert warnings_for(tmp_path, kind, RelayLimit.NEAR * limit, 0) == []
    [warning] = warnings_for(tmp_path, kind, RelayLimit.NEAR * limit + 1, 0)
    assert "(forward)" in warning and f"{kind} relay" in warning and f"{limit:,}" in warning


@pytest.mark.parametrize("kind", [COMPILED, PYTHON])
def test_traffic_both_ways_is_warned_about_near_the_both_ways_limit(tmp_path, kind):
    limit = RELAY_LIMITS[kind].both_ways
    assert warnings_for(tmp_path, kind, RelayLimit.NEAR * limit, RelayLimit.NEAR * limit) == []
    assert len(warnings_for(tmp_path, kind, RelayLimit.NEAR * limit + 1,
                            RelayLimit.NEAR * limit + 1)) == 2


def test_the_python_relay_is_warned_about_sooner_both_ways():
    both = 0.9 * RELAY_LIMITS[PYTHON].both_ways
    assert RELAY_LIMITS[PYTHON].near(both, both)
    assert not RELAY_LIMITS[COMPILED].near(both, both)
