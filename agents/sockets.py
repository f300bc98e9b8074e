"""Receiving datagrams: sockets with large buffers and kernel receive timestamps, read in
bursts of those waiting, in batches at most once a quantum until an agent stops, and reading
what already waits when it does."""

from __future__ import annotations

import math
import os
import select
import socket
import struct
import sys
from typing import Callable, Iterator

from pydantic import BaseModel, Field

from edgebed import clock
from edgebed.quantities import Duration
from agents.agent import RECEIVE_BUFFER_FULL, Agent

SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
# The default lost 38% of a 945-packet AI burst. It also holds a receive quantum's datagrams
# at the highest rate an agent takes (the relay's 50k packets/s: 500 in 10 ms, a few kB of
# buffer each, their truesize), thousands of times over.
RECEIVE_BUFFER = 16 * 1024 * 1024
# A packet waiting in its link's queue is charged to the socket that sent it until the link
# sends it. The default (208 KiB, about 90 full packets by their truesize) refused I-frame
# bursts a media node's link had room for in its 1,000-packet queue; 16 MiB holds that queue
# of full packets 7 times, so the link's queue, whose drops its configured rate makes, fills
# first.
SEND_BUFFER = 16 * 1024 * 1024
TIMESPEC = struct.Struct("@ll")
# Longest wait on a socket before an agent looks at its stop flag again.
POLL_S = 0.1


def receiving_socket(port: int, kind: int = socket.SOCK_DGRAM,
                     bind_address: str = "0.0.0.0", reuse: bool = True) -> socket.socket:
    """A UDP socket with a 16 MiB receive buffer and kernel receive timestamps, whose reads
    time out every 0.1 s so a stop request is seen. ``reuse=False``: binding fails with
    EADDRINUSE when another socket holds the address and port (with SO_REUSEADDR two UDP
    sockets may share them)."""
    sock = socket.socket(socket.AF_INET, kind)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("@ll", 0, round(POLL_S * 1e6)))
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind_address, port))
    except OSError:
        sock.close()
        raise
    return sock


def sending_without_waiting(sock: socket.socket) -> socket.socket:
    """``sock`` made to send without waiting, with a 16 MiB send buffer: a send fails at once
    only when the buffer is full, and a full link queue drops before that."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, SEND_BUFFER)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    sock.setblocking(False)
    return sock


CONTROL_SPACE = socket.CMSG_SPACE(TIMESPEC.size)


def receive(sock: socket.socket, buffer: bytearray,
            wait: bool = True) -> tuple[int, int, tuple] | None:
    """One datagram into ``buffer``: (size, kernel receive time ns, sender address), or None
    when the read timed out (at once when nothing is waiting, with ``wait=False``)."""
    try:
        size, control, _, address = sock.recvmsg_into([buffer], CONTROL_SPACE, 0 if wait
                                                      else socket.MSG_DONTWAIT)
    except (BlockingIOError, socket.timeout):
        return None
    for level, kind, data in control:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = TIMESPEC.unpack_from(data)
            return (size, clock.virtual_realtime_ns(seconds * 1_000_000_000 + nanoseconds),
                    address)
    return size, clock.time_ns(), address


# The most datagrams a media node (edge forwarder, edge server) reads in one wake-up. Its
# departures already end a burst (the stop predicate); the cap is for what no departure
# stands for: the controller's pushed decisions, next hops' NACKs, the stop flag, an edge's
# housekeeping and NACK asks. A datagram takes a media node some microseconds to tens of them
# (the edge gathers it into its frame), so 64 keep those waiting about a millisecond at most,
# far within a 20 ms reorder wait or a decision's switch, while one select() call for 64
# datagrams costs next to nothing beside their handling.
BURST_DATAGRAMS = 64


def burst(sock: socket.socket, buffer: bytearray, most: int | None = None,
          stop: Callable[[], bool] | None = None) -> Iterator[tuple[int, int, tuple]]:
    """The datagrams waiting on ``sock``, read without waiting into ``buffer`` and given as
    :func:`receive` gives them, until none waits, ``most`` were read or ``stop()``, asked after
    each one given, says so. The first waiting datagram is always read: a wake-up for a
    readable socket takes at least one."""
    read = 0
    while most is None or read < most:
        arrival = receive(sock, buffer, wait=False)
        if arrival is None:
            return
        yield arrival
        read += 1
        if stop is not None and stop():
            return


# A measuring receiver wakes at most this often and reads everything waiting. Its datagrams
# carry their kernel receive times, so the batching costs no timing accuracy; what it delays is
# the receiver's reaction to a datagram: a NACK ask for a gap the datagram reveals (at most a
# quantum later, against a default reorder wait of 20 ms and a repair deadline of 500 ms) and
# the stop after ``expect`` (against a grace of 500 ms). At a video flow's few hundred packets/s
# 10 ms gathers a few datagrams a wake-up, at thousands tens of them.
RECEIVE_QUANTUM_S = 0.01


class ReceiveParams(BaseModel):
    """What an agent with a measuring receive loop (:func:`datagrams`) takes (its ``Params``
    derive from this)."""

    receive_quantum: Duration = Field(RECEIVE_QUANTUM_S, description="the receiver wakes at "
                                                                     "most once in this long "
                                                                     "and reads all that "
                                                                     "waits; 0: a wake-up a "
                                                                     "datagram")


GRACE_S = 0.5  # listening on after the expected packets arrived, for stragglers and duplicates
DATAGRAM_BUFFER = 65536  # larger than any UDP payload


def listen(port: int) -> socket.socket:
    """A receiving socket on ``port`` (0: any free port), announced on stderr as ``listening on
    PORT`` once bound, so that whoever starts a sender can wait for it."""
    sock = receiving_socket(port)
    print(f"listening on {sock.getsockname()[1]}", file=sys.stderr, flush=True)
    return sock


def datagrams(agent: Agent, sock: socket.socket, buffer: bytearray,
              quantum_s: float = RECEIVE_QUANTUM_S,
              duration_s: float | None = None,
              enough: Callable[[], bool] | None = None,
              timer: Callable[[], float | None] | None = None,
              ) -> Iterator[tuple[int, int, tuple]]:
    """The datagrams arriving on ``sock``, each read into ``buffer`` and given as (size, kernel
    receive time ns, sender address), in their order of arrival, until the agent is stopped,
    ``duration_s`` has passed or GRACE_S after ``enough()`` first says so; then those still
    waiting on the socket (:func:`waiting_datagrams`): what reached the host before its agent
    stopped is measured, not lost.

    The loop wakes at most once a ``quantum_s`` (virtual seconds) and then reads what waits
    without blocking, for up to a quantum; with nothing waiting it sleeps until a datagram
    comes. ``timer()`` does the caller's timed work; it is called after every wake-up and
    returns the virtual seconds until it is next due (None: nothing pending), which the loop
    wakes for whatever the quantum."""
    now = clock.monotonic()
    end = math.inf if duration_s is None else now + duration_s
    readable_from = now  # the end of the last read's quantum
    timer_due = math.inf
    while not agent.stopping and now < end:
        if now < readable_from:
            clock.sleep(max(0.0, min(readable_from, timer_due, end) - now))
        elif select.select([sock], [], [], clock.real_seconds(
                max(0.0, min(timer_due, end, now + POLL_S) - now)))[0]:
            readable_from = clock.monotonic() + quantum_s
            # More may keep coming: past the quantum the timer and the stop flag have their turn.
            yield from burst(sock, buffer, stop=lambda: clock.monotonic() >= readable_from)
            if enough is not None and enough():
                end = min(end, clock.monotonic() + GRACE_S)
                enough = None
        now = clock.monotonic()
        if timer is not None:
            wait_s = timer()
            timer_due = math.inf if wait_s is None else now + wait_s
    yield from waiting_datagrams(sock, buffer)


MARKER_SIZE = 16  # random bytes: no datagram a sender sends carries them by chance
SMALLEST_QUEUED_BYTES = 256  # a datagram takes at least this much of a receive buffer (its truesize)


def waiting_datagrams(sock: socket.socket, buffer: bytearray) -> Iterator[tuple[int, int, tuple]]:
    """The datagrams waiting on ``sock`` now, read without waiting, as :func:`datagrams` gives
    them; a sender that keeps sending cannot hold them up.

    "Now" is a marker datagram the socket sends itself over loopback: it joins the receive
    queue behind every datagram that had arrived, so the reading ends where it is read. No
    clock decides it (the kernel's receive stamps and user-space time need not order the same
    way). A full queue drops the marker; then the reading ends when the queue is empty or
    after as many datagrams as the queue could hold."""
    marker = os.urandom(MARKER_SIZE)
    sock.sendto(marker, _own_address(sock))
    capacity = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // SMALLEST_QUEUED_BYTES
    for arrival in burst(sock, buffer, most=capacity):
        if buffer[:arrival[0]] == marker:
            return
        yield arrival


def _own_address(sock: socket.socket) -> tuple[str, int]:
    """Where a datagram reaches ``sock`` from its own host: its bound address, or loopback
    for a socket bound to every address."""
    address, port = sock.getsockname()[:2]
    return ("127.0.0.1" if address == "0.0.0.0" else address), port


def udp_socket_drops(sock: socket.socket) -> int | None:
    """The datagrams the kernel dropped for ``sock`` because its receive buffer was full (the
    ``drops`` column of /proc/net/udp, this namespace's, found by the socket's inode); None
    where the kernel does not say."""
    inode = str(os.fstat(sock.fileno()).st_ino)
    try:
        with open("/proc/self/net/udp") as table:
            header = table.readline().split()
            for line in table:
                fields = line.split()
                # The header names "tx_queue rx_queue" and "tr tm->when" as one field each.
                if len(fields) == len(header) - 2 and fields[9] == inode:
                    return int(fields[-1])
    except (OSError, ValueError):
        pass
    return None


def record_socket_drops(agent: Agent, sock: socket.socket) -> int | None:
    """The datagrams the kernel dropped for ``sock``'s full receive buffer
    (:func:`udp_socket_drops`), as an ``agent_drops`` row when there were any: the agent did not
    read them in time, a loss nobody configured."""
    drops = udp_socket_drops(sock)
    if drops:
        agent.row("agent_drops", RECEIVE_BUFFER_FULL, "", sock.getsockname()[1], drops)
    return drops
