"""Shared test helpers."""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
EXAMPLES = sorted((ROOT / "topologies").glob("*.yaml"))


def wait_until(condition, what: str, timeout_s: float, poll_s: float = 0.01) -> None:
    """Poll ``condition`` until it holds; AssertionError naming ``what`` after ``timeout_s``,
    which is there to catch a hang, never to time anything."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s:g} s"
        time.sleep(poll_s)
