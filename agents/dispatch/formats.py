"""dispatch's wire messages: the back-to-source lookup between dispatch centers.

=====================  ====  ===========================================================
message                type  fields after the common four bytes (:mod:`agents.wire`)
=====================  ====  ===========================================================
lookup_query             16  lookup u32, stream u32, attempt u8, send_ns u64
lookup_reply             17  lookup u32, stream u32, attempt u8, found u8, node u32 (IPv4),
                             query_send_ns u64
=====================  ====  ===========================================================

dispatch's back-to-source lookup between dispatch centers
(:mod:`agents.dispatch.dispatch_center`): a center that does not know ``stream`` asks another
(``lookup_query``: its lookup's number, and ``attempt`` 0 for the first query, 1, 2, ... for
retransmissions), which answers whether the stream is registered with it and on which media node
(``lookup_reply``: ``found`` 1 or 0, ``node`` 0 when not), echoing the query's attempt and send
time so the asker times each reply.
"""

from __future__ import annotations

from agents.wire import MessageFormat

LOOKUP_FOUND = {0: "not here", 1: "found"}

LOOKUP_QUERY = MessageFormat("lookup_query", 16, (
    ("lookup", "I"), ("stream", "I"), ("attempt", "B"), ("send_ns", "Q")),
    timestamps=frozenset({"send_ns"}))
LOOKUP_REPLY = MessageFormat("lookup_reply", 17, (
    ("lookup", "I"), ("stream", "I"), ("attempt", "B"), ("found", "B"), ("node", "I"),
    ("query_send_ns", "Q")), timestamps=frozenset({"query_send_ns"}),
    named_values={"found": LOOKUP_FOUND})

MESSAGES = (LOOKUP_QUERY, LOOKUP_REPLY)
