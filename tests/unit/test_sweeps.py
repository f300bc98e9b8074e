"""Experiment files and sweeps: validation with positions, cells and paired seeds, the
resumable runner, confidence intervals, the report, and the live_edge_model cell runner."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import BaseModel, ConfigDict

from controller.policies.live_edge.allocators import ALLOCATORS
from controller.policies.live_edge.model import MBPS, MS, evaluate
from experiments import report
from experiments.kinds.live_edge import model as live_edge
from experiments.cli import main
from experiments.sweeps import experiment as experiments
from experiments.sweeps.kinds import (EMULATED_METRICS, FIDELITY, Claim, EmulatedParameters,
                                      Kind, Metric)
from experiments.sweeps.runner import RESULTS, ResultsMismatch, read_results, run
from topologies.problems import ScenarioInvalid

ROOT = Path(__file__).resolve().parents[2]


class FakeParameters(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    x: float = 1.0
    periods: int = 2


def fake_run(cell):
    """y = x, doubled for policy p; one row per period."""
    y = cell.parameters.x * (2 if cell.policy == "p" else 1)
    return [{"y": y + cell.repetition, "z": period} for period in range(cell.parameters.periods)]


FAKE = Kind(name="fake", parameters=FakeParameters, policies=("p", "q"), run=fake_run,
            metrics=(Metric("y", "y", "units"), Metric("z", "z")), plots=("y",),
            claims={"p_over_q": Claim("p's y against q's", "y", "p", "q", relative=True,
                                      why="p doubles y.")},
            ablation="x", about="A fake kind for tests.")

FAKE_FILE = """\
name: tiny
kind: fake
seed: 7
repetitions: 3
policies: [p, q]
base: {periods: 2}
sweeps:
  - name: along-x
    vary: x
    values: [1, 2, 4]
  - name: one-policy
    vary: x
    values: [3]
    policies: [q]
paper:
  p_over_q: {sweep: along-x, value: [90, 110]}
"""


def register_fake(monkeypatch, kind: Kind) -> None:
    """Makes ``kind`` one of the kinds experiment files may name, beside the discovered ones."""
    discovered = experiments.registered_kinds
    monkeypatch.setattr(experiments, "registered_kinds", lambda: {**discovered(), "fake": kind})


@pytest.fixture
def fake(monkeypatch):
    register_fake(monkeypatch, FAKE)
    return experiments.loads(FAKE_FILE, "tiny.yaml")


def problems(text: str) -> list:
    with pytest.raises(ScenarioInvalid) as raised:
        experiments.loads(text, "bad.yaml")
    return raised.value.problems


# Validation


def test_the_papers_experiment_file_is_valid():
    loaded = experiments.load(ROOT / "experiments" / "live_edge" / "model.yaml")
    assert loaded.repetitions >= 5
    assert {"viewers", "servers", "demand", "a", "G"} <= {s.parameter for s in loaded.sweeps}
    small = [s for s in loaded.sweeps if "optimal" in s.policies]
    assert small and all(s.parameters[0].servers == 2 for s in small)
    assert all("optimal" not in s.policies for s in loaded.sweeps if s not in small)


@pytest.mark.parametrize("text, line, column, field, message, hint", [
    ("name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua]\nseeed: 3\n"
     "sweeps: [{name: s, vary: viewers, values: [1]}]\n",
     5, 1, "seeed", "unknown key 'seeed'", "did you mean 'seed'?"),
    ("name: x\nkind: live_edge\nrepetitions: 1\npolicies: [lua]\n"
     "sweeps: [{name: s, vary: viewers, values: [1]}]\n",
     2, 7, "kind", "unknown kind 'live_edge'", "did you mean 'live_edge_model'?"),
    ("name: x\nkind: live_edge_model\nrepetitions: 0\npolicies: [lua]\n"
     "sweeps: [{name: s, vary: viewers, values: [1]}]\n",
     3, 14, "repetitions", "greater than or equal to 1", ""),
    ("name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua, dff]\n"
     "sweeps: [{name: s, vary: viewers, values: [1]}]\n",
     4, 17, "policies[1]", "no policy 'dff'", "did you mean 'df'?"),
    ("name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua]\nbase:\n"
     "  viewers: 10\n  bandwith: 20\nsweeps: [{name: s, vary: servers, values: [1]}]\n",
     7, 3, "base.bandwith", "unknown key 'bandwith'", "did you mean 'bandwidth'?"),
    ("name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua]\nsweeps:\n"
     "  - name: s\n    vary: viewers\n    values: [10, 0, 20]\n",
     8, 18, "sweeps[0].values[1]", "greater than or equal to 1", ""),
    ("name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua]\nsweeps:\n"
     "  - name: s\n    vary: viewer\n    values: [10]\n",
     7, 11, "sweeps[0].vary", "no parameter 'viewer'", "did you mean 'viewers'?"),
    ("name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua]\nsweeps:\n"
     "  - name: s\n    vary: danmaku\n    values: [[2, 1]]\n",
     8, 14, "sweeps[0].values[0]", "a range is written [low, high]", ""),
    ("name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua]\nsweeps:\n"
     "  - name: s\n    vary: G\n    values: [5]\n    base: {bandwidth: 40 Mbps/s}\n",
     9, 23, "sweeps[0].base.bandwidth", "unknown unit", ""),
    ("name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua]\nsweeps:\n"
     "  - name: s\n    vary: G\n    values: [5]\npaper:\n  lua_vs_optimal: {sweep: s, value: 1}\n",
     10, 27, "paper.lua_vs_optimal.sweep", "which sweep 's' does not run", "add optimal"),
    ("name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua]\nsweeps:\n"
     "  - name: s\n    vary: G\n    values: [5]\n"
     "paper:\n  qoe_lua_over_dff: {sweep: s, value: 1}\n",
     10, 3, "paper.qoe_lua_over_dff", "no claim 'qoe_lua_over_dff'",
     "did you mean 'qoe_lua_over_df'?"),
])
def test_a_bad_file_is_refused_with_position_field_and_hint(text, line, column, field,
                                                            message, hint):
    found = problems(text)
    assert len(found) == 1, found
    problem = found[0]
    assert (problem.position.line, problem.position.column) == (line, column)
    assert problem.field == field and message in problem.message and hint in problem.hint


def test_every_problem_is_reported_once():
    # A mistake in base reaches every cell; it is one problem all the same.
    head = "name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua]\n"
    text = (head + "base: {servers: 0}\nsweeps:\n  - {name: a, vary: viewers, values: [1, 2]}\n"
            "  - {name: a, vary: G, values: [5, 20]}\n")
    found = {(p.position.line, p.field, p.message) for p in problems(text)}
    assert found == {(5, "base.servers", "Input should be greater than or equal to 1"),
                     (8, "sweeps[1].name", "sweep 'a' is defined twice")}
    text = head + "sweeps:\n  - {name: a, vary: G, values: [5, 20, 5.0]}\n"
    assert [(p.position.line, p.field, p.message) for p in problems(text)] == [
        (6, "sweeps[0].values[2]", "value 5 is listed twice")]


def test_the_command_exits_2_naming_file_line_and_column(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nkind: live_edge_model\nrepetitions: 1\npolicies: [lua]\n"
                    "sweeps: [{name: s, vary: viewers, values: [1]}]\nsedd: 3\n")
    assert main(["experiment", str(path), "--out", str(tmp_path / "out")]) == 2
    assert f"{path}:6:1: sedd: unknown key 'sedd'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_parameters_take_the_papers_units_or_strings_with_units():
    parameters = live_edge.Parameters(G=50, bandwidth="20Mbps", beta="0.25s",
                                      access_delay=("1ms", 3), k=0.2)
    weights = parameters.pool(0).weights
    assert (weights.G, weights.beta, weights.k) == pytest.approx((50 * MS / MBPS, 0.25,
                                                                  0.2 / MBPS))
    assert parameters.pool(0).servers[0].bandwidth == 20 * MBPS
    assert parameters.access_delay == (1.0, 3.0)
    defaults = live_edge.Parameters()
    assert (defaults.G, defaults.bandwidth, defaults.beta, defaults.k) == (50, 40, 300, 0.2)


# Cells and seeds


def test_cells_are_sweep_value_policy_repetition_with_seeds_shared_by_policies(fake):
    cells = list(fake.cells())
    assert len(cells) == 3 * 2 * 3 + 1 * 1 * 3
    assert len({cell.id for cell in cells}) == len(cells)
    by_instance: dict = {}
    for cell in cells:
        by_instance.setdefault((cell.sweep, cell.value, cell.repetition), set()).add(cell.seed)
    assert all(len(seeds) == 1 for seeds in by_instance.values())  # paired
    seeds = [seeds.pop() for seeds in by_instance.values()]
    assert len(set(seeds)) == len(seeds)  # every value and repetition its own instance
    assert experiments.repetition_seed(7, "along-x", "2", 1) == next(
        cell.seed for cell in cells if (cell.sweep, cell.value, cell.repetition)
        == ("along-x", "2", 1))
    assert experiments.repetition_seed(7, "along-x", "2", 1) != experiments.repetition_seed(
        8, "along-x", "2", 1)


def test_a_paired_sweep_runs_every_value_on_the_same_instances(fake):
    paired = experiments.loads(FAKE_FILE.replace("    values: [1, 2, 4]\n",
                                                 "    values: [1, 2, 4]\n    paired: true\n"),
                               "tiny.yaml")
    seeds: dict = {}
    for cell in paired.cells():
        if cell.sweep == "along-x":
            seeds.setdefault(cell.repetition, set()).add(cell.seed)
    assert all(len(same) == 1 for same in seeds.values()) and len(seeds) == 3
    assert len({same.pop() for same in seeds.values()}) == 3  # repetitions still differ


def test_claims_at_one_value_across_neighbours_and_on_the_metric_itself(fake):
    cells = pd.DataFrame({"sweep": "along-x", "value": ["1", "2", "4"] * 2,
                          "policy": ["p"] * 3 + ["q"] * 3, "y": [2.0, 4.0, 8.0, 1.0, 2.0, 4.0]})
    sweep = fake.sweep("along-x")

    def change(**fields) -> float:
        claim = Claim("c", "y", **({"policy": "p", "versus": "q", "relative": False} | fields))
        return report.measure(claim, cells, sweep).change

    assert change(values="first") == 1.0 and change(values="last") == 4.0
    assert change(values="last-vs-previous", versus="p") == 4.0  # 8 against 4
    assert change(values="last-vs-first", versus="p") == 6.0
    assert change(versus="", values="last") == 8.0  # the metric's own value
    assert Claim("c", "y", "p", "", relative=False).policies == {"p"}


def test_a_quick_run_is_a_subset_of_the_full_one(fake):
    quick = list(fake.quick_version().cells())
    assert {(cell.sweep, cell.value) for cell in quick} == {
        ("along-x", "1"), ("along-x", "4"), ("one-policy", "3")}
    assert max(cell.repetition for cell in quick) == 1
    assert {cell.id for cell in quick} <= {cell.id for cell in fake.cells()}


def test_value_labels():
    assert [experiments.value_label(v) for v in (50, 50.0, 0.1, [1.0, 2.5], True)] == [
        "50", "50", "0.1", "(1, 2.5)", "True"]


# The runner


def test_an_interrupted_run_resumes_without_duplicates(fake, tmp_path):
    calls = []

    def interrupted(cell):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(cell.id)
        return fake_run(cell)

    with pytest.raises(KeyboardInterrupt):
        run(dataclasses.replace(fake, kind=dataclasses.replace(FAKE, run=interrupted)),
            tmp_path)
    first = read_results(tmp_path / RESULTS, FAKE)
    assert sorted(set(first["cell"])) == sorted(calls)
    assert len(first) == 5 * 2

    outcome = run(fake, tmp_path)
    results = read_results(tmp_path / RESULTS, FAKE)
    all_ids = {cell.id for cell in fake.cells()}
    assert (outcome.ran, outcome.reused) == (len(all_ids) - 5, 5)
    assert set(results["cell"]) == all_ids
    assert not results.duplicated(["cell", "period"]).any()
    assert run(fake, tmp_path).ran == 0
    assert run(fake, tmp_path, fresh=True).ran == len(all_ids)


def test_a_write_cut_short_is_repaired_on_the_next_run(fake, tmp_path):
    run(fake, tmp_path)
    path = tmp_path / RESULTS
    lines = path.read_text().splitlines(keepends=True)
    # The last cell lost its last row and half of the one before.
    path.write_text("".join(lines[:-2]) + lines[-2][:20])
    outcome = run(fake, tmp_path)
    assert (outcome.ran, outcome.reused) == (1, len(list(fake.cells())) - 1)
    results = read_results(path, FAKE)
    assert len(results) == 2 * len(list(fake.cells()))
    assert not results.duplicated(["cell", "period"]).any()


def test_the_command_resumes_and_says_where(fake, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    source = tmp_path / "tiny.yaml"
    source.write_text(FAKE_FILE)
    calls = []

    def interrupted(cell):
        if calls:
            raise KeyboardInterrupt
        calls.append(cell)
        return fake_run(cell)

    register_fake(monkeypatch, dataclasses.replace(FAKE, run=interrupted))
    # In this process: the interruption is this process's Ctrl-C.
    assert main(["experiment", str(source), "--out", str(out), "--workers", "1"]) == 130
    assert "run the same command again" in capsys.readouterr().err
    register_fake(monkeypatch, FAKE)
    assert main(["experiment", str(source), "--out", str(out), "--workers", "1"]) == 0
    assert f"20 cells run, 1 already in {out / RESULTS}" in capsys.readouterr().out


# Statistics and the report


def test_confidence_interval_by_hand():
    cells = pd.DataFrame({"sweep": "s", "parameter": "x", "value": ["1"] * 3 + ["2"],
                          "policy": "p", "repetition": [0, 1, 2, 0], "y": [1.0, 2.0, 3.0, 5.0]})
    summary = report.summarize(cells, ["y"]).set_index("value")
    # mean 2, sd 1, t(0.975, 2 df) = 4.302653: half-width 4.302653 / sqrt(3).
    assert summary.loc["1", ["n", "mean", "std"]].tolist() == [3, 2.0, 1.0]
    assert summary.loc["1", "ci95"] == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert summary.loc["1", "low"] == pytest.approx(2 - 2.484138, rel=1e-6)
    assert summary.loc["2", "n"] == 1 and math.isnan(summary.loc["2", "ci95"])


def test_cells_equal_but_for_float_rounding_have_no_spread():
    # The same allocation's objective summed in two orders: 47.966413846993369 and ...37.
    same = 47.96641384699337
    cells = pd.DataFrame({"sweep": "s", "parameter": "x", "value": ["1"] * 3 + ["2"] * 2,
                          "policy": "p", "repetition": [0, 1, 2, 0, 1],
                          "y": [same, same + 7e-15, same, 1.0, 1.0 + 1e-6]})
    summary = report.summarize(cells, ["y"]).set_index("value")
    assert summary.loc["1", ["std", "ci95"]].tolist() == [0.0, 0.0]
    assert summary.loc["2", "ci95"] > 0  # a real spread, however small, is kept


def test_compare_and_agreement():
    assert report.compare(1.2, 1.0, relative=True) == pytest.approx(20)
    assert report.compare(-0.5, -1.0, relative=True) == pytest.approx(50)  # a rise
    assert report.compare(1.0, 0.0, relative=True) == math.inf
    assert report.compare(3.0, 1.0, relative=False) == 2.0
    paper = experiments.PaperEntry(sweep="s", value=(-56, -49))
    assert report.agreement(-50, paper) == "within the paper's range"
    assert report.agreement(-80, paper) == "same direction, stronger"
    assert report.agreement(-10, paper) == "same direction, weaker"
    assert report.agreement(10, paper) == "opposite direction"


def test_the_report_has_its_files_tables_and_claims(fake, tmp_path):
    run(fake, tmp_path)
    written = report.write(fake, tmp_path)
    for sweep in ("along-x", "one-policy"):
        for suffix in (".png", ".svg"):
            assert (tmp_path / "plots" / f"{sweep}-y{suffix}").stat().st_size > 1000
    summary = pd.read_csv(tmp_path / "summary.csv", dtype={"value": str})
    # y = 2x + repetition for p: repetitions 0, 1, 2 at x = 4 give mean 9.
    row = summary[(summary["value"] == "4") & (summary["policy"] == "p")
                  & (summary["metric"] == "y")].iloc[0]
    assert (row["n"], row["mean"], row["std"]) == (3, 9.0, 1.0)
    (headline,) = written.headlines
    # p's mean y over along-x: 2·(7/3) + 1; q's: 7/3 + 1.
    expected = (2 * 7 / 3 + 1) / (7 / 3 + 1) * 100 - 100
    assert headline.ours == f"{expected:+.0f}%" == "+70%"
    assert (headline.paper, headline.agreement) == ("+90% to +110%", "same direction, weaker")
    assert headline.ablation == "along-x: x = 1: +50%, x = 2: +67%, x = 4: +80%"
    text = written.path.read_text()
    assert "A fake kind for tests." in text and "p doubles y." in text
    assert "| 4 | 9.0 ± 2.5 | 5.0 ± 2.5 |" in text
    assert "plots/along-x-y.png" in text
    assert "seed 7, 3 repetitions, 21 cells" in text


def test_the_report_leaves_out_rows_of_other_cells(fake, tmp_path):
    run(fake, tmp_path)
    quick = fake.quick_version()
    written = report.write(quick, tmp_path)
    assert written.left_out == 2 * (len(list(fake.cells())) - len(list(quick.cells())))
    assert "quick run" in written.path.read_text()


class EmulatedFakeParameters(EmulatedParameters):
    scenario: str = "fake.yaml"
    x: float = 1.0
    periods: int = 2


def emulated_fake_run(cell):
    """:func:`fake_run` as an emulated kind's: the monitor flags repetition 1 of policy p at
    x = 4, and its y is far off, so a report that kept it would show it."""
    flagged = cell.policy == "p" and cell.repetition == 1 and cell.parameters.x == 4
    return [row | {"y": 1000.0 if flagged else row["y"], FIDELITY.name: int(not flagged)}
            for row in fake_run(cell)]


def emulated_fake(**fields) -> Kind:
    return dataclasses.replace(FAKE, parameters=EmulatedFakeParameters, emulated=True,
                               metrics=(*FAKE.metrics, *EMULATED_METRICS), **fields)


def test_an_emulated_report_leaves_out_and_counts_the_runs_the_monitor_flagged(monkeypatch,
                                                                               tmp_path):
    kind = emulated_fake(run=emulated_fake_run)
    register_fake(monkeypatch, kind)
    tiny = experiments.loads(FAKE_FILE, "tiny.yaml")
    run(tiny, tmp_path)
    written = report.write(tiny, tmp_path)
    assert written.unfaithful == 1
    summary = pd.read_csv(tmp_path / "summary.csv", dtype={"value": str})
    kept = summary[(summary["value"] == "4") & (summary["policy"] == "p")
                   & (summary["metric"] == "y")].iloc[0]
    # Repetitions 0 and 2 of y = 2x + repetition at x = 4: 8 and 10.
    assert (kept["n"], kept["mean"]) == (2, 9.0)
    text = written.path.read_text()
    assert "1 of 21 runs have no clean fidelity verdict" in text
    assert "| along-x | 4 | p | 1 | 3 |" in text


def test_flagged_runs_are_run_again_on_request_and_their_rows_replaced(monkeypatch, tmp_path):
    register_fake(monkeypatch, emulated_fake(run=emulated_fake_run))
    tiny = experiments.loads(FAKE_FILE, "tiny.yaml")
    run(tiny, tmp_path)
    assert run(tiny, tmp_path).ran == 0  # resuming finds every cell written, flagged or not
    register_fake(monkeypatch, emulated_fake(run=lambda cell: [
        row | {FIDELITY.name: 1} for row in fake_run(cell)]))
    again = experiments.loads(FAKE_FILE, "tiny.yaml")
    assert (run(again, tmp_path, rerun_unfaithful=True).ran, report.write(again, tmp_path)
            .unfaithful) == (1, 0)
    results = read_results(tmp_path / RESULTS, again.kind)
    assert len(results) == 2 * 21 and (results[FIDELITY.name] == 1).all()


def test_results_written_before_a_metric_existed_resume_with_it_empty(fake, tmp_path):
    run(fake, tmp_path)
    path = tmp_path / RESULTS
    pd.read_csv(path).drop(columns="z").to_csv(path, index=False)
    assert run(fake, tmp_path).ran == 0
    assert read_results(path, fake.kind)["z"].isna().all()
    pd.read_csv(path).assign(w=1).to_csv(path, index=False)
    with pytest.raises(ResultsMismatch):
        run(fake, tmp_path)


def test_a_run_without_a_verdict_is_left_out_and_an_emulated_kind_must_carry_one(monkeypatch,
                                                                                tmp_path):
    with pytest.raises(ValueError, match="fidelity_ok, time_dilation missing"):
        dataclasses.replace(FAKE, parameters=EmulatedFakeParameters, emulated=True)
    with pytest.raises(ValueError, match="EmulatedParameters"):
        dataclasses.replace(FAKE, emulated=True, metrics=(*FAKE.metrics, *EMULATED_METRICS))
    kind = emulated_fake()
    register_fake(monkeypatch, kind)
    tiny = experiments.loads(FAKE_FILE, "tiny.yaml")
    run(tiny, tmp_path)  # fake_run records no verdict
    written = report.write(tiny, tmp_path)
    assert written.unfaithful == len(list(tiny.cells())) == 21
    assert "21 of 21 runs have no clean fidelity verdict" in written.path.read_text()


# The live_edge_model cell runner


def tiny_cell(policy: str, **parameters):
    values = {"viewers": 12, "servers": 2, "periods": 3, "churn": 0.25} | parameters
    return next(cell for cell in experiments.Experiment(
        "t.yaml", "t", live_edge.KIND, 3, 1, live_edge.Parameters(**values),
        (experiments.Sweep("s", "viewers", (12,), ("12",), (policy,),
                           (live_edge.Parameters(**values),), {}),), {}).cells())


@pytest.mark.parametrize("policy", ["lua", "df", "mhcp", "random"])
def test_the_runner_reports_what_evaluate_says_period_by_period(policy):
    cell = tiny_cell(policy)
    rows = live_edge.run_cell(cell)
    assert len(rows) == 3
    pool = cell.parameters.pool(cell.seed)
    rng = np.random.default_rng([cell.seed, 1])
    history = {v.name: (v.previous_server, v.previous_bitrate) for v in pool.viewers}
    for period, row in enumerate(rows):
        # Three viewers leave and three arrive each period; the rest keep their history.
        watching = []
        for viewer in pool.viewers[3 * period:3 * period + 12]:
            server, bitrate = history.get(viewer.name, (None, None))
            watching.append(dataclasses.replace(viewer, previous_server=server,
                                                previous_bitrate=bitrate))
        instance = dataclasses.replace(pool, viewers=tuple(watching))
        allocation = ALLOCATORS[policy](instance, rng)
        judged = evaluate(instance, allocation)
        assert row["objective"] == pytest.approx(judged.objective)
        assert row["mean_latency_ms"] == pytest.approx(judged.mean_latency / MS)
        assert row["mean_bitrate_mbps"] == pytest.approx(judged.mean_bitrate / MBPS)
        assert (row["switches"], row["drops"], row["served"], row["unassigned"]) == (
            judged.switches, judged.drops, judged.served, judged.unassigned)
        assert row["solver_status"] is None and row["decision_ms"] > 0
        history = {v.name: allocation.assignment.get(v.name, (None, None)) for v in watching}


def test_later_periods_carry_the_allocation_forward():
    # A viewer kept on its server at its rung pays neither penalty: with no churn and no
    # scarcity LUA repeats itself and period 2 has no switch and no drop.
    rows = live_edge.run_cell(tiny_cell("lua", churn=0.0, bandwidth=1000, compute=1000))
    assert rows[0]["switches"] > 0  # the generator's history
    assert all(row["switches"] == 0 and row["drops"] == 0 for row in rows[1:])


def test_the_optimal_cell_reports_its_solver():
    (row,) = live_edge.run_cell(tiny_cell("optimal", periods=1))
    assert row["solver_status"] == 0 and row["solver_gap"] == pytest.approx(0, abs=1e-6)


def test_a_model_line_is_drawn_beside_the_measured_points(fake, tmp_path):
    # z as a "model" of y: y's figure draws z as each policy's line and y as its points.
    with_line = dataclasses.replace(FAKE, lines={"y": "z"})
    experiment = dataclasses.replace(fake, kind=with_line)
    run(experiment, tmp_path)
    report.write(experiment, tmp_path)
    svg = (tmp_path / "plots" / "along-x-y.svg").read_text()
    assert "p, z" in svg and "q, z" in svg


def test_an_emulated_cell_run_again_reads_its_new_run_not_an_earlier_one(tmp_path, monkeypatch):
    # `edgebed run` needs root and Mininet (tests/integration/live_edge/test_live_edge_runs.py runs it);
    # here a stand-in makes the run directory each real run makes, numbered by call.
    from experiments.kinds.live_edge import emulation
    from experiments.sweeps import kinds as sweep_kinds  # where an emulated cell's run is made

    made = []

    def made_run(command, **_):
        run_dir = Path(command[command.index("--runs-dir") + 1]) / f"run-{len(made)}"
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text('{"fidelity": {"ok": %s}}'
                                              % ("true" if made else "false"))
        made.append(run_dir)
        return sweep_kinds.subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(sweep_kinds.subprocess, "run", made_run)
    monkeypatch.setattr(emulation, "viewer_qoe", lambda run_dir: [run_dir])
    monkeypatch.setattr(emulation, "run_totals", lambda rows: {"run": rows[0]})
    monkeypatch.setattr(emulation, "placement", lambda run_dir, rows: ({"v": ("e", 1.0)}, 0))
    monkeypatch.setattr(emulation, "run_playout", lambda run_dir: {})
    cell = next(experiments.Experiment(
        "t.yaml", "t", emulation.KIND, 3, 1, emulation.Parameters(runs_dir=str(tmp_path)),
        (experiments.Sweep("s", "G", (5,), ("5",), ("lua",),
                           (emulation.Parameters(runs_dir=str(tmp_path)),), {}),), {}).cells())
    first, again = emulation.run_cell(cell), emulation.run_cell(cell)
    placed = {"unconfirmed": 0, "placement": "v=e@1"}
    assert first == [{"run": made[0], "fidelity_ok": 0, "time_dilation": 1} | placed]
    assert again == [{"run": made[1], "fidelity_ok": 1, "time_dilation": 1} | placed]


def test_an_emulated_cell_runs_at_its_time_dilation_under_the_same_cell_id(tmp_path,
                                                                           monkeypatch):
    from experiments.kinds.dispatch import emulation
    from experiments.sweeps import kinds as sweep_kinds

    commands = []

    def made_run(command, **_):
        run_dir = Path(command[command.index("--runs-dir") + 1]) / f"run-{len(commands)}"
        run_dir.mkdir(parents=True)
        # What a run at --dilate auto leaves beside its run: the calibration's runs.
        (run_dir.parent / "calibration").mkdir(exist_ok=True)
        (run_dir / "summary.json").write_text('{"fidelity": {"ok": true}, "time_dilation": 4}')
        commands.append(command)
        return sweep_kinds.subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(sweep_kinds.subprocess, "run", made_run)
    run = sweep_kinds.measured_run(emulation.variables, lambda run_dir: {"viewers": 6})

    def cell(**fields):
        parameters = emulation.Parameters(runs_dir=str(tmp_path), **fields)
        return sweep_kinds.Cell("e", "s", "gop_cache", "False", "probe", 0, 7, parameters)

    plain, dilated, auto = cell(), cell(time_dilation=4), cell(time_dilation="auto")
    assert plain.id == dilated.id == auto.id
    assert run(dilated) == [{"viewers": 6, "fidelity_ok": 1, "time_dilation": 4}]
    run(auto)
    run(plain)
    assert [c[c.index("--dilate") + 1] if "--dilate" in c else None for c in commands] == [
        "4.0", "auto", None]
    with pytest.raises(ValueError):
        cell(time_dilation=0.5)


def test_a_metric_named_like_a_runner_column_is_refused_and_no_kind_has_one():
    from experiments.sweeps.runner import columns
    clash = dataclasses.replace(FAKE, metrics=(Metric("period", "period"), Metric("y", "y")))
    with pytest.raises(ValueError, match="kind fake: metric.s. period take the names"):
        columns(clash)
    for kind in experiments.registered_kinds().values():
        header = columns(kind)
        assert len(header) == len(set(header)), kind.name


def test_a_decision_whose_stream_never_arrived_has_no_measured_latency_and_no_qoe():
    # From a real run on a saturated machine: viewer1's first decision (stream-1, 2.5 Mbit/s)
    # was replaced 90 ms later, before any of its packets came; the run's tables stopped the
    # experiment with a KeyError.
    from experiments.kinds.live_edge.emulation_measures import (decision_qoe, run_totals,
                                                                viewer_qoe)

    run_dir = Path(__file__).parent / "live_edge" / "recorded" / "unserved"
    rows = decision_qoe(run_dir)
    [replaced] = [row for row in rows if (row["viewer"], row["flow"]) == ("viewer1", "stream-1")]
    assert replaced["goodput_bps"] == 0 and replaced["qoe_measured"] == 0
    assert math.isnan(replaced["latency_measured_ms"]) and replaced["qoe_model"] != 0
    last = {row["viewer"]: row for row in viewer_qoe(run_dir)}
    assert last["viewer1"]["flow"] == "stream-5" and last["viewer1"]["goodput_bps"] > 0
    served = dict(last["viewer1"])
    unserved = served | {"latency_measured_ms": math.nan, "goodput_bps": 0.0, "qoe_measured": 0.0}
    totals = run_totals([served, unserved])
    assert totals["latency_measured_ms"] == served["latency_measured_ms"]
    assert totals["goodput_mbps"] == served["goodput_bps"] / 2e6
