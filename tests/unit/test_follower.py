"""The decision follower (agents.follower): joins, follows pushed decisions, probes ranked
candidates with real ICMP echo requests and confirms the best with ``steer``, against a
controller played by a :class:`~controller.control_server.ControlServer` on loopback whose
handler is a real :class:`~controller.core.ControllerCore`."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from agents.control import ControlClient
from agents.echo import ProbeResult, echo_probe, echo_probes
from agents.follower import FOLLOWER_TABLES, DecisionFollower, best_candidate, probes_settled
from controller import netns
from edgebed import protocol
from controller.control_server import ControlServer
from controller.core import ControllerCore
from controller.policies import create
from controller.view import NetworkView
from experiments.scenarios import load


class Controller:
    """A core behind the control protocol: joins placed by least loaded with candidates, steers
    migrate, decisions pushed to subscribers (what the controller app does, without
    OpenFlow)."""

    def __init__(self, **policy_params):
        self.core = ControllerCore(NetworkView.from_scenario(
            load("topologies/edge-services.yaml")), create("least_loaded", policy_params))
        self.lock = threading.Lock()
        self.subscribers: dict[str, tuple] = {}
        self.join_delay = 0.0  # seconds the stand-in takes over a join before it answers
        self.leaves: list[str] = []  # the flows leave messages named, in order
        sock = netns.udp_socket("127.0.0.1", 0)
        self.address = sock.getsockname()
        self.server = ControlServer([sock], self.handle).start()

    def handle(self, message, reply, source):
        with self.lock:
            if message.type == "subscribe":
                self.subscribers[message.node] = source
                reply(protocol.Ack(id=message.id))
            elif message.type == "join":
                time.sleep(self.join_delay)
                request = self.core.request_for(message.node, message.service, message.demand,
                                                tuple(message.bitrates), message.flow,
                                                message.port)
                self.core.place([request])
                reply(self.core.decision_message(message.id, request.flow))
            elif message.type == "leave":
                self.leaves.append(message.flow)
                self.core.leave(message.flow)
                reply(protocol.Ack(id=message.id))
            elif message.type == "steer":
                self.core.steer(message.flow, message.server)
                reply(self.core.decision_message(message.id, message.flow, True))
                self.push(message.flow, True)

    def push(self, flow: str, migrated: bool = True) -> None:
        client = self.core.flows[flow].placement.request.client
        if client in self.subscribers:
            self.server.push(self.subscribers[client],
                             self.core.decision_message(0, flow, migrated))

    def close(self):
        self.server.stop()


@pytest.fixture
def controller():
    made = []

    def make(**params) -> Controller:
        made.append(Controller(**params))
        return made[-1]

    yield make
    for controller in made:
        controller.close()


def by_loss_then_rtt(quality: dict[str, tuple[int, float]]):
    """A probe whose answers per address the test sets: (answered of 5, round trip ms)."""

    def probe(addresses) -> list[ProbeResult]:
        return [ProbeResult(address, 5, quality[address][0],
                            (quality[address][1],) * quality[address][0])
                for address in addresses]

    return probe


def address_of(controller: Controller, host: str) -> str:
    return controller.core.view.attachment(host).address


def test_the_follower_confirms_the_candidate_that_probes_best(controller):
    ctl = controller(candidates=3)
    quality = {address_of(ctl, "edge1"): (5, 9.0), address_of(ctl, "edge2"): (4, 1.0),
               address_of(ctl, "edge3"): (5, 3.0)}
    with ControlClient(ctl.address, node="viewer1") as control:
        follower = DecisionFollower(control, "video", port=40001,
                                    probe=by_loss_then_rtt(quality))
        followed = follower.join()
    # Least loaded picked edge1 and ranked all three; edge3 lost nothing and answered fastest
    # of those that lost nothing, so the follower steered there.
    assert [hop.name for hop in followed.decision.candidates] == ["edge1", "edge2", "edge3"]
    assert (followed.server, followed.confirmed, followed.migrated) == ("edge3", "edge3", False)
    assert ctl.core.flows["viewer1/video:40001"].placement.server == "edge3"
    assert follower.steers == 1 and [name for name, _ in followed.probes] == [
        "edge1", "edge2", "edge3"]


def test_the_decided_server_is_kept_when_it_probes_best_and_no_steer_goes(controller):
    ctl = controller(candidates=2)
    quality = {address_of(ctl, "edge1"): (5, 1.0), address_of(ctl, "edge2"): (5, 2.0)}
    with ControlClient(ctl.address, node="viewer1") as control:
        follower = DecisionFollower(control, "video", probe=by_loss_then_rtt(quality))
        assert follower.join().confirmed == "edge1"
    assert follower.steers == 0


def test_pushed_decisions_are_followed_once_and_the_same_candidates_not_probed_again(controller):
    ctl = controller(candidates=2)
    probed = []

    def probe(addresses):
        probed.extend(addresses)
        return [ProbeResult(address, 5, 5, (1.0,) * 5) for address in addresses]

    with ControlClient(ctl.address, node="viewer1") as control:
        follower = DecisionFollower(control, "video", probe=probe)
        follower.join()
        assert len(probed) == 2
        with ctl.lock:
            ctl.core.steer("viewer1/video", "edge3")  # an operator moves the flow
            ctl.push("viewer1/video")
        moved = follower.poll(timeout=5.0)
        assert (moved.server, moved.migrated) == ("edge3", True)
        with ctl.lock:
            ctl.push("viewer1/video")  # the same decision again: nothing new
        assert follower.poll(timeout=0.3) is None
    assert len(probed) == 2 and len(follower.followed) == 2


def test_a_decision_with_a_via_chain_reaches_the_follower(controller):
    ctl = controller()
    ctl.core.view.labels["viewer2"] = {"via": "viewer1, viewer3"}
    with ControlClient(ctl.address, node="viewer2") as control:
        followed = DecisionFollower(control, "video").join()
    assert [(hop.name, hop.address) for hop in followed.via] == [
        ("viewer1", address_of(ctl, "viewer1")), ("viewer3", address_of(ctl, "viewer3"))]
    assert followed.confirmed is None and followed.probes == ()


def test_a_refused_join_says_why(controller):
    ctl = controller()
    # The stand-in's handler fails on an unknown service, which the server answers with error.
    with ControlClient(ctl.address, node="viewer1", timeout=0.2, tries=1) as control:
        follower = DecisionFollower(control, "nothing")
        assert follower.join() is None and "failed to handle join" in follower.refusal


def test_the_best_candidate_is_least_loss_then_least_rtt_then_rank():
    hops = [protocol.Hop(name=f"e{n}", address=f"10.0.0.{n}") for n in (1, 2, 3)]
    results = [ProbeResult("10.0.0.1", 5, 5, (4.0,) * 5), ProbeResult("10.0.0.2", 5, 5,
                                                                       (2.0,) * 5),
               ProbeResult("10.0.0.3", 5, 3, (1.0,) * 3)]
    assert best_candidate(hops, results).name == "e2"
    silent = [ProbeResult(h.address, 5, 0) for h in hops]
    assert best_candidate(hops, silent).name == "e1"  # nothing answered: the controller's rank


def test_a_near_candidate_that_answered_everything_settles_before_a_far_one_answers():
    near = ProbeResult("10.0.0.1", 5, 5, (20.0, 21.0, 20.5, 22.0, 20.0))
    # The far one's five requests have waited 100, 80, 60, 40, 20 ms: were they all answered
    # now, its median round trip would be at least 60 ms, worse than the near one's 20.5.
    far = ProbeResult("10.0.0.2", 5, 0, (), (100.0, 80.0, 60.0, 40.0, 20.0))
    assert probes_settled([near, far]) and probes_settled([far, near])
    # Just after the last round went (waits 80, 60, 40, 20, 0 ms less) its median bound is
    # 0 ms: all five answered at once it would win, so the probe must wait.
    early = ProbeResult("10.0.0.2", 5, 0, (), (40.0, 20.0, 0.0, 0.0, 0.0))
    assert not probes_settled([near, early])
    # A far candidate that already lost an echo for good cannot beat one that lost nothing.
    lost_one = ProbeResult("10.0.0.2", 5, 4, (1.0,) * 4)
    assert probes_settled([near, lost_one])


def test_a_leader_still_waiting_for_an_echo_is_not_settled_while_the_echo_could_save_it():
    # The near candidate's fifth echo is unanswered: counted lost it ranks below the far one
    # that lost nothing, but answered it would win again, so the probe goes on waiting.
    near = ProbeResult("10.0.0.1", 5, 4, (20.0,) * 4, (30.0,))
    far = ProbeResult("10.0.0.2", 5, 5, (180.0,) * 5)
    assert not probes_settled([near, far])
    # Once that echo is given up on (the timeout), the far one's choice stands.
    assert probes_settled([ProbeResult("10.0.0.1", 5, 4, (20.0,) * 4), far])
    # Complete results always decide.
    assert probes_settled([ProbeResult("10.0.0.1", 5, 5, (20.0,) * 5), far])


@st.composite
def probing_now(draw):
    """A parallel probe of 2-4 candidates caught once every round is sent: each request
    answered (its round trip), given up, or still waiting (how long so far)."""
    count = draw(st.integers(1, 5))
    rtt = st.floats(0.1, 400.0, allow_nan=False)
    results = []
    for index in range(draw(st.integers(2, 4))):
        states = draw(st.lists(st.one_of(st.tuples(st.just("answered"), rtt),
                                         st.tuples(st.just("lost"), st.just(0.0)),
                                         st.tuples(st.just("waiting"), rtt)),
                               min_size=count, max_size=count))
        results.append(ProbeResult(
            f"10.0.0.{index + 1}", count, sum(kind == "answered" for kind, _ in states),
            tuple(value for kind, value in states if kind == "answered"),
            tuple(value for kind, value in states if kind == "waiting")))
    return results


@settings(max_examples=400, deadline=None)
@given(probing_now(), st.data())
def test_a_settled_probe_chooses_what_waiting_out_every_answer_would(results, data):
    """Whatever happens to the waiting requests once the probe says it is settled (each
    answered with a round trip no shorter than it has waited, or lost), the candidate chosen
    from the complete results is the one chosen when it stopped. Fails if the settle rule
    ignores the waits' bounds or lets a waiting leader stand."""
    hops = [protocol.Hop(name=f"e{index}", address=result.address)
            for index, result in enumerate(results)]
    if not probes_settled(results):
        return
    chosen = best_candidate(hops, results).name
    completed = []
    for result in results:
        rtts = list(result.rtts_ms)
        for waited in result.waiting_ms:
            if data.draw(st.booleans()):
                rtts.append(waited + data.draw(st.floats(0.0, 1000.0, allow_nan=False)))
        completed.append(ProbeResult(result.address, result.sent, len(rtts), tuple(rtts)))
    assert best_candidate(hops, completed).name == chosen


def test_probes_with_nothing_waiting_are_always_settled():
    results = [ProbeResult("10.0.0.1", 5, 3, (9.0, 1.0, 4.0)), ProbeResult("10.0.0.2", 5, 0),
               ProbeResult("10.0.0.3", 5, 5, (50.0,) * 5)]
    assert probes_settled(results)


def test_a_parallel_probe_asks_whether_it_is_settled_only_once_every_round_is_sent():
    asked = []

    def settled(results):
        asked.append([(result.sent, result.answered + len(result.waiting_ms))
                      for result in results])
        return True

    addresses = ["127.0.0.1", "127.0.0.2"]
    results = echo_probes(addresses, parallel=True, count=4, interval=0.005, timeout=0.5,
                          settled=settled)
    # Asked at the first chance after the fourth round went, it stopped there: what had not
    # been answered by then is reported waiting, not lost.
    assert len(asked) == 1 and asked[0] == [(4, 4), (4, 4)], asked
    assert all(result.given_up == 0 for result in results)
    assert all(waited >= 0 for result in results for waited in result.waiting_ms)
    # Told never, it waits for every answer as before.
    never = echo_probes(addresses, parallel=True, count=3, interval=0.005, timeout=0.5,
                        settled=lambda results: False)
    assert [(r.sent, r.answered, r.waiting_ms) for r in never] == [(3, 3, ())] * 2


def test_echo_probes_measure_a_real_round_trip():
    result = echo_probe("127.0.0.1", count=4, interval=0.005, timeout=0.5)
    assert (result.sent, result.answered) == (4, 4) and result.loss == 0
    # Within the timeout, however busy the machine (over 50 ms on loopback has been seen).
    assert all(0 < rtt < 500 for rtt in result.rtts_ms)
    # Answers are told apart by address and identifier: two probes at once each get their own.
    other = echo_probe("127.0.0.2", count=3, interval=0.005, timeout=0.3)
    assert (other.address, other.sent, other.answered) == ("127.0.0.2", 3, 3)


def test_candidates_probed_at_once_each_get_their_answers():
    addresses = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    results = echo_probes(addresses, parallel=True, count=3, interval=0.005, timeout=0.5)
    assert [(r.address, r.sent, r.answered) for r in results] == [(a, 3, 3) for a in addresses]
    assert all(0 < rtt < 500 for r in results for rtt in r.rtts_ms)
    # One round reaches every address before the next round starts: the requests of a round
    # share their sequence number, so each address's answers are told apart by its address.
    assert [len(r.rtts_ms) for r in results] == [3, 3, 3]


def test_a_late_push_of_an_older_decision_is_not_followed(controller):
    ctl = controller()
    with ControlClient(ctl.address, node="viewer1") as control:
        follower = DecisionFollower(control, "video")
        follower.join()
        with ctl.lock:
            placed = ctl.core.decision_message(0, "viewer1/video")  # version 1
            ctl.core.steer("viewer1/video", "edge3")
            ctl.push("viewer1/video")  # version 2
            ctl.server.push(ctl.subscribers["viewer1"], placed)  # the first, arriving late
        assert follower.poll(timeout=5.0).server == "edge3"
        assert follower.poll(timeout=0.3) is None
    assert follower.stale == 1 and [f.server for f in follower.followed] == ["edge1", "edge3"]
    assert [f.decision.version for f in follower.followed] == [1, 2]


class Rows:
    """An agent stand-in collecting table rows."""

    def __init__(self):
        self.rows: list[tuple] = []

    def row(self, table_name, *values):
        self.rows.append((table_name, *values))


def test_the_join_is_timed_from_request_to_grant_and_pushes_are_not(controller):
    ctl = controller()
    ctl.join_delay = 0.08  # below the client's first retransmission (0.5 s)
    with ControlClient(ctl.address, node="viewer1") as control:
        follower = DecisionFollower(control, "video", probe=None)
        before = time.time()
        joined = follower.join()
        elapsed_ms = (time.time() - before) * 1e3
        with ctl.lock:
            ctl.core.steer("viewer1/video", "edge3")
            ctl.push("viewer1/video")
        assert follower.poll(timeout=5.0).server == "edge3"
    # The grant took the controller's 80 ms and at most what the whole join() took (the
    # subscription's round trip before it is not counted).
    assert joined.request is follower.timing
    assert 80 <= joined.request.response_ms <= elapsed_ms
    assert before <= joined.request.requested_ns / 1e9 <= before + elapsed_ms / 1e3
    agent = Rows()
    summary = follower.write(agent)
    assert summary["response_ms"] == joined.request.response_ms
    columns = FOLLOWER_TABLES["decisions_followed"][2:]  # the agent fills node and agent in
    rows = [dict(zip(columns, row[1:])) for row in agent.rows if row[0] == "decisions_followed"]
    assert [row["server"] for row in rows] == ["edge1", "edge3"]
    assert float(rows[0]["requested_s"]) == pytest.approx(joined.request.requested_ns / 1e9,
                                                          abs=1e-6)
    assert float(rows[0]["response_ms"]) == pytest.approx(joined.request.response_ms, abs=1e-3)
    # A pushed decision answers no request of the agent's: no response time.
    assert (rows[1]["requested_s"], rows[1]["response_ms"]) == (None, None)



def test_a_joined_flow_leaves_once_and_the_controller_releases_it(controller):
    ctl = controller()
    with ControlClient(ctl.address, node="viewer1") as control:
        follower = DecisionFollower(control, "video", probe=None)
        assert not follower.leave()  # not joined yet: nothing to leave, nothing sent
        follower.join()
        assert "viewer1/video" in ctl.core.flows
        before = time.time()
        assert follower.leave()
        assert not follower.leave()  # left already: sent once
    assert ctl.leaves == ["viewer1/video"] and "viewer1/video" not in ctl.core.flows
    summary = follower.write(Rows())
    assert before <= summary["left_s"] <= time.time() and summary["leave_error"] is None


def test_a_refused_flow_sends_no_leave_and_an_unanswered_leave_says_why(controller):
    ctl = controller()
    with ControlClient(ctl.address, node="viewer1", timeout=0.2, tries=1) as control:
        refused = DecisionFollower(control, "nothing", probe=None)
        assert refused.join() is None and not refused.leave()
        follower = DecisionFollower(control, "video", probe=None)
        follower.join()
        ctl.close()  # the controller is gone: the leave goes unanswered, within its tries
        started = time.monotonic()
        assert not follower.leave(tries=1)
        assert time.monotonic() - started < 1.0
    assert ctl.leaves == [] and "no reply" in follower.leave_error
    assert follower.write(Rows())["left_s"] is None
