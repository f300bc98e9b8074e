"""The chat collector: receives the viewers' danmaku and gifts and measures them per user."""

from __future__ import annotations

import sys
from typing import Optional

from pydantic import Field

from agents.agent import Agent, AgentParams
from agents.flows import FlowStats, MalformedLog
from agents.formats import DANMAKU, GIFT
from agents.wire import message_type
from agents.sockets import (DATAGRAM_BUFFER, ReceiveParams, datagrams, listen,
                            udp_socket_drops)
from agents.viewer import chat_flow
from edgebed.quantities import Duration


class Params(ReceiveParams, AgentParams):
    """Where the collector listens, how often it reads (:class:`agents.sockets.ReceiveParams`)
    and for how long."""

    port: int = Field(5006, ge=0, le=65535, description="0: any free port")
    duration: Optional[Duration] = Field(None, description="default: until stopped")


class ChatMeter:
    """Danmaku and gifts arriving on one port, measured per user and kind."""

    def __init__(self, port: int):
        self.port = port
        self.flows: dict[tuple[str, int], FlowStats] = {}
        self.gift_cents = 0
        self.malformed = MalformedLog()

    def add(self, buffer: bytearray, size: int, received_ns: int, address: tuple) -> None:
        """Measure the datagram of ``size`` bytes in ``buffer``, or log it as malformed."""
        message = memoryview(buffer)[:size]
        kind = message_type(message, (DANMAKU, GIFT))
        if kind not in (DANMAKU, GIFT) or size < kind.header_size:
            self.malformed.add(self.port, message)
            return
        header = kind.unpack(message)  # a dict: chat is a few messages a second
        if kind is DANMAKU and not self._is_text(message, header["text_length"]):
            self.malformed.add(self.port, message)
            return
        user, sequence = header["user"], header["sequence"]
        flow = self.flows.get((kind.name, user))
        if flow is None:
            flow = self.flows[kind.name, user] = FlowStats(chat_flow(kind.name, user), address[0])
        if kind is GIFT and sequence not in flow.seen:
            self.gift_cents += header["value_cents"]
        flow.add(sequence, header["send_ns"], received_ns, size)

    @staticmethod
    def _is_text(message: memoryview, text_length: int) -> bool:
        """Whether a danmaku's tail is exactly ``text_length`` bytes of UTF-8."""
        if DANMAKU.header_size + text_length != len(message):
            return False
        try:
            bytes(message[DANMAKU.header_size:]).decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    def write(self, agent: Agent) -> dict:
        """Every flow's rows and the malformed datagrams' row; returns the summary."""
        summaries = {key: flow.write(agent) for key, flow in sorted(self.flows.items())}
        self.malformed.write(agent)
        by_kind = {}
        for kind in (DANMAKU.name, GIFT.name):
            flows = [summary for (name, _), summary in summaries.items() if name == kind]
            by_kind[kind] = {"users": len(flows), "messages": sum(f["unique"] for f in flows),
                             "lost": sum(f["lost"] for f in flows),
                             "duplicates": sum(f["duplicates"] for f in flows)}
        return {"port": self.port, **by_kind, "gift_value": self.gift_cents / 100,
                "malformed": self.malformed.count}


def main(argv: list[str] | None = None) -> int:
    agent = Agent("chat_collector", argv)
    params = Params.model_validate(agent.params)
    sock = listen(params.port)
    meter = ChatMeter(sock.getsockname()[1])
    buffer = bytearray(DATAGRAM_BUFFER)
    try:
        for size, received_ns, address in datagrams(agent, sock, buffer, params.receive_quantum,
                                                    params.duration):
            meter.add(buffer, size, received_ns, address)
        # Datagrams that found the socket's buffer full: lost to the collector falling
        # behind, not to the path.
        socket_drops = udp_socket_drops(sock)
    finally:
        sock.close()
    agent.finish(meter.write(agent) | {"socket_drops": socket_drops})
    return 0


if __name__ == "__main__":
    sys.exit(main())
