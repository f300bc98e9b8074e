"""What both wire relays share around the forwarding: changes read from stdin and acknowledged
on stdout, stop signals, and the front that hands checked settings to the compiled relay."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys

from edgebed import clock

from .wire_config import DEFAULT_LIMIT, DIRECTIONS, parse_config, variation_table


def report(document: dict) -> None:
    """One line of JSON on stdout: an acknowledgement, a rejection or the final statistics."""
    try:
        sys.stdout.write(json.dumps(document) + "\n")
        sys.stdout.flush()
    except OSError:
        pass  # nobody listening is no reason to stop forwarding


class Changes:
    """The changes read from stdin, one JSON document a line, as both relays' fronts take
    them: each line gets the next number, and one that is not JSON or that ``configure``
    refuses is reported rejected under that number (with the reason) and changes nothing.
    One step for both, so the compiled relay cannot come to mean something else by a change."""

    def __init__(self, configure):
        self.configure = configure
        self.seen = 0

    def take(self, line: bytes) -> int | None:
        """The change's number when ``configure`` took it, None when it was rejected; the
        caller acknowledges it once it is in effect."""
        self.seen += 1
        try:
            document = json.loads(line)
        except ValueError as error:
            report({"rejected": self.seen, "error": f"not JSON: {error}"})
            return None
        try:
            self.configure(document)
        except ValueError as error:
            report({"rejected": self.seen, "error": str(error)})
            return None
        return self.seen


class StopSignals:
    """SIGTERM and SIGINT as bytes on a pipe for select() to wait on (signal.set_wakeup_fd).

    Why not a handler alone: Python runs a handler between bytecodes, so a signal that comes
    just before a blocking system call (a read, os.waitpid) is taken by the C-level handler and
    the call then blocks as if nothing had come. The compiled relay's front, waiting in
    os.waitpid for its relay, missed the SIGTERM that way about once in 20 stops made soon
    after a change (CI runs hung 30 s); the byte on the pipe wakes select() whenever the
    signal came."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.fd, wakeup_write = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(wakeup_write, False)
        signal.set_wakeup_fd(wakeup_write)
        for signum in self.SIGNALS:
            # A handler must be set for the signal to reach the pipe; what it does is the
            # loop's, on reading the pipe.
            signal.signal(signum, lambda signum, frame: None)

    def take(self) -> list[int]:
        """The signals that came since the last take, in order."""
        taken = b""
        try:
            while chunk := os.read(self.fd, 4096):
                taken += chunk
        except BlockingIOError:
            pass
        return list(taken)


class StdinLines:
    """Changes from stdin as whole lines, read once select() has seen stdin readable."""

    def __init__(self):
        # started with stdin closed: no changes will come
        self.fd = sys.stdin.fileno() if sys.stdin is not None else None
        self.pending = b""

    def read(self) -> list[bytes] | None:
        """The non-blank lines completed by what was there to read; None at end of stdin."""
        chunk = os.read(self.fd, 65536)
        if not chunk:
            return None
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        return [line for line in lines if line.strip()]


# The compiled relay's distribution codes (topologies/impairments/wire_relay.c).
COMPILED_DISTRIBUTIONS = {"normal": 0, "uniform": 1, "pareto": 2, "paretonormal": 2}


class CompiledRelay:
    """The front of the compiled relay (``wire_relay.c``, built by scripts/setup.sh): checks the
    configuration and every change here, with the same models and messages as :class:`Relay`,
    and hands the C program only settled numbers. Why: the Python relay's per-frame cost caps it
    near 7,500 frames/s per direction on 2 cores; the C one batches system calls and is not
    interpreted, and keeping the checking here keeps one definition of what a change means."""

    def __init__(self, binary: str, forward_in: str, forward_out: str, status_path: str | None,
                 priority: int):
        command = [binary, "--forward-in", forward_in, "--forward-out", forward_out,
                   "--realtime-priority", str(priority)]
        if status_path is not None:
            command += ["--status", status_path]
        # Its stdout is ours: acknowledgements and the final statistics come straight from it.
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE)
        # What each direction is now, in the relay's units: a change names only what changes.
        self.settings = {name: {"delay_ns": 0, "jitter_ns": 0, "distribution": "normal",
                                "reorder": False, "loss": 0.0, "burst": None, "down": False,
                                "limit": DEFAULT_LIMIT} for name in DIRECTIONS}
        self.changes = Changes(self.configure)

    def configure(self, document) -> None:
        changes, seed = parse_config(document)
        real_ns = clock.current().real_ns
        lines = [] if seed is None else [f"S {seed}"]
        for index, name in enumerate(DIRECTIONS):
            if name not in changes:
                continue
            current = self.settings[name]
            current.update(changes[name])
            burst = current["burst"]
            if current["distribution"] in ("pareto", "paretonormal"):
                lines.append(f"T {index} " + " ".join(
                    repr(value) for value in variation_table(current["distribution"])))
            # The C relay keeps real time: a virtual delay lasts N times longer for real.
            lines.append(" ".join(str(value) for value in (
                "D", index, real_ns(current["delay_ns"]), real_ns(current["jitter_ns"]),
                COMPILED_DISTRIBUTIONS[current["distribution"]], int(current["reorder"]),
                repr(float(current["loss"])), int(burst is not None),
                *(repr(float(getattr(burst, key))) if burst else "0.0"
                  for key in ("p", "r", "bad_loss", "good_loss")),
                int(current["down"]), current["limit"])))
        self.send(lines)

    def send(self, lines: list[str]) -> None:
        try:
            self.process.stdin.write("".join(line + "\n" for line in lines).encode())
            self.process.stdin.flush()
        except OSError:
            pass  # it has exited; run() reports how

    def run(self) -> int:
        """Pass changes on until stdin ends or a signal comes, and signals on to the relay (it
        prints the statistics and exits) until it has exited; its exit status."""
        signals, stdin = StopSignals(), StdinLines()
        exited = os.pidfd_open(self.process.pid)
        watched = [signals.fd, exited] + ([stdin.fd] if stdin.fd is not None else [])
        self.send(["G"])
        try:
            while exited not in (readable := select.select(watched, (), ())[0]):
                if signals.fd in readable:
                    for signum in signals.take():
                        self.process.send_signal(signum)
                    watched = [signals.fd, exited]  # a signal ends the changes
                elif (lines := stdin.read()) is None:
                    watched = [signals.fd, exited]  # end of stdin ends the changes, not the relay
                else:
                    for line in lines:
                        self.change(line)
        finally:
            os.close(exited)
        return self.process.wait()

    def change(self, line: bytes) -> None:
        number = self.changes.take(line)
        if number is not None:
            # Acknowledged by the C relay once it has applied the settings sent before this.
            self.send([f"A {number}"])
