"""``controller.control_network``: out-of-band, the control protocol travels the management
network and no impairment touches it; in-band, it crosses the data network's switches and
impaired links to the control host, so load reports arrive late and some not at all.

One scenario, run both ways: the edge server e1 reports its load every 100 ms to the controller;
the data path between e1 and the control host dc has 40 ms of delay and 20 % loss each way.
OpenFlow (switches to controller) stays out-of-band on loopback in both runs.

The bounds are the configured values and what the emulator counted, not a quiet machine's
timings: a report crosses the delayed link once (at least the delay, well under twice it), and
the reports missing in-band are as many as a 20 % coin drawn for each would miss (a binomial
99.9 % interval), plus what the emulator counted as its own drops in that direction.
"""

from __future__ import annotations

import json
import statistics
import textwrap

from scipy.stats import binom

from experiments.measurements import read_table
from tests.integration.conftest import assert_nothing_left, edgebed, only_run_dir

DELAY_MS, LOSS = 40, 0.2
MIDDLE_LINK = 1  # s1-s2: the only link with an impairment
SCENARIO = """
name: control-{network}
duration: 8s
topology:
  subnet: 10.9.0.0/24
  nodes:
    dc: {{role: datacenter}}
    e1: {{role: edge}}
    s[1-2]: {{role: switch}}
  links:
    - endpoints: ["dc:eth1", "s1:eth1"]
    - {{endpoints: ["s1:eth2", "s2:eth2"], delay: {delay}ms, loss: {loss}}}
    - endpoints: ["e1:eth1", "s2:eth1"]
controller:
  app: edgebed
  control_network: {network}
{host}
  services:
    video: {{address: 10.9.0.200, port: 5004, servers: [e1]}}
workload:
  - agent: edge_server
    nodes: [e1]
    params: {{service: video, report_period: 100ms, report_host: false}}
"""


def run(tmp_path, network: str) -> tuple[list[dict], dict, dict]:
    """The load reports from e1 the controller received in a run with ``network`` control, the
    run's summary and its manifest."""
    directory = tmp_path / network
    directory.mkdir()
    path = directory / "scenario.yaml"
    path.write_text(textwrap.dedent(SCENARIO.format(
        network=network, delay=DELAY_MS, loss=LOSS,
        host="  control_host: dc" if network == "in-band" else "")))
    runs = directory / "runs"
    result = edgebed("run", str(path), "--runs-dir", str(runs))
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(runs)
    summary = json.loads((run_dir / "summary.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["controller"]["control_network"] == network
    reports = [row for row in read_table(run_dir, "load_reports") if row["server"] == "e1"]
    assert len(reports) > 30, reports  # 10 a second for about 7 s, less what was lost
    assert all(row["kept"] == "1" for row in reports), reports  # none stale or reordered
    return reports, summary, manifest


def interior(reports: list[dict]) -> tuple[int, int]:
    """(sent, lost) of the reports strictly between the first and the last that arrived: seq
    counts every report sent, and whether those arrived does not depend on which report came
    first or last, so each is one independent draw of the link's loss."""
    sequence = sorted(int(row["seq"]) for row in reports)
    assert len(set(sequence)) == len(sequence), "a report arrived twice"
    sent = sequence[-1] - sequence[0] - 1
    return sent, sent - (len(sequence) - 2)


def toward_control_host(summary: dict) -> dict:
    """The middle link's drops in the direction e1 -> dc (s2 -> s1)."""
    for entry in summary["emulator_loss"]:
        if entry["link"] == MIDDLE_LINK:
            a, _b = entry["endpoints"]
            if entry["direction"] == ("forward" if a.startswith("s2") else "reverse"):
                return entry
    raise AssertionError(f"no frames toward dc on link {MIDDLE_LINK}: "
                         f"{summary['emulator_loss']}")


def test_in_band_load_reports_cross_the_impaired_data_network(tmp_path, state_before):
    outside, outside_summary, outside_manifest = run(tmp_path, "out-of-band")
    inside, inside_summary, inside_manifest = run(tmp_path, "in-band")
    # Where the hosts were told to send: the management network, or dc's data-plane address.
    assert outside_manifest["controller"]["control"].startswith("172.30.")
    assert inside_manifest["controller"]["control"] == "10.9.0.1:6650"

    outside_ages = [float(row["age_ms"]) for row in outside]
    inside_ages = [float(row["age_ms"]) for row in inside]
    outside_sent, outside_lost = interior(outside)
    inside_sent, inside_lost = interior(inside)
    low, high = binom.interval(0.999, inside_sent, LOSS)
    wire = toward_control_host(inside_summary)
    print(f"\nload report age: out-of-band median {statistics.median(outside_ages):.2f} ms "
          f"(max {max(outside_ages):.2f}), in-band median {statistics.median(inside_ages):.2f} "
          f"ms (min {min(inside_ages):.2f}; configured {DELAY_MS} ms one way); lost: "
          f"out-of-band {outside_lost}/{outside_sent}, in-band {inside_lost}/{inside_sent} = "
          f"{inside_lost / inside_sent:.1%} (configured {LOSS:.0%}, 99.9 % interval "
          f"{low:.0f}-{high:.0f}; emulator-made drops toward dc {wire['emulator_made']})")

    # Out-of-band the management network carries them: the data link's delay is not in them
    # (a report that crossed it would be at least DELAY_MS old), nor its loss.
    assert statistics.median(outside_ages) < DELAY_MS, outside_ages
    assert outside_lost == 0, outside
    # In-band every report waited the link's delay (the relay never sends a frame early; the
    # hosts share CLOCK_REALTIME), and crossed the link once: twice would be 2 * DELAY_MS.
    assert min(inside_ages) >= DELAY_MS, inside_ages
    assert statistics.median(inside_ages) < 2 * DELAY_MS, inside_ages
    # The link's loss takes its share: as many as independent 20 % draws would miss, plus
    # what the emulator itself counted as dropped there. (The fallback backend draws random
    # loss in a BPF filter that counts nothing, so the drawn loss cannot be matched frame for
    # frame.)
    assert low <= inside_lost <= high + wire["emulator_made"], (inside_lost, inside_sent, wire)

    for summary in (outside_summary, inside_summary):
        assert summary["controller"]["status"]["control"]["handler_errors"] == 0
        assert_nothing_left(state_before, summary["prefix"])
