"""The policy trace: one record per call of the policy, what it was given and what it answered."""

from __future__ import annotations

from dataclasses import dataclass

from .policy import Decision, State

TRACE_COLUMNS = ("now_s", "kind", "policy", "requests", "servers", "placements", "previous",
                 "loads_seen", "load_age_max_s", "load_age_mean_s", "assignments", "rejections",
                 "migrations", "assigned", "rejected", "migrated", "decide_ms")


@dataclass(frozen=True)
class PolicyTrace:
    """One call of the policy: when (``now``, the controller's clock) and why (``kind``: place,
    rebalance or reallocate), what it was given (counts of requests, servers, placed flows and
    previous placements; how many servers' load reports it saw and how old the latest were),
    what it answered and how long :meth:`Policy.decide` took."""

    now: float
    kind: str
    policy: str
    requests: int
    servers: int
    placements: int
    previous: int
    loads_seen: int
    load_age_max: float | None
    load_age_mean: float | None
    decision: Decision
    decide_ms: float

    @classmethod
    def of(cls, state: State, kind: str, policy: str, decision: Decision,
           decide_ms: float) -> PolicyTrace:
        ages = [state.load_age(server.name) for server in state.servers
                if state.latest_load(server.name) is not None]
        return cls(state.now, kind, policy, len(state.requests), len(state.servers),
                   len(state.placements), len(state.previous), len(ages),
                   max(ages) if ages else None, sum(ages) / len(ages) if ages else None,
                   decision, decide_ms)

    def row(self) -> tuple:
        """The trace's values in :data:`TRACE_COLUMNS` order; flows as ``flow@server`` (an
        assignment with a bitrate ``flow@server@bits``), ``;``-separated."""
        decision = self.decision

        def placed(item) -> str:
            bitrate = "" if item.bitrate is None else f"@{item.bitrate:.0f}"
            return f"{item.flow}@{item.server}{bitrate}"

        def seconds(value: float | None) -> str:
            return "" if value is None else f"{value:.3f}"

        return (f"{self.now:.6f}", self.kind, self.policy, self.requests, self.servers,
                self.placements, self.previous, self.loads_seen, seconds(self.load_age_max),
                seconds(self.load_age_mean), len(decision.assignments),
                len(decision.rejections), len(decision.migrations),
                ";".join(placed(a) for a in decision.assignments),
                ";".join(r.flow for r in decision.rejections),
                ";".join(placed(m) for m in decision.migrations), f"{self.decide_ms:.3f}")
