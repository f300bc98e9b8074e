"""The largest scenario of each kind of traffic that runs here with a clean fidelity verdict.

For each kind (live video streamer to viewer, danmaku and gifts from viewers to a chat
collector, AI data flows terminal to receiver) the benchmark builds a scenario of ``n`` flows
whose every packet crosses one impaired link (20 ms delay and 1 % loss each way, so on a kernel
without sch_netem the fallback delay relay carries it), runs it as ``edgebed run`` does, and
reads the run's own fidelity verdict (:func:`experiments.measurements.fidelity`: emulator-made
loss, senders behind their schedule, a late wire, a saturated CPU). ``n`` doubles from 1 until
a run is flagged or fails, then two bisection steps narrow the boundary. The table gives, per
kind, the largest clean run's hosts, flows and the frames a second the impaired link carried,
and what flagged the first run past it; with ``--dilate 1,10`` the search runs at each time
dilation factor (docs/concepts/virtual-time.md), durations and rates in virtual time; with
``--userspace-ports packet_socket,af_xdp`` at each way the userspace switch reads its ports.

A verdict on a shared machine is noisy: a run beside other work can be flagged at a size that
passes alone, so run it alone (the runner waits for the machine lock anyway) and read the
boundary as "about", not as an exact figure.

    sudo .venv/bin/python benchmarks/scale.py [--kinds video,chat,ai] [--duration 10]
                                              [--largest 256] [--dilate 1,10] [--keep DIR]
                                              [--userspace-ports packet_socket,af_xdp]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, get_args

import yaml
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments import scenarios  # noqa: E402
from recorder import Recording  # noqa: E402
from experiments.runner import RunOptions, run_scenario  # noqa: E402
from topologies.model import Emulation  # noqa: E402

IMPAIRMENT = {"delay": "20ms", "loss": "1%"}
TRUNK = ["s1:eth1", "s2:eth1"]  # the impaired link, senders' side first
SENDERS_START_S = 1.0
USERSPACE_PORTS = get_args(Emulation.model_fields["userspace_ports"].annotation)
BISECTION_STEPS = 2


@dataclass(frozen=True)
class TrafficKind:
    """One kind of traffic: its hosts at ``n`` flows and the workload between them. Senders
    are ``src1..src{n}``; ``receivers(n)`` hosts ``dst1..`` sit across the impaired link."""

    name: str
    what: str
    sender_role: str
    receiver_role: str
    receivers: Callable[[int], int]
    workload: Callable[[int], list[dict]]


def _video(n: int) -> list[dict]:
    viewers = [{"agent": "viewer", "nodes": [f"dst{i}"], "params": {"port": 5004}}
               for i in range(1, n + 1)]
    streamers = [{"agent": "streamer", "nodes": [f"src{i}"], "start": f"{SENDERS_START_S}s",
                  "params": {"to": f"dst{i}", "stream": i, "bitrate": "3Mbps", "fps": 30}}
                 for i in range(1, n + 1)]
    return viewers + streamers


def _chat(n: int) -> list[dict]:
    return [{"agent": "chat_collector", "nodes": ["dst1"], "params": {"port": 5006}},
            {"agent": "viewer", "nodes": [f"src[1-{n}]"], "start": f"{SENDERS_START_S}s",
             "params": {"port": 5004, "danmaku_to": "dst1", "danmaku_rate": 5,
                        "gift_rate": 0.5}}]


def _ai(n: int) -> list[dict]:
    receivers = [{"agent": "ai_receiver", "nodes": [f"dst{i}"]} for i in range(1, n + 1)]
    terminals = [{"agent": "ai_terminal", "nodes": [f"src{i}"], "start": f"{SENDERS_START_S}s",
                  "params": {"to": f"dst{i}", "stream": i}} for i in range(1, n + 1)]
    return receivers + terminals


KINDS = {kind.name: kind for kind in (
    TrafficKind("video", "live video, 3 Mbit/s 30 fps, streamer to its own viewer",
                "streamer", "viewer", lambda n: n, _video),
    TrafficKind("chat", "danmaku (5/s) and gifts (0.5/s) from each viewer to one collector",
                "viewer", "edge", lambda n: 1, _chat),
    TrafficKind("ai", "AI data flows, a 100 kB unit a second each, terminal to its receiver",
                "client", "access", lambda n: n, _ai),
)}


def is_sender_node(name: str) -> bool:
    """Whether host ``name`` (or a range of them) is a sender's: ``src1..src{n}``."""
    return name.startswith("src")


def _on_senders(entry: dict) -> bool:
    return all(is_sender_node(node) for node in entry["nodes"])


def scenario_text(kind: TrafficKind, n: int, duration_s: float, senders: bool = True,
                  dilation: float = 1, ports: str = "packet_socket") -> str:
    """The scenario of ``n`` flows of ``kind``: senders on s1, receivers on s2, and the one
    impaired link between the switches; with ``senders`` False, the same hosts and receiving
    agents with no agent on the senders' hosts (no traffic); time dilated ``dilation`` times;
    the userspace switch reads its ports as ``ports`` says."""
    receivers = kind.receivers(n)
    workload = [entry for entry in kind.workload(n) if senders or not _on_senders(entry)]
    document = {
        "name": f"scale-{kind.name}-{n}",
        "description": f"{n} flows of {kind.what}, over one link of "
                       f"{IMPAIRMENT['delay']} delay and {IMPAIRMENT['loss']} loss each way",
        "seed": 1,
        "duration": f"{duration_s:g}s",
        "time_dilation": dilation,
        "emulation": {"userspace_ports": ports},
        "topology": {
            "nodes": {f"src[1-{n}]": {"role": kind.sender_role},
                      f"dst[1-{receivers}]": {"role": kind.receiver_role},
                      "s1": {"role": "switch"}, "s2": {"role": "switch"}},
            "links": [{"endpoints": TRUNK, **IMPAIRMENT},
                      {"endpoints": [f"src[1-{n}]:eth1", f"s1:eth[2-{n + 1}]"]},
                      {"endpoints": [f"dst[1-{receivers}]:eth1", f"s2:eth[2-{receivers + 1}]"]}],
        },
        "workload": workload,
    }
    return yaml.safe_dump(document, sort_keys=False)


@dataclass
class Outcome:
    """One run of ``n`` flows: whether it was clean, and what it carried."""

    n: int
    hosts: int
    clean: bool
    frames_per_s: float
    cpu_busy_max: float | None
    why: str


def trunk_offered(summary: dict) -> int:
    """Frames offered to the impaired link in the senders' direction, from a run's summary."""
    return sum(entry["offered"] for entry in summary.get("emulator_loss") or []
               if entry["endpoints"] == TRUNK and entry["direction"] == "forward")


def run_once(kind: TrafficKind, n: int, duration_s: float, runs_root: Path,
             dilation: float = 1, ports: str = "packet_socket") -> Outcome:
    text = scenario_text(kind, n, duration_s, dilation=dilation, ports=ports)
    loaded = scenarios.loads(text, file=f"<scale {kind.name} {n}>")
    result = run_scenario(loaded, RunOptions(runs_root=runs_root))
    summary = result.summary
    fidelity = summary.get("fidelity") or {}
    offered = trunk_offered(summary)
    flags = fidelity.get("flags") or []
    if result.status != "completed":
        failed = summary.get("failed_processes") or []
        why = f"run {result.status}" + (f": {failed[0]['command']} on {failed[0]['node']}"
                                        if failed else "")
    else:
        why = flags[0] if flags else ""
    return Outcome(n, n + kind.receivers(n), result.status == "completed" and not flags,
                   offered / (duration_s - SENDERS_START_S), fidelity.get("cpu_busy_max"), why)


def boundary(kind: TrafficKind, duration_s: float, largest: int, runs_root: Path,
             console: Console, dilation: float = 1,
             ports: str = "packet_socket") -> tuple[Outcome | None, Outcome | None]:
    """The largest clean run found and the smallest flagged one (None where there is none),
    time dilated ``dilation`` times, the switch reading its ports as ``ports`` says."""
    clean = flagged = None

    def attempt(n: int) -> Outcome:
        nonlocal clean, flagged
        outcome = run_once(kind, n, duration_s, runs_root, dilation, ports)
        verdict = "clean" if outcome.clean else "flagged"
        console.print(f"  {kind.name} {ports} N={dilation:g} n={n}: {verdict}, "
                      f"{outcome.frames_per_s:,.0f} frames/s on the impaired link"
                      + (f"; {outcome.why}" if outcome.why else ""), markup=False)
        if outcome.clean:
            clean = outcome if clean is None or n > clean.n else clean
        else:
            flagged = outcome if flagged is None or n < flagged.n else flagged
        return outcome

    n = 1
    while n <= largest and attempt(n).clean:
        n *= 2
    for _ in range(BISECTION_STEPS):
        if clean is None or flagged is None or flagged.n - clean.n < 2:
            break
        attempt((clean.n + flagged.n) // 2)
    return clean, flagged


def kinds_parser(doc: str) -> argparse.ArgumentParser:
    """The options a benchmark over the kinds of traffic takes: which kinds, how long a run,
    where to keep the run directories."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds a run")
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    parser.add_argument("--userspace-ports", default=USERSPACE_PORTS[0],
                        help="comma-separated, of " + ", ".join(USERSPACE_PORTS)
                             + ": how the userspace switch reads its ports, each in turn")
    return parser


def ports_readers(arguments: argparse.Namespace) -> list[str]:
    readers = arguments.userspace_ports.split(",")
    unknown = sorted(set(readers) - set(USERSPACE_PORTS))
    if unknown:
        raise SystemExit(f"--userspace-ports: {', '.join(unknown)} is not one of "
                         f"{', '.join(USERSPACE_PORTS)}")
    return readers


def main() -> int:
    recording = Recording(__file__, __doc__)
    parser = kinds_parser(__doc__)
    parser.add_argument("--largest", type=int, default=256, help="flows at most")
    parser.add_argument("--dilate", default="1",
                        help="comma-separated time dilation factors, each searched in turn")
    arguments = parser.parse_args()
    kinds = [KINDS[name] for name in arguments.kinds.split(",")]
    dilations = [float(factor) for factor in arguments.dilate.split(",")]
    readers = ports_readers(arguments)
    console = Console(width=200)
    with tempfile.TemporaryDirectory(prefix="edgebed-scale-") as scratch:
        runs_root = arguments.keep or Path(scratch)
        found = {(kind.name, n, ports): boundary(kind, arguments.duration, arguments.largest,
                                                 runs_root, console, n, ports)
                 for ports in readers for n in dilations for kind in kinds}
    table = Table(title=f"largest clean run a kind ({arguments.duration:g} s runs of virtual "
                        f"time, one link of {IMPAIRMENT['delay']} and {IMPAIRMENT['loss']} "
                        f"each way; frames/s in virtual time)", title_justify="left")
    for column in ("traffic", "switch ports", "time dilation", "hosts", "flows",
                   "frames/s on the impaired link", "CPU busy max", "next size flagged for"):
        table.add_column(column)
    for ports, n, kind in ((ports, n, kind) for ports in readers for n in dilations
                           for kind in kinds):
        clean, flagged = found[kind.name, n, ports]
        past = (f"n={flagged.n}: {flagged.why}" if flagged
                else f"none up to {arguments.largest}")
        if clean is None:
            table.add_row(kind.what, ports, f"{n:g}", "-", "-", "-", "-", past)
            continue
        table.add_row(kind.what, ports, f"{n:g}", str(clean.hosts), str(clean.n),
                      f"{clean.frames_per_s:,.0f}",
                      f"{clean.cpu_busy_max:.0%}" if clean.cpu_busy_max is not None
                      else "-", past)
    console.print(recording.table(table))
    recording.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
