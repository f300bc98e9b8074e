"""The dispatch centers' back-to-source lookups, run as programs over loopback (no root): each
center on an address of its own (127.0.0.1, .2, .3: all loopback), started in turn so that
each binds the next address. The emulated run (tests/integration/dispatch/test_dispatch_runs.py) does
the same across lossy cross-border links."""

from __future__ import annotations

import signal
import socket
import subprocess
import time

import pytest
from pydantic import ValidationError

from agents.dispatch import dispatch_center
from agents.dispatch.formats import LOOKUP_QUERY, LOOKUP_REPLY
from tests.unit.test_media_agents import start, summary_of, table

CENTERS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
INGEST = ["127.0.1.1", "127.0.1.2", "127.0.1.3"]  # only named in replies, never sent to


def free_port() -> int:
    """A UDP port free on every address of CENTERS (loopback ports are shared per address
    only when bound to one, so the first free one on 0.0.0.0 is free on each)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("0.0.0.0", 0))
        return probe.getsockname()[1]


def centers(tmp_path, count: int, **params) -> list[tuple[str, subprocess.Popen]]:
    """``count`` centers of CENTERS started in turn, each once the one before it is bound."""
    started = []
    for index in range(count):
        node = f"d{index}"
        process = start("dispatch_center", node, tmp_path, {
            "centers": CENTERS, "ingest": INGEST, "streams": 12, **params}, seed=7)
        line = process.stderr.readline()
        assert line == f"listening on {params['port']} at {CENTERS[index]}\n", (
            line + process.stderr.read())
        started.append((node, process))
    return started


def stopped_together(running: list[tuple[str, subprocess.Popen]], after_s: float) -> list[dict]:
    """The centers' summaries, all told to stop at once ``after_s`` from now: a center that
    ended on its own duration would leave the others' last queries to it unanswered."""
    time.sleep(after_s)
    for _, process in running:
        process.send_signal(signal.SIGTERM)
    return [summary_of(process) for _, process in running]


def lookups_of(tmp_path, node: str) -> list[dict]:
    return table(tmp_path, "lookups", node, "dispatch_center")


def test_broadcast_asks_every_other_center_and_a_hint_one_unless_stale(tmp_path):
    port = free_port()
    running = centers(tmp_path, 3, port=port, rate=25, warmup="0.3s", stale_share=0.5,
                      timeout="0.3s", modes="broadcast, hint")
    # On a busy machine the first center may start looking up before the last one is bound:
    # its queries to that one are lost and retransmitted. Lookups started after every center
    # was bound are held to loopback's exactness.
    all_bound = time.time()
    summaries = stopped_together(running, 2.5)
    counts = {"broadcast": 0, "fresh": 0, "stale": 0}
    exact_lookups = 0
    for (node, _), summary, address in zip(running, summaries, CENTERS):
        all_rows = lookups_of(tmp_path, node)
        assert summary["lookups"] == len(all_rows) > 10
        rows = [row for row in all_rows if float(row["started_s"]) > all_bound]
        exact_lookups += len(rows)
        assert summary["malformed"] == summary["replies_unmatched"] == 0
        # The stop may come with a lookup's replies on their way; none fails on loopback.
        assert {row["outcome"] for row in rows} <= {"found", "unfinished"}
        last = max(float(row["started_s"]) for row in rows)
        ending = [row for row in rows if float(row["started_s"]) > last - 0.2]
        assert all(row in ending for row in rows if row["outcome"] == "unfinished")
        # Lookups still going at the stop may miss a reply that came after the answer.
        for row in (row for row in rows if row["outcome"] == "found" and row not in ending):
            owner = CENTERS.index(row["owner"])
            assert int(row["stream"]) % 3 == owner != CENTERS.index(address)
            assert (row["center"], row["found_node"]) == (row["owner"], INGEST[owner])
            assert row["retransmissions"] == "0" and float(row["seconds"]) < 0.3
            if row["mode"] == "broadcast":
                counts["broadcast"] += 1
                assert (row["hint"], row["messages"], row["fell_back"]) == ("", "4", "False")
            elif row["stale"] == "True":
                counts["stale"] += 1
                # The hinted center is the third one: its "not here", then the owner asked.
                assert row["hint"] not in (row["owner"], address)
                assert (row["messages"], row["fell_back"]) == ("4", "True")
            else:
                counts["fresh"] += 1
                assert (row["hint"], row["messages"], row["fell_back"]) == (row["owner"], "2",
                                                                            "False")
        exact = {row["lookup"] for row in rows}
        replies = [row for row in table(tmp_path, "lookup_replies", node, "dispatch_center")
                   if row["lookup"] in exact]
        assert {row["attempt"] for row in replies} == {"0"}
        assert all(0 < float(row["rtt_ms"]) < 300 for row in replies)
    assert exact_lookups > 60
    # Every center answered every query sent to it once all were bound (none was lost on
    # loopback): the queries of the lookups before then may have been.
    queries = sum(int(row["messages"]) for node, _ in running
                  for row in lookups_of(tmp_path, node)
                  if row["outcome"] == "found" and float(row["started_s"]) > all_bound) / 2
    assert sum(summary["queries_answered"] for summary in summaries) >= queries
    assert min(counts.values()) > 0, counts


def test_a_center_that_never_answers_is_asked_again_until_the_lookup_fails(tmp_path):
    port = free_port()
    running = centers(tmp_path, 2, port=port, rate=20, warmup="0.2s", timeout="0.1s",
                      retries=2, modes="broadcast")
    all_bound = time.time()  # as in the test above: lookups before it may have lost queries
    # Garbage from the silent center's address, from a host that is no center, and a reply to
    # a lookup never started: counted, never fatal.
    for source, datagram in (("127.0.0.3", b"EB\x01\x10garbage"),
                             ("127.0.0.9", LOOKUP_QUERY.pack(lookup=0, stream=1, attempt=0,
                                                             send_ns=0)),
                             ("127.0.0.3", LOOKUP_REPLY.pack(lookup=99999, stream=1, attempt=0,
                                                             found=1, node=1,
                                                             query_send_ns=0))):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            sender.bind((source, 0))
            sender.sendto(datagram, (CENTERS[0], port))
    summaries = stopped_together(running, 2.5)
    assert summaries[0]["malformed"] == 2 and summaries[0]["replies_unmatched"] == 1
    failed = found = 0
    for node, _ in running:
        for row in lookups_of(tmp_path, node):
            if float(row["started_s"]) <= all_bound:
                continue
            if row["owner"] == CENTERS[2]:
                if row["outcome"] == "unfinished":
                    continue
                failed += 1
                # The other running center said "not here" at once; the silent one was asked
                # twice more, 0.1 s apart, then the lookup gave up.
                assert (row["outcome"], row["retransmissions"], row["messages"]) == (
                    "failed", "2", str(2 + 1 + 2))
                assert 0.3 <= float(row["seconds"]) < 0.6
            elif row["outcome"] == "found":
                found += 1
                assert row["retransmissions"] == "0" and row["messages"] == "3"
    assert failed > 0 and found > 0


@pytest.mark.parametrize("params, message", [
    ({"centers": ["10.0.0.1", "10.0.0.2"], "ingest": ["10.0.0.3"]}, "one per center"),
    ({"centers": ["10.0.0.1", "10.0.0.1"], "ingest": ["10.0.0.3"] * 2}, "named twice"),
    ({"centers": ["10.0.0.1", "10.0.0.2"], "ingest": ["10.0.0.3"] * 2, "streams": 1},
     "would have none"),
    ({"centers": ["10.0.0.1", "10.0.0.2"], "ingest": ["10.0.0.3"] * 2, "modes": "hint,flood"},
     "modes"),
])
def test_parameters_that_cannot_work_are_refused(params, message):
    with pytest.raises(ValidationError, match=message):
        dispatch_center.Params.model_validate(params)


def test_modes_come_as_a_list_or_names_separated_by_commas():
    params = dispatch_center.Params.model_validate(
        {"centers": ["10.0.0.1", "10.0.0.2"], "ingest": ["10.0.0.3"] * 2,
         "modes": "hint, broadcast"})
    assert [mode.value for mode in params.modes] == ["hint", "broadcast"]
