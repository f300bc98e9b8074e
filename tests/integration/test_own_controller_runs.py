"""Users' own controllers on real Mininet networks (userspace OVS here): a learning switch
written against the Ryu API (only ``ryu.*`` imports) run by edgebed's controller process, two
apps in one process, a remote os-ken controller the test starts on loopback outside the run
(and one that dies during the run, flagged), and apps that fail to load or raise in a handler
or a thread of their own failing the run.

The network is a line h1 - s1 - s2 - s3 - h2: the hosts are two switches apart, so a ping
between them crosses every switch, each needing the app's rules.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from experiments.measurements import read_table
from tests.conftest import ROOT
from tests.integration.conftest import assert_nothing_left, edgebed, eventually, only_run_dir

LINE = """
name: own
duration: {duration}
topology:
  nodes:
    h1: {{role: viewer, ip: 10.7.0.1/24}}
    h2: {{role: edge, ip: 10.7.0.2/24}}
    s[1-3]: {{role: switch}}
  links:
    - endpoints: ["h1:eth1", "s1:eth1"]
    - endpoints: ["s1:eth2", "s2:eth1"]
    - endpoints: ["s2:eth2", "s3:eth1"]
    - endpoints: ["h2:eth1", "s3:eth2"]
controller: {controller}
workload:
  - agent: command
    nodes: [h1]
    start: 1s
    command: {command}
"""
PING = '["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.7.0.2"]'
PINGS = 5
DPIDS = ("0000000000000001", "0000000000000002", "0000000000000003")

# A learning switch as Ryu's simple_switch_13 is written: only ryu.* imports.
LEARNING_SWITCH = '''
from ryu.base import app_manager
from ryu.controller import ofp_event
from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from ryu.lib.packet import ethernet, packet
from ryu.ofproto import ofproto_v1_3

COOKIE = 0x01 << 56  # beside edgebed's 0xEB range, as docs/byo-controller.md asks


class LearningSwitch(app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ports = {}  # dpid -> MAC -> port

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, event):
        datapath = event.msg.datapath
        ofproto, parser = datapath.ofproto, datapath.ofproto_parser
        self.add_flow(datapath, 0, parser.OFPMatch(), [
            parser.OFPActionOutput(ofproto.OFPP_CONTROLLER, ofproto.OFPCML_NO_BUFFER)])

    def add_flow(self, datapath, priority, match, actions):
        ofproto, parser = datapath.ofproto, datapath.ofproto_parser
        instructions = [parser.OFPInstructionActions(ofproto.OFPIT_APPLY_ACTIONS, actions)]
        datapath.send_msg(parser.OFPFlowMod(datapath=datapath, cookie=COOKIE,
                                            priority=priority, match=match,
                                            instructions=instructions))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, event):
        message = event.msg
        datapath = message.datapath
        ofproto, parser = datapath.ofproto, datapath.ofproto_parser
        in_port = message.match["in_port"]
        frame = packet.Packet(message.data).get_protocol(ethernet.ethernet)
        known = self.ports.setdefault(datapath.id, {})
        known[frame.src] = in_port
        out_port = known.get(frame.dst, ofproto.OFPP_FLOOD)
        actions = [parser.OFPActionOutput(out_port)]
        if out_port != ofproto.OFPP_FLOOD:
            self.add_flow(datapath, 1, parser.OFPMatch(in_port=in_port, eth_dst=frame.dst),
                          actions)
        self.logger.info("packet in on %016x from %s to %s", datapath.id, frame.src, frame.dst)
        datapath.send_msg(parser.OFPPacketOut(datapath=datapath,
                                              buffer_id=ofproto.OFP_NO_BUFFER,
                                              in_port=in_port, actions=actions,
                                              data=message.data))
'''

# A second app in the same process: it sees the same switches and packets.
MONITOR = '''
from ryu.base import app_manager
from ryu.controller import ofp_event
from ryu.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from ryu.ofproto import ofproto_v1_3


class Monitor(app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, event):
        if event.state == MAIN_DISPATCHER:
            self.logger.info("monitor: switch %016x up", event.datapath.id)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, event):
        self.logger.info("monitor: packet in on %016x", event.msg.datapath.id)
'''

# Started by the test, outside any run: an os-ken controller on loopback running the
# learning switch above (its ryu.* imports answered by os-ken, as in edgebed's process).
REMOTE_CONTROLLER = '''
import logging
import sys

from controller import ryu_namespace
from os_ken import cfg
from os_ken.base import app_manager

ryu_namespace.install()
logging.basicConfig(level=logging.INFO)
cfg.CONF(args=[], project="os_ken")
cfg.CONF.set_override("ofp_listen_host", "127.0.0.1")
cfg.CONF.set_override("ofp_tcp_listen_port", int(sys.argv[1]))
app_manager.AppManager.run_apps([sys.argv[2]])
'''


def run(tmp_path, controller: str, env: dict | None = None, command: str = PING,
        duration: str = "6s"):
    path = tmp_path / "scenario.yaml"
    path.write_text(LINE.format(controller=controller, command=command, duration=duration))
    runs = tmp_path / "runs"
    result = edgebed("run", str(path), "--runs-dir", str(runs), env=env)
    run_dir = only_run_dir(runs)
    return result, run_dir, json.loads((run_dir / "summary.json").read_text())


def assert_ping_forwarded(result, run_dir, summary) -> None:
    """h1's pings reached h2 across the three switches, every one, and the runner's own
    reachability check passed."""
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(pair["ok"] for pair in summary["reachability"]), summary["reachability"]
    log = (run_dir / "logs" / "h1.log").read_text()
    assert f"{PINGS} packets transmitted, {PINGS} received" in log, log


def assert_flows_recorded(run_dir, summary) -> None:
    """Each switch's flows were dumped while the run went on and at its end, and the final
    dump holds the learning switch's rules (its cookie) beside its table-miss rule."""
    for switch in ("s1", "s2", "s3"):
        dumps = (run_dir / "switch_flows" / f"{switch}.txt").read_text()
        final = dumps.split(" final ")[-1]
        assert dumps.count("--- t=") >= 2 and "cookie=0x100000000000000" in final, dumps
        assert summary["switch_flows"][switch] >= 2, summary["switch_flows"]
    rows = read_table(run_dir, "switch_flows")
    assert {row["switch"] for row in rows if row["final"] == "1"} == {"s1", "s2", "s3"}
    assert sum(int(row["packets"]) for row in rows if row["final"] == "1") >= PINGS * 2


def test_a_ryu_learning_switch_forwards_ping_across_two_switches(tmp_path, state_before):
    (tmp_path / "learning.py").write_text(LEARNING_SWITCH)
    result, run_dir, summary = run(tmp_path, "{app: learning.py}")
    assert_ping_forwarded(result, run_dir, summary)
    assert_flows_recorded(run_dir, summary)
    # The app logged to a file of its own, from every switch; edgebed's log has none of it.
    own = (run_dir / "controller" / "learning.log").read_text()
    assert all(f"packet in on {dpid}" in own for dpid in DPIDS), own
    assert "packet in on" not in (run_dir / "controller" / "controller.log").read_text()
    assert_nothing_left(state_before, summary["prefix"])


def test_two_apps_in_one_controller_both_get_their_events(tmp_path, state_before):
    (tmp_path / "learning.py").write_text(LEARNING_SWITCH)
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "edgebed_test_monitor.py").write_text(MONITOR)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(modules), os.environ.get("PYTHONPATH")])))
    result, run_dir, summary = run(tmp_path, "{app: [learning.py, edgebed_test_monitor]}",
                                   env=env)
    assert_ping_forwarded(result, run_dir, summary)
    learning = (run_dir / "controller" / "learning.log").read_text()
    monitor = (run_dir / "controller" / "edgebed_test_monitor.log").read_text()
    for dpid in DPIDS:
        assert f"packet in on {dpid}" in learning, learning
        assert f"monitor: switch {dpid} up" in monitor, monitor
        assert f"monitor: packet in on {dpid}" in monitor, monitor
    assert_nothing_left(state_before, summary["prefix"])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def accepts(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def remote_controller(tmp_path):
    """An os-ken controller running the learning switch on loopback, started outside any run
    and stopped after the block (unless it ended already); yields it, its port and its log's
    path."""
    app = tmp_path / "learning.py"
    app.write_text(LEARNING_SWITCH)
    port = free_port()
    log_path = tmp_path / "remote.log"
    with open(log_path, "w") as log:
        remote = subprocess.Popen([sys.executable, "-c", REMOTE_CONTROLLER, str(port), str(app)],
                                  cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        eventually(lambda: remote.poll() is not None or accepts(port),
                   "the remote controller listening")
        assert remote.poll() is None, log_path.read_text()
        yield remote, port, log_path
    finally:
        if remote.poll() is None:
            remote.send_signal(signal.SIGTERM)
        try:
            remote.wait(timeout=10)
        except subprocess.TimeoutExpired:
            remote.kill()
            remote.wait()


def test_a_remote_controller_gets_every_switch_and_forwards(tmp_path, state_before):
    with remote_controller(tmp_path) as (_, port, log_path):
        result, run_dir, summary = run(tmp_path, f"{{remote: tcp:127.0.0.1:{port}}}")
    assert_ping_forwarded(result, run_dir, summary)
    assert_flows_recorded(run_dir, summary)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["controller"] == {"remote": [f"tcp:127.0.0.1:{port}"]}
    assert "controller" not in summary  # edgebed started none
    assert read_table(run_dir, "controller_connections") == []  # no switch lost it
    # Every switch reached the remote controller, which saw packets from each.
    remote_log = log_path.read_text()
    assert all(f"packet in on {dpid}" in remote_log for dpid in DPIDS), remote_log
    assert_nothing_left(state_before, summary["prefix"])


def test_a_remote_controller_that_dies_during_the_run_is_flagged(tmp_path, state_before):
    # The workload itself stops the remote controller at t=1s (a host shares the machine's
    # process IDs): the switches lose it for the rest of the run, which lasts beyond the 5 s
    # OVS takes to write a lost connection to its database.
    with remote_controller(tmp_path) as (remote, port, _):
        result, run_dir, summary = run(tmp_path, f"{{remote: tcp:127.0.0.1:{port}}}",
                                       command=f'["kill", "-TERM", "{remote.pid}"]',
                                       duration="10s")
        assert remote.wait(timeout=10) is not None
    assert result.returncode == 0, result.stdout + result.stderr
    flags = [flag for flag in summary["fidelity"]["flags"] if "lost" in flag]
    assert not summary["fidelity"]["ok"] and flags, summary["fidelity"]["flags"]
    for switch in ("s1", "s2", "s3"):
        assert any(switch in flag and "unscheduled" in flag for flag in flags), flags
    rows = read_table(run_dir, "controller_connections")
    assert sorted(row["switch"] for row in rows) == ["s1", "s2", "s3"], rows
    assert all(row["scheduled"] == "0" and float(row["lost_t_s"]) >= 1.0 for row in rows), rows
    assert_nothing_left(state_before, summary["prefix"])


HANDLER_RAISES = LEARNING_SWITCH.replace(
    '        message = event.msg\n',
    '        message = event.msg\n        raise ZeroDivisionError("this handler fails")\n')




def thread_raises(start: str) -> str:
    """The learning switch starting, as it is made, a thread (``start``) that raises."""
    return LEARNING_SWITCH.replace(
        "from ryu.base import app_manager\n",
        "import threading\n\nfrom ryu.base import app_manager\nfrom ryu.lib import hub\n",
    ).replace(
        "        self.ports = {}  # dpid -> MAC -> port\n",
        f"        self.ports = {{}}  # dpid -> MAC -> port\n        {start}\n\n"
        "    def poll(self):\n        raise LookupError('this thread fails')\n")


@pytest.mark.parametrize("source, raised", [
    ("raise RuntimeError('this app does not load')\n", "RuntimeError: this app does not load"),
    (HANDLER_RAISES, "ZeroDivisionError: this handler fails"),
    (thread_raises("hub.spawn(self.poll)"), "LookupError: this thread fails"),
    (thread_raises("threading.Thread(target=self.poll).start()"),
     "LookupError: this thread fails"),
], ids=["at-import", "in-a-handler", "in-a-hub-thread", "in-a-thread"])
def test_an_app_that_fails_fails_the_run_with_its_traceback(tmp_path, state_before, source,
                                                             raised):
    (tmp_path / "broken.py").write_text(source)
    result, run_dir, summary = run(tmp_path, "{app: broken.py}")
    assert result.returncode != 0, result.stdout
    assert summary["status"] == "failed", summary
    assert "Traceback (most recent call last)" in summary["error"], summary["error"]
    assert raised in summary["error"] and "broken.py" in summary["error"], summary["error"]
    assert raised in (run_dir / "controller" / "broken.log").read_text()
    assert_nothing_left(state_before, summary["prefix"])
