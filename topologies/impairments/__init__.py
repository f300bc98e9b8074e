"""Link impairments that are real on every kernel: netem where the kernel has it, a measured
fallback (tc rate, classic-BPF loss, a user-space relay for delay and jitter) where not."""
