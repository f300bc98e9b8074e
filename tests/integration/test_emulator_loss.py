"""Emulator-made loss measured for real: a wire's relay driven past its packet rate loses
frames nobody configured, and the run counts them where they were lost, attributes them to the
link and direction, and marks the run's fidelity verdict invalid; at a low rate nothing is
lost and nothing is counted.

Both runs compare what the receiver measured (sent - received) with what the emulator counted,
so they hold on a loaded machine: how much the relay loses depends on the machine, that it is
all counted does not."""

from __future__ import annotations

import json
import sys
import textwrap

from tests.integration.conftest import assert_nothing_left, edgebed, only_run_dir

# Far beyond the relay's accurate rate (4k-10k packets/s per direction on this 2-core machine,
# see topologies/impairments/relay.py): it falls behind, its queue reaches its limit or its
# socket's receive queue overflows. (Measured here, loaded by other runs: 60k packets/s for
# 3 s lost 982 of 180 000 at the relay's queue limit, every one counted.)
OVERLOAD_PPS, OVERLOAD_S = 100_000, 3
CLEAN_PPS, CLEAN_S = 500, 3

SCENARIO = """
name: emulator-loss
duration: {duration}s
topology:
  subnet: 10.9.0.0/24
  nodes:
    h1: {{role: streamer, ip: 10.9.0.1/24}}
    h2: {{role: viewer, ip: 10.9.0.2/24}}
  links:
    - {{endpoints: ["h1:eth1", "h2:eth1"], delay: 20ms}}
workload:
  - agent: command
    nodes: [h2]
    command: ["{python}", "-m", "agents.probe", "receive", "--port", "5005", "--expect",
              "{count}", "--duration", "{receive_s}", "--output", "{{run_dir}}/received.json"]
  # One ping first: the sender's ARP is resolved before the flood, so no datagram waits for it.
  - agent: command
    nodes: [h1]
    start: 1s
    command: ["sh", "-c", "ping -n -c 1 -W 2 10.9.0.2 >/dev/null && exec {python} -m agents.probe
              send --to 10.9.0.2:5005 --rate {rate} --count {count}
              --output {{run_dir}}/sent.json"]
"""


def run(tmp_path, state_before, rate: int, seconds: int) -> tuple[dict, int, int]:
    """Run the two-host scenario at ``rate``; its summary, datagrams sent and received."""
    count = rate * seconds
    receive_s = seconds + 6
    path = tmp_path / "scenario.yaml"
    path.write_text(textwrap.dedent(SCENARIO.format(
        duration=receive_s + 2, python=sys.executable, count=count, rate=rate,
        receive_s=receive_s)))
    runs = tmp_path / "runs"
    result = edgebed("run", str(path), "--runs-dir", str(runs))
    run_dir = only_run_dir(runs)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed", result.stdout + result.stderr
    assert_nothing_left(state_before, summary["prefix"])
    sent = json.loads((run_dir / "sent.json").read_text())["sent"]
    received = json.loads((run_dir / "received.json").read_text())["received"]
    print(f"\n{rate} packets/s: sent {sent}, received {received}; emulator-made by link "
          f"direction: {summary['emulator_loss']}")
    return summary, sent, received


def forward(summary: dict) -> dict:
    (entry,) = [e for e in summary["emulator_loss"] if e["link"] == 0
                and e["direction"] == "forward"]
    return entry


def emulator_flags(summary: dict) -> list[str]:
    return [flag for flag in summary["fidelity"]["flags"] if "emulator-made loss" in flag]


def test_an_overloaded_relay_counts_its_loss_and_invalidates_the_run(tmp_path, state_before):
    summary, sent, received = run(tmp_path, state_before, OVERLOAD_PPS, OVERLOAD_S)
    entry = forward(summary)
    measured = sent - received
    # Past the run's limit (0.1 % of the frames: nothing is configured), or the relay kept up.
    assert measured > 0.002 * sent, "the relay kept up: no overload to count"
    # The emulator counts no loss that did not happen (within 1 % of the datagrams sent: frames
    # at the start and end the count cannot see), and its count alone is past the limit. What
    # the receiving host drops itself is not the emulator's to count: at this rate, with the
    # relay at real-time priority on two busy cores, the receiver's socket can overflow too
    # (counted 17,886 of 26,784 missed in one CI run; all of them on a quieter machine).
    assert entry["emulator_made"] <= measured + 0.01 * sent, entry
    assert entry["emulator_made"] > 0.002 * sent, entry
    assert entry["receive_queue"] + entry["relay_queue"] + entry["interface"] > 0
    assert entry["configured_loss"] == 0 and entry["over_limit"]
    assert entry["offered"] >= sent
    (reverse,) = [e for e in summary["emulator_loss"] if e["direction"] == "reverse"]
    assert reverse["emulator_made"] <= 0.001 * sent  # the other way carried next to nothing
    assert not summary["fidelity"]["ok"]
    (flag,) = emulator_flags(summary)
    assert "link 0 (h1:eth1 -> h2:eth1)" in flag
    assert flag in summary["warnings"]


def test_a_relay_at_a_low_rate_makes_no_loss(tmp_path, state_before):
    summary, sent, received = run(tmp_path, state_before, CLEAN_PPS, CLEAN_S)
    entry = forward(summary)
    assert sent == CLEAN_PPS * CLEAN_S
    assert sent - received == entry["emulator_made"] == 0, entry
    assert not emulator_flags(summary)
