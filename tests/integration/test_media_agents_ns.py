"""The media agents on a real Mininet path (experiments.fidelity's v1 - s1 - s2 - e1, fallback
backend): a streamer in v1, a viewer in e1, both started as a run starts them.

The viewer must measure what the path does (loss inside the binomial interval, one-way delay
within 1 ms), and a sender the machine cannot keep up with must show it in
``sender_lateness``, which the runner's fidelity monitor reads.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import time

import pytest

from agents.probe import loss_interval
from experiments import measurements
from experiments.fidelity import CLEAR, HOST_SWITCH, FidelityPath
from tests.conftest import ROOT
from tests.integration.test_impairments import measure
from tests.integration.test_wire_relay import SENDER_PRIORITY
from tests.unit.test_media_agents import (agent_argv, expected_packets, frame_packets,
                                          listening_port, stream_params, summary_of, table)
from topologies.model import Impairment

E1 = "10.9.0.2"
PORT = 5004
LOSS, DELAY_MS = 0.02, 30.0
# A paced stream the machine keeps up with: 4 Mbit/s, about 420 packets a second (I frames:
# 2,100 a second for a frame interval).
NORMAL = {"bitrate": "4Mbps", "duration": 8}
# 2 frames of 20,000 68-byte packets at 1000 fps: 40,000 packets due within 2 ms.
OVERLOAD = {"bitrate": 20_000 * 68 * 8 * 1000, "fps": 1000, "gop": 1, "noise": 0,
            "payload": 68, "duration": 0.002}


@pytest.fixture(scope="module")
def path(fallback_path):
    return fallback_path


def stream_across(path: FidelityPath, out, params: dict, seed: int = 1,
                  realtime: bool = False) -> tuple[dict, dict]:
    """A streamer in v1 sends to a viewer in e1; (streamer summary, viewer summary). The
    viewer expects every packet the streamer sends, so a lost tail counts as loss.
    ``realtime``: the streamer runs under SCHED_FIFO, below the relays."""
    expect = expected_packets(stream_params(**params), seed)
    viewer = path.host("e1").popen(
        agent_argv("viewer", "e1", out, {"port": PORT, "expect": expect}, seed), cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    listening_port(viewer)
    priority = ["chrt", "-f", str(SENDER_PRIORITY)] if realtime else []
    streamer = path.host("v1").popen(
        priority + agent_argv("streamer", "v1", out, {"to": E1, "port": PORT} | params, seed),
        cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sent = summary_of(streamer)
    assert sent["packets"] + sent["send_errors"] == expect
    # The last packets are tens of milliseconds on the way; a viewer that got them all has
    # stopped by itself already, one that did not is told to stop a second later.
    time.sleep(1)
    return sent, summary_of(viewer, stop=True)


def fidelity_flags(out) -> list[str]:
    """The fidelity monitor's flags for the agents that wrote into ``out``."""
    measurements.merge_tables(out)
    return measurements.fidelity(out, measurements.CpuMonitor())["flags"]


def test_viewer_measures_the_links_loss_and_delay(path, tmp_path):
    path.only(HOST_SWITCH, CLEAR)
    base_ms = path.udp(rate_pps=1000, count=1000)["delay_ms"]["mean"]  # the wires' own
    path.only(HOST_SWITCH, Impairment(loss=LOSS, delay=DELAY_MS / 1e3))
    attempts = itertools.count()

    def within(result) -> bool:
        sent, received = result
        [flow] = received["streams"]
        low, high = loss_interval(flow["lost"], sent["packets"])
        return low <= LOSS <= high and abs(flow["delay_mean_ms"] - DELAY_MS - base_ms) <= 1

    sent, received = measure(
        lambda: stream_across(path, tmp_path / f"attempt{next(attempts)}", NORMAL), within)
    [flow] = received["streams"]
    assert sent["send_errors"] == 0 and flow["duplicates"] == 0
    assert within((sent, received)), (flow["loss_fraction"], flow["delay_mean_ms"], base_ms)
    # Frames: with packets lost independently, a frame of n packets is complete with
    # probability (1 - loss)^n, so the complete frames' count has the mean and variance of a
    # sum of such Bernoulli trials (the frame sizes replayed); allow 4 standard deviations.
    complete = [(1 - LOSS) ** n for n in frame_packets(stream_params(**NORMAL), seed=1)]
    mean, sd = sum(complete), math.sqrt(sum(q * (1 - q) for q in complete))
    assert abs(flow["frames_complete"] - mean) <= 4 * sd, (flow["frames_complete"], mean, sd)
    assert flow["frames_complete"] + flow["frames_incomplete"] + flow["frames_missing"] == (
        sent["frames"])


def late_fraction(out) -> float:
    [row] = table(out, "sender_lateness", "v1", "streamer")
    return float(row["late_over_1ms_fraction"])


def test_an_overloaded_streamer_is_flagged_far_above_a_normal_one(path, tmp_path):
    path.only(HOST_SWITCH, CLEAR)
    overloaded = tmp_path / "overloaded"
    sent, _ = stream_across(path, overloaded, OVERLOAD)
    # Every packet is due within 2 ms of the start, and no sender puts packet i out sooner than
    # i / C after it, C being its top packet rate. A CPython send loop pays over a microsecond
    # per packet for the system call alone, so C < 1M/s: every packet after the 3,000th
    # (i / C > 3 ms) is over 1 ms late, at least 92.5% of the 40,000.
    overload_bound = 1 - 3_000 / 40_000
    assert sent["lateness"]["packets"] == 40_000
    assert late_fraction(overloaded) >= overload_bound
    flags = fidelity_flags(overloaded)
    assert any(flag.startswith("streamer on v1 (flow stream-0) fell behind") for flag in flags)

    # A sender that keeps up is late only when the machine holds it back: on a quiet machine
    # that is under the monitor's 1%, on a busy one more (16% of packets over 1 ms late here,
    # with two cores busy under normal scheduling). Given the CPU, at real-time priority as the
    # relays run, it stays an order of magnitude below the overloaded sender (or the monitor
    # could not tell them apart).
    attempts = itertools.count()

    def normal_run():
        out = tmp_path / f"normal{next(attempts)}"
        stream_across(path, out, NORMAL, realtime=True)
        return out

    normal = measure(normal_run, lambda out: late_fraction(out) <= overload_bound / 10)
    assert late_fraction(normal) <= overload_bound / 10, fidelity_flags(normal)
