"""The layers' import contracts (pyproject.toml's [tool.importlinter]) hold, and each can fail:
a deliberately wrong import in a scratch copy of the packages breaks it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("edgebed", "topologies", "controller", "agents", "experiments")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the packages under ``root`` (found there first, not in the venv's
    editable install)."""
    command = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(command), "--config", str(root / "pyproject.toml")], cwd=root,
                          env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True,
                          text=True, timeout=120)


def test_the_layer_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


LAYERS = "layers: edgebed, then topologies"
POLICIES = "policies import only the base"


@pytest.mark.parametrize("module, wrong_import, contract", [
    ("agents/iperf.py", "from experiments import report", LAYERS),
    ("agents/streamer.py", "from controller import core", LAYERS),
    ("controller/app.py", "from agents import common", LAYERS),
    ("topologies/model.py", "from agents import catalog", LAYERS),
    ("edgebed/units.py", "from topologies import naming", LAYERS),
    ("controller/policies/baseline.py", "import controller.app", POLICIES),
    ("controller/policies/baseline.py", "import mininet.node", POLICIES),
    ("controller/policies/live_edge/model.py", "from topologies import model", POLICIES),
    ("controller/policies/dispatch/access.py", "from controller.policies.live_edge import model",
     "policies never import another's"),
])
def test_a_wrong_import_in_a_scratch_copy_breaks_its_contract(tmp_path, module, wrong_import,
                                                               contract):
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / module, "a") as source:
        source.write(f"\n{wrong_import}  # deliberately wrong\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout, result.stdout
