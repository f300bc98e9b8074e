"""Fidelity of link impairments, measured on a real Mininet path (experiments.fidelity):
host-switch and switch-switch links, UDP probe with kernel timestamps, iperf3 for TCP.

Each backend is tested where the kernel has it: the fallback everywhere, netem only where the
kernel has sch_netem (the netem tests skip here, saying so, and run in the VM lane).

Under qemu's TCG (the VM lane on a machine without working KVM) the guest's two CPUs are
emulated by two host threads that the host deschedules now and then, for milliseconds to
hundreds of milliseconds on a loaded host. Whatever the guest is doing then (netem's timer,
the softirq that forwards the packet) waits, so a delivered packet's delay is the configured one
plus that wait, and packets netem releases on different CPUs can overtake each other in the
CPUs' receive queues (measured: 10 to 237 of 3000 packets reordered with a constant 50 ms delay).
Where a bound cannot hold there, the test states a separate bound for ``EMULATED``, chosen from
the VM lane's measurements (scripts/vm.sh; docs/vm-lane.md).
"""

from __future__ import annotations

import json
import math
import time

import pytest

from agents.probe import loss_interval
from experiments.fidelity import CLEAR, HOST_SWITCH, SWITCH_SWITCH, FidelityPath
from topologies import switch_sockets
from topologies.capabilities import cpu_emulated, probe_qdiscs
from topologies.model import BurstLoss, Impairment

LINKS = [pytest.param(HOST_SWITCH, id="host-switch"), pytest.param(SWITCH_SWITCH, id="switch-switch")]
# Where an impairment goes on each kind of link, the tests of a link's whole behaviour check on
# both (delay, order, link state, rate); the statistical ones check a distribution, which the
# link's kind does not change, on one link each, the two kinds taking turns.
HOST_SWITCH_ONLY, SWITCH_SWITCH_ONLY = ([link] for link in LINKS)
ATTEMPTS = 3
EMULATED = cpu_emulated()
TCP_PAYLOAD_PER_FRAME = 1448 / 1514  # MSS with timestamps over Ethernet + IP + TCP headers
# The relays' drop counters by whose the drop is (topologies.impairments.wire): the
# configuration's, or the emulator's own because it did not keep up.
DROP_CAUSES = {"configured": ("dropped_loss", "dropped_down"),
               "emulator": ("dropped_receive_queue", "dropped_queue_full", "dropped_oversize")}
# A relay writes its status once a second; one that has not in this long has stopped.
STATUS_PATIENCE_S = 10.0


def cpu_ticks() -> dict[str, int]:
    """The machine's CPU time so far in clock ticks, ``all`` of it and the ``steal`` part: time
    a hypervisor ran other machines on this one's CPUs (the first line of /proc/stat)."""
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, irq, softirq, steal = map(
            int, stat.readline().split()[1:9])
    return {"all": user + nice + system + idle + iowait + irq + softirq + steal, "steal": steal}


@pytest.fixture
def record(record_property):
    """Keep a measurement in the JUnit XML (``measured`` properties, one per attempt), so the
    values behind every verdict can be read back, passed or not (the VM lane's pytest.xml)."""
    def keep(measured):
        record_property("measured", json.dumps(measured, sort_keys=True))
        return measured
    return keep


def measure(measurement, meets_bounds, record=lambda measured: measured):
    """The first of up to ATTEMPTS independent measurements that meets the bounds, else the
    last; each is recorded when ``record`` is given. Each bound is one the backend meets on a quiet machine; this one
    is shared with other virtual machines, whose bursts of load now and then stretch a tail (a
    delay's p99, a 99% interval's 1% miss). A backend that is wrong misses every attempt."""
    for _ in range(ATTEMPTS):
        result = record(measurement())
        if meets_bounds(result):
            break
    return result


def relay_readings(path) -> dict[int, dict]:
    """Each wire's forward statistics (the direction the probe crosses) from a status the relay
    wrote after this call began; none on the netem backend, which has no relays."""
    relays = path.links.relays
    written = {index: relay.status.stat().st_mtime_ns for index, relay in relays.items()}
    deadline = time.monotonic() + STATUS_PATIENCE_S
    readings: dict[int, dict] = {}
    while len(readings) < len(relays):
        for index, relay in relays.items():
            if index not in readings and relay.status.stat().st_mtime_ns != written[index]:
                readings[index] = json.loads(relay.status.read_text())["forward"]
        assert time.monotonic() < deadline, f"relays stopped writing their status: {relays}"
        time.sleep(0.02)
    return readings


def counted_udp(path, rate_pps: float, count: int) -> dict:
    """A probe run (:meth:`FidelityPath.udp`) between two readings of every wire's status,
    with ``counted_late_ms``: what the wires counted as their own lateness meanwhile (a
    packet's is the sum over the wires it crossed), as bounds over the packets received: the
    mean (all of it theirs), the standard deviation (Minkowski: a sum's is at most the sum of
    its terms'; a subset's at most the set's times sqrt(set / subset)) and the most any packet
    can have had (no square is above the sum of squares, no frame above the relay's maximum).
    ``counted_dropped``: the frames the wires dropped meanwhile, by cause (DROP_CAUSES), the
    userspace switch's socket drops with the emulator's.
    On the netem backend nothing is counted: all zero."""
    before = relay_readings(path)
    switch_before = switch_sockets.read()
    measured = path.udp(rate_pps=rate_pps, count=count)
    after = relay_readings(path)
    switch_after = switch_sockets.read()
    packets = max(1, measured["received"])
    mean_us = std_us = most_us = 0.0
    for index, last in after.items():
        first = before[index]
        frames = last["frames_out"] - first["frames_out"]
        if not frames:
            continue
        total = last["late_us"]["sum"] - first["late_us"]["sum"]
        squares = last["late_us"]["sum_squares"] - first["late_us"]["sum_squares"]
        mean_us += total / packets
        std_us += math.sqrt(max(0.0, squares - total * total / frames) / packets)
        most_us += min(math.sqrt(squares), last["late_us"]["max"])
    measured["counted_late_ms"] = {"mean": mean_us / 1e3, "std": std_us / 1e3,
                                   "max": most_us / 1e3}
    measured["counted_dropped"] = {
        cause: sum(after[index][field] - before[index][field]
                   for index in after for field in fields)
        for cause, fields in DROP_CAUSES.items()}
    # The userspace switch's own drops on the path's ports (topologies.switch_sockets) are the
    # emulator's too.
    measured["counted_dropped"]["emulator"] += sum(
        switch_after[port].drops - switch_before[port].drops
        for port in path.network.switch_ports() if port in switch_before and port in switch_after)
    return measured


def configured_losses(measured: dict) -> tuple[int, int]:
    """Of a :func:`counted_udp` run, the packets lost and sent, less the frames the relays
    counted as dropped by themselves (they did not keep up): those are the emulator's, not the
    configuration's, and the record keeps them. On the netem backend nothing is counted."""
    emulator = measured["counted_dropped"]["emulator"]
    return measured["lost"] - emulator, measured["sent"] - emulator


@pytest.fixture(scope="module", params=["fallback", "netem"])
def path(request, tmp_path_factory):
    if request.param == "netem" and not probe_qdiscs()["netem"]:
        pytest.skip("this kernel has no sch_netem; the netem backend is tested where it exists "
                    "(the Vagrant VM)")
    line = FidelityPath(request.param, tmp_path_factory.mktemp(f"wires-{request.param}"))
    try:
        line.start()
        yield line
    finally:
        line.stop()


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("delay_ms", [50, 150])
def test_delay_mean_and_tail(path, link, delay_ms, record):
    """The backend adds the configured delay to what the path takes without it, measured just
    before: on this machine the path crosses Open vSwitch's userspace datapath twice, whose own
    delay (0.1 ms when the machine is quiet, near 1 ms when other virtual machines load it) is
    not the impairment's to answer for. What the wires counted as their own lateness in either
    measurement is theirs to answer for, and they did (:func:`counted_udp`)."""

    def delays():
        path.only(link, CLEAR)
        bare = counted_udp(path, rate_pps=1000, count=1000)
        path.only(link, Impairment(delay=delay_ms / 1e3))
        return bare, counted_udp(path, rate_pps=1000, count=3000)

    def within(measured):
        bare, delayed = measured[0]["delay_ms"], measured[1]["delay_ms"]
        bare_late, late = measured[0]["counted_late_ms"], measured[1]["counted_late_ms"]
        if EMULATED:
            # Mean and tail measure the host's descheduling of the emulated CPUs, not netem
            # (under TCG, three attempts of one test: mean +1.0 to +14 ms, p99 +6 to +226 ms).
            # What netem itself does shows in the packets the guest forwarded at once: none
            # early, the fastest within 1 ms of the delay (measured +0.06 to +0.13 ms) and the
            # median within max(2 ms, 2%) of the bare path's plus the delay (best of three
            # attempts: +0.45 to +1.54 ms over the delay).
            return (delay_ms <= delayed["min"] <= delay_ms + 1
                    and delayed["p50"] <= bare["p50"] + delay_ms + max(2, 0.02 * delay_ms))
        # The mean: the bare path's, give or take what the path itself varies by between the
        # two measurements (max(0.5 ms, 1%)), plus what either measurement's wires counted.
        # The tail: no packet more than the delay, 3 ms of the path's own variation and the
        # most the wires can have held it late beyond the bare path's p99.
        tolerance = max(0.5, 0.01 * delay_ms)
        added = delayed["mean"] - bare["mean"] - delay_ms
        return (delayed["min"] >= delay_ms
                and -tolerance - bare_late["mean"] <= added <= tolerance + late["mean"]
                and delayed["p99"] <= bare["p99"] + delay_ms + 3 + late["max"])

    measured = measure(delays, within, record)
    # Nothing lost but what the emulator counted as its own (then the run's fidelity fails).
    for run in measured:
        assert run["lost"] <= run["counted_dropped"]["emulator"], run
    assert within(measured), measured


@pytest.mark.parametrize("link", LINKS)
def test_delay_set_back_to_zero(path, link, record):
    path.only(link, Impairment(delay=0.05))
    path.links.set(link, Impairment(delay=0), ("forward",))
    measured = record(counted_udp(path, rate_pps=1000, count=500))
    delay = measured["delay_ms"]
    assert measured["lost"] == 0, measured
    # A delay wrongly kept would hold every packet 50 ms: the median cannot come near half of
    # it, however late the machine made some packets. The mean is the path's own (under 2 ms
    # with nothing configured) plus what the wires counted as their lateness.
    assert delay["p50"] < 25, measured
    assert delay["mean"] < 2 + measured["counted_late_ms"]["mean"], measured


@pytest.mark.parametrize("link", SWITCH_SWITCH_ONLY)
def test_jitter_has_the_distributions_spread(path, link, record):
    """The configured mean and spread on top of what the path takes without them, measured just
    before (see test_delay_mean_and_tail): the path's own delay adds to the mean and its own
    variation to the variance."""
    jittered = Impairment(delay=0.05, jitter=0.01, distribution="normal", reorder=True)

    def delays():
        path.only(link, CLEAR)
        bare = counted_udp(path, rate_pps=1000, count=1000)
        path.only(link, jittered)
        return bare, counted_udp(path, rate_pps=1000, count=5000)

    def within(measured):
        # The sample std of 5000 normal values is within 1% of sigma (one standard error),
        # so 10% is a wide margin. Under TCG the guest adds its own wait to every delay (see
        # test_delay_mean_and_tail): measured mean 50.8 to 51.5 ms, so the mean gets 2 ms
        # there; the spread holds as is. The wires' counted lateness comes off each
        # measurement's figures as bounds (Minkowski for the spreads, see counted_udp), so the
        # jitter's own spread lies between what the smallest and the largest leave.
        bare, delay = measured[0]["delay_ms"], measured[1]["delay_ms"]
        bare_late, late = measured[0]["counted_late_ms"], measured[1]["counted_late_ms"]
        own_low = math.sqrt(max(0.0, max(0.0, delay["std"] - late["std"]) ** 2
                                - (bare["std"] + bare_late["std"]) ** 2))
        own_high = math.sqrt(max(0.0, (delay["std"] + late["std"]) ** 2
                                 - max(0.0, bare["std"] - bare_late["std"]) ** 2))
        mean_tolerance = 2.0 if EMULATED else 1.0
        added = delay["mean"] - bare["mean"] - 50.0
        return (own_low - 1.0 <= 10.0 <= own_high + 1.0
                and -mean_tolerance - bare_late["mean"] <= added
                <= mean_tolerance + late["mean"])

    measured = measure(delays, within, record)
    assert within(measured), measured
    assert measured[1]["reordered"] > 0  # reordering allowed, as with netem


@pytest.mark.parametrize("link", LINKS)
def test_jitter_without_reordering_keeps_order(path, link, record):
    path.only(link, Impairment(delay=0.05, jitter=0.01, reorder=False))

    def within(measured):
        # Under TCG packets overtake each other after netem, in the emulated CPUs' receive
        # queues (module docstring): measured 9 of 2000 with this impairment, 10 to 237 of 3000
        # with a constant delay. 5% stays far from what reordering netem gives (83% of 5000 in
        # test_jitter_has_the_distributions_spread).
        allowed = 0.05 * measured["sent"] if EMULATED else 0
        return measured["reordered"] <= allowed and measured["lost"] == 0

    measured = measure(lambda: path.udp(rate_pps=1000, count=2000), within, record)
    assert within(measured), (measured["reordered"], measured["lost"])


@pytest.mark.parametrize(("loss", "link"), [
    pytest.param(0.01, HOST_SWITCH, id="0.01-host-switch"),
    pytest.param(0.20, SWITCH_SWITCH, id="0.2-switch-switch")])
def test_random_loss_is_binomial(path, link, loss, record):
    """The configured loss inside the 99% interval of what the configuration dropped: the
    loss less what the relays counted as their own (:func:`configured_losses`)."""
    path.only(link, Impairment(loss=loss))

    def within(measured):
        low, high = loss_interval(*configured_losses(measured))
        return low <= loss <= high

    measured = measure(lambda: counted_udp(path, rate_pps=4000, count=10_000), within, record)
    assert within(measured), (configured_losses(measured), measured["counted_dropped"])


@pytest.mark.parametrize("link", HOST_SWITCH_ONLY)
def test_burst_loss_mean_and_burst_length(path, link, record):
    """Gilbert's two states lose p / (p + r) of the frames the configuration saw
    (:func:`configured_losses`)."""
    p, r, count = 0.02, 0.25, 20_000
    path.only(link, Impairment(burst=BurstLoss(p=p, r=r)))
    expected = p / (p + r)
    # Losses come in bursts of mean 1/r = 4, so the variance of the loss count is about
    # (1 + 2(1-p-r)/(p+r)) times the binomial one; allow 4 of those standard deviations.
    inflation = 1 + 2 * (1 - p - r) / (p + r)
    sigma = math.sqrt(expected * (1 - expected) * inflation / count)

    def configured_fraction(measured):
        lost, seen = configured_losses(measured)
        return lost / max(1, seen)

    def within(measured):
        return abs(configured_fraction(measured) - expected) <= 4 * sigma

    measured = measure(lambda: counted_udp(path, rate_pps=4000, count=count), within, record)
    assert within(measured), (configured_fraction(measured), expected,
                              measured["counted_dropped"])


@pytest.fixture(scope="module")
def frame_capacity(path) -> float:
    """The unshaped path's TCP goodput in Ethernet frame bits per second, measured once per
    backend. Crossing userspace bridges and a relay, the path carries what this machine's CPU
    does (about 300 Mbit/s on a quiet two-core machine), so a rate the test sets is at most half
    of it: a rate the path cannot carry tests the CPU, not the shaper."""
    path.only(HOST_SWITCH, CLEAR)
    return path.tcp_goodput() / TCP_PAYLOAD_PER_FRAME


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("mbps", [10, 50])
def test_rate_limits_tcp_goodput(path, frame_capacity, link, mbps, record):
    bw = min(mbps * 1e6, frame_capacity / 2)
    path.only(link, Impairment(bw=bw))

    # bw counts Ethernet frames (as netem and Mininet do): a full-size TCP segment carries
    # 1448 payload bytes in a 1514-byte frame, so the goodput a bw-limited link allows is
    # 95.6% of bw. Measured goodput must be within 5% of that.
    allowed = bw * TCP_PAYLOAD_PER_FRAME

    def goodput_and_stolen_share() -> dict:
        before = cpu_ticks()
        goodput = path.tcp_goodput()
        after = cpu_ticks()
        stolen = (after["steal"] - before["steal"]) / max(1, after["all"] - before["all"])
        return {"goodput": goodput, "stolen_share": stolen}

    # Time the hypervisor gave to other machines meanwhile (the kernel's steal time) is time
    # this machine, its shaper included, did not run; the lower bound allows for that share.
    def within(measured):
        low = 0.95 * allowed * (1 - measured["stolen_share"])
        return low <= measured["goodput"] <= 1.05 * allowed

    measured = measure(goodput_and_stolen_share, within, record)
    assert within(measured), (measured["goodput"] / 1e6, allowed / 1e6,
                              measured["stolen_share"], frame_capacity / 1e6)


@pytest.mark.parametrize("link", LINKS)
def test_link_down_drops_everything_and_comes_back(path, link, record):
    path.only(link, CLEAR)
    path.links.set_link_state(link, up=False)
    try:
        measured = record(path.udp(rate_pps=1000, count=300, all_sent=False))
        assert measured["received"] == 0
    finally:
        path.links.set_link_state(link, up=True)
    path.wait_passing()  # the switch uses the port again (a moment, longer on a busy machine)
    measured = record(path.udp(rate_pps=1000, count=300))
    assert measured["lost"] == 0
