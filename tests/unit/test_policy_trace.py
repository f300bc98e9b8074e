"""The controller's policy trace: one :class:`controller.traces.PolicyTrace` per policy call, with
what the policy was given and what it answered, on the fake flow table (the switches hold what
the traced decisions say); and the table the app writes it to."""

from __future__ import annotations

import csv

from edgebed.tables import TableWriter
from controller.records import TABLES
from controller.traces import TRACE_COLUMNS
from controller.policy import Request
from tests.unit.test_controller_flows import VIDEO, Bed

WALL = 1.7e9


def rows(bed: Bed) -> list[dict]:
    return [dict(zip(TRACE_COLUMNS, map(str, trace.row()))) for trace in bed.core.take_traces()]


def test_every_policy_call_is_one_trace_row_with_its_counts_and_flows():
    bed = Bed("least_loaded", rebalance_threshold=0.1)
    core = bed.core
    requests = [core.request_for(viewer, "video") for viewer in ("viewer1", "viewer2")]
    outcome = core.place(requests, now=1.0)
    bed.sync(outcome.switches)
    [first] = rows(bed)
    assert first["kind"] == "place" and first["policy"] == "least_loaded"
    assert (first["requests"], first["servers"], first["placements"]) == ("2", "3", "0")
    assert (first["assignments"], first["rejections"], first["migrations"]) == ("2", "0", "0")
    assert first["assigned"] == ";".join(f"{flow}@{server}" for flow, server
                                         in outcome.placed.items())
    assert first["loads_seen"] == "0" and first["load_age_max_s"] == ""
    assert float(first["decide_ms"]) > 0
    # The switches hold what the trace says was decided: each viewer reaches its server.
    for item in first["assigned"].split(";"):
        flow, server = item.split("@")
        [(host, _)] = bed.udp(flow.split("/")[0], VIDEO)
        assert host == server
    # A flow placed already is not asked again: no policy call, no row.
    bed.core.place([requests[0]], now=1.5)
    assert rows(bed) == []
    # A report makes least_loaded rebalance: a call without requests, with the report's age.
    bed.core.report_load("edge1", 1e9, now=2.0, sent=WALL, wall_clock=WALL)
    bed.core.report_load("edge2", 0.0, now=2.5, sent=WALL, wall_clock=WALL)
    moved = bed.core.react_to_load(now=3.0)
    [second] = rows(bed)
    assert second["kind"] == "rebalance" and second["requests"] == "0"
    assert second["placements"] == "2" and second["loads_seen"] == "2"
    assert (float(second["load_age_max_s"]), float(second["load_age_mean_s"])) == (1.0, 0.75)
    assert int(second["migrations"]) == len(moved.decision.migrations)
    assert second["migrated"] == ";".join(f"{m.flow}@{m.server}"
                                          for m in moved.decision.migrations)


def test_rejections_are_counted_as_the_policy_answered_them():
    bed = Bed("least_loaded")
    core = bed.core
    # A service without servers is refused by the policy, not the core.
    lonely = Request(flow="viewer2/ghost", client="viewer2", service="ghost")
    core.place([core.request_for("viewer1", "video"), lonely], now=1.0)
    [row] = rows(bed)
    assert (row["requests"], row["assignments"], row["rejections"]) == ("2", "1", "1")
    assert row["rejected"] == "viewer2/ghost"
    # The core's own refusals (a second flow of a client to a service) are not the policy's.
    core.place([core.request_for("viewer1", "video", flow="viewer1/video-again")], now=2.0)
    assert rows(bed) == []


def test_a_new_period_is_one_row_deciding_every_placed_flow_again():
    bed = Bed("lua")
    core = bed.core
    core.place([core.request_for(viewer, "video") for viewer in ("viewer1", "viewer2",
                                                                 "viewer3")], now=1.0)
    rows(bed)
    core.reallocate(now=5.0)
    [row] = rows(bed)
    assert row["kind"] == "reallocate" and row["policy"] == "lua"
    assert (row["requests"], row["placements"], row["previous"]) == ("3", "0", "3")
    assert int(row["assignments"]) + int(row["rejections"]) == 3
    for item in filter(None, row["assigned"].split(";")):
        flow, server, bitrate = item.split("@")  # lua chooses a bitrate
        assert core.flows[flow].placement.server == server
        assert float(bitrate) == core.flows[flow].placement.bitrate


def test_the_controller_tables_go_on_after_a_takeover(tmp_path):
    path = tmp_path / "records" / "policy_trace" / "controller-controller.csv"
    columns = TABLES["policy_trace"]
    first = TableWriter(path, columns, append=True, flush=True)
    first.row(*(["a"] * len(columns)))
    # flushed at once: a reader sees the row while the writer is open
    assert len(list(csv.reader(path.open()))) == 2
    first.close()
    second = TableWriter(path, columns, append=True)
    second.row(*(["b"] * len(columns)))
    second.close()
    with path.open() as stream:
        table = list(csv.reader(stream))
    assert table[0] == list(columns) and [row[0] for row in table[1:]] == ["a", "b"]

