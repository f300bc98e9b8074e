"""The wire relay's configuration is checked by the scenario's own impairment fields: the same
units, bounds and messages, and a bad change names the field it got wrong."""

import statistics

import pytest

from topologies.impairments.relay import relay_direction
from topologies.impairments.wire import LatenessHistogram
from topologies.impairments.wire_config import WireDirection, parse_config
from topologies.model import Impairment, WireImpairment


def test_every_scenario_field_the_relay_acts_on_is_checked_by_the_scenario_model():
    assert set(WireImpairment.model_fields) <= set(WireDirection.model_fields)
    assert set(WireImpairment.model_fields) <= set(Impairment.model_fields)
    for name in WireImpairment.model_fields:
        assert WireDirection.model_fields[name].annotation == \
            Impairment.model_fields[name].annotation


def test_the_controller_side_settings_are_what_the_relay_accepts():
    impairment = Impairment(delay="150ms", jitter="5ms", distribution="pareto", reorder=False,
                            burst={"p": 0.01, "r": 0.3})
    changes, seed = parse_config({"forward": relay_direction(impairment), "seed": 7})
    assert seed == 7
    assert changes["forward"]["delay_ns"] == 150_000_000
    assert changes["forward"]["jitter_ns"] == 5_000_000
    assert changes["forward"]["distribution"] == "pareto"
    assert changes["forward"]["reorder"] is False
    assert changes["forward"]["burst"].p == 0.01


def test_units_are_the_scenario_units():
    changes, _ = parse_config({"reverse": {"delay": "20ms", "loss": "1.5%"}})
    assert changes == {"reverse": {"delay_ns": 20_000_000, "loss": 0.015}}


def test_a_change_names_only_what_changes_and_null_clears():
    changes, seed = parse_config({"forward": {"delay": None, "down": True}})
    assert changes == {"forward": {"delay_ns": 0, "down": True}} and seed is None
    assert parse_config({}) == ({}, None)


@pytest.mark.parametrize(("document", "complaint"), [
    ({"forward": {"delay": -1}}, "forward.delay: duration must be at least 0, got -1"),
    ({"forward": {"delay": 1e12}}, "forward.delay: duration must be at most 365 days"),
    ({"reverse": {"loss": 1.5}}, "reverse.loss: fraction must be at most 1"),
    ({"sideways": {}}, "sideways: unknown key (known: forward, reverse, seed)"),
    ({"forward": {"bw": "1Mbps"}}, "forward.bw: unknown key (known: delay, jitter"),
    ({"forward": {"burst": {"p": 0.1, "r": 0.5, "q": 1}}},
     "forward.burst.q: unknown key (known: p, r, bad_loss, good_loss)"),
    ({"forward": {"distribution": "cauchy"}}, "forward.distribution: 'cauchy' is not one of"),
    ({"forward": 3}, "forward: must be a JSON object, not 3"),
    ([1], "the configuration: must be a JSON object"),
    ({"seed": True}, "seed: "),
])
def test_a_bad_configuration_names_its_field(document, complaint):
    with pytest.raises(ValueError) as raised:
        parse_config(document)
    assert complaint in str(raised.value)


def test_the_bounds_are_the_scenarios():
    """One source of truth: the relay refuses exactly what a scenario's link refuses."""
    for value in (-0.001, 1.0001, "101%", "x"):
        with pytest.raises(ValueError):
            Impairment(loss=value)
        with pytest.raises(ValueError):
            parse_config({"forward": {"loss": value}})


def test_lateness_summary_has_the_exact_mean_and_spread():
    values = [0, 3, 3, 950, 1023, 1024, 40_000, 7]
    lateness = LatenessHistogram()
    assert lateness.summary() == {"mean": None, "std": None, "p50": None, "p99": None,
                                  "max": None, "sum": 0, "sum_squares": 0}
    for value in values:
        lateness.add(value)
    summary = lateness.summary()
    assert summary["mean"] == statistics.fmean(values)
    assert summary["std"] == pytest.approx(statistics.pstdev(values), rel=1e-12)
    assert (summary["sum"], summary["sum_squares"]) == (sum(values), sum(v * v for v in values))
    assert (summary["p50"], summary["max"]) == (7, 40_000)
