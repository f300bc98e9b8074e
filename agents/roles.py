"""The host roles the shared agents key on; a scheme's own are ``ROLES`` of its package
(``agents/<slug>/__init__.py``), and :func:`agents.catalog.roles` finds them all."""

ROLES = {
    "streamer": "a host that pushes a live stream",
    "viewer": "a host that watches streams and chats",
    "edge": "an edge server relaying, transcoding or serving content",
    "relay": "a node forwarding streams between edges",
    "client": "a host that sends requests or data to a service",
}
