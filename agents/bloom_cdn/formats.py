"""bloom_cdn's wire messages: the media cloud's traffic between content nodes and the data
center, and the nodes' Bloom-filter synchronisation.

=====================  ====  ===========================================================
message                type  fields after the common four bytes (:mod:`agents.wire`)
=====================  ====  ===========================================================
cdn                      11  kind u8 (1 route, 2 fetch, 3 item), flags u8, hops u8,
                             entry u8, request u32, client u32, client_port u16, content
                             u32, send_ns u64, deliver u32, deliver_port u16, copy_to u32,
                             copy_port u16, then padding or the item's bytes
filter_update            12  node u16, filter_version u32, then the deflated XOR of the filter's
                             bits since the previous version
=====================  ====  ===========================================================

A cdn message is bloom_cdn's traffic between content nodes and the data center
(:mod:`agents.bloom_cdn.bloom_cdn_node`): a user's request routed over the Chord ring toward its
home node (``route``), a fetch from the data center (``fetch``: the item goes to ``deliver``,
and a second copy to ``copy_to`` when it is not zero) and an item sent to a node (``item``);
``client`` and ``client_port`` say whose request it is and ``send_ns`` when the user sent it. A
filter update is a node's Bloom-filter synchronisation to another node.
"""

from __future__ import annotations

from agents.wire import MessageFormat

CDN_KINDS = {1: "route", 2: "fetch", 3: "item"}

CDN = MessageFormat("cdn", 11, (
    ("kind", "B"), ("flags", "B"), ("hops", "B"), ("entry", "B"), ("request", "I"),
    ("client", "I"), ("client_port", "H"), ("content", "I"), ("send_ns", "Q"),
    ("deliver", "I"), ("deliver_port", "H"), ("copy_to", "I"), ("copy_port", "H")), "payload",
    "payload", timestamps=frozenset({"send_ns"}), named_values={"kind": CDN_KINDS})
FILTER_UPDATE = MessageFormat("filter_update", 12, (("node", "H"), ("filter_version", "I")),
                              "payload", "delta")

MESSAGES = (CDN, FILTER_UPDATE)
