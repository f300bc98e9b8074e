"""The front of the compiled send engine (``send_engine.c``, built by scripts/setup.sh): a paced
UDP sender's packets, built here with the declared wire formats, handed over with their
deadlines ahead of time; the groups whose sends were refused and the final figures read back.

Why: a packet paced from Python costs ~90 us of CPU (the interpreter, and the spin before each
deadline); the engine sleeps to each deadline and sends, so a packet costs its system calls and
its share of a wake-up. The agent stays in Python: parameters, what to send, tables; only the
per-packet loop is compiled."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgebed import clock
from edgebed.realtime import request_cpu_latency

BUILT_ENGINE = Path(sys.prefix) / "bin" / "edgebed-send-engine"
# "python" sends from Python; a path, the engine built there; unset, the built one if any.
ENGINE_KEY = "EDGEBED_SEND_ENGINE"
PYTHON = "python"
# deadline_ns, group, size, header length (send_engine.c); big-endian, as the wire formats, so
# a sender packs a record and its header in one step (:func:`record_format`).
RECORD = struct.Struct("!qIHH")
RESUME = 0xFFFFFFFF  # the group of the record that ends the dropping after a refusal
# How far ahead of their deadlines packets are handed over: the engine never waits for Python
# unless Python is this late, and Python wakes a few times per second, not per packet.
LOOKAHEAD_NS = 500_000_000
LATENESS_BYTES = 8  # a send attempt's lateness: int64_t, the machine's byte order
PIPE_BYTES = 1 << 20  # two lookaheads of records at 10k packets/s before a write waits


def engine_binary(agent_name: str) -> str | None:
    """The engine to send with, or None to send from Python (said once on stderr when no
    engine is built or time is dilated)."""
    wanted = os.environ.get(ENGINE_KEY, "")
    if wanted == PYTHON:
        return None
    if clock.current().dilated:
        # The engine keeps real time; Python's sender reads the run's dilated clock.
        print(f"{agent_name}: time dilated: sending from Python, which reads the run's clock",
              file=sys.stderr, flush=True)
        return None
    if wanted:
        if not os.access(wanted, os.X_OK):
            raise RuntimeError(f"{ENGINE_KEY}={wanted!r}: no such engine")
        return wanted
    if os.access(BUILT_ENGINE, os.X_OK):
        return str(BUILT_ENGINE)
    print(f"{agent_name}: the compiled send engine is not built ({BUILT_ENGINE}; "
          "scripts/setup.sh builds it): sending from Python, ~90 us of CPU a packet",
          file=sys.stderr, flush=True)
    return None


def record_format(header: struct.Struct) -> struct.Struct:
    """A record with a header packed by ``header`` after it, as one struct: deadline_ns,
    group, size, header length (``header.size``), then the header's fields."""
    return struct.Struct(RECORD.format + header.format.lstrip("!"))


def monotonic_ns() -> int:
    """The deadlines' clock: CLOCK_MONOTONIC, as the engine's (it runs only undilated, where
    the clock's time is the system's)."""
    return clock.monotonic_ns()


@dataclass
class EngineResult:
    """What the engine did: datagrams and bytes sent, failed sends, the last group it began
    (-1: none), its last send on the monotonic clock (None: none), refusals reported at its
    end, and every send attempt's lateness."""

    sent: int
    bytes: int
    send_errors: int
    last_group: int
    last_send_ns: int | None
    refusals: int
    lateness_ns: np.ndarray


class SendEngine:
    """One engine process sending on a connected UDP socket: records (:func:`record_format`)
    are added with :meth:`add`, handed over by :meth:`wait_until`, and :meth:`finish` ends
    it."""

    def __init__(self, binary: str, sock, sequence_offset: int, timestamp_offset: int):
        descriptor = sock.fileno()
        self.process = subprocess.Popen(
            [binary, "--socket", str(descriptor), "--sequence-offset", str(sequence_offset),
             "--timestamp-offset", str(timestamp_offset)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(descriptor,))
        self.requests = self.process.stdin.fileno()
        fcntl.fcntl(self.requests, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        os.set_blocking(self.requests, False)
        self.records = bytearray()
        self.replies = b""
        self.running = True
        # A stop signal wakes the waits at once (the agent's handler sets its flag; the byte
        # on this pipe ends the select() that would otherwise sleep through it).
        self.signalled, wakeup = os.pipe()
        for end in (self.signalled, wakeup):
            os.set_blocking(end, False)
        self.previous_wakeup = signal.set_wakeup_fd(wakeup)
        # The engine sleeps to each deadline: a halted virtual CPU would wake it late.
        request_cpu_latency(0)

    def add(self, records: bytes) -> None:
        """Packets to send: records, each a datagram's deadline, group and size, and the
        header it starts with (zeros follow)."""
        self.records += records

    def resume(self) -> None:
        """After a refusal: what is added from now on is sent again."""
        self.add(RECORD.pack(0, RESUME, 0, 0))

    def wait_until(self, deadline_ns: int, stopped) -> list[int]:
        """Hand over what was added and wait until ``deadline_ns``, ``stopped()`` or the
        engine's end; the groups whose sends were refused, as soon as the engine says so
        (it then drops what it is handed until :meth:`resume`). The hand-over never blocks:
        a full pipe is written as the engine drains it, so a stop is seen at once."""
        replies = self.process.stdout.fileno()
        while self.running and not stopped():
            remaining_ns = deadline_ns - monotonic_ns()
            if remaining_ns <= 0 and not self.records:
                break
            writable = [self.requests] if self.records else []
            timeout = clock.real_seconds(max(remaining_ns, 0) / 1e9) if not writable else None
            readable, writable, _ = select.select([replies, self.signalled], writable, [],
                                                  timeout)
            if self.signalled in readable:
                os.read(self.signalled, 4096)  # the handler has run: stopped() says what came
            if writable:
                self._write_some()
            if replies not in readable:
                continue
            reply = os.read(replies, 65536)
            if not reply:
                self.running = False
                break
            self.replies += reply
            if refused := self._refusals():
                return refused
        return []

    def finish(self, stop: bool) -> EngineResult:
        """End the engine: at once with ``stop``, else once it has sent everything; its
        figures."""
        os.close(signal.set_wakeup_fd(self.previous_wakeup))
        os.close(self.signalled)
        if stop:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
        else:
            os.set_blocking(self.requests, True)
            while self.records and self.running:
                self._write_some()
        try:
            self.process.stdin.close()
        except OSError:
            pass  # it has exited; its output says how far it got
        self.replies += self.process.stdout.read()
        code = self.process.wait()
        refusals = len(self._refusals())
        try:
            head, rest = self.replies.split(b"\n", 1)
            fields = head.split()
            count_line, rest = rest.split(b"\n", 1)
            count = int(count_line.split()[1])
        except ValueError:
            raise RuntimeError(f"the send engine ended with {code} and no figures: "
                               f"{self.replies[:200]!r}") from None
        sent, sent_bytes, errors, last_group, last_send_ns = map(int, fields[1:])
        if len(rest) < count * LATENESS_BYTES:
            raise RuntimeError(f"the send engine ended with {code} and its figures cut short: "
                               f"{len(rest) // LATENESS_BYTES} of {count} lateness values")
        lateness = np.frombuffer(rest, dtype=np.int64, count=count)
        return EngineResult(sent, sent_bytes, errors, last_group,
                            last_send_ns if sent else None, refusals, lateness)

    def _write_some(self) -> None:
        """Write as much of what was added as the pipe takes now."""
        try:
            written = os.write(self.requests, self.records)
        except BlockingIOError:
            return
        except OSError:
            self.running = False  # it has exited; finish() says how
            self.records.clear()
            return
        del self.records[:written]

    def _refusals(self) -> list[int]:
        """The refusals the engine reported so far, taken from its replies."""
        refused = []
        while self.replies.startswith(b"R ") and b"\n" in self.replies:
            line, self.replies = self.replies.split(b"\n", 1)
            refused.append(int(line.split()[1]))
        return refused
