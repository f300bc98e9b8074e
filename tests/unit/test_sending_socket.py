"""A media node's sending socket (agents.sockets.sending_without_waiting): it never waits, and
its send buffer holds a full default link queue, so the link's queue drops first."""

import socket

from agents.sockets import sending_without_waiting

DEFAULT_LINK_QUEUE = 1000  # packets: a veth's txqueuelen, the queue under a rate limit
FULL_PACKET_TRUESIZE = 2304  # bytes a 1,500-byte datagram is charged in a socket's buffer


def test_the_send_buffer_holds_a_default_link_queue_of_full_packets():
    with sending_without_waiting(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as sock:
        held = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    assert held >= DEFAULT_LINK_QUEUE * FULL_PACKET_TRUESIZE


def test_a_send_never_waits():
    with sending_without_waiting(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as sock:
        assert sock.gettimeout() == 0.0
