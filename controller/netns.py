"""Sockets in another network namespace, for a process that lives in the root one."""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading
from typing import Iterator

CLONE_NEWNET = 0x40000000
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
RECEIVE_BUFFER = 4 * 1024 * 1024
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


@contextlib.contextmanager
def entered(pid: int) -> Iterator[None]:
    """Run the block in the network namespace of process ``pid``."""
    own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


def udp_socket(address: str, port: int, netns_pid: int | None = None) -> socket.socket:
    """A UDP socket bound to ``address:port``, in the namespace of ``netns_pid`` if given."""
    with entered(netns_pid) if netns_pid is not None else contextlib.nullcontext():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            # A burst of joins (every client of an experiment at once) must not overflow the
            # default buffer of ~200 KiB.
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
            sock.bind((address, port))
        except OSError:
            sock.close()
            raise
    return sock
