"""iperf3 as an agent: runs ``iperf3 -J`` as a server or a client and turns its JSON report into
tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import ClassVar, Literal, Optional

from pydantic import Field, model_validator

from agents.agent import Agent, AgentParams, NodeRef
from edgebed.quantities import Duration, PositiveDuration, Rate
from edgebed import clock

TABLES = {
    # One row per side (sent, received) of each test, one per reporting interval.
    "iperf": ("node", "agent", "role", "protocol", "test", "side", "seconds", "bytes",
              "bits_per_second", "retransmits", "jitter_ms", "lost_percent"),
    "iperf_intervals": ("node", "agent", "role", "protocol", "test", "start_s", "end_s",
                        "bytes", "bits_per_second", "retransmits", "jitter_ms", "lost_percent",
                        "omitted"),
}

POLL_S = 0.1  # how often the agent looks at its stop flag while iperf3 runs
KILL_AFTER_S = 5.0
TCP_LISTEN = "0A"  # the LISTEN state in /proc/net/tcp


def whole_seconds(value: float, name: str) -> None:
    # iperf3 reads -t and -O with atoi(): 0.5 would become 0, which for -t means "forever".
    if value != int(value):
        raise ValueError(f"{name} must be a whole number of seconds for iperf3, not {value:g}")


class Params(AgentParams):
    """Which side of an iperf3 test this is and what the test does."""

    undilatable: ClassVar[str | None] = ("iperf3 paces and times itself on the system's clock, "
                                         "and kernel TCP's timers run in real time")

    role: Literal["server", "client"]
    to: Optional[NodeRef] = Field(None, description="the server (clients only)")
    port: int = Field(5201, ge=1, le=65535)
    protocol: Literal["tcp", "udp"] = Field("tcp", description="clients only; a server "
                                                               "takes what the client asks")
    bandwidth: Optional[Rate] = Field(None, gt=0, description="target rate (iperf3 -b); "
                                                              "default iperf3's: 1 Mbit/s "
                                                              "for UDP, unlimited for TCP")
    duration: Duration = Field(10.0, ge=1, description="test length, whole seconds (clients)")
    reverse: bool = Field(False, description="the server sends, the client receives")
    omit: Duration = Field(0.0, description="whole seconds left out at the start (clients)")
    interval: PositiveDuration = Field(1.0, ge=0.1, le=60, description="reporting interval")
    streams: int = Field(1, ge=1, le=128, description="parallel streams (iperf3 -P)")
    once: bool = Field(True, description="servers: serve one test and end (iperf3 -1); "
                                         "false: serve until stopped")

    @model_validator(mode="after")
    def _sides_agree(self) -> "Params":
        if (self.role == "client") != (self.to is not None):
            raise ValueError("a client needs `to`, the server; a server takes no `to`")
        whole_seconds(self.duration, "duration")
        whole_seconds(self.omit, "omit")
        return self

    def command(self) -> list[str]:
        """The iperf3 command line."""
        argv = ["iperf3", "--json", "--port", str(self.port), "--interval", f"{self.interval:g}"]
        if self.role == "server":
            return argv + ["--server"] + (["--one-off"] if self.once else [])
        argv += ["--client", self.to, "--time", str(int(self.duration)),
                 "--parallel", str(self.streams)]
        if self.protocol == "udp":
            argv.append("--udp")
        if self.bandwidth is not None:
            argv += ["--bitrate", str(round(self.bandwidth))]
        if self.reverse:
            argv.append("--reverse")
        if self.omit:
            argv += ["--omit", str(int(self.omit))]
        return argv


def reports(text: str) -> list[dict]:
    """The JSON reports in iperf3's output: one per test, one after the other. Anything after
    the last complete report (output cut short) is left out."""
    decoder = json.JSONDecoder()
    found = []
    position = 0
    while (position := _skip_space(text, position)) < len(text):
        try:
            report, position = decoder.raw_decode(text, position)
        except ValueError:
            break
        found.append(report)
    return found


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def tcp_listening(port: int) -> bool:
    """Whether something in this network namespace listens on TCP ``port``."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[1].endswith(f":{port:04X}") and fields[3] == TCP_LISTEN:
                return True
    return False


def run_iperf3(agent: Agent, params: Params) -> tuple[str, int, bool]:
    """Run iperf3 until it ends or the agent stops; (its whole stdout, its exit code, whether
    the agent stopped it)."""
    process = subprocess.Popen(params.command(), stdout=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True)
    announce = params.role == "server"
    stopped_at = None
    while True:
        try:
            output, _ = process.communicate(timeout=POLL_S)
            # A Ctrl-C reaches iperf3 directly, as it shares the agent's process group.
            return output, process.returncode, stopped_at is not None or agent.stopping
        except subprocess.TimeoutExpired:
            pass  # communicate() keeps what it read so far for the next call
        if announce and tcp_listening(params.port):
            print(f"listening on {params.port}", file=sys.stderr, flush=True)
            announce = False
        if agent.stopping and stopped_at is None:
            process.terminate()
            stopped_at = clock.monotonic()
        elif stopped_at is not None and clock.monotonic() - stopped_at > KILL_AFTER_S:
            process.kill()


def write_report(agent: Agent, params: Params, test: int, report: dict) -> dict:
    """The report's rows of ``iperf`` and ``iperf_intervals``; returns its end figures."""
    protocol = (report.get("start", {}).get("test_start", {}).get("protocol")
                or params.protocol).lower()
    figures = {"protocol": protocol, "error": report.get("error")}
    for side, key in (("sent", "sum_sent"), ("received", "sum_received")):
        total = report.get("end", {}).get(key)
        if total is None:
            continue
        # iperf3 fills jitter and loss on the sent side with zeros: only the receiver knows.
        received = side == "received"
        jitter_ms = total.get("jitter_ms") if received else None
        lost_percent = total.get("lost_percent") if received else None
        agent.row("iperf", params.role, protocol, test, side, total.get("seconds"),
                  total.get("bytes"), total.get("bits_per_second"), total.get("retransmits"),
                  jitter_ms, lost_percent)
        figures[side] = {"bits_per_second": total.get("bits_per_second"),
                         "bytes": total.get("bytes"), "retransmits": total.get("retransmits"),
                         "jitter_ms": jitter_ms, "lost_percent": lost_percent}
    for interval in report.get("intervals", []):
        total = interval.get("sum", {})
        agent.row("iperf_intervals", params.role, protocol, test, total.get("start"),
                  total.get("end"), total.get("bytes"), total.get("bits_per_second"),
                  total.get("retransmits"), total.get("jitter_ms"), total.get("lost_percent"),
                  int(bool(total.get("omitted"))))
    figures["intervals"] = len(report.get("intervals", []))
    return figures


def main(argv: list[str] | None = None) -> int:
    agent = Agent("iperf", argv, TABLES)
    params = Params.model_validate(agent.params)
    output, exit_code, stopped = run_iperf3(agent, params)
    found = reports(output)
    # A report without a test start is an error alone (no server to connect to, a server
    # stopped while it waited for a client).
    tests = [write_report(agent, params, test, report) for test, report in enumerate(
        report for report in found if "test_start" in report.get("start", {}))]
    errors = [report["error"] for report in found if report.get("error")]
    # Reports of what the agent interrupted say so in their error; that is no failure.
    failed = not stopped and (exit_code != 0 or bool(errors))
    agent.finish({"role": params.role, "tests": len(tests), "output_bytes": len(output.encode()),
                  "exit_code": exit_code, "stopped": stopped, "failed": failed,
                  "errors": errors, "last": tests[-1] if tests else None})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
