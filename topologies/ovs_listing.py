"""Open vSwitch database listings read: ``ovs-vsctl --format=json --data=json list TABLE`` as
rows, and which switches those rows show connected to a controller."""

from __future__ import annotations

import json


def rows(listing: str) -> list[dict]:
    """The rows of an ``ovs-vsctl --format=json --data=json list`` output as dicts by column;
    a UUID is its text, a set the list of its members (a map stays OVS's ``["map", pairs]``)."""
    table = json.loads(listing)
    return [{name: _value(value) for name, value in zip(table["headings"], row)}
            for row in table["data"]]


def connections(bridges: dict[str, str], bridge_rows: list[dict],
                controller_rows: list[dict]) -> dict[str, bool | None]:
    """Whether each switch of ``bridges`` (switch -> its bridge) is connected to one of its
    controllers, in ``bridges``' order, as OVS's database says: True when one of its
    Controller rows ``is_connected``, False when none is but one was once (its ``status`` has
    ``sec_since_connect``), None when none has been reported connected yet (``bridge_rows``
    list ``name,controller``, ``controller_rows`` ``_uuid,is_connected,status``)."""
    rows_by_id = {row["_uuid"]: row for row in controller_rows}
    found = {row["name"]: _members(row["controller"]) for row in bridge_rows}
    states = {}
    for switch, bridge in bridges.items():
        mine = [rows_by_id[uuid] for uuid in found.get(bridge, []) if uuid in rows_by_id]
        if any(row["is_connected"] for row in mine):
            states[switch] = True
        elif any("sec_since_connect" in _map(row.get("status")) for row in mine):
            states[switch] = False
        else:
            states[switch] = None
    return states


def _value(value):
    if isinstance(value, list) and len(value) == 2 and value[0] in ("uuid", "set"):
        kind, content = value
        return content if kind == "uuid" else [_value(member) for member in content]
    return value


def _map(value) -> dict:
    """A map column as a dict (OVS writes ``["map", [[key, value], ...]]``)."""
    return dict(value[1]) if isinstance(value, list) and value[:1] == ["map"] else {}


def _members(value) -> list:
    """A set column's members: OVS writes a set of one as the member alone."""
    return value if isinstance(value, list) else [value]
