"""The typed contracts between the scenario, the runner and the controller app: the
``ControllerConfig`` both sides use, and the policies' params and labels in the published JSON
schema (the scenario loader's file:line:column refusals are in tests/scenarios/invalid/)."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from experiments import scenarios
from controller import policies
from controller.config import ControllerConfig, ControlEndpoint
from experiments.scenarios import json_schema

INVALID = Path(__file__).resolve().parents[1] / "scenarios" / "invalid"


def config(**changes) -> ControllerConfig:
    fields = dict(out="/tmp/run/controller", view={"nodes": []}, policy="lua",
                  policy_params={"source_bitrate": "8Mbps"}, control_port=6650,
                  loopback_control_port=40000, period=2.0,
                  control_endpoint={"address": "172.30.0.1", "netns_pid": 4242})
    return ControllerConfig(**{**fields, **changes})


def test_the_config_round_trips_through_the_file_the_app_reads(tmp_path):
    written = config()
    written.openflow_port = 6633
    written.write(tmp_path / "config.json")
    read = ControllerConfig.read(tmp_path / "config.json")
    assert read == written
    assert read.control_endpoint == ControlEndpoint(address="172.30.0.1", netns_pid=4242)
    assert read.out == Path("/tmp/run/controller") and read.period == 2.0


@pytest.mark.parametrize("changes, problem", [
    ({"policy_params": {"source_bitrat": "8Mbps"}}, "source_bitrat"),
    ({"policy_params": {"weights": {"alpha": "heavy"}}}, "alpha"),
    ({"policy": "lu"}, "unknown policy 'lu'"),
    ({"loopback_control_port": 0}, "loopback_control_port"),
    ({"control_endpoint": {"address": "172.30.0.1"}}, "netns_pid"),
])
def test_a_config_the_app_could_not_use_is_refused_when_written_or_read(changes, problem):
    with pytest.raises(ValidationError, match=problem):
        config(**changes)


def test_a_key_neither_side_knows_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(config().model_dump_json()[:-1] + ', "polcy": "lua"}')
    with pytest.raises(ValidationError, match="polcy"):
        ControllerConfig.read(path)


def scenario_document(name: str) -> dict:
    return yaml.safe_load((INVALID / name).read_text())


def test_the_schema_names_every_policy_and_types_its_params():
    schema = json_schema()
    controller = schema["$defs"]["Controller"]
    enum = next(part["enum"] for part in controller["properties"]["policy"]["anyOf"]
                if "enum" in part)
    assert enum == policies.available()
    chosen = {clause["if"]["properties"]["policy"]["const"]: clause["then"]
              for clause in controller["allOf"]}
    assert set(chosen) == set(policies.available())
    lua = chosen["lua"]["properties"]["policy_params"]["$ref"].split("/")[-1]
    assert "source_bitrate" in schema["$defs"][lua]["properties"]
    assert schema["$defs"][lua]["additionalProperties"] is False


@pytest.mark.parametrize("name, where", [
    ("policy-param-misspelled.yaml", "source_bitrat"),
    ("policy-param-wrong-type.yaml", "heavy"),
    ("policy-label-wrong-type.yaml", "often"),
])
def test_the_schema_refuses_what_the_loader_refuses(name, where):
    document = scenario_document(name)
    with pytest.raises(jsonschema.ValidationError, match=where):
        jsonschema.validate(document, json_schema())


def test_the_schema_accepts_the_same_scenario_put_right():
    document = scenario_document("policy-label-wrong-type.yaml")
    fixed = copy.deepcopy(document)
    fixed["topology"]["kinds"]["viewer"]["labels"]["danmaku_rate"] = 2.5
    fixed["controller"]["policy_params"] = {"source_bitrate": "8Mbps",
                                            "weights": {"alpha": 0.2}}
    jsonschema.validate(fixed, json_schema())


IN_BAND = """\
name: in-band
topology:
  subnet: 10.0.0.0/24
  nodes:
    dc: {role: datacenter}
    e1: {role: edge}
    s1: {role: switch}
  links:
    - endpoints: ["dc:eth1", "s1:eth1"]
    - endpoints: ["e1:eth1", "s1:eth2"]
controller:
  app: edgebed
  control_network: in-band
  control_host: dc
"""


def test_in_band_control_builds_no_management_network_and_the_schema_takes_it():
    document = yaml.safe_load(IN_BAND)
    jsonschema.validate(document, json_schema())
    settings = scenarios.loads(IN_BAND).document.controller
    assert settings.control_network == "in-band" and settings.control_host == "dc"
    assert settings.management and not settings.builds_management
    out_of_band = scenarios.loads(IN_BAND.replace("  control_network: in-band\n", "")
                                        .replace("  control_host: dc\n", ""))
    assert out_of_band.document.controller.builds_management  # the default


def test_the_schema_refuses_a_misspelt_control_network():
    document = scenario_document("controller-control-network-misspelt.yaml")
    with pytest.raises(jsonschema.ValidationError, match="inband"):
        jsonschema.validate(document, json_schema())
