"""ai_access's hand-over of AI data units to the GPU servers, over loopback: the cluster manager's
grants in rotation (side band), the access servers' hand-over threads and the GPU servers
receiving the units whole over TCP. Everything waits for what was counted, never for a time."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter

import pytest

from agents.ai_access.ai_gpu import ClusterManager, GpuServer, Handoff
from agents.ai_access.formats import AI_UNIT, GPU_GRANT, GPU_REQUEST
from tests.unit.ai_access.test_ai_agents import RowsKept
from tests.unit.test_media_agents import LOOPBACK

HANG_GUARD_S = 30.0


def until(condition, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


class GpuAgent(RowsKept):
    """Stands in for the GPU server's Agent."""

    name, node = "ai_gpu", "g1"


class Serving:
    """A GPU server stepping in a thread of its own, on a loopback listener."""

    def __init__(self):
        self.agent = GpuAgent()
        self.server = GpuServer(self.agent, socket.create_server((LOOPBACK, 0)))
        self.address = (LOOPBACK, self.server.port)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stopped.is_set():
            self.server.step(0.01)

    def close(self) -> dict:
        self.stopped.set()
        self.thread.join()
        self.server.drain()
        summary = self.server.summary()
        self.server.listener.close()
        return summary


@pytest.fixture
def cluster():
    gpus = [Serving(), Serving()]
    side_band = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    side_band.bind((LOOPBACK, 0))
    manager = ClusterManager(side_band, [gpu.address for gpu in gpus]).start()
    yield gpus, manager
    manager.close()
    side_band.close()
    for gpu in gpus:
        if not gpu.stopped.is_set():
            gpu.close()


def test_completed_units_reach_one_gpu_server_each_in_rotation(cluster):
    gpus, manager = cluster
    access = [RowsKept(), RowsKept()]
    handoffs = [Handoff(manager.sock.getsockname(), agent.row).start() for agent in access]
    units = [(stream, unit) for unit in range(5) for stream in (1, 2, 3)]
    for stream, unit in units:  # streams 1 and 2 on one access server, 3 on the other
        handoffs[stream == 3].put(stream, unit, bytes([stream]) * (1000 + unit))
    until(lambda: sum(gpu.server.units for gpu in gpus) == len(units), "every unit arrived")
    summaries = [handoff.close() for handoff in handoffs]
    assert sum(summary["sent"] for summary in summaries) == len(units)
    assert not any(summary["pending_at_stop"] for summary in summaries)
    received = [(gpu_index, row) for gpu_index, gpu in enumerate(gpus)
                for row in gpu.agent.rows if row[0] == "gpu_units"]
    # Each unit whole, at one GPU server, the one whose turn its grant was.
    keys = Counter((row[3], row[4]) for _, row in received)
    assert set(keys) == set(units) and set(keys.values()) == {1}
    for gpu_index, (_, _, _, stream, unit, sequence, length) in received:
        assert gpu_index == sequence % 2 and length == 1000 + unit
    assert sorted(row[5] for _, row in received) == list(range(len(units)))
    counts = Counter(gpu_index for gpu_index, _ in received)
    assert abs(counts[0] - counts[1]) <= 1
    # The access servers' rows name the same grants.
    handed = {(row[2], row[3]): row[4] for agent in access for row in agent.rows
              if row[0] == "gpu_handoffs"}
    assert handed == {(row[3], row[4]): row[5] for _, row in received}
    assert manager.close()["grants"] == len(units)


def test_a_repeated_request_is_granted_again_and_garbage_is_counted(cluster):
    _, manager = cluster
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as asking:
        asking.settimeout(HANG_GUARD_S)
        asking.connect(manager.sock.getsockname())
        request = GPU_REQUEST.pack(stream=9, unit=4, unit_bytes=100)
        asking.send(b"EB\x01\x0dgarbage")
        replies = []
        for _ in range(2):
            asking.send(request)
            replies.append(GPU_GRANT.unpack(asking.recv(100)))
    assert replies[0] == replies[1] and replies[0]["sequence"] == 0
    summary = manager.close()
    assert summary["grants"] == 1 and summary["repeated"] == 1 and summary["malformed"] == 1


def test_a_gpu_server_closes_a_connection_that_sends_garbage_and_keeps_serving(cluster):
    gpus, _ = cluster
    gpu = gpus[0]
    with socket.create_connection(gpu.address) as bad:
        bad.sendall(b"not an ai_unit message at all")
        until(lambda: gpu.server.malformed.count == 1, "the garbage was counted")
    with socket.create_connection(gpu.address) as good:
        good.sendall(AI_UNIT.pack(stream=1, unit=2, sequence=0, length=3) + b"abc")
        until(lambda: gpu.server.units == 1, "the good unit arrived")
    summary = gpu.close()
    assert summary["units"] == 1 and summary["malformed"] == 1 and summary["bytes"] == 3
