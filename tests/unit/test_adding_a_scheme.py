"""Adding a scheme edits no shared file: a toy scheme ("toy": one policy, one experiment kind,
one agent with a table and a wire message of its own) written at test time into directories appended to the
packages' paths is found by every layer, as docs/schemes/index.md describes.

The directories stand for the scheme's own files in the repository
(``controller/policies/toy/``, ``experiments/kinds/toy.py``, ``agents/toy/``): discovery
scans a package's ``__path__`` the way the import system does, so files in an appended
directory are found exactly as files in the package's own directory are.
"""

from __future__ import annotations

import gc
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from experiments import scenarios
import agents
import controller.policies
import experiments.kinds
from agents import catalog, dissector, wire
from controller import policies
from experiments.sweeps import experiment as experiments_file
from experiments.sweeps.runner import read_results, run
from topologies.problems import ScenarioInvalid

POLICY = '''
"""Toy scheme: every request to the server of its service with the most capacity left."""
from pydantic import Field

from controller.policy import Assignment, Decision, PolicyParams, Rejection, State


class Params(PolicyParams):
    reserve: float = Field(0.0, ge=0, description="capacity kept free on every server")


class MostRoom:
    """Each request to the server with the most capacity left, if it fits."""

    name = "most_room"
    Params = Params

    def __init__(self, params: Params | None = None) -> None:
        self.params = params or Params()

    def decide(self, state: State) -> Decision:
        left = {server.name: server.capacity - self.params.reserve for server in state.servers}
        decision = Decision()
        for request in state.requests:
            fitting = [server.name for server in state.servers_of(request.service)
                       if left[server.name] >= request.demand]
            if not fitting:
                decision.rejections.append(Rejection(request.flow, "no room"))
                continue
            server = max(fitting, key=lambda name: (left[name], name))
            left[server] -= request.demand
            decision.assignments.append(Assignment(request.flow, server))
        return decision


POLICIES = (MostRoom,)
'''

KIND = '''
"""Toy scheme at model level: one decision of a policy on servers x requests of demand 1."""
import networkx as nx
from pydantic import BaseModel, ConfigDict

from controller import policies
from controller.policy import Client, Request, Server, State
from experiments.sweeps.kinds import Kind, Metric


class Parameters(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    requests: int = 4
    servers: int = 2
    capacity: float = 1.0


def run_cell(cell):
    p = cell.parameters
    state = State(graph=nx.MultiDiGraph(),
                  servers=tuple(Server(f"e{i}", "toy", f"10.0.0.{i + 1}", p.capacity)
                                for i in range(p.servers)),
                  clients=(Client("v", "10.0.0.100"),),
                  requests=tuple(Request(f"v/{i}", "v", "toy", 1.0) for i in range(p.requests)))
    decision = policies.create(cell.policy).decide(state)
    return [{"assigned": len(decision.assignments), "rejected": len(decision.rejections)}]


KINDS = (Kind(name="toy_model", parameters=Parameters, policies=("most_room",), run=run_cell,
              metrics=(Metric("assigned", "requests assigned"),
                       Metric("rejected", "requests rejected")),
              plots=("assigned",)),)
'''

TOY_AGENTS = '''
"""The toy scheme agents, and the role of the hosts that run them."""
ROLES = {"counter": "a host that counts"}
'''

MESSAGES = '''
"""Toy scheme's wire message: one number."""
from agents.wire import MessageFormat

TICK = MessageFormat("toy_tick", 250, (("number", "I"), ("send_ns", "Q")),
                     timestamps=frozenset({"send_ns"}))

MESSAGES = (TICK,)
'''

CODES = '''{"published": {"toy_tick": 250}, "retired": {}}
'''

AGENT = '''
"""Toy scheme's agent: counts to ``count`` and writes one row per number, the number as the
scheme's own message."""
import sys

from agents.agent import Agent, AgentParams
from agents.toy.formats import TICK

TABLES = {"toy_counts": ("node", "agent", "number")}


class Params(AgentParams):
    count: int = 3


def main(argv=None) -> int:
    agent = Agent("toy", argv, TABLES)
    params = Params.model_validate(agent.params)
    for number in range(params.count):
        agent.row("toy_counts", TICK.unpack(TICK.pack(number=number, send_ns=0))["number"])
    agent.finish({"count": params.count})
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

SCENARIO = """
name: toy
topology:
  subnet: 10.0.0.0/24
  nodes:
    v1: {role: counter}
    e1: {role: edge, labels: {capacity: 10}}
    s1: {role: switch}
  links:
    - endpoints: ["v1:eth1", "s1:eth1"]
    - endpoints: ["e1:eth1", "s1:eth2"]
controller:
  app: edgebed
  policy: most_room
  policy_params: {reserve: RESERVE}
  services:
    toy: {address: 10.0.0.200, protocol: udp, port: 5000, servers: [e1], demand: 1}
workload:
  - agent: toy
    nodes: [v1]
    params: {count: COUNT}
"""

EXPERIMENT = """
name: toy-model
kind: toy_model
seed: 1
repetitions: 1
policies: [most_room]
sweeps:
  - name: requests
    vary: requests
    values: [1, 2, 3]
"""


@pytest.fixture
def toy_scheme(tmp_path, monkeypatch):
    """The toy scheme's files, each in a directory appended to its package's path."""
    files = {(controller.policies, "toy/__init__.py"): POLICY,
             (experiments.kinds, "toy.py"): KIND,
             (agents, "toy/__init__.py"): TOY_AGENTS,
             (agents, "toy/toy.py"): AGENT,
             (agents, "toy/formats.py"): MESSAGES,
             (agents, "toy/wire_codes.json"): CODES}
    for (package, name), text in files.items():
        directory = tmp_path / package.__name__
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(textwrap.dedent(text))
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(directory)])
    yield tmp_path
    for module in ("controller.policies.toy", "experiments.kinds.toy", "agents.toy.toy",
                   "agents.toy.formats", "agents.toy"):
        sys.modules.pop(module, None)


def test_the_toy_policy_is_found_created_and_checked_in_scenarios(toy_scheme):
    assert "most_room" in policies.available()
    assert policies.create("most_room", {"reserve": 1}).params.reserve == 1
    loaded = scenarios.loads(SCENARIO.replace("RESERVE", "2").replace("COUNT", "2"), "toy.yaml",
                            {})
    assert loaded.document.controller.policy == "most_room"
    assert [entry.agent for entry in loaded.workload] == ["toy"]
    assert loaded.nodes["v1"].role == "counter"
    assert "counter" in scenarios.json_schema()["$defs"]["Role"]["anyOf"][0]["enum"]
    with pytest.raises(ScenarioInvalid, match="reserve") as refused:
        scenarios.loads(SCENARIO.replace("RESERVE", "-1").replace("COUNT", "2"), "toy.yaml", {})
    assert "toy.yaml:" in str(refused.value)


def test_the_toy_kind_is_found_and_runs_its_cells(toy_scheme):
    experiment = experiments_file.loads(EXPERIMENT, "toy-model.yaml")
    outcome_dir = toy_scheme / "out"
    run(experiment, outcome_dir)
    results = read_results(outcome_dir / "results.csv", experiment.kind)
    # Two servers of capacity 1: the third request finds no room.
    assert list(results["assigned"]) == [1, 2, 2]
    assert list(results["rejected"]) == [0, 0, 1]


def test_the_toy_agent_and_its_table_are_found_and_written(toy_scheme):
    assert "toy" in catalog.available()
    assert catalog.tables()["toy_counts"] == ("node", "agent", "number")
    with pytest.raises(ScenarioInvalid, match="count"):
        scenarios.loads(SCENARIO.replace("RESERVE", "0").replace("COUNT", "many"), "toy.yaml", {})
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        module = __import__(catalog.module_name("toy"), fromlist=["main"])
        assert module.main(["--node", "v1", "--out", str(toy_scheme), "--params",
                            '{"count": 2}']) == 0
    finally:
        gc.enable()  # an agent turns the collector off for its lifetime
        for number, handler in handlers.items():
            signal.signal(number, handler)
    written = (toy_scheme / "records" / "toy_counts" / "v1-toy.csv").read_text().splitlines()
    assert written == ["node,agent,number", "v1,toy,0", "v1,toy,1"]


def test_the_toy_message_is_found_and_dissected(toy_scheme):
    tick = wire.formats()[250]
    assert tick.name == "toy_tick"
    assert wire.message_type(tick.pack(number=7, send_ns=1), wire.formats().values()) is tick
    assert ('[250] = {name = "toy_tick", fields = {{"number", "u32"}, {"send_ns", "time"}}}'
            in dissector.lua())
    assert wire.published_codes()[0]["toy_tick"] == 250  # recorded in its own package


def test_a_table_an_agent_does_not_declare_is_refused(tmp_path):
    from agents.agent import Agent

    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        agent = Agent("toy", ["--node", "v1", "--out", str(tmp_path)], {"mine": ("node", "agent")})
        with pytest.raises(KeyError, match="undeclared"):
            agent.row("undeclared", 1)
    finally:
        gc.enable()
        for number, handler in handlers.items():
            signal.signal(number, handler)


def test_discovery_refuses_two_entries_under_one_name(tmp_path, monkeypatch):
    duplicate = tmp_path / "again.py"
    duplicate.write_text("from controller.policies.baseline import RoundRobin\n\n\n"
                         "class RoundRobin(RoundRobin):\n    pass\n\n\nPOLICIES = (RoundRobin,)\n")
    monkeypatch.setattr(controller.policies, "__path__",
                        [*controller.policies.__path__, str(tmp_path)])
    try:
        with pytest.raises(ValueError, match="'round_robin' is declared by both"):
            policies.available()
    finally:
        sys.modules.pop("controller.policies.again", None)


def test_every_shipped_scheme_follows_the_layout():
    """live_edge has one slug in every layer and nothing left in the old mirrored tree."""
    root = Path(__file__).resolve().parents[2]
    assert not (root / "controller" / "live_edge").exists()
    for path in ("controller/policies/live_edge/__init__.py", "experiments/kinds/live_edge/model.py",
                 "agents/edge_server.py", "topologies/live_edge/live_edge.yaml",
                 "experiments/live_edge/model.yaml", "reports/live_edge/model/report.md"):
        assert (root / path).exists(), path
    assert {"lua", "df", "mhcp", "random", "optimal"} <= set(policies.available())
    for slug in ("live_edge", "dispatch", "bloom_cdn", "ai_access", "surveillance"):
        for place in (f"controller/policies/{slug}", f"experiments/kinds/{slug}",
                      f"experiments/{slug}", f"topologies/{slug}", f"reports/{slug}",
                      f"benchmarks/{slug}.py", f"tests/unit/{slug}", f"tests/integration/{slug}"):
            assert (root / place).exists(), place
