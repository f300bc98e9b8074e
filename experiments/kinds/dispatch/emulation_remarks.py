"""dispatch emulated, reported: the tables the ``dispatch_emulation`` report computes from the
results rows (playout, LiveNet's goals, what probing and relays bought, the failover)."""

from __future__ import annotations

import pandas as pd
from scipy import stats

from experiments.kinds.dispatch.emulation_measures import (
    ACCESS, CUT_VIEWER, EARLY_S, FAILOVER, INGEST, PRE_CUT_S, RELAY_FIX_GOAL, RELAYS,
    STALL_FREE_GOAL, STARTUP_GOAL, Failover)
from experiments.playout_columns import PLAYOUT_BUFFER_S
from experiments.report import CONFIDENCE, at_value, swept_values, whole
from experiments.sweeps.kinds import Table


def by_value_and_policy(results: pd.DataFrame):
    """``results``' rows per sweep, value and policy, in their order: the sweep and the value
    as :func:`~experiments.report.at_value` words it (two sweeps may vary one parameter over
    the same values under other settings), the policy and the rows."""
    for (sweep, _, policy), group in results.groupby(["sweep", "value", "policy"], sort=False):
        yield f"{sweep}: {at_value(group)}", policy, group


def counted(column: pd.Series) -> str:
    """The sum of a count column over runs, "n/a" when no run measured it."""
    return "n/a" if column.isna().all() else str(int(column.sum()))


def playout_table(results: pd.DataFrame) -> Table:
    """Each policy's views at each swept value, over all its runs: the views that never stalled
    or froze, the stalls and their time, the startups under 1 s and the slowest, the mean time
    to the first whole frame and (when the rows have it) the player's mean lag behind the
    source."""
    lag = "playout_lag_mean_ms" in results
    rows = []
    for at, policy, group in by_value_and_policy(results):
        recorded = group["startup_max_ms"].notna().any()
        rows.append((at, policy, str(len(group)), str(int(group["viewers"].sum())),
                     counted(group["uninterrupted_viewers"]), counted(group["stalls"]),
                     whole(group["stall_ms"].sum()),
                     str(int(group["startups_under_1s"].sum())) if recorded else "n/a",
                     whole(group["startup_max_ms"].max()),
                     whole(group["first_frame_mean_ms"].mean()))
                    + ((whole(group["playout_lag_mean_ms"].mean()),) if lag else ()))
    return Table(
        "Playout per swept value and policy, over all its runs' views (counts and time stalled "
        "summed over the runs):",
        ("value", "policy", "runs", "views", "never stalled or froze", "stalls",
         "time stalled (ms)", "started within 1 s", "slowest startup (ms)",
         "join to first whole frame (ms, mean)")
        + (("player behind the source (ms, mean)",) if lag else ()), tuple(rows))


def mean_interval(values: pd.Series) -> tuple[float, float]:
    """The mean of ``values`` and the half-width of its Student-t interval at the report's
    confidence (NaN for fewer than two)."""
    if len(values) < 2:
        return values.mean(), float("nan")
    return values.mean(), stats.t.ppf((1 + CONFIDENCE) / 2, len(values) - 1) * stats.sem(values)


def share_with_interval(values: pd.Series) -> str:
    """The mean of per-run shares in percent with its :func:`mean_interval`, the interval cut
    to 0-100% (a share is neither negative nor over the whole)."""
    mean, half = mean_interval(values)
    if pd.isna(mean):
        return "n/a"
    if pd.isna(half):
        return f"{mean:.1f}% (one run)"
    return f"{mean:.1f}% ({max(0.0, mean - half):.1f}-{min(100.0, mean + half):.1f}%)"


def freeze_table(results: pd.DataFrame) -> list[Table]:
    """Each policy's views at each swept value, over all its runs: the freezes and their time,
    the share of the time watched frozen and of the frames watched lost (means over the runs
    with their intervals), and what became of the frames watched; none when no row measured
    freezes."""
    rows = []
    for at, policy, group in by_value_and_policy(results):
        if "freezes" not in group or group["freezes"].isna().all():
            continue
        lost = 100 * group["frames_lost"] / group["frames_watched"]
        rows.append((at, policy, str(len(group)), str(int(group["viewers"].sum())),
                     str(int(group["freezes"].sum())), f"{group['freeze_ms'].sum() / 1e3:.1f}",
                     share_with_interval(group["freeze_share_pct"].dropna()),
                     *(str(int(group[f"frames_{fate}"].sum()))
                       for fate in ("watched", "lost", "late", "undecodable")),
                     share_with_interval(lost.dropna())))
    return [Table(
        "Freezes per swept value and policy, over all its runs' views (a frame lost, late or "
        "without the frames it is decoded from holds the picture until an I frame shows; "
        f"shares are means over the runs with their {CONFIDENCE:.0%} Student-t intervals):",
        ("value", "policy", "runs", "views", "freezes", "time frozen (s)",
         "time watched frozen", "frames watched", "lost", "late", "undecodable",
         "frames watched lost"), tuple(rows))] if rows else []


def gop_cache_table(results: pd.DataFrame) -> list[Table]:
    """What the GOP caches cost where media nodes kept them: the bytes they sent a run, the
    longest backlog, the views stalled right after startup; none when no cache sent a byte."""
    if "cached_kbytes" not in results:
        return []
    rows = tuple((at, policy, whole(group["cached_kbytes"].mean()),
                  whole(group["catch_up_max_ms"].max()),
                  str(int(group["early_stall_viewers"].sum())))
                 for at, policy, group in by_value_and_policy(results)
                 if group["cached_kbytes"].sum() > 0)
    return [Table("What the GOP caches cost, where the media nodes kept them:",
                  ("value", "policy", "sent from the caches (kB a run, mean)",
                   "backlogs drained within (ms)",
                   f"views stalled within {EARLY_S:g} s of startup"), rows)] if rows else []


def goals_tables(results: pd.DataFrame) -> list[Table]:
    """Each policy's views at each swept value against LiveNet's goals: the share that never
    stalled or froze against :data:`STALL_FREE_GOAL` and the share started within 1 s against
    :data:`STARTUP_GOAL`, each with its Clopper-Pearson interval (the views are few, so the
    interval says what the count can show); and where the startup went: the mean first whole
    frame after the join, the wait from it to the first frame shown less the playout delay
    (the wait for an I frame) and the playout delay. A view that never showed a frame counts
    as neither stall-free nor started."""
    shares, startups = [], []
    for at, policy, group in by_value_and_policy(results):
        views = int(group["viewers"].sum())
        for column, goal, what in (("uninterrupted_viewers", STALL_FREE_GOAL,
                                    "never stalled or froze"),
                                   ("startups_under_1s", STARTUP_GOAL, "started within 1 s")):
            if group[column].isna().all():
                shares.append((at, policy, what, "n/a", str(views), "n/a", "n/a",
                               f"{100 * goal:.0f}%", "not measured"))
                continue
            count = int(group[column].sum())
            low, high = (stats.binomtest(count, views).proportion_ci(CONFIDENCE) if views
                         else (0, 1))
            shares.append((at, policy, what, str(count), str(views),
                           f"{100 * count / views:.0f}%" if views else "n/a",
                           f"{100 * low:.0f}-{100 * high:.0f}%", f"{100 * goal:.0f}%",
                           "met" if views and count >= goal * views else "not met"))
        if group["startup_mean_ms"].notna().any():
            first = group["first_frame_mean_ms"].mean()
            keyframe = group["startup_mean_ms"].mean() - first - 1e3 * PLAYOUT_BUFFER_S
            startups.append((at, policy, whole(group["startup_mean_ms"].mean()), whole(first),
                             whole(keyframe), whole(1e3 * PLAYOUT_BUFFER_S)))
    found = [Table("LiveNet's goals per swept value and policy, from the views of all its runs "
                   "(a goal is met when the share of views reaches it):",
                   ("value", "policy", "views that", "count", "of views", "share",
                    f"{CONFIDENCE:.0%} Clopper-Pearson interval", "LiveNet's goal", "met"),
                   tuple(shares))]
    if startups:
        found.append(Table("Where the mean startup went (means over the runs):",
                           ("value", "policy", "startup (ms)", "join to first whole frame (ms)",
                            "then to the first I frame (ms)", "playout delay (ms)"),
                           tuple(startups)))
    return found


def verdict(runs: pd.DataFrame) -> str:
    """Whether hot standby's failover gap is shorter than recomputation's in ``runs`` (one
    swept value's), from the valid runs: shorter when the Student-t intervals of the two means
    (at the report's confidence) do not overlap; otherwise not shown apart at this number of
    runs."""
    gaps = {policy: runs.loc[(runs["policy"] == policy) & (runs["failover_valid"] == 1),
                             "failover_gap_ms"] for policy in FAILOVER}
    if min(len(gap) for gap in gaps.values()) < 2:
        return "too few valid runs to compare hot standby with recomputation."
    interval = {policy: mean_interval(gap) for policy, gap in gaps.items()}
    (hot, hot_half), (recomputed, recomputed_half) = (interval["hot_standby"],
                                                      interval["recompute"])
    figures = (f"mean gap {hot:.0f} ± {hot_half:.0f} ms with hot standby against "
               f"{recomputed:.0f} ± {recomputed_half:.0f} ms recomputed ({CONFIDENCE:.0%} "
               f"intervals over the valid runs)")
    if hot + hot_half < recomputed - recomputed_half:
        return f"hot standby re-sources faster: {figures}."
    if recomputed + recomputed_half < hot - hot_half:
        return f"recomputation re-sources faster: {figures}."
    return f"hot standby is not shown faster than recomputation at this scale: {figures}."


def fixed_rows(at: str, group: pd.DataFrame, baseline: str, mechanism: str
               ) -> list[tuple[str, ...]]:
    """VIA's anchor for relays (:data:`RELAY_FIX_GOAL` of direct access's poor sessions fixed)
    on ``group``'s runs: the share of the baseline's poor viewers the mechanism's runs do not
    have (poor viewers a run), over every run and over the runs whose emulated network kept
    up (``network_kept_up``: a run whose impairment relays fell behind makes viewers poor
    that the policy did not; the hosts' own flags, a CPU busy at start-up, do not) when some
    did not."""
    def row(runs: pd.DataFrame, which: str) -> tuple[str, ...]:
        poor = runs.groupby("policy")["poor_viewers"].mean()  # a run: the two may differ in runs
        counted = runs.groupby("policy").size()
        both = {baseline, mechanism} <= set(poor.index)
        fixed = 1 - poor[mechanism] / poor[baseline] if both and poor[baseline] else None
        return (at, which,
                *(f"{int(counted[p])}" if p in counted else "0" for p in (mechanism, baseline)),
                *(f"{poor[p]:.2f}" if p in poor else "n/a" for p in (mechanism, baseline)),
                f"{100 * fixed:.0f}%" if fixed is not None else f"no poor viewer with {baseline}",
                ("met" if fixed >= RELAY_FIX_GOAL else "not met") if fixed is not None else "–")
    rows = [row(group, "every run")]
    if "network_kept_up" in group and group["network_kept_up"].notna().all():
        kept_up = group[group["network_kept_up"] == 1]
        if len(kept_up) < len(group):
            rows.append(row(kept_up, "the runs whose network kept up"))
    return rows


def mechanism_tables(results: pd.DataFrame) -> list[Table]:
    """Per swept value, what probing and relays bought against their absence: viewers served
    from abroad (probing) and viewers poor by VIA (relays), in total over the value's runs,
    and for relays the share of the poor viewers they fixed against VIA's anchor."""
    found = []
    for (baseline, mechanism), metric, what in (
            (ACCESS, "served_abroad", "Viewers served from another region"),
            (RELAYS, "poor_viewers", "Viewers poor by VIA's thresholds")):
        chosen = results[results["policy"].isin((baseline, mechanism))]
        totals, fixed = [], []
        for _, at, group in swept_values(chosen):
            summed = group.groupby("policy")[metric].sum()
            runs = group.groupby("policy").size()
            if {baseline, mechanism} <= set(summed.index):
                totals.append((at, str(int(summed[mechanism])),
                               str(int(summed[baseline])), str(int(runs[mechanism])),
                               str(int(runs[baseline])), f"{group['viewers'].mean():g}"))
                if metric == "poor_viewers":
                    fixed += fixed_rows(at, group, baseline, mechanism)
        if totals:
            found.append(Table(f"{what}, {mechanism} against {baseline}, in total over the "
                               "runs:", ("value", f"with {mechanism}", f"with {baseline}",
                                         f"runs of {mechanism}", f"runs of {baseline}",
                                         "viewers a run"), tuple(totals)))
        if fixed:
            found.append(Table(
                f"Of {baseline}'s poor viewers, the share {mechanism} fixed (poor viewers a run), "
                f"against VIA's anchor for relays:",
                ("value", "runs counted", f"runs of {mechanism}", f"runs of {baseline}",
                 f"poor a run with {mechanism}", f"poor a run with {baseline}", "fixed",
                 f"VIA's anchor ({RELAY_FIX_GOAL:.0%})"), tuple(fixed)))
    return found


def failover_remarks(results: pd.DataFrame) -> list[str | Table]:
    """Per swept value that ran both: the failover gap's range and mean, the frames lost in
    total and the controller's reroute, over the valid runs, with the number flagged; whether
    hot standby is faster (:func:`verdict`); and every run as measured, the flagged ones with
    the reason."""
    chosen = results[results["policy"].isin(FAILOVER)]
    summaries, verdicts, each = [], [], []
    for _, at, group in swept_values(chosen):
        if not set(FAILOVER) <= set(group["policy"]):
            continue
        for policy in reversed(FAILOVER):
            runs = group[group["policy"] == policy]
            valid = runs[runs["failover_valid"] == 1]
            gap, reroute = valid["failover_gap_ms"], valid["failover_reroute_ms"]
            summaries.append((at, policy, str(len(valid)), str(len(runs) - len(valid)),
                              *(whole(x) for x in (gap.min(), gap.max(), gap.mean())),
                              str(int(valid["failover_frames_lost"].sum())),
                              f"{whole(reroute.min())}-{whole(reroute.max())}"
                              if len(valid) else "n/a"))
        verdicts.append(f"At {at}: {verdict(group)}")
        for _, row in group.iterrows():
            cut = Failover(CUT_VIEWER, INGEST, row["failover_measured_gap_ms"] / 1e3,
                           int(row["failover_measured_frames_lost"]),
                           row["failover_wait_before_ms"] / 1e3,
                           row["failover_ingest_wait_ms"] / 1e3)
            each.append((at, row["policy"], str(row["repetition"]), str(row["seed"]),
                         whole(1e3 * cut.gap_s), str(cut.frames_lost),
                         whole(1e3 * cut.viewer_wait_before_s), whole(1e3 * cut.ingest_wait_s),
                         f"flagged, left out of the means: {cut.invalid}" if cut.invalid
                         else "valid"))
    if not summaries:
        return []
    return [Table("The failover gap over the valid runs (a flagged run is left out), the frames "
                  f"{CUT_VIEWER} lost in total over them and when the controller's recomputed "
                  "routes were in:",
                  ("value", "policy", "valid runs", "flagged", "shortest gap (ms)",
                   "longest gap (ms)", "mean gap (ms)", "frames lost",
                   "routes recomputed after the cut (ms)"), tuple(summaries)),
            *verdicts,
            Table("Every run as measured (the longest waits for a whole frame say whether it "
                  "measured failover):",
                  ("value", "policy", "repetition", "seed", "gap (ms)", "frames lost",
                   f"{CUT_VIEWER}'s longest wait in the {PRE_CUT_S:g} s before the cut (ms)",
                   f"{INGEST}'s longest wait around it (ms)", "run"), tuple(each))]


def remarks(results: pd.DataFrame) -> list[str | Table]:
    """Per swept value and policy, from the results: the views' playout and startup
    (:func:`playout_table`), their freezes (:func:`freeze_table`), what the GOP caches cost,
    the views against LiveNet's goals and where the startup went (:func:`goals_tables`), what
    probing and relays bought (:func:`mechanism_tables`) and the failover
    (:func:`failover_remarks`)."""
    return [playout_table(results), *freeze_table(results), *gop_cache_table(results),
            *goals_tables(results), *mechanism_tables(results), *failover_remarks(results)]

