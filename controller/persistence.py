"""The core's state as a JSON-able snapshot, and back: a restarted controller takes over the
flows placed before, the link delays announced and each server's last load report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .desired import FlowRecord
from .policy import Placement, Terms

if TYPE_CHECKING:
    from .core import ControllerCore


def snapshot(core: ControllerCore) -> dict:
    """``core``'s placed flows, announced link delays and last load reports."""
    return {"flows": [{"flow": flow, "client": r.placement.request.client,
                       "service": r.placement.request.service,
                       "port": r.placement.request.client_port,
                       "demand": r.placement.request.demand,
                       "bitrates": list(r.placement.request.bitrates),
                       "server": r.placement.server, "bitrate": r.placement.bitrate,
                       "candidates": list(r.placement.candidates),
                       "via": list(r.placement.via),
                       "attributes": dict(r.placement.attributes),
                       "path": list(r.path) if r.path else None,
                       "migrations": r.migrations, "version": r.version,
                       "former_servers": list(r.former_servers)}
                      for flow, r in core.flows.items()],
            "load_reports": core.loads.snapshot(),
            "link_delays": [{"link": link, "forward": forward, "reverse": reverse}
                            for link, (forward, reverse) in sorted(core.link_delays.items())]}


def restore(core: ControllerCore, snapshot: dict) -> None:
    """Take over what :func:`snapshot` saved; what ``core``'s network does not have is left."""
    # The network as last announced first: the flows' rules follow its paths.
    for item in snapshot.get("link_delays", []):
        try:
            core.link_delay_changed(item["link"], item["forward"], item["reverse"])
        except KeyError:
            continue  # not a link of this view
    for item in snapshot.get("flows", []):
        if item["service"] not in core.view.services:
            continue
        request = core.request_for(item["client"], item["service"], item["demand"],
                                   tuple(item["bitrates"]), item["flow"], item.get("port"))
        terms = Terms(item["bitrate"], tuple(item.get("candidates", ())),
                      tuple(item.get("via", ())), dict(item.get("attributes", {})))
        core.adopt(item["flow"], FlowRecord(
            Placement.of(request, item["server"], terms),
            tuple(item["path"]) if item["path"] else None, item["migrations"],
            tuple(item.get("former_servers", ())), item.get("version", 1)))
    core.loads.restore(snapshot.get("load_reports", []))
