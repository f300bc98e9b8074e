"""bloom_cdn (bloom_cdn): the queueing model, the Bloom filters, the Chord ring and the
simulation checked against the model."""

from __future__ import annotations

import math
from pathlib import Path
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from controller.policies.bloom_cdn import model
from controller.policies.bloom_cdn.bloom import (CountingFilter, apply_update, bit_positions,
                                                 delta_update)
from controller.policies.bloom_cdn.chord import RING, ChordRing
from controller.policies.bloom_cdn.model import (HIGH_TRAFFIC, LOW_TRAFFIC, Reading, Setting,
                                                 evaluate)
from controller.policies.bloom_cdn.simulation import (AdaptiveSwitch, SimConfig, Simulation,
                                                      Workload, _ServiceDraws, initial_state,
                                                      simulate)

LOW = LOW_TRAFFIC


def loads(result, node=0):
    """Each function's arrival rate at ``node`` (the DC's fetch queue has one)."""
    return {q.name: q.arrival_rate for q in result.queues if q.node in (node, None)}


# The model's traffic equations


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_linear_traffic_equations(alpha):
    result = evaluate("linear", LOW, alpha)
    n, lam, hops = LOW.nodes, LOW.arrival_rate, math.ceil(math.log2(LOW.nodes))
    assert loads(result) == pytest.approx({"routing": hops * lam / n, "lookup": lam / n,
                                           "fetch": (1 - alpha) * lam, "response": lam / n})
    expected = (hops / (300 - hops * 2) + 1 / (500 - 2) + (1 - alpha) / (1200 - (1 - alpha) * 100)
                + 1 / (60 - 2))
    assert result.mean == pytest.approx(expected)


def test_filter_strategies_traffic_equations():
    alpha, fp, fn = 0.4, 0.05, 0.02
    judged = alpha + fp - fn
    n, lam = LOW.nodes, LOW.arrival_rate
    parallel = loads(evaluate("parallel", LOW, alpha, fp, fn))
    cut = loads(evaluate("cut_through", LOW, alpha, fp, fn))
    # The DC fetches for filter-judged misses and for false positives (the home misses).
    assert parallel["fetch"] == pytest.approx((1 - judged + fp) * lam)
    assert parallel["response"] == pytest.approx(lam / n)
    # Cut-through's misses bypass the response queue: lambda_4 = (alpha' - fp) lambda, more
    # precisely the filter-judged hits, false positives included, answered by the home node.
    assert cut["response"] == pytest.approx(judged * lam / n)
    assert {k: cut[k] for k in ("routing", "lookup", "fetch")} == pytest.approx(
        {k: parallel[k] for k in ("routing", "lookup", "fetch")})
    assert cut["lookup"] == pytest.approx(lam / n)  # misses are looked up, to cache them


def test_strategies_meet_at_full_hits_and_order_at_none():
    for setting in (LOW_TRAFFIC, HIGH_TRAFFIC):
        full = {s: evaluate(s, setting, 1.0).mean for s in model.STRATEGIES}
        assert max(full.values()) == pytest.approx(min(full.values()))
        none = {s: evaluate(s, setting, 0.0).mean for s in model.STRATEGIES}
        assert none["cut_through"] < none["parallel"] < none["linear"]


def test_cut_through_doubles_the_dc_output():
    setting = replace(HIGH_TRAFFIC, miss_item_bytes=400e3)
    parallel = evaluate("parallel", setting, 0.2)
    cut = evaluate("cut_through", setting, 0.2)
    assert cut.dc_link_utilisation == pytest.approx(2 * parallel.dc_link_utilisation)


# Stability


def test_aggregate_response_queue_is_unstable_and_has_no_finite_mean():
    result = evaluate("linear", LOW, 0.0, reading=Reading(node_queues="aggregate"))
    assert not result.stable and math.isinf(result.mean)
    assert any("response" in reason for reason in result.unstable)


def test_dc_link_overload_is_unstable():
    setting = replace(HIGH_TRAFFIC, miss_item_bytes=700e3)
    assert evaluate("parallel", setting, 0.2).stable
    congested = evaluate("cut_through", setting, 0.2)
    assert math.isinf(congested.mean) and "DC link" in congested.unstable[0]
    assert evaluate("cut_through", setting, 0.5).stable


def test_queue_at_its_rate_is_unstable():
    setting = Setting(arrival_rate=100, routing_rate=300, lookup_rate=500, fetch_rate=100,
                      response_rate=60)
    assert math.isinf(evaluate("linear", setting, 0.0).mean)
    assert math.isfinite(evaluate("linear", setting, 0.01).mean)


def test_every_reading_is_evaluated():
    readings = list(model.readings())
    assert len(readings) == 3 * 2 * 2 * 2 * 2 * 2 * 2
    rows = model.closest_readings()
    # Aggregate queues are unstable for linear at these rates: they are left out.
    assert all(row[1].node_queues != "aggregate" for row in rows)
    assert rows == sorted(rows, key=lambda row: row[0])


@pytest.mark.parametrize("alpha,fp,fn", [(0.0, 0.0, 0.0), (0.4, 0.05, 0.02), (1.0, 0.0, 0.1)])
def test_miss_path_reading_adds_four_routing_sojourns_to_each_filter_miss(alpha, fp, fn):
    base, miss_path = Reading(), model.MISS_PATH_READING
    per_node = LOW_TRAFFIC.arrival_rate * base.hop_count(LOW_TRAFFIC.nodes) / LOW_TRAFFIC.nodes
    sojourn = 1 / (LOW_TRAFFIC.routing_rate - per_node)
    filter_misses = 1 - alpha - fp + fn  # beta', the paper's judged-miss share
    for strategy in ("parallel", "cut_through"):
        added = (evaluate(strategy, LOW_TRAFFIC, alpha, fp, fn, miss_path).mean
                 - evaluate(strategy, LOW_TRAFFIC, alpha, fp, fn, base).mean)
        assert added == pytest.approx(model.MISS_ROUTING_SOJOURNS * filter_misses * sojourn)
    assert (evaluate("linear", LOW_TRAFFIC, alpha, reading=miss_path).mean
            == evaluate("linear", LOW_TRAFFIC, alpha, reading=base).mean)


def test_fitted_sojourns_reach_each_figure_exactly():
    counts = model.fitted_miss_sojourns()
    per_node = LOW_TRAFFIC.arrival_rate * Reading().hop_count(LOW_TRAFFIC.nodes) / LOW_TRAFFIC.nodes
    sojourn = 1 / (LOW_TRAFFIC.routing_rate - per_node)
    linear = evaluate("linear", LOW_TRAFFIC, 0.0).mean
    for strategy, figure in (("parallel", -23.6), ("cut_through", -65.2)):
        reached = evaluate(strategy, LOW_TRAFFIC, 0.0).mean + counts[strategy] * sojourn
        assert 100 * (reached / linear - 1) == pytest.approx(figure)


def test_miss_path_reading_is_near_the_papers_zero_hit_figures_and_the_default_is_not():
    paper = {"parallel": -23.6, "cut_through": -65.2}
    for reading, near in ((model.MISS_PATH_READING, True), (Reading(), False)):
        ours = model.relative_to_linear(LOW_TRAFFIC, 0.0, reading)
        assert all((abs(ours[s] - paper[s]) < 2.5) is near for s in paper), (reading, ours)


# Bloom filters


def filled(keys, bits=40_000):
    counting = CountingFilter(bits)
    counting.add(bit_positions([f"k{i}" for i in range(keys)], bits).ravel())
    return counting


def test_bit_positions_are_md5_words_mod_size():
    # MD5("") = d41d8cd9 8f00b204 e9800998 ecf8427e
    words = [0xD41D8CD9, 0x8F00B204, 0xE9800998, 0xECF8427E]
    assert bit_positions("", 40_000).tolist() == [w % 40_000 for w in words]


@pytest.mark.parametrize("keys", [1_000, 5_000])
def test_filter_has_no_false_negatives_and_the_formula_false_positive_rate(keys):
    bits = 40_000  # the paper's 5 kB node filter
    bitmap = filled(keys, bits).bitmap()
    inserted = bit_positions([f"k{i}" for i in range(keys)], bits)
    assert bitmap[inserted].all(axis=1).all()
    trials = 200_000
    others = bit_positions([f"other{i}" for i in range(trials)], bits)
    positives = int(bitmap[others].all(axis=1).sum())
    p = model.false_positive_rate(bits, 4, keys)
    low, high = stats.binom.interval(0.99, trials, p)
    assert low <= positives <= high, (positives, trials * p)


def test_counting_filter_removes_exactly():
    counting = filled(300)
    before = counting.bitmap().copy()
    extra = bit_positions([f"x{i}" for i in range(50)], counting.bits).ravel()
    counting.add(extra)
    counting.remove(extra)
    assert (counting.bitmap() == before).all()


def test_delta_update_rebuilds_the_filter_and_is_smaller_than_it():
    previous = filled(1000).bitmap()
    counting = filled(1000)
    counting.add(bit_positions([f"new{i}" for i in range(40)], counting.bits).ravel())
    current = counting.bitmap()
    message = delta_update(previous, current)
    assert (apply_update(previous, message) == current).all()
    assert len(message) < current.size // 8


# Chord


@pytest.mark.parametrize("nodes", [8, 50, 64])
def test_chord_routes_to_the_successor_within_log_hops(nodes):
    rng = np.random.default_rng(nodes)
    for ring in (ChordRing.evenly_spread(nodes),
                 ChordRing.of_names([f"node{i}" for i in range(nodes)])):
        hops = []
        for _ in range(2000):
            entry, key = int(rng.integers(nodes)), int(rng.integers(RING))
            path = ring.route(entry, key)
            assert path[0] == entry and path[-1] == ring.successor(key)
            assert len(set(path)) == len(path)
            hops.append(len(path) - 1)
        # Chord's bound: O(log N), here at most ceil(log2 N) + 1 for hashed identifiers.
        assert max(hops) <= math.ceil(math.log2(nodes)) + 1
        assert math.log2(nodes) / 2 <= np.mean(hops) <= math.log2(nodes) / 2 + 1
    even = ChordRing.evenly_spread(nodes)
    assert max(len(even.route(e, int(k))) - 1 for e in range(nodes)
               for k in rng.integers(RING, size=50)) <= math.ceil(math.log2(nodes))


# LRU under Che's approximation


def test_characteristic_time_fills_the_cache():
    rates = np.arange(1, 201, dtype=float) ** -0.8
    t = model.characteristic_time(rates, 50)
    assert np.sum(-np.expm1(-rates * t)) == pytest.approx(50, rel=1e-6)
    assert math.isinf(model.characteristic_time(rates, 200))


# The simulation against the model


@pytest.mark.parametrize("setting,strategy,alpha", [(LOW_TRAFFIC, "cut_through", 0.5),
                                                    (LOW_TRAFFIC, "parallel", 0.2)])
def test_model_mean_is_inside_the_simulated_interval(setting, strategy, alpha):
    result = simulate(SimConfig(setting, strategy, alpha, duration=300, seed=7))
    assert abs(result.hit_rate - alpha) < 0.05
    theory = evaluate(strategy, result.measured_setting(), result.hit_rate,
                      result.false_positive, result.false_miss)
    low, high = result.interval
    assert low <= theory.mean <= high, (theory.mean, result.interval)


def test_speculative_fetches_every_request_and_at_no_hits_is_parallels_miss_path():
    config = SimConfig(LOW_TRAFFIC, "speculative", 0.0, duration=200, warmup=0, seed=5)
    simulation = Simulation(config)
    result = simulation.run()
    assert simulation.fetch.arrivals == result.requests  # the DC fetches for every request
    # With nothing cached the home never answers: the user waits for the DC's copy through
    # the entry node's response queue, parallel's miss path under an exact filter.
    theory = evaluate("parallel", result.measured_setting(), 0.0)
    low, high = result.interval
    assert low <= theory.mean <= high, (theory.mean, result.interval)
    cached = simulate(replace(config, hit_rate=0.5))
    assert cached.dc_utilisation == pytest.approx(result.dc_utilisation, rel=0.1)


def test_simulation_measures_filter_errors_and_sync_traffic():
    result = simulate(SimConfig(LOW_TRAFFIC, "parallel", 0.5, duration=300, seed=3))
    assert 0 < result.false_miss < 0.2 and result.false_positive > 0
    assert result.false_positive_bloom < 0.01  # 1,000 items in 40,000 bits: ~1e-4 a lookup
    assert result.sync.messages > 0 and 0 < result.sync.delta_bytes < result.sync.full_bytes


def test_simulation_flags_an_overloaded_dc():
    setting = replace(LOW_TRAFFIC, fetch_rate=80)
    result = simulate(SimConfig(setting, "linear", 0.0, duration=100, warmup=10, seed=1))
    assert result.unstable
    assert not simulate(SimConfig(LOW_TRAFFIC, "linear", 0.0, duration=100, warmup=10,
                                  seed=1)).unstable


# The adaptive strategy


def nominal(setting, small_popular):
    workload = Workload(small_popular=small_popular)
    popularity, sizes = workload.popularity(), workload.sizes()
    return replace(setting, miss_item_bytes=float(popularity @ sizes),
                   miss_item_bytes_square=float(popularity @ sizes ** 2))


@pytest.mark.parametrize("setting,small_popular", [(LOW_TRAFFIC, True), (HIGH_TRAFFIC, False)])
def test_adaptive_is_at_or_below_the_best_fixed_strategy_at_every_hit_rate(setting,
                                                                          small_popular):
    setting = nominal(setting, small_popular)
    for alpha in np.linspace(0, 1, 21):
        fixed = [evaluate(s, setting, alpha).mean for s in model.STRATEGIES]
        assert model.adaptive(setting, alpha).mean <= min(fixed) * (1 + 1e-12)


def test_high_traffic_cut_through_congests_the_dc_at_low_hit_rates():
    setting = nominal(HIGH_TRAFFIC, False)
    congested = [alpha for alpha in np.linspace(0, 1, 21)
                 if not evaluate("cut_through", setting, alpha).stable]
    assert congested and max(congested) < 0.4  # the paper: below ~30 %, fine above ~40 %
    assert all(evaluate("parallel", setting, a).stable for a in congested)
    assert model.adaptive(setting, 0.0).strategy == "adaptive"
    assert model.adaptive(setting, 0.0).mean == evaluate("parallel", setting, 0.0).mean


@pytest.mark.parametrize("hit_rate", [0.05, 0.3, 0.5])
def test_initial_state_sets_the_hit_rate_regardless_of_item_size(hit_rate):
    workload = Workload(small_popular=False)
    popularity, sizes = workload.popularity(), workload.sizes(0)
    draws = [initial_state(popularity, hit_rate, np.random.default_rng(seed))
             for seed in range(40)]
    head = popularity.max()  # the most an item moves the sum
    assert all(abs(popularity[d].sum() - hit_rate) <= head / 2 for d in draws)
    # A miss's size, popularity-weighted, is the catalogue's on average: sizes play no part
    # (LRU's hits would be the popular, in high traffic the large, items).
    missed = []
    for cached in draws:
        weights = popularity.copy()
        weights[cached] = 0
        missed.append(weights @ sizes / weights.sum())
    mean = popularity @ sizes
    assert stats.ttest_1samp(missed, mean).pvalue > 0.001
    lru = popularity[:np.searchsorted(np.cumsum(popularity), hit_rate)]
    assert (popularity[len(lru):] @ sizes[len(lru):]) / popularity[len(lru):].sum() < mean


def test_catalogue_seed_fixes_the_item_sizes_across_runs():
    workload = Workload(small_popular=False)
    runs = [Simulation(SimConfig(HIGH_TRAFFIC, "linear", 0.3, workload=workload, seed=seed,
                                 catalogue_seed=0)) for seed in (1, 2)]
    assert all(np.array_equal(run.sizes, workload.sizes(0)) for run in runs)
    states = [Simulation(SimConfig(HIGH_TRAFFIC, "linear", hit, workload=workload, seed=seed,
                                   catalogue_seed=0, hits="initial_state"))
              for hit, seed in ((0.2, 1), (0.4, 2))]
    low, high = ({item for node in state.nodes for item in node.cache.items} for state in states)
    assert low < high  # nested: a higher hit rate caches the lower one's items and more
    assert not np.array_equal(Simulation(SimConfig(HIGH_TRAFFIC, "linear", 0.3,
                                                   workload=workload, seed=1)).sizes,
                              workload.sizes(0))


def test_initial_state_caches_stay_as_drawn_and_the_filter_exact():
    config = SimConfig(HIGH_TRAFFIC, "parallel", 0.3, workload=Workload(small_popular=False),
                       duration=60, warmup=10, seed=2, hits="initial_state")
    simulation = Simulation(config)
    cached = [set(node.cache.items) for node in simulation.nodes]
    result = simulation.run()
    assert [set(node.cache.items) for node in simulation.nodes] == cached
    assert result.false_positive_stale == 0 and result.false_miss == 0
    half = 3 * math.sqrt(0.3 * 0.7 / result.requests)  # the measured share's binomial spread
    assert abs(result.hit_rate - 0.3) < config.workload.popularity().max() / 2 + half


@pytest.mark.parametrize("law,scv", [("exponential", 1.0), ("lognormal", 0.5),
                                     ("lognormal", 8.0)])
def test_service_draws_have_mean_one_and_the_asked_variation(law, scv):
    draws = _ServiceDraws(np.random.default_rng(4), law, scv, block=4096)
    values = np.array([draws.next() for _ in range(200_000)])  # crosses blocks
    assert stats.ttest_1samp(values, 1.0).pvalue > 0.001
    # log-normal: the log of the draws is normal with variance log(1 + scv)
    spread = np.log(values).var() if law == "lognormal" else values.var()
    assert spread == pytest.approx(math.log1p(scv) if law == "lognormal" else 1.0, rel=0.02)
    with pytest.raises(ValueError):
        _ServiceDraws(np.random.default_rng(0), "pareto")


def test_cut_through_crossing_is_where_it_turns_faster_than_linear():
    setting = nominal(HIGH_TRAFFIC, False)
    crossing = model.cut_through_crossing(setting)
    mean = lambda s, a: evaluate(s, setting, a).mean  # noqa: E731
    assert mean("cut_through", crossing + 1e-4) < mean("linear", crossing + 1e-4)
    assert mean("cut_through", crossing - 1e-4) >= mean("linear", crossing - 1e-4)
    # Cut-through sends two copies of each miss: it cannot be stable, let alone faster,
    # below the hit rate where they fill the DC's link.
    link_full = 1 - setting.dc_bandwidth / (2 * setting.arrival_rate * setting.miss_item_bytes)
    assert crossing > link_full
    assert model.cut_through_crossing(LOW_TRAFFIC) == 0.0


def test_adaptive_switch_has_hysteresis():
    switch = AdaptiveSwitch(high=0.8, low=0.6, window=1.0)
    for utilisation, cut in [(0.5, True), (0.79, True), (0.85, False), (0.7, False),
                             (0.61, False), (0.55, True), (0.75, True)]:
        switch.observe(utilisation)
        assert switch.cut_through is cut, utilisation
    assert switch.switches == 2
    with pytest.raises(ValueError):
        AdaptiveSwitch(high=0.5, low=0.6, window=1.0)


def test_simulated_adaptive_leaves_cut_through_when_the_dc_congests():
    workload = Workload(small_popular=False)
    runs = {strategy: simulate(SimConfig(HIGH_TRAFFIC, strategy, 0.0, workload=workload,
                                         duration=150, warmup=20, seed=5))
            for strategy in ("cut_through", "adaptive")}
    assert runs["cut_through"].dc_link_utilisation > 1  # two copies of every miss
    assert runs["adaptive"].cut_through_share < 0.9
    assert runs["adaptive"].dc_link_utilisation < runs["cut_through"].dc_link_utilisation


# The experiment kind


def test_kind_runs_a_cell_with_model_beside_it_and_the_files_load():
    from experiments.kinds.bloom_cdn.model import KINDS, Parameters
    from experiments.sweeps import experiment
    from experiments.sweeps.kinds import Cell

    (kind,) = KINDS
    parameters = Parameters(traffic="low", hit_rate=0.5, duration=60, warmup=10)
    (row,) = kind.run(Cell("e", "s", "hit_rate", "0.5", "parallel", 0, 3, parameters))
    assert {metric.name for metric in kind.metrics} | set(kind.texts) == set(row)
    assert row["response_ci_low_ms"] <= row["response_ms"] <= row["response_ci_high_ms"]
    assert abs(row["theory_error_pct"]) < 10 and row["theory_unstable"] == 0
    (linear,) = kind.run(Cell("e", "s", "hit_rate", "0.5", "linear", 0, 3, parameters))
    assert math.isnan(linear["fp"])  # linear has no filter
    (speculative,) = kind.run(Cell("e", "s", "hit_rate", "0.5", "speculative", 0, 3,
                                   parameters))
    # No filter, and no sum of sojourns for the first of two answers: no model beside it.
    assert math.isnan(speculative["fp"]) and math.isnan(speculative["theory_ms"])
    assert math.isnan(speculative["theory_unstable"]) and speculative["response_ms"] > 0
    # An unstable model point is left empty, never a finite mean.
    congested = Parameters(traffic="high", hit_rate=0.0, duration=40, warmup=5)
    (cut,) = kind.run(Cell("e", "s", "hit_rate", "0", "cut_through", 0, 3, congested))
    assert math.isnan(cut["theory_nominal_ms"])
    # The kind is found by convention (experiments/kinds/bloom_cdn/model.py) and the files load.
    for name in ("low", "high"):
        loaded = experiment.load(Path(__file__).parents[3] / "experiments"
                                 / "bloom_cdn" / f"{name}.yaml")
        assert loaded.kind is kind and loaded.sweeps[0].parameter == "hit_rate"
