"""surveillance's experiment kind: every policy on one trace, the report with the paper's Fig. 3,
the readings of the original, load and admission, and the burst."""

from __future__ import annotations

from experiments import report
from experiments.sweeps import experiment, runner


def run(tmp_path, text: str):
    loaded = experiment.loads(text)
    runner.run(loaded, tmp_path)
    return loaded, runner.read_results(tmp_path / runner.RESULTS, loaded.kind)


def test_the_experiment_kind_runs_every_policy_on_one_trace_and_draws_fig3(tmp_path):
    loaded, results = run(tmp_path, """\
name: sv-tiny
kind: surveillance_model
seed: 1
repetitions: 2
policies: [sv_feedback, sv_feedback_greedy, sv_improved, sv_wlc]
base: {requests: 200, horizon_s: 120}
sweeps:
  - {name: session, vary: session_mean_s, values: [30, 900]}
paper:
  cv_improved_vs_original: {sweep: session, value: [-.inf, -30]}
  fig3a_greedy: {sweep: session, value: [5, .inf]}
""")
    assert len(results) == 2 * 2 * 4  # values x repetitions x policies, one row per cell
    # The policies of a repetition see one trace: same seed, same requests.
    assert results.groupby(["value", "repetition"])["seed"].nunique().eq(1).all()
    assert results["cv_load"].between(0, 2).all()
    assert (results.loc[results["policy"] != "sv_improved", "cascades"] == 0).all()
    written = report.write(loaded, tmp_path)
    assert (tmp_path / "plots" / "session-fig3.png").stat().st_size > 10_000
    text = written.path.read_text()
    assert "## Over time" in text and "(plots/session-fig3.png)" in text
    assert [h.key for h in written.headlines] == ["cv_improved_vs_original", "fig3a_greedy"]
    # 200 requests in 120 s of 30 s at 4 Mbit/s ask for 200 of the 700 Mbit/s; of 900 s,
    # 6,000: the second setting is overloaded.
    assert "| session | session_mean_s = 30 | 29% | feasible |" in text
    assert "| session | session_mean_s = 900 | 857% | overloaded |" in text


def test_a_burst_experiment_compares_active_notification_with_periodic_feedback(tmp_path):
    loaded, results = run(tmp_path, """\
name: sv-burst
kind: surveillance_model
seed: 1
repetitions: 2
policies: [sv_improved, sv_improved_periodic]
base: {requests: 200, horizon_s: 120, session_mean_s: 40, burst_at_s: 62.5,
       notify_when: queue}
sweeps:
  - {name: burst, vary: burst_requests, values: [30], paired: true}
""")
    assert (results.loc[results["policy"] == "sv_improved_periodic", "notifications"] == 0).all()
    written = report.write(loaded, tmp_path)
    assert (tmp_path / "plots" / "burst-burst.png").stat().st_size > 10_000
    assert not (tmp_path / "plots" / "burst-fig3.png").exists()  # no original in the sweep
    text = written.path.read_text()
    assert "Active notification against periodic feedback alone" in text
    assert "| burst | burst_requests = 30 | sv_improved_periodic |" in text
    first = results.loc[results["repetition"] == results["repetition"].min(), "seed"]
    assert f"(seed {first.iloc[0]})" in text  # the figure shows a run the cells made
