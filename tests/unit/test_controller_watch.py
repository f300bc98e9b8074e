"""The watch over the switches' controller connections: OVS's listings read, each switch's
spells without a controller kept, the unscheduled ones flagged and tabled."""

from __future__ import annotations

import json
import subprocess

from experiments.controller_watch import (OVS_REPORT_S, PERIOD_S, ControllerWatch, Loss, Losses,
                                          loss_flags)
from experiments.measurements import merge_tables, read_table
from topologies import ovs_listing

BRIDGES = json.dumps({"headings": ["name", "controller"], "data": [
    ["eb1s0", ["uuid", "c-one"]],
    ["eb1s1", ["set", [["uuid", "c-two"], ["uuid", "c-three"]]]],
    ["eb1s2", ["set", []]],
    ["other", ["uuid", "c-other"]],
]})
LOST = ["map", [["sec_since_connect", "12"], ["sec_since_disconnect", "2"],
                ["state", "BACKOFF"]]]
NEVER = ["map", [["state", "CONNECTING"]]]
ACTIVE = ["map", [["sec_since_connect", "14"], ["state", "ACTIVE"]]]
CONTROLLERS = json.dumps({"headings": ["_uuid", "is_connected", "status"], "data": [
    [["uuid", "c-one"], False, LOST],
    [["uuid", "c-two"], False, NEVER],
    [["uuid", "c-three"], True, ACTIVE],
    [["uuid", "c-four"], False, NEVER],
    [["uuid", "c-other"], True, ACTIVE],
]})


def connections(bridges: dict[str, str]) -> dict:
    return ovs_listing.connections(bridges, ovs_listing.rows(BRIDGES),
                                   ovs_listing.rows(CONTROLLERS))


def test_a_switch_is_connected_when_one_of_its_controllers_is():
    # s2 keeps one of its two; s1's one was connected once and is no more.
    assert connections({"s1": "eb1s0", "s2": "eb1s1"}) == {"s1": False, "s2": True}


def test_a_switch_none_of_whose_controllers_was_reported_connected_is_not_known():
    # s3 has no controller configured; s4's bridge is not there at all.
    assert connections({"s3": "eb1s2", "s4": "eb1s9"}) == {"s3": None, "s4": None}
    fresh = json.dumps({"headings": ["name", "controller"], "data": [
        ["eb1s3", ["uuid", "c-four"]]]})
    assert ovs_listing.connections({"s5": "eb1s3"}, ovs_listing.rows(fresh),
                                   ovs_listing.rows(CONTROLLERS)) == {"s5": None}


def test_a_listing_reads_uuids_and_sets():
    assert ovs_listing.rows(BRIDGES)[1] == {"name": "eb1s1", "controller": ["c-two", "c-three"]}
    assert ovs_listing.rows(CONTROLLERS)[0] == {"_uuid": "c-one", "is_connected": False,
                                                "status": LOST}


def connected(*up: str, down: tuple[str, ...] = ()) -> dict[str, bool]:
    return {switch: True for switch in up} | {switch: False for switch in down}


def test_spells_open_at_the_first_poll_without_and_close_at_the_first_with():
    losses = Losses()
    assert losses.observe(1.0, connected("s1", "s2"), scheduled=False) == []
    began = losses.observe(2.0, connected(down=("s1", "s2")), scheduled=False)
    assert [loss.switch for loss in began] == ["s1", "s2"]
    assert losses.observe(3.0, connected("s1", down=("s2",)), scheduled=False) == []
    losses.observe(4.0, connected("s2", down=("s1",)), scheduled=True)  # s1 again, s2 back
    assert losses.all == [Loss("s1", 2.0, 3.0, False), Loss("s2", 2.0, 4.0, False),
                          Loss("s1", 4.0, None, True)]
    assert losses.all[2].length(end_s=6.5) == 2.5


def test_a_switch_not_known_neither_begins_nor_ends_a_spell():
    losses = Losses()
    assert losses.observe(1.0, {"s1": None, "s2": False}, scheduled=False)[0].switch == "s2"
    assert losses.observe(2.0, {"s1": False, "s2": None}, scheduled=False)[0].switch == "s1"
    assert losses.observe(3.0, connected("s1", "s2"), scheduled=False) == []
    assert losses.all == [Loss("s2", 1.0, 3.0, False), Loss("s1", 2.0, 3.0, False)]


def test_only_unscheduled_spells_are_flagged_and_switches_lost_together_named_together():
    flags = loss_flags([Loss("s1", 2.0, 5.5, False), Loss("s2", 2.0, 5.5, False),
                        Loss("s3", 4.25, None, False), Loss("s4", 1.0, 2.0, True)], end_s=9.0)
    assert flags == [
        "switches s1, s2 lost their controller at t=2.0s for 3.5s, unscheduled",
        "switch s3 lost its controller at t=4.2s, unscheduled, and had none at the run's end "
        "(4.8s later)"]


class Controller:
    """Stands for edgebed's controller process: down on schedule or not, and the times the
    run stopped it."""

    def __init__(self, down: bool):
        self.down = down
        self.exits = [-9] if down else []

    def stopped_by_run(self) -> bool:
        return self.down


class Looks:
    """What OVS's database says at each look, in turn; the last one for ever after."""

    def __init__(self, *looks: dict[str, bool]):
        self.looks = list(looks)

    def __call__(self) -> dict[str, bool]:
        return self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]


def polled(watch: ControllerWatch, t_s: float) -> list[str]:
    """A poll at ``t_s`` whenever it comes: the test does not wait out the period."""
    watch.next_due = 0.0
    return watch.poll(t_s)


def test_the_watch_warns_as_it_happens_and_tables_every_spell(tmp_path):
    watch = ControllerWatch(tmp_path, Looks(connected("s1", "s2"),
                                            connected("s1", down=("s2",)),
                                            connected("s1", "s2")), Controller(down=False))
    assert watch.poll(0.5) == []
    assert polled(watch, 1.5) == ["switch s2 lost its controller at t=1.5s"]
    assert watch.poll(1.7) == []  # not due: one look a period
    assert watch.finish(6.0) == ["switch s2 lost its controller at t=1.5s for 4.5s, "
                                 "unscheduled"]
    merge_tables(tmp_path)
    assert read_table(tmp_path, "controller_connections") == [{
        "node": "runner", "agent": "runner", "switch": "s2", "lost_t_s": "1.5",
        "regained_t_s": "6", "lost_for_s": "4.5", "scheduled": "0"}]


def test_a_loss_while_the_schedule_has_the_controller_down_is_no_flag(tmp_path):
    watch = ControllerWatch(tmp_path, Looks(connected("s1"), connected(down=("s1",))),
                            Controller(down=True))
    watch.poll(1.0)
    assert polled(watch, 3.0) == []
    assert watch.finish(8.0) == []
    merge_tables(tmp_path)
    [row] = read_table(tmp_path, "controller_connections")
    assert (row["lost_t_s"], row["regained_t_s"], row["lost_for_s"], row["scheduled"]) == \
        ("3", "", "5", "1")


def test_a_loss_reported_late_after_a_scheduled_outage_is_the_schedules(tmp_path):
    controller = Controller(down=False)
    watch = ControllerWatch(tmp_path, Looks(connected("s1", "s2"), connected("s1", "s2"),
                                            connected("s2", down=("s1",)),
                                            connected(down=("s1", "s2"))), controller)
    watch.poll(1.0)
    controller.exits.append(-9)  # controller_down and controller_up between two polls
    polled(watch, 2.0)
    assert polled(watch, 2.0 + OVS_REPORT_S) == []  # OVS writes s1's loss only now
    late = 2.0 + OVS_REPORT_S + PERIOD_S + 1.0  # long after: the outage is over
    assert polled(watch, late) == [f"switch s2 lost its controller at t={late:.1f}s"]


def test_a_failed_look_is_a_warning_not_a_loss(tmp_path):
    def failing():
        raise subprocess.CalledProcessError(1, ["ovs-vsctl"])

    watch = ControllerWatch(tmp_path, failing)
    [warning] = watch.poll(2.0)
    assert warning.startswith("no look at the switches' controller connections at t=2.0s")
    assert watch.losses.all == []
