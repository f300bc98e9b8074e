"""Impairment fidelity: configured against measured, for every backend this kernel has, and the
packet rates up to which the fallback's relays (Python and compiled, side by side) hold a delay.

Measured on a real Mininet path (experiments.fidelity: v1 - s1 - s2 - e1) with the UDP probe
(kernel receive timestamps) and iperf3. Host-switch and switch-switch links are measured alike.
The rate sweep sends 1,200-byte frames one way and both ways at once and accounts for every
frame sent: delivered, dropped without being asked to (emulator-made: by a relay, a veth or the
userspace switch's receive socket), dropped by the receiving probe's own full socket, or lost
elsewhere (inside Open vSwitch, the senders' hosts). It runs on two paths: ``direct``, the two
hosts wired to each other (the relay alone), and ``switched``, the line through two Open
vSwitch bridges, whose limit on a machine without the openvswitch module is the userspace
switch's. On the direct path it also measures the configured distributions, normal jitter
and Gilbert-Elliott burst loss, at 1k and at 50k packets/s: a relay that keeps the mean at
the rate but bunches its timers or drops in its own bursts would change them.

    sudo .venv/bin/python benchmarks/impairment.py [--quick] [--sweep-only]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tempfile
from pathlib import Path

from mininet.log import setLogLevel
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recorder import Recording  # noqa: E402
from experiments.fidelity import (CLEAR, DIRECT, HOST_SWITCH, LINE,  # noqa: E402
                                  SWITCH_SWITCH, FidelityPath)
from topologies.capabilities import probe_qdiscs  # noqa: E402
from topologies.impairments.drops import interface_counters  # noqa: E402
from topologies.impairments.relay import (RELAY_ENGINE_KEY, WIRE_TOWARD_A,  # noqa: E402
                                          WIRE_TOWARD_B)
from topologies.model import BurstLoss, Impairment  # noqa: E402
from topologies.switch_sockets import read as read_switch_sockets  # noqa: E402

LINK_NAMES = {HOST_SWITCH: "host-switch", SWITCH_SWITCH: "switch-switch"}
RATE_SWEEP_PPS = (1000, 2000, 5000, 7500, 10_000, 15_000, 20_000, 30_000, 40_000, 50_000)
# The impairment goals' frames: 1,200 bytes on the wire (Ethernet 14 + IPv4 20 + UDP 8 + payload).
SWEEP_PAYLOAD_BYTES = 1200 - 42
# Both relays, side by side in one run (topologies.impairments.relay.RELAY_ENGINE_KEY).
ENGINES = ("python", "compiled")
# The relay alone, and end to end through the switches (experiments.fidelity).
SWEEP_PATHS = {"direct": DIRECT, "switched": LINE}
# The senders wake once per 100 us and send what is due instead of spinning to each deadline:
# two spinning senders at 50k packets/s take both cores from what they measure. The frames'
# send stamps are taken as they go, so a burst of a few frames does not bias the delays.
SWEEP_QUANTUM_US = 100.0
# The relay's drop causes that nobody configured (topologies/impairments/wire.py).
EMULATOR_CAUSES = ("dropped_receive_queue", "dropped_queue_full", "dropped_oversize",
                   "send_errors")
# The goals hold up to 50k packets/s per direction.
GOAL_MEAN_MS, GOAL_P99_MS = 0.5, 2.0


def fidelity_rows(path: FidelityPath, link: int, quick: bool) -> list[tuple[str, str, str, str]]:
    """(what, configured, measured, error) rows for one link."""
    rows = []
    for delay_ms in (50, 150):
        path.only(link, Impairment(delay=delay_ms / 1e3))
        delay = path.udp(rate_pps=1000, count=1000 if quick else 3000)["delay_ms"]
        rows.append(("delay @1k pps (mean / p99)", f"{delay_ms} ms",
                     f"{delay['mean']:.3f} / {delay['p99']:.3f} ms",
                     f"{delay['mean'] - delay_ms:+.3f} ms"))
    path.only(link, Impairment(delay=0.05, jitter=0.01))
    delay = path.udp(rate_pps=1000, count=2000 if quick else 5000)["delay_ms"]
    rows.append(("jitter (std, normal)", "10 ms", f"{delay['std']:.3f} ms",
                 f"{(delay['std'] - 10) / 10:+.1%}"))
    for loss in (0.01, 0.05, 0.20):
        path.only(link, Impairment(loss=loss))
        measured = path.udp(rate_pps=4000, count=4000 if quick else 10_000)
        low, high = measured["loss_interval_99"]
        rows.append(("random loss", f"{loss:.0%}", f"{measured['loss_fraction']:.2%}",
                     "inside 99% interval" if low <= loss <= high else "OUTSIDE 99% interval"))
    for mbps in (10, 50):
        path.only(link, Impairment(bw=mbps * 1e6))
        goodput = path.tcp_goodput(seconds=3 if quick else 6) / 1e6
        rows.append(("rate (TCP goodput)", f"{mbps} Mbit/s", f"{goodput:.2f} Mbit/s",
                     f"{(goodput - mbps) / mbps:+.1%}"))
    return rows


def rate_limit_rows(path: FidelityPath, quick: bool) -> dict[tuple[int, bool], tuple]:
    """For each rate and for one direction and both at once: the path's first link (host-switch,
    or the hosts' own when direct), wired with 50 ms, carrying 1,200-byte frames at that rate
    per direction, and where the frames went. Keys
    (rate, both ways); values (mean error ms, p99 - 50 ms, the delayed relay's own counted
    lateness (mean µs), delivered, emulator-made drops (relays' and veths'), receiver's own
    drops, lost elsewhere,
    sent/s): over both flows when both ways (the worse direction's errors), so every frame sent
    is in exactly one count. The errors are end to end: they include the bare path's own
    (on the switched path Open vSwitch in user space twice and the other wire), which the
    lateness leaves out."""
    # One unrecorded second first: on a freshly built path the first second carries the
    # bring-up's errors (milliseconds of mean error at 1,000/s), which no later step does.
    path.wait_passing()
    path.udp(rate_pps=1000, count=1000, size=SWEEP_PAYLOAD_BYTES, all_sent=False,
             quantum_us=SWEEP_QUANTUM_US)
    rows = {}
    for both_ways in (False, True):
        for rate in RATE_SWEEP_PPS:
            path.only(HOST_SWITCH, CLEAR)
            path.links.set(HOST_SWITCH, Impairment(delay=0.05),
                           ("forward", "reverse") if both_ways else ("forward",))
            count = int(rate * (1 if quick else 2))
            before = relay_counts(path)
            measured = path.udp(rate_pps=rate, count=count, size=SWEEP_PAYLOAD_BYTES,
                                all_sent=False, both_ways=both_ways,
                                quantum_us=SWEEP_QUANTUM_US)
            emulator, late_us, frames = (after - first for after, first
                                         in zip(relay_counts(path), before))
            flows = [measured] + ([measured["reverse"]] if both_ways else [])
            delays = [flow["delay_ms"] for flow in flows]
            if all(delays):
                error = max((delay["mean"] - 50 for delay in delays), key=abs)
                tail = max(delay["p99"] - 50 for delay in delays)
            else:
                error = tail = float("nan")
            sent = sum(flow["sender"]["sent"] if flow["sender"] else 0 for flow in flows)
            delivered = sum(flow["unique"] for flow in flows)
            receiver = sum(flow["socket_drops"] or 0 for flow in flows)
            rates = [flow["sender"]["rate_pps"] or 0 if flow["sender"] else 0 for flow in flows]
            rows[rate, both_ways] = (error, tail, late_us / max(1, frames),
                                     delivered / (count * len(flows)), emulator, receiver,
                                     sent - delivered - emulator - receiver, min(rates))
    return rows


# The distributions a link is configured with must not change at the rate either.
DISTRIBUTION_RATES = (1000, 50_000)
JITTER = Impairment(delay=0.05, jitter=0.01)  # normal, 10 ms standard deviation
BURST = BurstLoss(p=0.02, r=0.25)  # Gilbert: p / (p + r) = 7.4 % lost, bursts of 1/r = 4


def distribution_rows(path: FidelityPath, quick: bool) -> list[tuple[str, ...]]:
    """Jitter and burst loss on the path's first link, one way, at a low rate and at the
    sweep's highest, with 1,200-byte frames: (what, packets/s, configured, measured, verdict).
    The burst loss is what the configuration dropped (the frames lost less those the emulator
    counted as its own, which are given apart), within four standard deviations of p / (p + r)
    (the binomial one inflated by the bursts' correlation, as the fidelity test allows); the
    jitter's standard deviation within 1 ms of 10 ms, the mean within the sweep's 0.5 ms."""
    expected = BURST.p / (BURST.p + BURST.r)
    inflation = 1 + 2 * (1 - BURST.p - BURST.r) / (BURST.p + BURST.r)
    rows = []
    for rate in DISTRIBUTION_RATES:
        count = int(rate * (1 if quick else 2))
        path.only(HOST_SWITCH, JITTER)
        delay = path.udp(rate_pps=rate, count=count, size=SWEEP_PAYLOAD_BYTES, all_sent=False,
                         quantum_us=SWEEP_QUANTUM_US)["delay_ms"]
        met = abs(delay["std"] - 10) <= 1 and abs(delay["mean"] - 50) <= GOAL_MEAN_MS
        rows.append(("jitter, normal (mean / std)", f"{rate}", "50 / 10 ms",
                     f"{delay['mean']:.2f} / {delay['std']:.2f} ms", "met" if met else "NOT met"))
        path.only(HOST_SWITCH, Impairment(burst=BURST))
        before = relay_counts(path)[0]
        measured = path.udp(rate_pps=rate, count=count, size=SWEEP_PAYLOAD_BYTES,
                            all_sent=False, quantum_us=SWEEP_QUANTUM_US)
        emulator = relay_counts(path)[0] - before
        seen = max(1, measured["sent"] - emulator)
        fraction = (measured["lost"] - emulator) / seen
        sigma = (expected * (1 - expected) * inflation / seen) ** 0.5
        rows.append(("burst loss, Gilbert p 2% r 25%", f"{rate}", f"{expected:.2%}",
                     f"{fraction:.2%} ({emulator} emulator-made apart)",
                     "met" if abs(fraction - expected) <= 4 * sigma else "NOT met"))
    return rows


def meets_goals(row: tuple) -> bool:
    error, tail, _, delivered = row[:4]
    return abs(error) <= GOAL_MEAN_MS and tail <= GOAL_P99_MS and delivered == 1.0


def relay_counts(path: FidelityPath) -> tuple[int, int, int]:
    """So far: the frames the path dropped that nobody configured, by its relays (both wires,
    both directions: a frame crosses two), by its veths (a veth that could not hand a frame
    to its peer in time: tx_dropped) and by the switch's receive sockets, and the host-switch relay's summed lateness (µs) and
    frames sent."""
    # The relays write their status once a second: wait for one taken after the last frame.
    time.sleep(1.2)
    drops = interface_drops(path)
    for relay in path.links.relays.values():
        statistics = json.loads(relay.status.read_text())
        drops += sum(statistics[direction][cause] for direction in ("forward", "reverse")
                     for cause in EMULATOR_CAUSES)
    delayed = json.loads(path.links.relays[HOST_SWITCH].status.read_text())
    return (drops, sum(delayed[direction]["late_us"]["sum"] for direction in delayed),
            sum(delayed[direction]["frames_out"] for direction in delayed))


def interface_drops(path: FidelityPath) -> int:
    """Frames the path's veths (hosts', switches' and wires' ends) could not hand on so far,
    and those the userspace switch's receive sockets on the path's ports dropped."""
    counters: dict[int, dict] = {}
    total = 0
    for link in path.scenario.links:
        ends = path.network.ends(link.index)
        interfaces = [(ends.a.node, ends.a.name), (ends.b.node, ends.b.name)]
        if ends.wire is not None:
            interfaces += [(ends.wire, WIRE_TOWARD_A), (ends.wire, WIRE_TOWARD_B)]
        for node, name in interfaces:
            if id(node) not in counters:
                counters[id(node)] = interface_counters(node.cmd("ip -s -j link show"))
            total += counters[id(node)].get(name, (0, 0))[1]
    sockets = read_switch_sockets()
    return total + sum(sockets[port].drops for port in path.network.switch_ports()
                       if port in sockets)


def main() -> int:
    recording = Recording(__file__, __doc__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer packets, shorter TCP runs")
    parser.add_argument("--sweep-only", action="store_true",
                        help="only the fallback relays' rate sweep, both relays")
    arguments = parser.parse_args()
    setLogLevel("error")
    # Wide enough for the sweep's twelve columns when the output is not a terminal.
    console = Console(width=180)
    backends = ["fallback"] + (["netem"] if probe_qdiscs()["netem"] else [])
    if "netem" not in backends:
        console.print("netem: not measured, this kernel has no sch_netem")
    for backend in [] if arguments.sweep_only else backends:
        with tempfile.TemporaryDirectory() as logs:
            path = FidelityPath(backend, Path(logs))
            path.start()
            try:
                table = Table(title=f"{backend} backend: configured vs measured",
                              title_justify="left")
                for column in ("link", "what", "configured", "measured", "error"):
                    table.add_column(column)
                for link, name in LINK_NAMES.items():
                    for row in fidelity_rows(path, link, arguments.quick):
                        table.add_row(name, *row)
                console.print(recording.table(table))
            finally:
                path.stop()
    # The rate sweep: each relay on each path of its own, in this one run, so they compare.
    sweeps, distributions = {}, {}
    for engine in ENGINES:
        os.environ[RELAY_ENGINE_KEY] = engine
        for name, line in SWEEP_PATHS.items():
            with tempfile.TemporaryDirectory() as logs:
                path = FidelityPath("fallback", Path(logs), line)
                path.start()
                try:
                    sweeps[engine, name] = rate_limit_rows(path, arguments.quick)
                    if name == "direct":
                        distributions[engine] = distribution_rows(path, arguments.quick)
                finally:
                    path.stop()
    sweep = Table(title="fallback relays, 50 ms delay on the first link (host-switch, or the "
                        "hosts' own when direct), 1,200-byte frames, per direction: error and "
                        "where the frames went", title_justify="left")
    for column in ("packets/s", "ways", "path", "relay", "mean error ms", "p99 - 50 ms",
                   "relay late µs", "delivered", "emulator-made", "receiver's own",
                   "lost elsewhere", "sent/s"):
        sweep.add_column(column, justify="right")
    for both_ways in (False, True):
        for rate in RATE_SWEEP_PPS:
            for engine, name in sweeps:
                error, tail, late, delivered, emulator, receiver, elsewhere, sent = \
                    sweeps[engine, name][rate, both_ways]
                sweep.add_row(str(rate), "both" if both_ways else "one", name, engine,
                              f"{error:+.3f}", f"{tail:+.3f}", f"{late:.0f}", f"{delivered:.2%}",
                              str(emulator), str(receiver), str(elsewhere), f"{sent:.0f}")
        sweep.add_section()
    console.print(recording.table(sweep))
    shapes = Table(title="fallback relays alone (direct path), one way, 1,200-byte frames: "
                         "the configured distributions at a low rate and at 50k packets/s",
                   title_justify="left")
    for column in ("relay", "what", "packets/s", "configured", "measured", "verdict"):
        shapes.add_column(column)
    for engine, rows in distributions.items():
        for row in rows:
            shapes.add_row(engine, *row)
    console.print(recording.table(shapes))
    for engine, name in sweeps:
        for both_ways in (False, True):
            met = [rate for rate in RATE_SWEEP_PPS
                   if all(meets_goals(sweeps[engine, name][lower, both_ways])
                          for lower in RATE_SWEEP_PPS if lower <= rate)]
            console.print(f"{engine} relay, {name}, {'both ways' if both_ways else 'one way'}: "
                          f"goals (mean error <= {GOAL_MEAN_MS} ms, p99 <= +{GOAL_P99_MS} ms, "
                          f"all delivered) met up to "
                          + (f"{met[-1]} packets/s" if met else "no rate measured"))
    recording.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
