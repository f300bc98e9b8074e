"""A scenario derived for an experiment's cell: the file with its variables expanded and
top-level keys replaced (a schedule of the cell's own), written where the cell runs and
checked like any scenario file."""

from __future__ import annotations

import pytest
import yaml

from experiments import scenarios
from experiments.sweeps.kinds import derived_scenario
from tests.conftest import ROOT
from topologies.problems import ScenarioInvalid

DISPATCH = "topologies/dispatch/dispatch.yaml"
STALL = [{"at": "5s", "action": "node_stall", "node": "cn1"},
         {"at": "9s", "action": "node_resume", "node": "cn1"}]


def test_the_derived_scenario_runs_the_given_schedule_with_the_variables_expanded(tmp_path):
    derived = tmp_path / "derived.yaml"
    loaded = scenarios.derive(ROOT / DISPATCH, derived, {"schedule": STALL},
                              {"EDGEBED_DURATION": "12s", "EDGEBED_GRAY_FAILOVER": "true"})
    assert [(event.at, event.action, event.node) for event in loaded.schedule] == [
        (5.0, "node_stall", "cn1"), (9.0, "node_resume", "cn1")]
    text = derived.read_text()
    assert "${" not in text and "link_down" not in text
    data = yaml.safe_load(text)
    assert data["duration"] == "12s"
    assert data["controller"]["policy_params"]["gray_failover"] is True
    # Everything else is the scenario's own, read as it reads.
    original = scenarios.load(ROOT / DISPATCH, {"EDGEBED_DURATION": "12s",
                                                "EDGEBED_GRAY_FAILOVER": "true"})
    assert loaded.resolved() | {"schedule": None} == original.resolved() | {"schedule": None}


def test_a_bad_schedule_names_the_derived_files_line_and_field(tmp_path):
    derived = tmp_path / "derived.yaml"
    bad = [{"at": "5s", "action": "node_stall", "node": "cn9"},
           {"at": "30s", "action": "node_resume", "node": "cn1"}]
    with pytest.raises(ScenarioInvalid) as raised:
        scenarios.derive(ROOT / DISPATCH, derived, {"schedule": bad},
                         {"EDGEBED_DURATION": "12s"})
    lines = derived.read_text().splitlines()
    problems = {problem.field: problem for problem in raised.value.problems}
    # The resume is after the run's end, and of a node the bad stall left running.
    assert set(problems) == {"schedule[0].node", "schedule[1].at", "schedule[1].node"}
    for field, written in (("schedule[0].node", "cn9"), ("schedule[1].at", "30s")):
        position = problems[field].position
        assert position.file == str(derived)
        assert written in lines[position.line - 1], (field, position)
    assert "unknown node 'cn9'" in str(raised.value)


def test_a_cell_runs_its_derived_scenario_from_its_own_directory(tmp_path):
    runs = tmp_path / "dispatch-gray-0123"
    path = derived_scenario(DISPATCH, runs, {"EDGEBED_DURATION": "12s"}, {"schedule": STALL})
    assert path.parent == runs.resolve() and path.name == "dispatch-derived.yaml"
    assert scenarios.load(path).schedule[0].node == "cn1"
