"""Real-time scheduling for the processes that carry emulated packets on time (the wire relay,
paced senders): a bound on the CPUs' wake-up latency and SCHED_FIFO."""

from __future__ import annotations

import os
import struct
import sys

_cpu_latency_requested = False


def request_cpu_latency(microseconds: int) -> None:
    """Ask the kernel to keep every CPU able to wake within ``microseconds`` for as long as this
    process runs: the request is a descriptor left open, which closes with the process however
    it ends (once per process; later calls do nothing).

    Waking a halted virtual CPU can take milliseconds (1.5 ms at the 99th percentile on the
    2-vCPU reference VM, 3.7 ms at the 99.9th), which no spinning before the due time covers:
    with idle CPUs polling, frames there leave within 0.7 ms of their due time at the 99th
    percentile instead of 3 to 5 ms. The price is that idle CPUs stay busy while relays and
    paced senders run."""
    global _cpu_latency_requested
    if _cpu_latency_requested:
        return
    _cpu_latency_requested = True
    try:
        os.write(os.open("/dev/cpu_dma_latency", os.O_WRONLY), struct.pack("i", microseconds))
    except OSError as error:
        print(f"CPU wake-up latency left to the machine: {error}", file=sys.stderr,
              flush=True)


def run_realtime(priority: int) -> None:
    """Run under SCHED_FIFO at ``priority``.

    On a machine whose cores are busy (the emulated hosts' own programs, Open vSwitch) a relay
    under normal scheduling waits for its turn and frames leave milliseconds late. The relay
    sleeps whenever nothing is due, and the kernel's real-time throttling (95% of each second
    by default) keeps even a saturated relay from starving the rest."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as error:
        print(f"normal scheduling: {error}", file=sys.stderr, flush=True)
