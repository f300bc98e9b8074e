"""ai_access's wire messages: AI data units from the terminals, their repair, and their
hand-over to the GPU servers.

=====================  ====  ===========================================================
message                type  fields after the common four bytes (:mod:`agents.wire`)
=====================  ====  ===========================================================
ai_data                   4  stream u32, unit u32, fragment u16, fragments u16, length u16,
                             send_ns u64, then ``length`` payload bytes
ai_nack                   7  stream u32, unit u32, count u16 (Rtr_Pkt_N), then count
                             fragment indexes u16
gpu_request              13  stream u32, unit u32, unit_bytes u32
gpu_grant                14  stream u32, unit u32, sequence u32, gpu u32 (IPv4), gpu_port u16
ai_unit                  15  stream u32, unit u32, sequence u32, length u32, then ``length``
                             unit bytes
=====================  ====  ===========================================================

ai_access's hand-over of AI data units to the GPU servers: an access server that completed a
unit asks the cluster manager where it goes (``gpu_request``, on the side band), the manager
answers with the GPU server whose turn it is (``gpu_grant``: its data-plane address and port,
and the grant's number in the rotation, :class:`agents.ai_access.ai_gpu.GpuRotation`), and the
access server sends the unit there on the data plane (``ai_unit``, over TCP: the unit whole).
"""

from __future__ import annotations

from agents.wire import MessageFormat

AI_DATA = MessageFormat("ai_data", 4, (
    ("stream", "I"), ("unit", "I"), ("fragment", "H"), ("fragments", "H"), ("length", "H"),
    ("send_ns", "Q")), "payload", "data", "length", timestamps=frozenset({"send_ns"}))
AI_NACK = MessageFormat("ai_nack", 7, (("stream", "I"), ("unit", "I"), ("count", "H")),
                        "u16 list", "indexes", "count")
GPU_REQUEST = MessageFormat("gpu_request", 13, (("stream", "I"), ("unit", "I"),
                                                ("unit_bytes", "I")))
GPU_GRANT = MessageFormat("gpu_grant", 14, (
    ("stream", "I"), ("unit", "I"), ("sequence", "I"), ("gpu", "I"), ("gpu_port", "H")))
AI_UNIT = MessageFormat("ai_unit", 15, (
    ("stream", "I"), ("unit", "I"), ("sequence", "I"), ("length", "I")), "payload", "data",
    "length")

MESSAGES = (AI_DATA, AI_NACK, GPU_REQUEST, GPU_GRANT, AI_UNIT)
