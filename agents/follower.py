"""Following the controller's decisions about one flow: what a viewer, a terminal or a camera
does to be told where to go and go there."""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agents.control import Answer, ControlClient, ControlError
from agents.echo import ProbeResult, echo_probes
from agents.agent import epoch_seconds
from edgebed import clock, protocol

# A leave's sends: 0.5 + 1 + 2 s of waiting at most, within the 5 s the runner gives an agent
# to stop, so that a controller gone away cannot cost the agent its summary.
LEAVE_TRIES = 3

# Written by every agent that follows decisions with a DecisionFollower.
FOLLOWER_TABLES = {
    "decisions_followed": ("node", "agent", "time_s", "flow", "version", "server",
                           "bitrate_bps", "migrated", "candidates", "via", "confirmed",
                           "attributes", "requested_s", "response_ms"),
    "candidate_probes": ("node", "agent", "time_s", "flow", "candidate", "address", "sent",
                         "answered", "waiting", "rtt_p50_ms", "rtt_max_ms"),
}


def _rank(index: int, sent: int, unanswered: int, rtts_ms: Sequence[float]) -> tuple:
    """How a candidate ranks (lower is better): loss, then median round trip, then the
    controller's rank (its place in the decision's list). The loss is one expression for
    every caller, so that equal losses compare equal to the last bit."""
    return (unanswered / sent if sent else 1.0,
            statistics.median(rtts_ms) if rtts_ms else math.inf, index)


def best_candidate(candidates: Sequence[protocol.Hop],
                   results: Sequence[ProbeResult]) -> protocol.Hop:
    """The candidate that probed best: least loss, then least median round trip; the
    controller's rank breaks ties (and decides when nothing answered). A request still
    waiting for its answer counts as lost."""
    return candidates[min(range(len(candidates)), key=lambda index: _rank(
        index, results[index].sent, results[index].sent - results[index].answered,
        results[index].rtts_ms))]


def probes_settled(results: Sequence[ProbeResult]) -> bool:
    """Whether no answer still to come can change :func:`best_candidate`'s choice, so a
    parallel probe may stop (:func:`agents.echo.echo_probes`' ``settled``). The choice now
    counts every waiting request as lost, the worst that can still happen to its candidate
    (fewer losses rank better, whatever the round trips); it stands when that beats the best
    that can still happen to every other candidate: each of its waiting requests answered,
    with a round trip no shorter than it has waited already. The choice is then the one
    waiting out every answer would make: a near candidate answering at once need not wait
    for a far one's answers, nor for the timeout of an echo the far one lost."""
    if not results:
        return True
    worst = [_rank(index, result.sent, result.sent - result.answered, result.rtts_ms)
             for index, result in enumerate(results)]
    chosen = min(range(len(results)), key=worst.__getitem__)
    return all(worst[chosen] < _rank(index, result.sent, result.given_up,
                                     result.rtts_ms + result.waiting_ms)
               for index, result in enumerate(results) if index != chosen)


@dataclass(frozen=True)
class JoinTiming:
    """When a join request was sent (``requested_ns``, CLOCK_REALTIME, comparable with the
    controller's tables) and how long its answer took (``response_ns``, on the monotonic clock,
    which no clock step moves): the access response time, request to grant or refusal."""

    requested_ns: int
    response_ns: int

    @property
    def response_ms(self) -> float:
        return self.response_ns / 1e6


@dataclass(frozen=True)
class Followed:
    """A decision the follower took: the controller's message and when it was heard, whether
    the server changed, the candidate it confirmed by probing (None: nothing to probe) and, for
    the answer to the join, the request it answered (:class:`JoinTiming`; None: pushed)."""

    decision: protocol.Decision
    heard_ns: int
    migrated: bool
    confirmed: str | None = None
    probes: tuple[tuple[str, ProbeResult], ...] = ()
    request: JoinTiming | None = None

    @property
    def server(self) -> str:
        return self.decision.server

    @property
    def address(self) -> str:
        return self.decision.address

    @property
    def bitrate(self) -> float | None:
        return self.decision.bitrate

    @property
    def via(self) -> tuple[protocol.Hop, ...]:
        return self.decision.via

    @property
    def attributes(self) -> dict:
        return self.decision.attributes

    def key(self) -> tuple:
        """What makes a decision a new one for an agent: where it goes and on what terms."""
        decision = self.decision
        return (decision.server, decision.bitrate, decision.via,
                tuple(sorted(decision.attributes.items(), key=lambda item: item[0])))


@dataclass
class DecisionFollower:
    """Joins ``service`` for one flow through ``control`` and follows the decisions about it
    (docs/concepts/internals.md). ``probe`` measures the candidates' addresses, a result for
    each in their order (by default :func:`echo_probes`, one after another; None: candidates
    are not probed)."""

    control: ControlClient
    service: str
    demand: float = 0.0
    bitrates: Sequence[float] = ()
    flow: str | None = None
    port: int | None = None
    probe: Callable[[Sequence[str]], Sequence[ProbeResult]] | None = echo_probes
    followed: list[Followed] = field(default_factory=list)
    refusal: str | None = None  # why the join got no decision
    timing: JoinTiming | None = None  # the join's request and response time (None: no answer)
    rejections: int = 0
    steers: int = 0
    stale: int = 0
    joined: bool = False  # the join got a decision (the flow is this follower's to leave)
    left_ns: int | None = None  # when the controller acknowledged the leave (CLOCK_REALTIME)
    leave_error: str | None = None  # why a leave was not acknowledged
    _probed: tuple[str, ...] = ()

    @property
    def current(self) -> Followed | None:
        return self.followed[-1] if self.followed else None

    def join(self) -> Followed | None:
        """Subscribe, then join (in that order, so that no decision falls between the two);
        the decision followed, or None when the controller refused (``refusal``)."""
        try:
            self.control.subscribe()
        except ControlError as error:
            self.refusal = str(error)
            return None
        [answer] = self.control.join_all([self.asking])
        return self.answered(answer)

    @property
    def asking(self) -> dict:
        """This flow's join, as :meth:`ControlClient.join_all` takes it (an agent asking for
        many flows at once, subscribed already, hands each follower its :meth:`answered`)."""
        return {"service": self.service, "demand": self.demand,
                "bitrates": tuple(self.bitrates), "flow": self.flow, "port": self.port}

    def answered(self, answer: Answer) -> Followed | None:
        """Take the controller's answer to this flow's join, timed from the join request alone
        (the subscription is not part of asking for access): the decision followed, or None
        when the controller refused (``refusal``)."""
        if answer.error is not None:
            self.refusal = str(answer.error)
            return None
        self.timing = JoinTiming(answer.requested_ns, answer.response_ns)
        self.flow = answer.reply.flow
        if isinstance(answer.reply, protocol.Rejected):
            self.refusal = answer.reply.reason
            return None
        self.joined = True
        return self._follow(answer.reply, self.timing)

    def leave(self, tries: int | None = LEAVE_TRIES) -> bool:
        """Tell the controller the flow ended, so that it releases the placement (see
        docs/concepts/internals.md); whether it acknowledged. Nothing is sent for a flow not joined
        (refused, or followed without joining) or already left."""
        if not self.joined or self.left_ns is not None:
            return False
        try:
            answer = self.control.leave(self.flow, tries=tries)
        except ControlError as error:
            self.leave_error = str(error)
            return False
        if isinstance(answer, protocol.Rejected):
            self.leave_error = answer.reason
            return False
        self.left_ns, self.leave_error = clock.time_ns(), None
        print(f"left {self.flow}", file=sys.stderr, flush=True)
        return True

    def poll(self, timeout: float) -> Followed | None:
        """The next pushed decision about the flow that changes anything, followed; None when
        ``timeout`` seconds pass without one. Pushed rejections are counted."""
        deadline = clock.monotonic() + timeout
        while (left := deadline - clock.monotonic()) > 0:
            pushed = next(self.control.decisions(timeout=left), None)
            if pushed is None:
                return None
            if pushed.flow == self.flow and (changed := self.take(pushed)) is not None:
                return changed
        return None

    def take(self, pushed: protocol.Decision | protocol.Rejected) -> Followed | None:
        """Follow one pushed message about the flow (an agent that reads the control socket
        itself hands them over); the decision followed if it changes anything, else None.
        Rejections and pushes older than the decision followed are counted."""
        if isinstance(pushed, protocol.Rejected):
            self.rejections += 1
            return None
        if self.current is not None and pushed.version < self.current.decision.version:
            self.stale += 1  # sent before the decision followed already (a late push)
            return None
        return self._follow(pushed)

    def _follow(self, decision: protocol.Decision,
                request: JoinTiming | None = None) -> Followed | None:
        heard_ns = clock.time_ns()
        confirmed, probes = None, ()
        names = tuple(hop.name for hop in decision.candidates)
        if names and self.probe is not None and names != self._probed:
            self._probed = names
            results = list(self.probe([hop.address for hop in decision.candidates]))
            probes = tuple(zip(names, results))
            best = best_candidate(decision.candidates, results)
            confirmed = best.name
            if best.name != decision.server:
                try:
                    answer = self.control.steer(decision.flow, best.name)
                except ControlError as error:
                    answer = None
                    self.refusal = f"steer to {best.name}: {error}"
                if isinstance(answer, protocol.Decision):
                    self.steers += 1
                    decision, heard_ns = answer, clock.time_ns()
        last = self.current
        followed = Followed(decision, heard_ns,
                            last is not None and last.server != decision.server, confirmed,
                            probes, request)
        if last is not None and not probes and followed.key() == last.key():
            return None
        self.followed.append(followed)
        print(f"followed {decision.flow} version {decision.version}: server {decision.server}"
              + (f", confirmed {confirmed} by probing" if confirmed else ""),
              file=sys.stderr, flush=True)
        return followed

    def write(self, agent) -> dict:
        """The rows of ``decisions_followed`` and ``candidate_probes``; returns the summary."""
        for item in self.followed:
            decision = item.decision
            heard = epoch_seconds(item.heard_ns)
            agent.row("decisions_followed", heard, decision.flow, decision.version,
                      decision.server,
                      decision.bitrate, item.migrated,
                      ";".join(hop.name for hop in decision.candidates),
                      ";".join(hop.name for hop in decision.via), item.confirmed,
                      json.dumps(decision.attributes, sort_keys=True),
                      *((epoch_seconds(item.request.requested_ns),
                         f"{item.request.response_ms:.3f}") if item.request is not None
                        else (None, None)))
            for name, result in item.probes:
                agent.row("candidate_probes", heard, decision.flow, name, result.address,
                          result.sent, result.answered, len(result.waiting_ms),
                          result.rtt_p50_ms,
                          max(result.rtts_ms) if result.rtts_ms else None)
        return {"flow": self.flow, "decisions": len(self.followed),
                "migrations": sum(item.migrated for item in self.followed),
                "steers": self.steers, "rejections": self.rejections, "stale": self.stale,
                "refusal": self.refusal,
                "response_ms": self.timing.response_ms if self.timing is not None else None,
                "left_s": (float(epoch_seconds(self.left_ns)) if self.left_ns is not None
                           else None),
                "leave_error": self.leave_error}


def follow_pushed(followers: dict[str, DecisionFollower | None], control: ControlClient,
                  pushed: protocol.Decision | protocol.Rejected) -> Followed | None:
    """Hand ``pushed`` to its flow's follower in ``followers`` (flow -> follower, or None until
    the flow's first decision creates one: no join, no probing, as a relay or a server follows
    a flow that is a client's); the decision followed if it changes anything."""
    follower = followers.get(pushed.flow)
    if follower is None:
        if isinstance(pushed, protocol.Rejected):
            return None
        follower = followers[pushed.flow] = DecisionFollower(control, pushed.service,
                                                             flow=pushed.flow, probe=None)
    return follower.take(pushed)
