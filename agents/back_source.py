"""An edge's back-source: it pulls each stream its sessions ask for from the upstream the
controller's decisions name."""

from __future__ import annotations

import socket

from edgebed import clock
from agents.agent import Agent, epoch_seconds
from agents.control import ControlClient
from agents.follower import DecisionFollower, follow_pushed
from agents.formats import PULL
from agents.flows import flow_name


class BackSource:
    """Where each stream comes from, as the controller's decisions about the flows placed on
    this edge say, and the pulls that bring it (docs/schemes/live_edge.md)."""

    def __init__(self, node: str, control: ControlClient, source: socket.socket,
                 port: int, interval: float, standing: dict[int, float] | None = None,
                 upstreams: dict[int, str] | None = None):
        self.node = node
        self.control = control
        self.source = source
        self.port = port
        self.interval_ns = round(interval * 1e9)
        self.followers: dict[str, DecisionFollower] = {}
        self.upstreams: dict[int, str] = dict(upstreams or {})  # stream -> address
        # back_source_mode always: stream -> bitrate, pulled whether sessions ask or not
        self.standing = dict(standing or {})
        self.changes: list[dict] = []
        self.due_ns: dict[int, int] = {}
        self.pulls: dict[int, int] = {}
        self.send_errors = 0

    def take_pushed(self) -> None:
        """Follow the decisions pushed since the last call about flows placed here."""
        for pushed in self.control.pending():
            followed = follow_pushed(self.followers, self.control, pushed)
            if followed is None or followed.server != self.node:
                continue
            stream = followed.attributes.get("stream")
            upstream = followed.attributes.get("upstream")
            if (isinstance(stream, int) and not isinstance(stream, bool)
                    and isinstance(upstream, str) and self.upstreams.get(stream) != upstream):
                self.changes.append({"time_s": epoch_seconds(followed.heard_ns),
                                     "stream": stream, "flow": pushed.flow,
                                     "from": self.upstreams.get(stream), "to": upstream})
                self.upstreams[stream] = upstream
                self.due_ns[stream] = 0  # pull from the new upstream at once

    def pull(self, wanted: dict[int, float], now_ns: int) -> None:
        """Pull every wanted stream (and every standing one) whose upstream is known and whose
        pull is due."""
        if self.standing:
            wanted = wanted | {stream: max(bitrate, wanted.get(stream, 0.0))
                               for stream, bitrate in self.standing.items()}
        for stream, bitrate in wanted.items():
            upstream = self.upstreams.get(stream)
            if upstream is None or now_ns < self.due_ns.get(stream, 0):
                continue
            self.due_ns[stream] = now_ns + self.interval_ns
            # One user per stream: the upstream keeps a session for each, from one socket.
            pull = PULL.pack(stream=stream, delivered_stream=stream, user=stream,
                             send_ns=clock.time_ns(),
                             bitrate_kbps=max(1, round(bitrate / 1e3)), rung=0)
            try:
                self.source.sendto(pull, (upstream, self.port))
                self.pulls[stream] = self.pulls.get(stream, 0) + 1
            except OSError:
                self.send_errors += 1  # the upstream's session outlives a lost pull or two

    def write(self, agent: Agent) -> dict:
        """The followers' ``decisions_followed`` rows; the summary of pulls and upstreams."""
        for follower in self.followers.values():
            follower.write(agent)
        return {"pulls": {flow_name(stream): count for stream, count in self.pulls.items()},
                "upstreams": self.changes, "send_errors": self.send_errors,
                "decisions": sum(len(f.followed) for f in self.followers.values())}
