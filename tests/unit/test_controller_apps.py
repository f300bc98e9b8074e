"""`edgebed validate` on the forms of ``controller.app`` and ``controller.remote``: edgebed or
none, a Python file beside the scenario, a module name, a list of them, remote controllers; a
missing app file or a malformed remote is refused at its file:line:column."""

from __future__ import annotations

import textwrap

import pytest

from experiments.cli import main

SCENARIO = """\
name: apps
duration: 5s
topology:
  nodes:
    h1: {{role: viewer}}
    h2: {{role: edge}}
    s1: {{role: switch}}
  links:
    - endpoints: ["h1:eth1", "s1:eth1"]
    - endpoints: ["h2:eth1", "s1:eth2"]
controller:
{controller}
"""

APP = """\
from ryu.base import app_manager


class Quiet(app_manager.RyuApp):
    pass
"""


@pytest.fixture
def scenario(tmp_path, monkeypatch):
    """Writes a scenario with the given controller block beside an app file (quiet.py) and
    a module directory on the path (quiet_module); returns its path."""
    (tmp_path / "quiet.py").write_text(APP)
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "quiet_module.py").write_text(APP)
    monkeypatch.syspath_prepend(str(modules))

    def write(controller: str):
        path = tmp_path / "scenario.yaml"
        path.write_text(SCENARIO.format(controller=textwrap.indent(controller, "  ")))
        return path
    return write


@pytest.mark.parametrize("controller", [
    "app: none",
    "app: edgebed",
    "app: quiet.py",
    "app: quiet_module",
    "app: [edgebed, quiet.py, quiet_module]",
    "remote: tcp:127.0.0.1:6653",
    "remote: [tcp:127.0.0.1:6653, tcp:localhost:6654]",
], ids=["none", "edgebed", "file", "module", "list", "remote", "remotes"])
def test_validate_accepts(scenario, controller, capsys):
    assert main(["validate", str(scenario(controller))]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("controller, line, column, message", [
    ("app: [edgebed, missing.py]", 12, 18, "controller app file 'missing.py' not found"),
    ("app: missing.py", 12, 8, "controller app file 'missing.py' not found"),
    ("remote: [tcp:127.0.0.1:6653, 127.0.0.1:6654]", 12, 32,
     "remote controller '127.0.0.1:6654' is not tcp:HOST:PORT"),
    ("remote: tcp:127.0.0.1:70000", 12, 11,
     "remote controller 'tcp:127.0.0.1:70000' is not tcp:HOST:PORT"),
    ("app: quiet.py\nremote: tcp:127.0.0.1:6653", 12, 3,
     "app is set beside a remote controller"),
], ids=["missing-file-in-list", "missing-file", "remote-without-tcp", "remote-port",
        "app-beside-remote"])
def test_validate_refuses_at_the_field(scenario, controller, line, column, message, capsys):
    path = scenario(controller)
    assert main(["validate", str(path)]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert f"{path}:{line}:{column}" in error and message in error, error


def test_the_schedule_cannot_stop_a_remote_controller(scenario, capsys):
    path = scenario("remote: tcp:127.0.0.1:6653")
    path.write_text(path.read_text() + "schedule:\n  - {at: 1s, action: controller_down}\n")
    assert main(["validate", str(path)]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert f"{path}:14:" in error and "controller_down needs a controller edgebed starts" \
        in error, error


def test_waiting_for_a_remote_controller_names_the_switches_it_lacks():
    from controller.launcher import wait_remote_connected

    wait_remote_connected(lambda: [], ["tcp:127.0.0.1:6653"])  # all connected: no wait
    with pytest.raises(RuntimeError) as raised:
        wait_remote_connected(lambda: ["s2", "s3"], ["tcp:127.0.0.1:6653"], timeout_s=-1)
    assert "tcp:127.0.0.1:6653" in str(raised.value)
    assert "not connected: s2, s3" in str(raised.value)


def test_a_flow_dump_is_counted_per_table():
    from experiments.flow_dumps import table_counts

    dump = """OFPST_FLOW reply (OF1.3) (xid=0x2):
 cookie=0x100000000000000, duration=3.1s, table=0, n_packets=5, n_bytes=420, priority=1,in_port="eth1",dl_dst=00:00:00:00:00:02 actions=output:"eth2"
 cookie=0x100000000000000, duration=3.2s, table=0, n_packets=7, n_bytes=600, priority=0 actions=CONTROLLER:65535
 cookie=0xeb00000000000002, duration=1s, table=1, n_packets=0, n_bytes=0, priority=100,dl_dst=00:00:00:00:00:01 actions=output:1
"""
    assert table_counts(dump) == {0: [2, 12, 1020], 1: [1, 0, 0]}
