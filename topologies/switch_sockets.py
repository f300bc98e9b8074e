"""The userspace switch's receive sockets enlarged: each port of the userspace datapath is a
packet socket of ovs-vswitchd with the kernel's default receive buffer, which a burst
overflows; a run raises only its own ports' buffers, through a duplicate of ovs-vswitchd's
descriptor (``pidfd_getfd``). The kernel datapath has no such sockets.
"""

from __future__ import annotations

import ctypes
import os
import re
import socket
import subprocess
from dataclasses import dataclass

from edgebed import clock

# Asked per port; the kernel doubles it for its bookkeeping, so ~8 MiB as ``ss`` shows it:
# ~3 600 frames, a 300 ms stall at 12 000 frames/s.
RECEIVE_BUFFER = 4 * 1024 * 1024
SO_RCVBUFFORCE = 33  # <asm-generic/socket.h>; the socket module does not name it
SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture

# One packet socket in ``ss -0 -a -m -p``: bound to one interface ("*:<name>"), its owner, and
# its memory (receive buffer ``rb`` and drops ``d``).
SOCKET = re.compile(r'\s\*:(?P<interface>\S+)\s.*users:\(\("ovs-vswitchd",pid=(?P<pid>\d+),'
                    r'fd=(?P<fd>\d+)\).*skmem:\(r\d+,rb(?P<buffer>\d+),.*\bd(?P<drops>\d+)\)')


@dataclass(frozen=True)
class SwitchSocket:
    """ovs-vswitchd's receive socket on one interface, as ``ss`` shows it."""

    interface: str
    pid: int
    fd: int
    receive_buffer: int
    drops: int


def parse(output: str) -> dict[str, SwitchSocket]:
    """ovs-vswitchd's sockets by interface, from ``ss -0 -a -m -p`` output (with ``-e`` ``ss``
    wraps a socket's details onto indented lines)."""
    lines: list[str] = []
    for line in (output or "").splitlines():
        if line[:1].isspace() and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    sockets = {}
    for line in lines:
        match = SOCKET.search(line)
        if match:
            sockets[match["interface"]] = SwitchSocket(
                match["interface"], int(match["pid"]), int(match["fd"]),
                int(match["buffer"]), int(match["drops"]))
    return sockets


def read() -> dict[str, SwitchSocket]:
    """The switch's sockets now; run in the root namespace, where ovs-vswitchd's are."""
    return parse(subprocess.run(["ss", "-0", "-a", "-m", "-p"], capture_output=True,
                                text=True, check=True).stdout)


def enlarge(interfaces: list[str], size: int = RECEIVE_BUFFER,
            timeout: float = 10.0) -> list[str]:
    """Give ovs-vswitchd's socket on each of ``interfaces`` a receive buffer of ``size``, once
    the switch has opened them (it does when it takes the port); returns the interfaces it
    could not (no socket within ``timeout``, or the kernel refused), for the run's warnings."""
    libc = ctypes.CDLL(None, use_errno=True)
    waiting, refused = set(interfaces), []
    deadline = clock.monotonic() + timeout
    while waiting:
        sockets = read()
        for name in sorted(waiting & sockets.keys()):
            waiting.discard(name)
            if not _set_buffer(libc, sockets[name], size):
                refused.append(name)
        if not waiting or clock.monotonic() > deadline:
            break
        clock.sleep(0.05)
    return sorted(waiting) + refused


def _set_buffer(libc, found: SwitchSocket, size: int) -> bool:
    try:
        process = os.pidfd_open(found.pid)
    except OSError:
        return False
    try:
        duplicate = libc.syscall(SYS_PIDFD_GETFD, process, found.fd, 0)
        if duplicate < 0:
            return False
        borrowed = socket.socket(fileno=duplicate)
        try:
            borrowed.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
            return True
        except OSError:
            return False
        finally:
            borrowed.close()  # closes the duplicate only; ovs-vswitchd keeps its descriptor
    finally:
        os.close(process)
