"""The dispatch_emulation kind: which scenario variables each policy sets (a cell's run is the
experiment's; tests/integration/test_dispatch_runs.py runs the scenario itself)."""

from __future__ import annotations

from experiments.kinds import registered
from experiments.kinds.dispatch_emulation import Parameters, variables
from experiments.sweeps.kinds import Cell


def cell(policy: str, **parameters) -> Cell:
    return Cell("dispatch-test", "sweep", "database_error", "0.3", policy, 0, 7,
                Parameters(**parameters))


def test_each_policy_switches_one_mechanism_against_its_absence():
    database, probe = (variables(cell(p, database_error=0.3)) for p in ("database", "probe"))
    assert (database["EDGEBED_CANDIDATES"], probe["EDGEBED_CANDIDATES"]) == ("1", "3")
    assert database["EDGEBED_DATABASE_ERROR"] == probe["EDGEBED_DATABASE_ERROR_ABROAD"] == "0.3"
    assert database["EDGEBED_RELAYS"] == probe["EDGEBED_RELAYS"] == "false"
    direct, relay = (variables(cell(p, database_error=0.3, border_loss_p="1.5%"))
                     for p in ("direct", "relay"))
    assert (direct["EDGEBED_RELAYS"], relay["EDGEBED_RELAYS"]) == ("false", "true")
    # The relay comparison probes with a right database: only the back-source path differs.
    assert direct["EDGEBED_DATABASE_ERROR"] == relay["EDGEBED_DATABASE_ERROR_ABROAD"] == "0"
    assert direct["EDGEBED_BORDER_LOSS_P"] == "1.5%" and direct["EDGEBED_DATABASE_SEED"] == "7"
    assert registered()["dispatch_emulation"].emulated
