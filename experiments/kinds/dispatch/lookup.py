"""dispatch emulated, back-to-source lookup: the ``dispatch_lookup`` kind of experiment cell,
one ``edgebed run`` of ``topologies/dispatch/dispatch.yaml`` per cell in which the three dispatch
centers look streams up among themselves by broadcast or by following a hint (the cell's
policy), on the same seeds.

Everything comes from what the asking centers recorded (``agents/dispatch/dispatch_center.py``): one
row per lookup (``lookups``: its mode, the stream's owner, the hint, the outcome, messages,
retransmissions and time) and one per reply taken in (``lookup_replies``: its round trip).
Beside the measured lookups, the pure model
(:class:`controller.policies.dispatch.rooms.Directory`) answers the very same lookups with
the round trips measured between the centers in the run, no loss and no queueing.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field

from controller.policies.dispatch.rooms import Directory, LookupMode
from experiments.measurements import host_addresses, read_table
from experiments.report import policy_means, swept_values, versus
from experiments.sweeps.kinds import (EMULATED_METRICS, Cell, EmulatedParameters, Kind, Metric,
                                      measured_run)

POLICIES = tuple(mode.value for mode in LookupMode)
# The centers' regions in the scenario (each dispatch host's region label), and the pairs of
# them whose round trips the rows report, in this order.
REGIONS = ("cn", "us", "eu")
PAIRS = tuple(itertools.combinations(REGIONS, 2))
# A lookup is "as the model says" within this much of the model's time: well above the
# emulated links' accuracy (mean delay within 0.5 ms, p99 within 3 ms), well below the
# shortest round trip between centers (us-eu, 70 ms) and a timeout.
WITHIN_MS = 10.0
FINISHED = ("found", "nowhere")
# The columns of the agent's tables read here.
LOOKUP_COLUMNS = ("node", "stream", "mode", "owner", "hint", "seconds", "messages",
                  "retransmissions", "fell_back", "outcome", "found_node")
REPLY_COLUMNS = ("node", "center", "rtt_ms")


class Parameters(EmulatedParameters):
    """One cell: the scenario, for how long, how often each center starts a lookup, the share
    of stale hints, the cn-us link's burst-loss p and where the run directories go."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field("topologies/dispatch/dispatch.yaml", description="the scenario file")
    duration: float = Field(14.0, gt=0, description="run length (s)")
    rate: float = Field(4.0, gt=0, description="lookups a second each center starts "
                                               "(Poisson)")
    stale_share: float = Field(0.0, ge=0, le=1, description="share of hints naming a center "
                                                            "without the stream")
    border_loss_p: str = Field("0.5%", description="Gilbert-Elliott p of the cn-us link")


def variables(cell: Cell) -> dict[str, str]:
    """The scenario's variables for ``cell``'s policy and parameters."""
    parameters: Parameters = cell.parameters
    duration = f"{parameters.duration:g}s"
    return {"EDGEBED_LOOKUP_MODES": cell.policy,
            "EDGEBED_LOOKUP_RATE": f"{parameters.rate:g}",
            "EDGEBED_LOOKUP_STALE": f"{parameters.stale_share:g}",
            "EDGEBED_BORDER_LOSS_P": parameters.border_loss_p,
            "EDGEBED_DURATION": duration,
            # The scenario cuts the cn-eu link mid-run (its failover study): dcn-deu queries
            # would then go round by the us, 50 ms more each way, against the one round trip
            # per pair the model takes. At the run's end the cut changes no lookup.
            "EDGEBED_CUT_AT": duration}


def table(run_dir: Path, name: str, columns: Sequence[str]) -> pd.DataFrame:
    """The run's table ``name`` as text columns ``columns`` (none of its rows when the run
    wrote none)."""
    return pd.DataFrame(read_table(run_dir, name), columns=list(columns), dtype=str)


def pair_rtts(replies: pd.DataFrame, address: Mapping[str, str]) -> dict[tuple[str, str], float]:
    """Each unordered pair of centers' round trip (ms): the median ``rtt_ms`` of the replies
    between them (``replies``, the asker by host name, resolved by ``address``), whichever of
    the two asked. Keys are the two addresses, sorted; pairs without a reply are missing."""
    ends = pd.DataFrame({"asker": [address[name] for name in replies["node"]],
                         "responder": replies["center"]}, index=replies.index)
    pairs = pd.DataFrame({"a": ends.min(axis=1), "b": ends.max(axis=1),
                          "rtt_ms": pd.to_numeric(replies["rtt_ms"])})
    return pairs.groupby(["a", "b"])["rtt_ms"].median().to_dict()


def modelled(lookups: pd.DataFrame, address: Mapping[str, str], centers: Sequence[str],
             rtt_ms: Mapping[tuple[str, str], float]) -> pd.DataFrame:
    """The model's answer to each of ``lookups`` (rows of the ``lookups`` table): its messages
    and its time (ms, ``model_ms``), asked at the same center (``address`` by host name) for
    the stream registered at the same owner, in the same mode with the same hint, among
    ``centers`` with the round trips ``rtt_ms`` (:func:`pair_rtts`). NaN for every lookup when
    a pair's round trip is missing: the model needs them all."""
    answers = pd.DataFrame(float("nan"), index=lookups.index,
                           columns=["model_messages", "model_ms"])
    if len(rtt_ms) < len(list(itertools.combinations(centers, 2))):
        return answers
    directory = Directory(centers, {pair: ms / 1e3 for pair, ms in rtt_ms.items()})
    for index, row in lookups.iterrows():
        # Registered for this lookup alone, so each lookup sees its own owner. The node named
        # is not compared (and empty when the run's lookup found none).
        directory.register(row["owner"], row["stream"], row["found_node"])
        answer = directory.lookup(address[row["node"]], row["stream"], LookupMode(row["mode"]),
                                  hint=row["hint"] or None)
        directory.unregister(row["owner"], row["stream"])
        answers.loc[index] = answer.messages, 1e3 * answer.seconds
    return answers


def measure(run_dir: Path) -> dict[str, float]:
    """One row of the run's metrics (:data:`METRICS`). Unfinished lookups (the run ended
    first) are only counted; failed ones (retransmissions ran out) count in the messages,
    retransmissions and fallbacks but are not timed."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    nodes = resolved["topology"]["nodes"]
    address = host_addresses(nodes)
    center = {node["labels"]["region"]: address[name] for name, node in nodes.items()
              if node.get("role") == "dispatch"}
    centers = [center[region] for region in REGIONS]
    lookups = table(run_dir, "lookups", LOOKUP_COLUMNS)
    rtt_ms = pair_rtts(table(run_dir, "lookup_replies", REPLY_COLUMNS), address)
    outcome = lookups["outcome"]
    counted = lookups[outcome != "unfinished"]
    finished = lookups[outcome.isin(FINISHED)]
    measured_ms = 1e3 * pd.to_numeric(finished["seconds"])
    model = modelled(finished, address, centers, rtt_ms)
    over_ms = (measured_ms - model["model_ms"]).dropna()
    return {"lookups_finished": len(finished),
            "lookups_nowhere": int((outcome == "nowhere").sum()),
            "lookups_failed": int((outcome == "failed").sum()),
            "lookups_unfinished": int((outcome == "unfinished").sum()),
            "messages_per_lookup": pd.to_numeric(counted["messages"]).mean(),
            "retransmissions_per_lookup": pd.to_numeric(counted["retransmissions"]).mean(),
            "fallback_share": counted["fell_back"].eq("True").mean(),
            "lookup_ms_mean": measured_ms.mean(),
            "lookup_ms_p50": measured_ms.quantile(0.5),
            "lookup_ms_p95": measured_ms.quantile(0.95),
            "model_messages_per_lookup": model["model_messages"].mean(),
            "model_ms_mean": model["model_ms"].mean(),
            "model_ms_p95": model["model_ms"].quantile(0.95),
            "over_model_ms_mean": over_ms.mean(),
            "within_10ms_share": over_ms.abs().le(WITHIN_MS).mean(),
            **{f"rtt_{a}_{b}_ms": rtt_ms.get(tuple(sorted((center[a], center[b]))),
                                             float("nan")) for a, b in PAIRS}}


METRICS = (Metric("lookups_finished", "lookups answered (found, or nowhere)"),
           Metric("lookups_nowhere", "lookups every asked center said \"not here\" to"),
           Metric("lookups_failed", "lookups whose retransmissions ran out"),
           Metric("lookups_unfinished", "lookups still open when the run ended"),
           Metric("messages_per_lookup", "messages per lookup (queries, retransmissions "
                  "and replies; mean)"),
           Metric("retransmissions_per_lookup", "queries sent again per lookup (mean)"),
           Metric("fallback_share", "lookups whose hint was stale (then broadcast)",
                  "share"),
           Metric("lookup_ms_mean", "lookup time, start to answer, mean", "ms"),
           Metric("lookup_ms_p50", "lookup time, median", "ms"),
           Metric("lookup_ms_p95", "lookup time, p95", "ms"),
           Metric("model_messages_per_lookup", "model: messages per lookup (mean)"),
           Metric("model_ms_mean", "model: lookup time at the measured round trips, mean",
                  "ms"),
           Metric("model_ms_p95", "model: lookup time, p95", "ms"),
           Metric("over_model_ms_mean", "measured minus model time per lookup, mean", "ms"),
           Metric("within_10ms_share", "lookups within 10 ms of the model", "share"),
           *(Metric(f"rtt_{a}_{b}_ms", f"median round trip between the {a} and {b} centers",
                    "ms") for a, b in PAIRS),
           *EMULATED_METRICS)
PLOTS = ("messages_per_lookup", "lookup_ms_mean", "lookup_ms_p95", "retransmissions_per_lookup",
         "fallback_share", "over_model_ms_mean", "within_10ms_share", "lookups_failed")
LINES = {"messages_per_lookup": "model_messages_per_lookup", "lookup_ms_mean": "model_ms_mean",
         "lookup_ms_p95": "model_ms_p95"}

ABOUT = """\
Each cell is one emulated run of `topologies/dispatch/dispatch.yaml` (real packets on a Mininet
network, userspace Open vSwitch; the scenario's stream, seven media nodes and six viewers run
beside) in which each of the three regional dispatch centers, dcn (cn), dus (us) and deu
(eu), starts back-to-source lookups, Poisson at `rate` a second, for streams registered at
another center, and answers the others' queries (`agents/dispatch/dispatch_center.py`; the lookup's
state machine is `controller/policies/dispatch/lookup.py`, the one the model runs too). The policy is the lookup
mode:

* `broadcast` — the asking center queries both other centers at once; the answer is in at
  the owner's "found" (the third center's "not here" still arrives and is counted);
* `hint` — it queries the center the room's signalling names; `stale_share` of the hints are
  stale and name the third center (neither owner nor asker), whose "not here" sends the query
  on by broadcast to the center not yet asked (a fallback).

The configured round trips are cn-us 160 ms, cn-eu 180 ms and us-eu 70 ms (twice the links'
one-way delays). The cn-us link has Gilbert-Elliott burst loss, p `border_loss_p` and r 30%
(mean loss p / (p + 30%) each way: 1.6% at 0.5%, 9.1% at 3%), cn-eu p 0.5%, us-eu none; a
query or reply lost costs the agent's timeout, after which the unanswered centers are asked
again, a few times, and then the lookup has failed. The scenario's cut of the cn-eu link is
moved to the run's end, so every pair keeps one path while the centers look up.

Measured, from the asking centers' tables: the lookups answered (`lookups_finished`: found,
or "not here" from every center asked, `lookups_nowhere`), failed (retransmissions ran out)
and still open when the run ended (`lookups_unfinished`, left out of everything else); per
answered or failed lookup the messages (queries, retransmissions included, and replies taken
in, late ones too), retransmissions and whether it fell back; per answered lookup its time
from start to answer (mean, median, p95). Beside them, the pure model
(`controller.policies.dispatch.rooms.Directory`, the lookup of reports/dispatch/model) asked
the very same answered lookups (asker, owner, mode, hint), each pair's round trip the median
of the replies measured between that pair in the run (`rtt_*_ms`, either center asking),
without loss or queueing: its messages and time, and each lookup's measured minus model time
(mean, and the share within 10 ms).

What the model says for three centers: a broadcast takes 4 messages and the owner's round
trip; a fresh hint 2 messages and the same round trip; a stale hint 4 messages and two round
trips, the wrong center's and then the owner's. The emulation adds what the model leaves out:
loss (each lost query or reply a timeout and a retransmission), the centers' and hosts'
processing and queues, and the machine's load. Not reproduced: more than three centers (the
scenario has three, so a hint saves at most 2 messages of 4, where the model's 10 centers
save 16 of 18) and the model's 10k clients.

Scale: a machine's, three centers at `rate` lookups a second each for the run's length
(at most about 170 lookups at 4 a second over 14 s, fewer answered), two repetitions; a p95 is that
of a few hundred lookups, and a count of failures moves by one with one lookup. Runs made
while other work loads the shared 2-core machine carry its queues in their times.
"""


def remarks(results: pd.DataFrame) -> list[str]:
    """Per sweep and value, the hint against the broadcast on the measured columns and the
    model's (means over the repetitions), and the round trips the model was given."""
    found = []
    for sweep, at, group in swept_values(results, by_number=True):
        counted = policy_means(group, POLICIES)
        if counted is None:
            continue
        means, runs = counted
        h = means.loc["hint"]

        def sides(metric: str, form: str) -> str:
            return versus(means, "hint", "broadcast", metric, form)

        rtts = ", ".join(f"{a}-{z} {means[f'rtt_{a}_{z}_ms'].mean():.0f}" for a, z in PAIRS)
        found.append(
            f"{sweep}, {at}, hint against broadcast (means "
            f"of {int(runs['hint'])} and {int(runs['broadcast'])} runs): "
            f"{sides('messages_per_lookup', '.2f')} messages per lookup (the model "
            f"{sides('model_messages_per_lookup', '.2f')}); "
            f"{sides('lookup_ms_mean', '.0f')} ms on average (the model "
            f"{sides('model_ms_mean', '.0f')} ms), p95 {sides('lookup_ms_p95', '.0f')} ms "
            f"(the model {sides('model_ms_p95', '.0f')} ms); measured minus model "
            f"{sides('over_model_ms_mean', '+.1f')} ms per lookup, "
            f"{sides('within_10ms_share', '.0%')} of lookups within {WITHIN_MS:g} ms of it; "
            f"{sides('retransmissions_per_lookup', '.3f')} retransmissions per lookup, "
            f"{sides('lookups_failed', '.1f')} lookups failed of "
            f"{sides('lookups_finished', '.0f')} answered; {h['fallback_share']:.0%} of the "
            f"hints fell back. Median round trips {rtts} ms.")
    return found


KINDS = (Kind(name="dispatch_lookup", parameters=Parameters, policies=POLICIES,
              run=measured_run(variables, measure),
              metrics=METRICS, plots=PLOTS, lines=LINES, about=ABOUT, remarks=remarks,
              emulated=True),)
