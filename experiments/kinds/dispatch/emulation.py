"""dispatch emulated: the ``dispatch_emulation`` kind of experiment cell, one ``edgebed run`` of
``topologies/dispatch/dispatch.yaml`` per cell, each mechanism against its absence on the same seeds:
access (``database`` / ``probe``), back-source paths (``direct`` / ``relay``) and failure handling
(``recompute`` / ``hot_standby``). Everything comes from what the run recorded: the controller's
first placement of each viewer (the database's pick), the media nodes' sessions (where a viewer's
media came from), the nodes' input (the stream's loss) and the viewers' own one-way delays."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agents.echo import PROBE_INTERVAL, PROBE_TIMEOUT, PROBES
from controller.policies.dispatch.quality import VIA
from experiments.kinds.dispatch.emulation_measures import (
    ACCESS, CUT_VIEWER, EARLY_S, FAILOVER, FAILOVER_WINDOW_S, IN_FLIGHT_S, INGEST, PRE_CUT_S,
    RELAY_FIX_GOAL, RELAYS, STALL_FREE_GOAL, STALL_S, STARTUP_GOAL, measure)
from experiments.kinds.dispatch.emulation_remarks import remarks
from experiments.playout_columns import PLAYOUT_BUFFER_S, PLAYOUT_METRICS
from experiments.report import CONFIDENCE
from experiments.sweeps.kinds import (EMULATED_METRICS, Cell, Constant, EmulatedParameters, Kind,
                                      Metric, measured_run)


class Parameters(EmulatedParameters):
    """One emulated cell: the scenario, for how long, the database's error share (in and out
    of cn alike), the direct cn-us link's burst-loss p, whether media nodes keep a GOP cache
    and viewers probe in parallel (startup), whether the media hops recover lost packets by
    NACK, and where the run directories go."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field("topologies/dispatch/dispatch.yaml", description="the scenario file")
    duration: float = Field(14.0, gt=0, description="run length (s)")
    database_error: float = Field(0.0, ge=0, le=1, description="clients the database "
                                                                "misplaces")
    border_loss_p: str = Field("0.5%", description="Gilbert-Elliott p of the cn-us link")
    gop_cache: bool = Field(False, description="media nodes send a joining viewer the frames "
                                               "since the latest I frame first")
    parallel_probes: bool = Field(False, description="viewers probe their candidates all at "
                                                     "once, not in turn")
    nack: bool = Field(False, description="every media hop asks the one before it for the "
                                          "packets it lost (NACK), which keeps a send buffer")


def variables(cell: Cell) -> dict[str, str]:
    """The scenario's variables for ``cell``'s policy and parameters; the policy says which
    mechanism is on:

    * ``database`` / ``probe`` — access: each viewer takes the database's pick (one
      candidate), or probes three ranked candidates with ICMP echoes and confirms the best; the
      database is wrong for ``database_error`` of the clients in and out of cn (seeded by the
      cell's seed); relays off, so only access differs;
    * ``direct`` / ``relay`` — back-source paths: never relayed, or relayed through hk1 when a
      media node's probes show its direct path from the origin poor by VIA's thresholds;
      viewers probe (the database right), the direct cn-us link's Gilbert-Elliott p is
      ``border_loss_p``;
    * ``recompute`` / ``hot_standby`` — failure handling when the scheduled cut takes the cn-eu
      link down mid-stream: the controller recomputes the routes after the switch reports the
      port down, or every switch already holds the standby route in an OpenFlow fast-failover
      group; viewers probe (the database right), relays off.
    """
    parameters: Parameters = cell.parameters
    access = cell.policy in ACCESS
    # EDGEBED_SEED is the cell's seed already (emulated_run sets it).
    return {"EDGEBED_DATABASE_SEED": str(cell.seed % 2**32),
            "EDGEBED_CANDIDATES": "1" if cell.policy == "database" else "3",
            "EDGEBED_DATABASE_ERROR": f"{parameters.database_error:g}" if access else "0",
            "EDGEBED_DATABASE_ERROR_ABROAD": f"{parameters.database_error:g}" if access
            else "0",
            "EDGEBED_RELAYS": "true" if cell.policy == "relay" else "false",
            "EDGEBED_FAST_FAILOVER": "false" if cell.policy == "recompute" else "true",
            "EDGEBED_BORDER_LOSS_P": parameters.border_loss_p,
            "EDGEBED_GOP_CACHE": str(parameters.gop_cache).lower(),
            "EDGEBED_PARALLEL_PROBES": str(parameters.parallel_probes).lower(),
            "EDGEBED_NACK": str(parameters.nack).lower(),
            "EDGEBED_DURATION": f"{parameters.duration:g}s"}



METRICS = (Metric("misplaced_by_database", "viewers the database placed abroad"),
           Metric("served_abroad", "viewers served from another region"),
           Metric("access_rtt_ms", "mean round trip to the serving node (configured path)",
                  "ms"),
           Metric("cross_border_node_loss_pct",
                  "stream loss at the nodes of viewers outside cn", "%"),
           Metric("poor_viewers", f"viewers poor by VIA (node loss > {VIA.loss:.1%} or RTT > "
                                  f"{1e3 * VIA.rtt:.0f} ms)"),
           Metric("delay_p50_ms", "mean of viewers' median one-way delay", "ms"),
           Metric("relayed_flows", "flows the origin sent through hk1"),
           Metric("failover_gap_ms", f"{CUT_VIEWER}'s longest wait for a whole frame after "
                  "the cn-eu cut (valid runs)", "ms"),
           Metric("failover_frames_lost", f"frames {CUT_VIEWER} lost from the cut to "
                  f"{FAILOVER_WINDOW_S:g} s after (valid runs)"),
           Metric("failover_valid", f"runs receiving normally before the cut ({CUT_VIEWER}) "
                  f"and throughout ({INGEST})"),
           Metric("failover_measured_gap_ms", "failover_gap_ms as measured, valid or not",
                  "ms"),
           Metric("failover_measured_frames_lost",
                  "failover_frames_lost as measured, valid or not"),
           Metric("failover_wait_before_ms", f"{CUT_VIEWER}'s longest wait for a whole frame "
                  f"in the {PRE_CUT_S:g} s before the cut", "ms"),
           Metric("failover_ingest_wait_ms", f"{INGEST}'s longest wait for a whole frame from "
                  f"{PRE_CUT_S:g} s before the cut to {FAILOVER_WINDOW_S:g} s after", "ms"),
           Metric("failover_reroute_ms", "the controller's recomputed routes installed, after "
                  "the cut", "ms"),
           *PLAYOUT_METRICS,
           Metric("early_stall_viewers", f"viewers whose first stall came within {EARLY_S:g} s "
                  "of their startup"),
           Metric("cached_kbytes", "bytes media nodes sent from their GOP caches", "kB"),
           Metric("catch_up_max_ms", "longest GOP-cache backlog, admission to drained", "ms"),
           Metric("playout_lag_mean_ms", "mean lag of the player behind the source", "ms"),
           Metric("viewers_served", "viewers served"),
           Metric("viewers", "viewers in the scenario"),
           *EMULATED_METRICS,
           Metric("network_kept_up", "runs whose wires kept time and emulator-made loss "
                  "stayed within its limit"))
PLOTS = ("misplaced_by_database", "served_abroad", "access_rtt_ms",
         "cross_border_node_loss_pct", "poor_viewers", "delay_p50_ms", "failover_gap_ms",
         "failover_frames_lost", "failover_valid", "failover_reroute_ms",
         "uninterrupted_viewers", "stalls", "stall_ms", "freeze_share_pct", "startup_mean_ms",
         "startup_max_ms", "startups_under_1s", "first_frame_mean_ms", "early_stall_viewers",
         "cached_kbytes", "playout_lag_mean_ms", "viewers_served")

# The viewers' playout delay and LiveNet's goals as the dispatch reports of emulated runs
# tabulate them.
PLAYOUT_DELAY = Constant("PLAYOUT_BUFFER_S", f"{PLAYOUT_BUFFER_S:g} s",
                         "the viewers' player's playout delay (a low-latency live player's; "
                         "chosen, not fitted)")
GOALS = (Constant("STALL_FREE_GOAL", f"{STALL_FREE_GOAL:.0%}",
                  "LiveNet's goal: views never stalled"),
         Constant("STARTUP_GOAL", f"{STARTUP_GOAL:.0%}", "LiveNet's goal: startups under 1 s"))
CONSTANTS = (
    Constant("FAILOVER_WINDOW_S", f"{FAILOVER_WINDOW_S:g} s",
             f"how long after the cut {CUT_VIEWER}'s outage is looked for"),
    Constant("IN_FLIGHT_S", f"{IN_FLIGHT_S:g} s",
             f"frames {INGEST} got from this long before the cut count for "
             f"{CUT_VIEWER}'s frames lost (those in flight on the cut link die with it)"),
    Constant("PRE_CUT_S", f"{PRE_CUT_S:g} s", "how long before the cut the waits for a whole "
             "frame that flag a run are looked at"),
    Constant("STALL_S", f"{1e3 * STALL_S:.0f} ms",
             f"a longer wait for a whole frame, at {CUT_VIEWER} before the cut or at "
             f"{INGEST} from then to the window's end, flags the run (the emulator stalled)"),
    PLAYOUT_DELAY, *GOALS,
    Constant("EARLY_S", f"{EARLY_S:g} s", "a first stall this soon after startup counts as "
             "one right after it (what a GOP cache's burst could cause)"),
    Constant("VIA.loss", f"{VIA.loss:.1%}", "VIA's threshold of a poor session: loss above it"),
    Constant("VIA.rtt", f"{1e3 * VIA.rtt:.0f} ms",
             "VIA's threshold of a poor session: round trip above it"),
    Constant("RELAY_FIX_GOAL", f"{RELAY_FIX_GOAL:.0%}", "VIA's anchor for relays: the share of "
             "direct access's poor viewers relays with probing fix"),
    Constant("agents.echo.PROBES", f"{PROBES}", "ICMP echo requests a viewer sends each "
             "candidate it probes"),
    Constant("agents.echo.PROBE_INTERVAL", f"{1e3 * PROBE_INTERVAL:.0f} ms",
             "between a candidate's echo requests"),
    Constant("agents.echo.PROBE_TIMEOUT", f"{PROBE_TIMEOUT:g} s",
             "an echo's answer later than this after the last request counts as lost"))

ABOUT = f"""\
Each cell is one emulated run of `topologies/dispatch/dispatch.yaml` (real packets on a Mininet network,
userspace Open vSwitch, edgebed's controller running the dispatch policy for three regional
centers): one 1 Mbit/s stream pushed in cn and back-sourced to seven media nodes in cn, us and
eu, six viewers (four in cn, one in us, one in eu), a relay host hk1 between cn and us. The
scale is a machine's: 6 viewers and 7 nodes, not the talk's millions; the model-level report
(`reports/dispatch/model/`) runs 10k clients on 100 nodes. A metric is counted over the six
viewers of a run, so one misplaced viewer moves a count by one: read counts, not shares.
`access_rtt_ms` is the configured round trip between a viewer and the node its media came
from (what the database's mistake costs the pulls); the stream's loss is measured at the
viewers' nodes' input (a viewer's own loss counter adds its node's link to it).

Failover: at 9 s the scenario takes the cn-eu link down (both ends lose carrier), over which
eu1 gets the stream for {CUT_VIEWER}; the standby route is cn-us-eu (80 + 35 ms against 90 ms
one way). `failover_gap_ms` is {CUT_VIEWER}'s longest wait for a whole frame from the last
before the cut to {FAILOVER_WINDOW_S:g} s after it (link down to receiving again, plus up to
one frame interval, 1/25 s at the stream's 25 frames a second); `failover_frames_lost` counts
the frames the ingest node {INGEST} got from {IN_FLIGHT_S:g} s before the cut to the window's
end that {CUT_VIEWER} never got whole, the cross-border links' own burst losses included. Every
run has the cut; the hot_standby and recompute cells differ only in the controller's
`fast_failover`. `failover_reroute_ms` is when the controller had its recomputed routes in
every switch (its `reroute` decision, recorded once the switches' barrier replies are in): it
recomputes under both policies, but with hot standby the switches' fast-failover groups have
moved the traffic already.

A run measures failover only if {CUT_VIEWER} was receiving normally in the {PRE_CUT_S:g} s before
the cut and {INGEST}, upstream of the cut and untouched by it, from then to the window's end: no
wait for a whole frame over {1e3 * STALL_S:.0f} ms at either (a clean run's waits are a few frame
intervals). Otherwise the emulator stalled on the loaded machine (its relays then deliver frames
late) and the gap measures the stall. Such a run is flagged (`failover_valid` 0): it stays in
`results.csv` with its figures under `failover_measured_*` and its longest waits, the remarks
list it with the reason, and it is left out of `failover_gap_ms` and `failover_frames_lost`,
whose means count the valid runs only.

What to expect at this scale: a difference of about the controller's own reaction. The cut
is a carrier loss both switches at its ends see at once, so recomputation starts from the same
port-down event that flips a fast-failover group; what hot standby saves is the controller's
part, the port-status message, the new routes and their installation in every switch
(`failover_reroute_ms`), during which recomputed frames still go to the dead port. Neither
saves the frames in flight on the dead 90 ms link nor the standby route's longer way
(80 + 35 ms), so a valid run's gap is at least the standby route's one-way delay plus up to a
frame interval of phase. Hot standby's margin grows where the control plane is slow or far (a
loaded controller, many switches and flows to recompute, a controller out of reach), which
this experiment does not vary.

Playout, every viewer of every run (`experiments.playout`, the same for any scheme's runs): a
player with {PLAYOUT_BUFFER_S:g} s of playout delay (a low-latency live player's; chosen, not
fitted) starts on the first I frame the viewer got whole and shows a frame a slot at the
stream's rate after it. A frame shows in its slot only if it and every frame since its GOP's I
frame (the frames it is decoded from) arrived whole by then: a frame lost (never whole) or late
(whole after its slot) freezes the picture, and the P frames after it are undecodable, until an
I frame arrives whole in time. A stall is the buffer running dry: nothing of the frame due or a
later one there at its slot; the player waits for the next whole frame and the slots after it
move by the wait. A view is stall-free when it neither stalled nor froze. `freeze_ms` sums the
slots frozen, `watch_ms` the time from the first frame shown to the last slot, stalls included,
and `freeze_share_pct` is one over the other for a run's views together; `frames_*` say what
became of every frame from a view's first shown to its last whole. `startup_*` run from the
viewer's join request to its first frame shown: the join's answer, the probes, the pull, the
wait for an I frame (one in 50 frames, the stream's GOP: without a GOP cache a viewer joining
mid-GOP waits for the next; with one it gets the latest at once) and the
{PLAYOUT_BUFFER_S:g} s of playout delay; `first_frame_mean_ms` is the part up to the first
whole frame of any kind. The anchors are LiveNet's
{STALL_FREE_GOAL:.0%} stall-free views and {STARTUP_GOAL:.0%} of startups under 1 s; the remarks
tabulate each policy's shares against them with the number of views and a {CONFIDENCE:.0%}
Clopper-Pearson interval (a goal is met when the share of views reaches it; at six views a run
the interval says how little a few runs can show), and split the mean startup into its parts.

Startup with a GOP cache and parallel probes (`gop_cache`, `parallel_probes`): every
media node keeps each stream's frames since its latest I frame and sends them to a viewer's
new session first, paced at 4 times its bitrate (the live frames completed meanwhile queue
behind them), so the player starts on the cached I frame instead of waiting for the next;
and viewers probe their three candidates all at once ({PROBES} ICMP echoes
{1e3 * PROBE_INTERVAL:.0f} ms apart to each, an answer later than {PROBE_TIMEOUT:g} s after the
last request lost) and stop as soon as no answer still to come could change their choice
(`agents.follower.probes_settled`), so probing takes about the best candidate's round trip
after the last request: neither the farthest candidate's nor, when a far candidate loses an
echo, the {PROBE_TIMEOUT:g} s timeout. A lost echo of the candidate that would win still waits
it out.
What the cache costs: `cached_kbytes`, the bytes sent from the caches (the burst: up to a GOP
of the stream per viewer), `catch_up_max_ms`, the longest time from a session's admission to
its backlog drained, `early_stall_viewers`, views whose first stall came within {EARLY_S:g} s
of their startup (what a burst could cause), and `playout_lag_mean_ms`, how far the player
runs behind the source (the frame it started on was sent up to a GOP before the join, and this
player does not catch up: it lags by the cached GOP's age plus the playout delay for the whole
view; real players skip ahead or play faster). The viewers' one-way delays (`delay_p50_ms`)
include the cached frames, which are old when they arrive. The sweep `startup-before` runs the
old arm (no cache, probes in turn) beside the others.

"""


KINDS = (Kind(name="dispatch_emulation", parameters=Parameters, policies=ACCESS + RELAYS + FAILOVER,
              run=measured_run(variables, measure), metrics=METRICS,
              plots=PLOTS, constants=CONSTANTS,
              about=ABOUT, remarks=remarks, emulated=True),)
