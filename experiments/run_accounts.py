"""What a run's teardown reads off the network before it goes: drop counters, every flow's
delivery balance, agents that never got going, and the switches' final state."""

from __future__ import annotations

import logging
import signal
import traceback

from topologies.scenario import Scenario

from . import delivery, measurements
from .rundir import RunDirectory


def drop_counters(network, log: logging.Logger) -> tuple[tuple[dict, dict], list[str]]:
    """Per host and per switch port, what their kernels and Open vSwitch dropped, read after
    the agents stopped, and warnings; empty (and a warning) when the network is not there to
    ask."""
    if network is None or network.net is None:
        return ({}, {}), []
    try:
        return (network.host_counters(), network.switch_port_drops()), []
    except Exception as problem:
        log.error("reading drop counters failed:\n%s", traceback.format_exc())
        return ({}, {}), [f"no drop counters of hosts and switch ports: "
                          f"{type(problem).__name__}: {problem}"]


def delivery_balance(run_dir: RunDirectory, scenario: Scenario, emulator_loss: list | None,
                     counters: tuple[dict, dict]) -> tuple[dict, list[str], list[str]]:
    """Every flow's sent against received (:mod:`experiments.delivery`) as the summary's
    ``delivery``, the flags of the flows that arrived short, and warnings."""
    hosts, ports = counters
    configured = {(entry["link"], entry["direction"]): entry["configured_loss"]
                  for entry in emulator_loss or []}
    addresses = {node.name: [str(address.ip) for address in node.interfaces.values()
                             if address is not None] for node in scenario.hosts}
    found = delivery.balances(measurements.read_table(run_dir.path, "sent"),
                              measurements.read_table(run_dir.path, "flows"),
                              addresses, scenario.links, configured)
    record = {
        "flows": len(found), "short": sum(balance.short for balance in found),
        "sent": sum(balance.sent for balance in found),
        "received": sum(balance.received for balance in found),
        "short_flows": [balance.record() for balance in found if balance.short],
        "hosts": {name: figures for name, figures in hosts.items() if any(figures.values())},
        "switch_ports": {port: drops for port, drops in ports.items() if any(drops.values())}}
    flags = delivery.delivery_flags(found, hosts, emulator_loss or [], ports)
    outages = sorted({event.action for event in scenario.schedule
                      if event.action in ("link_down", "node_down", "controller_down")})
    if flags and outages:
        # Datagrams sent while the schedule had a link, a node or the controller down were
        # lost on purpose, in amounts no configured loss rate describes: the short flows are
        # reported, as warnings, not held against the machine.
        return record, [], [f"{flag} (the schedule has {', '.join(outages)})" for flag in flags]
    return record, flags, []


def _agent_name(outcome: dict) -> str | None:
    """The agent an outcome's command runs (``python -m agents.<module> ...``, the catalog's
    form), or None for another program."""
    words = outcome["command"].split()
    if words[1:2] == ["-m"] and words[2].startswith("agents."):
        return words[2].removeprefix("agents.")
    return None


def _listed(count_text: str, names: list[str]) -> str:
    return (f"{count_text}: {', '.join(names[:5])}" + (" ..." if len(names) > 5 else ""))


def agents_not_accounted(processes: list[dict]) -> list[str]:
    """Flags for the agents among ``processes`` (their outcomes) whose measurements are
    missing. An agent handles SIGTERM from its start-up on (it then writes its tables and
    exits 0), so one that SIGTERM ended by its default action was still importing, on a
    machine too slow to start it within the run, and sent or measured nothing; one that did
    not exit within the grace period was killed before it wrote its tables."""
    starting, killed = [], []
    for outcome in processes:
        name = _agent_name(outcome)
        if name is None:
            continue
        where = f"{name} on {outcome['node']}"
        if outcome["stopped"] == "terminated" and outcome["exit_code"] == -signal.SIGTERM:
            starting.append(where)
        elif outcome["stopped"] == "killed":
            killed.append(where)
    flags = []
    if starting:
        flags.append(_listed(f"{len(starting)} agents were still starting when the run "
                             "stopped them, and measured nothing", starting))
    if killed:
        flags.append(_listed(f"{len(killed)} agents did not stop within the grace period and "
                             "were killed: their tables are missing", killed))
    return flags


def write_switch_logs(network, scenario: Scenario, run_dir: RunDirectory) -> None:
    """Each switch's ports and flows as the run leaves them, in its node log."""
    for node in scenario.switches:
        bridge = network.bridge_of(node)
        switch = network.net[bridge]
        state = switch.cmd(f"ovs-vsctl show; ovs-ofctl -O OpenFlow13 dump-ports {bridge}; "
                           f"ovs-ofctl -O OpenFlow13 dump-flows {bridge}")
        with open(run_dir.node_log(node.name), "a") as stream:
            stream.write(f"--- {node.name} bridge={bridge} dpid={node.dpid:#018x}\n{state}")
