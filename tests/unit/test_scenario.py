"""The resolved model: inheritance, ranges, addresses, ports, dpids, env expansion."""

import ipaddress
import json
import os

import jsonschema
import pytest
import yaml

from tests.conftest import EXAMPLES, ROOT, example_id
from experiments import scenarios
from experiments.scenarios import json_schema
from topologies.problems import ScenarioInvalid

BASE = """
name: t
topology:
  defaults: {labels: {tier: default, city: x}, env: {A: "1"}}
  kinds:
    viewer: {role: viewer, labels: {tier: kind}}
    switch: {role: switch}
  groups:
    north: {kind: viewer, labels: {area: north}, env: {B: "2"}}
  nodes:
    v[1-3]: {group: north}
    e1: {role: edge, ip: 10.0.0.200/16, labels: {tier: node}}
    s1: {kind: switch}
    s2: {kind: switch, dpid: "0x0a"}
  links:
    - endpoints: ["v[1-3]:eth1", "s1:eth[1-3]"]
    - endpoints: ["e1:eth1", "s2:port7"]
    - endpoints: ["e1:uplink", "s1:trunk"]
    - endpoints: ["s1:eth9", "s2:eth1"]
      delay: 10ms
      loss: 1%
      reverse: {delay: 20ms, bw: 5Mbps}
"""


def load(text=BASE, environ=None):
    return scenarios.loads(text, "t.yaml", environ or {})


def test_inheritance_order_defaults_kind_group_node():
    s = load()
    v1, e1 = s.nodes["v1"], s.nodes["e1"]
    assert v1.role == "viewer" and v1.kind == "viewer" and v1.group == "north"
    assert v1.labels == {"tier": "kind", "city": "x", "area": "north"}
    assert v1.env == {"A": "1", "B": "2"}
    assert e1.labels == {"tier": "node", "city": "x"}


def test_ranges_expand_and_zip():
    s = load()
    assert [n for n in s.nodes if n.startswith("v")] == ["v1", "v2", "v3"]
    pairs = [(str(l.a), str(l.b)) for l in s.links[:3]]
    assert pairs == [("v1:eth1", "s1:eth1"), ("v2:eth1", "s1:eth2"), ("v3:eth1", "s1:eth3")]


def test_addresses_first_interface_takes_ip_others_from_subnet():
    s = load()
    e1 = s.nodes["e1"]
    assert e1.interfaces["eth1"] == ipaddress.IPv4Interface("10.0.0.200/16")
    assert e1.interfaces["uplink"] in ipaddress.IPv4Network("10.0.0.0/16")
    addresses = [a.ip for n in s.hosts for a in n.interfaces.values()]
    assert len(addresses) == len(set(addresses))


def test_ports_take_trailing_number_else_next_free():
    s = load()
    s1, s2 = s.nodes["s1"], s.nodes["s2"]
    assert s1.ports == {"eth1": 1, "eth2": 2, "eth3": 3, "trunk": 4, "eth9": 9}
    assert s2.ports == {"port7": 7, "eth1": 1}


def test_dpids_explicit_and_in_file_order():
    s = load()
    assert s.nodes["s2"].dpid == 10 and s.nodes["s1"].dpid == 1


def test_link_directions():
    link = load().links[-1]
    assert link.forward.delay == pytest.approx(0.01) and link.forward.loss == pytest.approx(0.01)
    assert link.forward.bw is None
    assert link.reverse.delay == pytest.approx(0.02) and link.reverse.bw == 5e6
    assert link.reverse.loss == pytest.approx(0.01)


def test_environment_expansion_types_and_defaults():
    text = BASE.replace("name: t", "name: ${NAME:=fromdefault}\nseed: ${SEED:=3}\n"
                                   "duration: ${DUR:-2s}")
    s = load(text, {"DUR": ""})
    assert (s.name, s.seed, s.duration) == ("fromdefault", 3, 2.0)
    s = load(text, {"NAME": "given", "SEED": "9", "DUR": "1min"})
    assert (s.name, s.seed, s.duration) == ("given", 9, 60.0)


def test_merge_keys_and_small_anchors_work():
    text = BASE.replace("  kinds:\n", "  kinds:\n    base: &base {role: gpu}\n"
                                      "    gpu: {<<: *base, labels: {gpus: 2}}\n")
    assert load(text).document.topology.kinds["gpu"].role == "gpu"


def test_many_problems_are_all_reported():
    text = BASE.replace("kind: viewer, labels", "kind: viewr, labels").replace(
        '"e1:eth1", "s2:port7"', '"e2:eth1", "s2:port7"')
    with pytest.raises(ScenarioInvalid) as error:
        load(text)
    messages = [p.message for p in error.value.problems]
    assert any("unknown kind 'viewr'" in m for m in messages)
    assert any("unknown node 'e2'" in m for m in messages)


def test_resolved_scenario_is_plain_data():
    data = load().resolved()
    json.dumps(data)
    assert data["topology"]["nodes"]["s2"]["dpid"] == "0x000000000000000a"
    assert data["topology"]["links"][-1]["reverse"]["bw"] == 5e6


@pytest.mark.parametrize("path", EXAMPLES, ids=example_id)
def test_examples_are_valid_and_match_the_json_schema(path):
    loaded = scenarios.load(path, {})
    assert loaded.hosts
    document = yaml.safe_load(path.read_text())
    jsonschema.validate(document, json_schema())
    # The editor resolves the schema relative to the file: a scheme's scenario is a level deeper.
    schema = os.path.relpath(ROOT / "topologies" / "schema" / "scenario.schema.json", path.parent)
    assert path.read_text().startswith(f"# yaml-language-server: $schema={schema}")


def test_big_example_has_more_than_100_hosts():
    assert len(scenarios.load(ROOT / "topologies" / "city-113.yaml", {}).hosts) > 100


def test_shipped_schema_is_current():
    shipped = json.loads((ROOT / "topologies" / "schema" / "scenario.schema.json").read_text())
    assert shipped == json_schema(), "regenerate with: make schema"


def test_a_cpu_limit_is_inherited_and_recorded():
    loaded = scenarios.loads("""
name: t
topology:
  kinds:
    small: {role: edge, cpu: 0.5}
  nodes:
    e1: {kind: small}
    e2: {kind: small, cpu: 1.5}
    v1: {role: viewer}
    s1: {role: switch}
  links:
    - endpoints: ["e[1-2]:eth1", "s1:eth[1-2]"]
    - endpoints: ["v1:eth1", "s1:eth3"]
""", "t.yaml")
    assert [loaded.nodes[name].cpu for name in ("e1", "e2", "v1")] == [0.5, 1.5, None]
    nodes = loaded.resolved()["topology"]["nodes"]
    assert nodes["e1"]["cpu"] == 0.5 and "cpu" not in nodes["v1"]


def test_a_role_no_agent_declares_is_refused_where_it_is_written():
    text = BASE.replace("role: viewer", "role: veiwer", 1)
    assert text != BASE
    with pytest.raises(ScenarioInvalid, match="unknown role 'veiwer'") as refused:
        load(text)
    assert "did you mean 'viewer'?" in str(refused.value)
