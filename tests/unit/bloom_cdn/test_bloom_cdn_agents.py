"""bloom_cdn's content node and data center agents run as programs over loopback (no root): a
ring of one node, so every request's home is its entry and each strategy's path is visible in
what the node, the data center and the user recorded. The emulated ring of eight is
tests/integration/bloom_cdn/test_bloom_cdn_runs.py."""

from __future__ import annotations

import pytest

from agents.bloom_cdn.bloom_cdn_node import DC_SERVER, item_bytes
from tests.unit.test_media_agents import LOOPBACK, listening_port, start, summary_of, table

ITEMS, REQUESTS, MEAN_BYTES = 200, 60, 4000


def run(tmp_path, strategy: str, hit_rate: float, sync_every: int = 400):
    """A ring of one node, the DC and one user; the three summaries."""
    dc = start("bloom_cdn_dc", "dc", tmp_path, {"port": 0, "item_bytes": MEAN_BYTES,
                                              "nodes": [LOOPBACK]}, seed=3)
    dc_port = listening_port(dc)
    node = start("bloom_cdn_node", "cn", tmp_path, {
        "port": 0, "nodes": [LOOPBACK], "dc": LOOPBACK, "dc_port": dc_port,
        "strategy": strategy, "items": ITEMS, "hit_rate": hit_rate, "item_bytes": MEAN_BYTES,
        "sync_every": sync_every}, seed=2)
    node_port = listening_port(node)
    user = start("request_client", "ug", tmp_path, {
        "to": LOOPBACK, "port": node_port, "rate": 100, "count": REQUESTS, "items": ITEMS,
        "request_bytes": 60, "any_responder": True})
    answered = summary_of(user)
    return answered, summary_of(node, stop=True), summary_of(dc, stop=True)


def test_item_sizes_are_the_same_everywhere_and_average_to_the_mean():
    sizes = [item_bytes(content, 10_000, 0.5) for content in range(20_000)]
    assert sizes == [item_bytes(content, 10_000, 0.5) for content in range(20_000)]
    # Five standard errors of the mean (the spread of a log-normal of sigma 0.5 is 0.53 means).
    assert sum(sizes) / len(sizes) == pytest.approx(10_000, rel=5 * 0.53 / len(sizes) ** 0.5)


@pytest.mark.parametrize("strategy", ["linear", "parallel", "cut_through"])
def test_every_miss_is_fetched_and_answered_with_the_item(tmp_path, strategy):
    user, node, dc = run(tmp_path, strategy, hit_rate=0.0)
    assert (user["answered"], user["timeouts"], user["malformed"]) == (REQUESTS, 0, 0)
    for row in table(tmp_path, "responses", "ug", "request_client"):
        assert int(row["bytes"]) == item_bytes(int(row["content"]), MEAN_BYTES, 0.5)
    assert dc["fetch"]["served"] == REQUESTS and node["hits"] == 0
    queues = table(tmp_path, "cdn_queues", "cn", "bloom_cdn_node")
    waited = {(row["queue"], row["waited"]) for row in queues}
    lookups = table(tmp_path, "cdn_lookups", "cn", "bloom_cdn_node")
    assert len(lookups) == REQUESTS and node["queues"]["routing"]["served"] == 0
    if strategy == "linear":
        # Looked up, fetched, answered by the home.
        assert waited == {("lookup", "1"), ("response", "1")}
        assert {row["filtered"] for row in lookups} == {"0"}
    else:
        # The empty filter says miss: the lookup only caches; the item comes from the DC
        # through the entry's response queue (parallel) or straight to the user (cut-through).
        assert {(row["filtered"], row["judged"], row["waited"]) for row in lookups} == {
            ("1", "0", "0")}
        if strategy == "parallel":
            assert waited == {("lookup", "0"), ("response", "1")}
            assert dc["items"] == REQUESTS and dc["direct"] == 0
        else:
            assert waited == {("lookup", "0")}
            assert (dc["direct"], dc["copies"]) == (REQUESTS, REQUESTS)


def test_hits_are_answered_by_the_home_and_the_filter_is_synchronised(tmp_path):
    user, node, dc = run(tmp_path, "parallel", hit_rate=0.5, sync_every=10)
    assert user["answered"] == REQUESTS
    lookups = table(tmp_path, "cdn_lookups", "cn", "bloom_cdn_node")
    hits = [row for row in lookups if row["cached"] == "1" and row["waited"] == "1"]
    assert hits and node["hits"] >= len(hits)
    # A filter-judged hit that was not cached (a false positive) is fetched by the home:
    # whatever the filter said, every request is answered once.
    assert dc["fetch"]["served"] + len(hits) == REQUESTS
    assert node["updates_sent"] == len(lookups) // 10  # a ring of one has no peers to tell
