"""surveillance at model level: the ``surveillance_model`` kind of experiment cell.

A cell is one run of the paper's test (:func:`controller.policies.surveillance.model.simulate`)
with one balancer: the repetition's seed draws the request trace, so every balancer of a
repetition serves the same requests. A cell is one row (one period) of the run's figures. The
report adds the paper's Fig. 3: per-node CPU and bandwidth utilisation over time, the original
dynamic feedback against the improved algorithm, on the first sweep's first value and first
repetition.
"""

from __future__ import annotations

from controller.policies.surveillance.balancer import BALANCERS
from controller.policies.surveillance.model import Workload, simulate
from experiments.sweeps.kinds import Cell, Claim, Kind, Metric, Panel, TimeFigure

METRICS = (
    Metric("cv_load", "CV of load L across nodes"),
    Metric("cv_cpu", "CV of CPU utilisation across nodes"),
    Metric("cv_bandwidth", "CV of bandwidth utilisation across nodes"),
    Metric("peak_load", "peak load L"),
    Metric("peak_cpu", "peak CPU utilisation"),
    Metric("peak_bandwidth", "peak bandwidth utilisation"),
    Metric("overloads", "overload events (L passing 0.9)"),
    Metric("heavy_max_s", "longest heavy spell", "s"),
    Metric("heavy_unnoticed_max_s", "longest heavy spell the balancer did not know of", "s"),
    Metric("notifications", "active notifications"),
    Metric("rejected", "rejected requests"),
    Metric("rejected_by_balancer", "requests the balancer refused"),
    Metric("rejected_by_node", "requests a full node refused"),
    Metric("clients_per_stream", "clients per camera stream"),
    Metric("cascades", "cascades set up"),
    Metric("max_depth", "deepest cascade", "hops"),
    Metric("mean_depth", "mean cascade depth of a session", "hops"),
    Metric("cascade_mbps", "cascade bandwidth", "Mbit/s"),
    Metric("cascade_share", "cascade bandwidth over client bandwidth"),
    Metric("decision_us", "decision time", "µs"),
)

_COOPERATION = ("The original sends every later request for a camera to the node receiving it, "
                "the improved one moves the clients of a loaded origin to a light helper; "
                "how much that evens the nodes out depends on how many clients share a "
                "stream, which the session length sets (the paper does not give it).")
_WEIGHTS = ("Weighted least tasks balances T/W, and W comes from z-scores of the hardware "
            "labels (shifted positive), not from the nodes' true capacity ratio, so where the "
            "weights and a node's link or CPU share differ, weighted least tasks loads that "
            "resource relatively more or less than the others. The original's queues see the "
            "reported load and partly correct for the weights.")
CLAIMS = {
    "cv_improved_vs_original": Claim(
        "CV of load L, improved against original dynamic feedback", "cv_load",
        "sv_improved", "sv_feedback", relative=True, why=_COOPERATION + " " + _WEIGHTS),
    "cv_bandwidth_improved_vs_original": Claim(
        "CV of bandwidth utilisation, improved against original", "cv_bandwidth",
        "sv_improved", "sv_feedback", relative=True, why=_COOPERATION),
    "cv_cpu_improved_vs_original": Claim(
        "CV of CPU utilisation, improved against original", "cv_cpu",
        "sv_improved", "sv_feedback", relative=True, why=_WEIGHTS),
    "cv_improved_vs_wlc": Claim(
        "CV of load L, improved against IPVS wlc", "cv_load", "sv_improved", "sv_wlc",
        relative=True, why=_COOPERATION),
    "cv_improved_vs_p2c": Claim(
        "CV of load L, improved against power of two choices", "cv_load",
        "sv_improved", "sv_p2c", relative=True, why=_COOPERATION),
}

ABOUT = """\
**Model level, no emulation.** Each cell simulates the paper's test (SimPy) with one balancer:
cameras, a hot tenth of them requested 10x as often, requests at uniform random times, sessions
of exponential length, node servers of different CPU, memory and link whose load L is computed
from the streams they carry (each stream received or sent costs its bitrate on the link and
CPU per Mbit/s), reported every period, and at once when a node turns heavy for the balancer
with active notification (the improved one). A node refuses a client it could not send to (a
rejection by the node); a balancer may refuse too. Every balancer shares streams: a request
for a camera already streaming goes to the node receiving it, except that the improved
algorithm may hand it to a helper fed by a cascade. See
`controller/policies/surveillance/model.py` for the resource model and its parameters.

**What is ours, not the paper's.** The paper's Table 1 (the nodes' hardware) and eq. 4 are
lost: the node classes are ~1x/2x/4x in CPU, memory, links and disk (the values are in the
model's node table) and MAXL is the R-weighted sum of z-scores shifted so the weakest node
sits at 1. The paper does not give session lengths, a report period or the CPU cost of a
stream: sessions are exponential (swept), the period 5 s, the CPU 0.04 GHz per Mbit/s (so CPU
and bandwidth are of the same order, as in the paper's Fig. 3). Disk is no indicator (nothing
is stored, as in the paper's model), so R is rescaled over CPU, memory and bandwidth. The
balance figure is ours too (the paper shows curves only): the coefficient of variation of
utilisation across nodes at each 1-s sample, averaged over the run. The goal of at least 30%
lower CV than the original is the issue's, not the paper's. Decision times are this machine's."""


def run_cell(cell: Cell) -> list[dict[str, float]]:
    return [simulate(cell.parameters, cell.policy, cell.seed).metrics]


def figures(experiment) -> list[TimeFigure]:
    """The paper's Fig. 3 on the first sweep's first value, first repetition."""
    # Not at the top: experiments.sweeps.experiment finds the kinds, this module among them.
    from experiments.sweeps.experiment import repetition_seed

    sweep = experiment.sweeps[0]
    workload = sweep.parameters[0]
    seed = repetition_seed(experiment.seed, sweep.name, sweep.labels[0], 0)
    runs = {name: simulate(workload, name, seed).samples
            for name in ("sv_feedback", "sv_improved")}
    panels = []
    for column, what in (("cpu", "CPU"), ("bandwidth", "bandwidth")):
        for letter, name in zip("ab" if column == "cpu" else "cd", runs):
            samples = runs[name]
            lines = {node: (rows["time_s"].to_numpy(), 100 * rows[column].to_numpy())
                     for node, rows in samples.groupby("node", sort=False)}
            panels.append(Panel(f"({letter}) {what}, {name}", "time (s)",
                                f"{what} utilisation (%)", lines))
    caption = (f"The paper's Fig. 3 on sweep `{sweep.name}`, {sweep.parameter} = "
               f"{sweep.labels[0]}, repetition 1 (seed {seed}): per-node CPU (a, b) and "
               "bandwidth (c, d) utilisation every second, the original dynamic feedback (a, c) "
               "against the improved algorithm (b, d), on the same requests.")
    return [TimeFigure(f"{sweep.name}-fig3", f"{experiment.name}: utilisation over time",
                       caption, tuple(panels))]


KIND = Kind(name="surveillance_model", parameters=Workload, policies=tuple(BALANCERS),
            run=run_cell, metrics=METRICS,
            plots=("cv_load", "cv_cpu", "cv_bandwidth", "peak_load", "overloads",
                   "heavy_unnoticed_max_s", "rejected", "clients_per_stream", "max_depth",
                   "cascade_mbps", "decision_us"),
            claims=CLAIMS, about=ABOUT, figures=figures)
KINDS = (KIND,)
