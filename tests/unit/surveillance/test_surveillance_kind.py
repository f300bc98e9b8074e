"""surveillance's experiment kind: every policy on one trace, the report with the paper's Fig. 3."""

from __future__ import annotations

from experiments import report
from experiments.sweeps import experiment, runner


def test_the_experiment_kind_runs_every_policy_on_one_trace_and_draws_fig3(tmp_path):
    loaded = experiment.loads("""\
name: sv-tiny
kind: surveillance_model
seed: 1
repetitions: 2
policies: [sv_feedback, sv_improved, sv_wlc]
base: {requests: 200, horizon_s: 120}
sweeps:
  - {name: session, vary: session_mean_s, values: [30, 90]}
paper:
  cv_improved_vs_original: {sweep: session, value: [-.inf, -30]}
""")
    runner.run(loaded, tmp_path)
    results = runner.read_results(tmp_path / runner.RESULTS, loaded.kind)
    assert len(results) == 2 * 2 * 3  # values x repetitions x policies, one row per cell
    # The policies of a repetition see one trace: same seed, same requests.
    assert results.groupby(["value", "repetition"])["seed"].nunique().eq(1).all()
    assert results["cv_load"].between(0, 2).all()
    assert (results.loc[results["policy"] != "sv_improved", "cascades"] == 0).all()
    written = report.write(loaded, tmp_path)
    assert (tmp_path / "plots" / "session-fig3.png").stat().st_size > 10_000
    text = written.path.read_text()
    assert "## Over time" in text and "(plots/session-fig3.png)" in text
    assert [h.key for h in written.headlines] == ["cv_improved_vs_original"]
