"""Link impairments that are real on every kernel: netem where the kernel has it, a measured
fallback (tc rate, classic-BPF loss, a user-space relay for delay and jitter) where not.

The semantics, whichever backend: ``forward`` is what happens to frames going from a link's
first endpoint to its second, ``reverse`` the other way. Rate (``bw``) counts whole Ethernet
frames; ``queue`` is the packet limit of the rate limiter's queue; ``delay`` and ``jitter``
(the standard deviation, shaped by ``distribution``) are one-way; ``loss`` is independent per
frame; ``burst`` is Gilbert–Elliott loss. Everything acts on egress toward the receiver.
"""
