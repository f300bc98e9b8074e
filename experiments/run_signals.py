"""How a run handles signals: SIGTERM and SIGHUP unwind it like Ctrl-C, and teardown ignores
them all."""

from __future__ import annotations

import contextlib
import signal
from typing import Iterator


class RunTerminated(BaseException):
    """SIGTERM or SIGHUP arrived; unwinds the run like Ctrl-C does."""

    def __init__(self, signal_number: int):
        super().__init__(signal.Signals(signal_number).name)


@contextlib.contextmanager
def signals_handled(handler, signals) -> Iterator[None]:
    """Handle ``signals`` with ``handler`` inside the block, as before after it."""
    previous = {number: signal.signal(number, handler) for number in signals}
    try:
        yield
    finally:
        for number, action in previous.items():
            signal.signal(number, action)


def _raise_terminated(number, _frame):
    raise RunTerminated(number)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind the run like Ctrl-C, and Ctrl-C (SIGINT) raises
    KeyboardInterrupt even where the runner was started with SIGINT ignored: Python installs
    its own handler only when SIGINT is not ignored at start-up, and a shell's background job
    (``cmd &`` in a script, nohup) starts ignoring it, so ``kill -INT`` did nothing there."""
    with signals_handled(signal.default_int_handler, (signal.SIGINT,)), \
            signals_handled(_raise_terminated, (signal.SIGTERM, signal.SIGHUP)):
        yield


def signals_ignored():
    """Teardown runs to its end, whatever arrives."""
    return signals_handled(signal.SIG_IGN, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
