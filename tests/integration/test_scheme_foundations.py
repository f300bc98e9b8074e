"""The mechanisms every scheme builds on, on a real Mininet network: load reports kept with
history and acted on by the policy, and a decision with ranked candidates and a via chain
pushed to a viewer, which probes the candidates with real packets, confirms one and follows
the migration a load report causes.

The network is the ring of test_controller_runs: viewers on s1, edges on s3, the short way
through s2 (2 + 2 ms each way), so a round trip from a viewer to any edge takes at least 8 ms.
"""

from __future__ import annotations

import json
import re
import time

from experiments.measurements import read_table
from tests.integration.conftest import assert_nothing_left, eventually
from tests.integration.test_controller_runs import (RING, control_client, decisions, scenario,
                                                    start)

EDGES = {"edge1", "edge2", "edge3"}


def test_a_load_report_moves_a_flow_and_the_viewer_follows_with_candidates_and_relays(
        tmp_path, state_before):
    assert "policy: {policy}" in RING
    path = scenario(tmp_path, duration="12s",
                    policy="least_loaded\n  policy_params: {candidates: 3, "
                           "rebalance_threshold: 0.3}",
                    workload="""
        - agent: viewer
          nodes: [viewer1]
          params: {pull: video, service: video, pull_port: 5004, port: 5004,
                   preferred_bitrate: 2.5Mbps, bitrates: [2.5Mbps, 1Mbps]}
    """)
    text = path.read_text().replace("viewer[1-3]: {kind: viewer}",
                                    "viewer1: {kind: viewer, labels: {via: viewer2}}\n"
                                    "    viewer[2-3]: {kind: viewer}")
    path.write_text(text)
    process, run_dir = start(tmp_path, path)
    log = run_dir / "logs" / "viewer1.log"

    def followed_servers() -> list[str]:
        """The servers of the decisions viewer1 said it followed, in order."""
        return re.findall(r"^followed viewer1/video version \d+: server (\S+?)(?:,|$)",
                          log.read_text() if log.exists() else "", re.MULTILINE)

    with control_client(run_dir) as operator:
        [placement] = eventually(lambda: operator.query().placements, "viewer1's flow placed")
        assert placement["candidates"] == ["edge1", "edge2", "edge3"]
        assert placement["via"] == ["viewer2"]
        # The viewer has probed the candidates and confirmed one (steered there when it was
        # not the server decided): it says so once the controller answered.
        eventually(lambda: "by probing" in (log.read_text() if log.exists() else ""),
                   "viewer1 confirmed a candidate")
        [placement] = operator.query().placements
        hot = placement["server"]
        assert followed_servers()[-1] == hot
        # Reports from the server's side: it is busy with something the controller did not
        # place (18 of its 20 Mbit/s), three reports in a row.
        with control_client(run_dir, hot) as server:
            for count in range(3):
                server.report_load(18e6, service="video", metrics={"cpu": 0.9,
                                                                    "sessions": count})
                time.sleep(0.2)
        state = eventually(lambda: (state := operator.query()).placements[0]["server"] != hot
                           and state, "the flow moved off the busy server")
        # ... and the viewer followed it there.
        eventually(lambda: followed_servers()[-1] == state.placements[0]["server"],
                   "viewer1 followed the migration")
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output

    # The reports were kept and reached the policy: it moved the flow off the busy server.
    servers = {entry["name"]: entry for entry in state.servers}
    assert servers[hot]["load"] == 18e6
    [moved] = state.placements
    assert moved["server"] in EDGES - {hot}
    migrations = [row for row in decisions(run_dir, "migrate") if row["flow"] == "viewer1/video"]
    assert migrations and migrations[-1]["server"] == moved["server"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["controller"]["status"]["load_reports"]["accepted"] == 3

    # The viewer followed: its first decision carried the candidates and the relay, it probed
    # each candidate with echo requests over the emulated links (at least 8 ms round trip),
    # confirmed one, and then followed the migration without probing again.
    followed = [row for row in read_table(run_dir, "decisions_followed")
                if row["node"] == "viewer1"]
    assert followed[0]["candidates"] == "edge1;edge2;edge3" and followed[0]["via"] == "viewer2"
    assert followed[0]["confirmed"] in EDGES
    assert followed[-1]["server"] == moved["server"] and followed[-1]["migrated"] == "True"
    versions = [int(row["version"]) for row in followed]
    assert versions == sorted(set(versions))  # never an older decision after a newer one
    probes = [row for row in read_table(run_dir, "candidate_probes") if row["node"] == "viewer1"]
    assert sorted(row["candidate"] for row in probes) == sorted(EDGES)
    for row in probes:
        assert int(row["sent"]) == 5 and int(row["answered"]) >= 4, row
        assert 8.0 <= float(row["rtt_p50_ms"]) < 40.0, row
    live = [row for row in read_table(run_dir, "live_decisions") if row["node"] == "viewer1"]
    assert live[-1]["server"] == moved["server"]
    assert_nothing_left(state_before, summary["prefix"])
