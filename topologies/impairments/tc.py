"""The tc commands behind link impairments, one function per mechanism.

Every function returns shell commands for one interface's egress; the caller runs them in the
namespace the interface lives in. Applying is always "clear, then add": a change never
depends on what was there before, and clearing (every value 0) leaves the interface as new.
"""

from __future__ import annotations

import math

from ..model import Impairment

# Classic BPF for cls_bpf in direct-action mode: A = random u32 (SKF_AD_RANDOM); if
# A >= threshold return TC_ACT_UNSPEC (-1, let the packet pass) else TC_ACT_STOLEN (4).
# STOLEN drops silently: unlike TC_ACT_SHOT, the sender's socket sees no error, as on a wire.
# Classic BPF needs neither a compiler nor bpffs, and runs at kernel speed.
_LOAD_RANDOM = "32 0 0 4294963256"  # BPF_LD|BPF_W|BPF_ABS, SKF_AD_OFF + SKF_AD_RANDOM
_TC_ACT_STOLEN = 4
_TC_ACT_UNSPEC = 0xFFFFFFFF
DISTRIBUTIONS = ("normal", "uniform", "pareto", "paretonormal")


def in_real_time(impairment: Impairment, dilation: float) -> Impairment:
    """What the kernel, which keeps real time, must apply for ``impairment`` to hold in a run
    dilated ``dilation`` times: delays and jitter that much longer, the rate that much lower.
    Loss and queue lengths (in packets) do not depend on time."""
    if dilation == 1:
        return impairment
    update = {name: getattr(impairment, name) * dilation for name in ("delay", "jitter")
              if getattr(impairment, name) is not None}
    if impairment.bw is not None:
        update["bw"] = impairment.bw / dilation
    return impairment.model_copy(update=update)


def loss_threshold(loss: float) -> int:
    """Random u32 values below this are dropped: exactly ``loss`` of them."""
    return min(2**32 - 1, round(loss * 2**32))


def loss_bytecode(loss: float) -> str:
    return (f"4,{_LOAD_RANDOM},53 1 0 {loss_threshold(loss)},6 0 0 {_TC_ACT_STOLEN},"
            f"6 0 0 {_TC_ACT_UNSPEC},")


def clear(interface: str) -> list[str]:
    return [f"tc qdisc del dev {interface} root 2>/dev/null",
            f"tc qdisc del dev {interface} clsact 2>/dev/null"]


# How long a stop of the shaper HTB's buckets make up for afterwards. A busy or shared machine
# stops it for milliseconds now and then (its timer fires late), which the emulated link would
# not have. Measured with 8 ms stops in every 20 ms: a bucket of 1 ms of traffic (and tc's
# default cburst) left 87-93% of a 130 Mbit/s rate, 12 ms in both buckets 97-98%. The price:
# after an idle moment, up to this much traffic (at least ten frames) passes at line rate.
HTB_CATCH_UP_S = 0.012


def htb_burst_bytes(bw: float) -> int:
    """HTB's buckets (burst for the rate, cburst for the ceiling, which is the rate): at least
    15 kB (ten frames, as Mininet uses) and :data:`HTB_CATCH_UP_S` of traffic."""
    return max(15_000, math.ceil(bw / 8 * HTB_CATCH_UP_S))


def htb_quantum(bw: float) -> int:
    """HTB's default quantum (rate/10 bytes) draws a warning above 200000 and is pointless
    below a frame; one class needs no fairness, so anything in range does."""
    return min(200_000, max(1514, round(bw / 8 / 10)))


def shaping(interface: str, bw: float | None, queue: int | None,
            leaf: str | None = None) -> list[str]:
    """Rate limit with HTB (handle 1:, class 1:1) and the queue under it.

    ``leaf`` is a qdisc spec to hang under the class (netem); otherwise a pfifo of ``queue``
    packets when one is asked for. Without a rate, the leaf (or the pfifo) is the root."""
    commands = []
    if bw:
        bucket = htb_burst_bytes(bw)
        commands += [f"tc qdisc add dev {interface} root handle 1: htb default 1",
                     f"tc class add dev {interface} parent 1: classid 1:1 htb rate {bw:.0f}bit "
                     f"ceil {bw:.0f}bit burst {bucket}b cburst {bucket}b quantum {htb_quantum(bw)}"]
        parent = "parent 1:1 handle 10:"
    else:
        parent = "root handle 10:"
    if leaf:
        commands.append(f"tc qdisc add dev {interface} {parent} {leaf}")
    elif queue:
        commands.append(f"tc qdisc add dev {interface} {parent} pfifo limit {queue}")
    return commands


def random_loss(interface: str, loss: float) -> list[str]:
    return [f"tc qdisc add dev {interface} clsact",
            f"tc filter add dev {interface} egress bpf da bytecode '{loss_bytecode(loss)}'"]


def netem_spec(impairment: Impairment) -> str | None:
    """The netem qdisc for ``impairment`` (everything but the rate, which HTB does), or None
    when netem has nothing to do."""
    delay, jitter = impairment.delay or 0.0, impairment.jitter or 0.0
    parts = []
    if delay or jitter:
        parts.append(f"delay {delay * 1e6:.0f}us")
        if jitter:
            parts.append(f"{jitter * 1e6:.0f}us distribution "
                         f"{impairment.distribution or 'normal'}")
    if impairment.loss:
        parts.append(f"loss random {impairment.loss * 100:.6g}%")
    elif impairment.burst:
        burst = impairment.burst
        parts.append(f"loss gemodel {burst.p * 100:.6g}% {burst.r * 100:.6g}% "
                     f"{burst.bad_loss * 100:.6g}% {burst.good_loss * 100:.6g}%")
    if not parts:
        return None
    if jitter and impairment.reorder is False:
        # With a rate, netem times each packet from the one queued before it, so none
        # overtakes another; 100 Gbit/s adds no measurable serialisation delay.
        parts.append(f"rate {impairment.bw or 100e9:.0f}bit")
    parts.append(f"limit {netem_limit(impairment)}")
    return "netem " + " ".join(parts)


# What an unlimited link is taken to carry at most (bit/s). A veth has no line rate: a sender
# that fell behind its schedule catches up in a burst at memory speed. At 1 Gbit/s a 50 ms
# wire held 5,128 frames, and one such burst of both ways at 50k frames/s overflowed it.
UNLIMITED_RATE = 10e9


def netem_limit(impairment: Impairment) -> int:
    """netem's limit counts packets being delayed, not only queued ones: room for the link's
    queue plus everything in flight during delay + 4 jitter at the link rate
    (:data:`UNLIMITED_RATE` when unlimited) in full-size frames, so a long delay never turns
    into loss."""
    in_flight = (impairment.bw or UNLIMITED_RATE) / 8 / 1514 * ((impairment.delay or 0)
                                                                + 4 * (impairment.jitter or 0))
    return (impairment.queue or 1000) + math.ceil(in_flight)
