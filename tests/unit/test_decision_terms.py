"""A decision's terms (bitrate, ranked candidates, a via chain of relays, attributes) go from
the policy through the controller core into the control protocol's ``decision`` and reach the
agent as they were decided, once, the same way for every term."""

from __future__ import annotations

import math

import pytest

from edgebed import protocol
from controller.core import ControllerCore
from controller.policies import create
from controller.policy import (Assignment, Decision, Migration, Placement, Request, State,
                               Terms)
from controller.view import NetworkView
from experiments.scenarios import load

TERMS = dict(candidates=("edge2", "edge3", "edge1"), via=("viewer2", "viewer3"),
             attributes={"tier": "gold", "probe_ms": 40, "shared": True, "weight": 0.25,
                         "note": None})


class Scripted:
    """A policy whose next answers the test writes: assignments by flow, then migrations."""

    name = "scripted"
    on_load = "nothing"

    def __init__(self):
        self.assign: dict[str, Assignment] = {}
        self.migrate: list[Migration] = []

    def decide(self, state: State) -> Decision:
        decision = Decision(migrations=self.migrate)
        self.migrate = []
        for request in state.requests:
            decision.assignments.append(self.assign.get(request.flow)
                                        or Assignment(request.flow, "edge1"))
        return decision


@pytest.fixture
def core() -> ControllerCore:
    return ControllerCore(NetworkView.from_scenario(load("topologies/edge-services.yaml")),
                          Scripted())


def place(core: ControllerCore, assignment: Assignment, port: int | None = None) -> None:
    request = core.request_for("viewer1", "video", port=port)
    core.policy.assign[request.flow] = assignment
    assert core.place([request]).placed == {request.flow: assignment.server}


def over_the_wire(message: protocol.Message) -> protocol.Message:
    return protocol.decode(protocol.encode(message), protocol.TO_HOST)


def test_every_term_reaches_the_agent_as_decided(core):
    place(core, Assignment("viewer1/video:40001", "edge2", 2.5e6, **TERMS), port=40001)
    pushed = over_the_wire(core.decision_message(0, "viewer1/video:40001"))
    view = core.view
    assert (pushed.flow, pushed.port, pushed.server, pushed.bitrate) == (
        "viewer1/video:40001", 40001, "edge2", 2.5e6)
    assert [(hop.name, hop.address) for hop in pushed.candidates] == [
        (name, view.attachment(name).address) for name in TERMS["candidates"]]
    assert [(hop.name, hop.address) for hop in pushed.via] == [
        (name, view.attachment(name).address) for name in TERMS["via"]]
    assert pushed.attributes == TERMS["attributes"]
    assert type(pushed.attributes["probe_ms"]) is int and pushed.attributes["shared"] is True


def test_a_decision_without_terms_says_so(core):
    place(core, Assignment("viewer1/video", "edge1"))
    pushed = over_the_wire(core.decision_message(7, "viewer1/video"))
    assert (pushed.id, pushed.port, pushed.bitrate, pushed.candidates, pushed.via,
            pushed.attributes) == (7, None, None, (), (), {})


def test_a_migration_replaces_the_terms_it_gives_and_keeps_the_others(core):
    place(core, Assignment("viewer1/video", "edge2", 2.5e6, **TERMS))
    core.policy.migrate = [Migration("viewer1/video", "edge3", via=("viewer3",))]
    assert core.rebalance().placed == {"viewer1/video": "edge3"}
    placement = core.flows["viewer1/video"].placement
    assert placement.terms == Terms(2.5e6, TERMS["candidates"], ("viewer3",),
                                    TERMS["attributes"])
    # A client confirming a candidate (steer) keeps every term.
    core.steer("viewer1/video", "edge1")
    assert core.flows["viewer1/video"].placement.terms == placement.terms


def test_a_new_period_restates_the_terms_and_a_change_alone_is_pushed(core):
    place(core, Assignment("viewer1/video", "edge2", 2.5e6, **TERMS))
    core.policy.assign["viewer1/video"] = Assignment("viewer1/video", "edge2", 2.5e6, **TERMS)
    assert not core.reallocate().placed  # the same terms: nothing to tell
    core.policy.assign["viewer1/video"] = Assignment("viewer1/video", "edge2", 2.5e6,
                                                     candidates=("edge3",))
    assert core.reallocate().placed == {"viewer1/video": "edge2"}
    assert core.flows["viewer1/video"].placement.terms == Terms(2.5e6, ("edge3",))


def test_terms_survive_a_controller_restart(core):
    place(core, Assignment("viewer1/video:9", "edge2", 1e6, **TERMS), port=9)
    successor = ControllerCore(core.view, Scripted())
    successor.restore(core.snapshot())
    assert successor.flows["viewer1/video:9"].placement == core.flows[
        "viewer1/video:9"].placement
    assert successor.decision_message(0, "viewer1/video:9") == core.decision_message(
        0, "viewer1/video:9")


@pytest.mark.parametrize("terms, problem", [
    (dict(candidates=("viewer2",)), "viewer2 does not serve video"),
    (dict(via=("s1",)), "s1"),  # a switch is no relay host
    (dict(attributes={"nested": {"a": 1}}), "not a scalar"),
    (dict(attributes={"inf": math.inf}), "not a scalar"),
    (dict(candidates=("edge1",) * 17), "at most 16"),
])
def test_terms_a_decision_cannot_carry_are_refused(core, terms, problem):
    request = core.request_for("viewer1", "video")
    core.policy.assign[request.flow] = Assignment(request.flow, "edge1", **terms)
    with pytest.raises((ValueError, KeyError), match=problem):
        core.place([request])
    assert not core.flows


def test_placements_and_decisions_share_their_terms():
    request = Request("f", "c", "s")
    assert Placement(request, "e1", 5.0).terms == Terms(5.0)  # as before terms existed
    assert Placement.of(request, "e1", Terms(1.0, ("a",), ("r",), {"k": 1})) == Placement(
        request, "e1", 1.0, candidates=("a",), via=("r",), attributes={"k": 1})
    assert Terms(1.0, ("a",), ("r",), {"k": 1}).updated(Terms(None, (), ("q",))) == Terms(
        1.0, ("a",), ("q",), {"k": 1})


@pytest.mark.parametrize("fields, problem", [
    (dict(candidates=[{"name": "edge1", "address": "10.0.0.300"}]), "candidates.0.address"),
    (dict(candidates=[{"name": "edge1"}]), "candidates.0.address: Field required"),
    (dict(via=[{"name": "r", "address": "10.0.0.1", "port": 1}]), "Extra inputs"),
    (dict(candidates=[{"name": "e", "address": "10.0.0.1"}] * 17), "at most 16 items"),
    (dict(attributes={"1st": 1}), "attributes.1st.[key]"),
    (dict(attributes={"a": [1, 2]}), "attributes.a"),
    (dict(attributes={f"a{n}": n for n in range(17)}), "at most 16 items"),
    (dict(port=0), "port: Input should be greater than or equal to 1"),
    (dict(port=65536), "port: Input should be less than or equal to 65535"),
])
def test_the_protocol_checks_the_terms(fields, problem):
    message = {"v": 1, "type": "decision", "id": 0, "flow": "c/s", "client": "c", "service": "s",
               "server": "e", "address": "10.0.0.2"} | fields
    with pytest.raises(protocol.ProtocolError, match=problem.replace(".", r"\.").replace(
            "[", r"\[")):
        protocol.decode(protocol.json.dumps(message).encode(), protocol.TO_HOST)


def test_a_join_from_a_port_names_its_flow_after_it():
    join = protocol.Join(id=1, node="cams", service="ai", port=41000)
    assert join.flow == "cams/ai:41000"
    assert protocol.Join(id=1, node="cams", service="ai").flow == "cams/ai"


def test_the_baseline_policies_rank_candidates_and_take_relays_from_labels():
    view = NetworkView.from_scenario(load("topologies/edge-services.yaml"))
    view.labels["viewer3"] = {"via": ["viewer1", "viewer2"]}
    core = ControllerCore(view, create("least_loaded", {"candidates": 2}))
    core.report_load("edge1", 15e6)  # busy: least loaded ranks it last
    core.place([core.request_for("viewer1", "video")])
    first = core.flows["viewer1/video"].placement
    assert (first.server, first.candidates, first.via) == ("edge2", ("edge2", "edge3"), ())
    core.place([core.request_for("viewer3", "video")])
    assert core.flows["viewer3/video"].placement.via == ("viewer1", "viewer2")
    turns = ControllerCore(view, create("round_robin", {"candidates": 3}))
    turns.place([turns.request_for("viewer1", "video")])
    assert turns.flows["viewer1/video"].placement.candidates == ("edge1", "edge2", "edge3")
    plain = ControllerCore(view, create("least_loaded"))
    plain.place([plain.request_for("viewer1", "video")])
    assert plain.flows["viewer1/video"].placement.candidates == ()
