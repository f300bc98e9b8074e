"""The reachability check's pairs and the loss their echoes may meet by configuration."""

from __future__ import annotations

import pytest

from experiments import scenarios
from agents.reachability import PingResult, configured_echo_loss, role_pairs

TWO_PATHS = """
name: two-paths
controller: {app: edgebed}
topology:
  subnet: 10.0.0.0/24
  nodes:
    a: {role: streamer}
    b: {role: edge}
    c: {role: viewer}
    s1: {role: switch}
    s2: {role: switch}
  links:
    - {endpoints: ["a:eth1", "s1:eth1"], forward: {loss: 1%}, reverse: {loss: 2%}}
    - {endpoints: ["s1:eth2", "s2:eth2"]}
    - {endpoints: ["s1:eth3", "s2:eth3"], burst: {p: 1%, r: 9%}}
    - {endpoints: ["b:eth1", "s2:eth1"]}
    - {endpoints: ["c:eth1", "s1:eth4"]}
"""


@pytest.fixture(scope="module")
def two_paths():
    return scenarios.loads(TWO_PATHS, "two-paths.yaml", {})


def test_both_directions_of_every_link_on_the_path_count(two_paths):
    # a-s1 loses 1 % of the requests and 2 % of the replies; c-s1 nothing.
    assert configured_echo_loss(two_paths, "a", "c") == pytest.approx(1 - 0.99 * 0.98)
    assert configured_echo_loss(two_paths, "c", "a") == pytest.approx(1 - 0.99 * 0.98)


def test_of_parallel_links_the_lossiest_counts(two_paths):
    # s1-s2 twice: clean, and a burst model that is bad 10 % of the time both ways.
    assert configured_echo_loss(two_paths, "c", "b") == pytest.approx(1 - 0.9 * 0.9)


def test_a_clean_path_has_none(two_paths):
    lossless = scenarios.loads(TWO_PATHS.replace(", forward: {loss: 1%}, reverse: "
                                                       "{loss: 2%}", "").replace(
        ", burst: {p: 1%, r: 9%}", ""), "clean.yaml", {})
    assert all(configured_echo_loss(lossless, a.name, b.name) == 0
               for a, b in role_pairs(lossless))


@pytest.mark.parametrize("configured, received, ok", [
    (0.0, 4, True), (0.0, 3, False), (0.0, 0, False),
    (0.005, 4, True), (0.005, 3, True), (0.005, 0, False)])
def test_configured_loss_excuses_a_lost_echo_not_a_dead_path(configured, received, ok):
    result = PingResult("a", "b", "streamer", "edge", 4, received, None, None, None, configured)
    assert result.ok is ok
