"""Shared test helpers."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The shipped scenarios: the generic ones and each scheme's in topologies/<slug>/.
EXAMPLES = sorted([*(ROOT / "topologies").glob("*.yaml"), *(ROOT / "topologies").glob("*/*.yaml")])


def example_id(path: Path) -> str:
    """A shipped scenario's test id, its path under topologies/."""
    return str(path.relative_to(ROOT / "topologies"))


def wait_until(condition, what: str, timeout_s: float, poll_s: float = 0.01) -> None:
    """Poll ``condition`` until it holds; AssertionError naming ``what`` after ``timeout_s``,
    which is there to catch a hang, never to time anything."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s:g} s"
        time.sleep(poll_s)


class LoopbackRelay:
    """A loopback UDP port whose datagrams a thread hands to :meth:`relay` (datagram, sender
    address) until :meth:`close`; subclasses decide where each goes, from ``self.sock``."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)  # how soon the thread sees close()
        self.port = self.sock.getsockname()[1]
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "LoopbackRelay":
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                datagram, sender = self.sock.recvfrom(65536)
            except TimeoutError:
                continue
            self.relay(datagram, sender)

    def relay(self, datagram: bytes, sender: tuple) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture(scope="session")
def compiled_send_engine(tmp_path_factory) -> str:
    """The compiled send engine built as scripts/setup.sh builds it, into a temporary
    directory; skips without gcc."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc on this machine")
    binary = tmp_path_factory.mktemp("engine") / "edgebed-send-engine"
    subprocess.run(["bash", str(ROOT / "scripts" / "build-compiled.sh"), "sender", str(binary)],
                   check=True, capture_output=True, timeout=120)
    return str(binary)


@pytest.fixture(params=["python", "compiled"])
def send_engine(request, monkeypatch) -> str:
    """Each way a paced agent sends, for the agents this test starts: from Python, and with
    the compiled send engine (agents.send_engine)."""
    from agents.send_engine import ENGINE_KEY, PYTHON

    engine = (PYTHON if request.param == "python"
              else request.getfixturevalue("compiled_send_engine"))
    monkeypatch.setenv(ENGINE_KEY, engine)
    return request.param
