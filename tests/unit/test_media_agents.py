"""The media agents (streamer, camera, viewer, chat collector, edge forwarder): the frame-size
model, packetization, and the agents run as programs over loopback (no root needed).

Bounds are derived from the model or from what the agents report; none is a timing guess.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from pydantic import ValidationError

from agents import catalog, chat_collector, edge_forwarder, streamer, viewer
from agents.surveillance import camera
from agents.formats import DANMAKU, GIFT, MEDIA
from tests.conftest import ROOT

LOOPBACK = "127.0.0.1"
HANG_GUARD_S = 60  # only against a hung agent; nothing here is a timed assertion


def agent_argv(agent: str, node: str, out: Path, params: dict, seed: int = 1) -> list[str]:
    """The command line a run uses to start ``agent``."""
    return [sys.executable, "-m", catalog.module_name(agent), "--node", node, "--out", str(out),
            "--params", json.dumps(params), "--seed", str(seed)]


def start(agent: str, node: str, out: Path, params: dict, seed: int = 1) -> subprocess.Popen:
    return subprocess.Popen(agent_argv(agent, node, out, params, seed), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def listening_port(process: subprocess.Popen) -> int:
    """The port a receiving agent announced once its socket was bound."""
    line = process.stderr.readline()
    assert line.startswith("listening on "), line + process.stderr.read()
    return int(line.split()[-1])


def summary_of(process: subprocess.Popen, stop: bool = False) -> dict:
    """The JSON summary an agent printed when it ended (told to stop with SIGTERM if
    ``stop``)."""
    if stop:
        process.send_signal(signal.SIGTERM)
    output, errors = process.communicate(timeout=HANG_GUARD_S)
    assert process.returncode == 0, errors
    return json.loads(output.splitlines()[-1])


def table(out: Path, name: str, node: str, agent: str) -> list[dict]:
    with open(out / "records" / name / f"{node}-{agent}.csv", newline="") as stream:
        return list(csv.DictReader(stream))


def frame_packets(params: streamer.Params, seed: int) -> list[int]:
    """How many packets each frame of a streamer with ``params`` and ``seed`` takes: its frames
    replayed."""
    sizes = streamer.FrameSizes(params, random.Random(seed))
    return [len(streamer.fragment_sizes(sizes.frame(number)[1], int(params.payload)))
            for number in range(params.frame_count)]


def expected_packets(params: streamer.Params, seed: int) -> int:
    return sum(frame_packets(params, seed))


def stream_params(**values) -> streamer.Params:
    return streamer.Params.model_validate({"to": LOOPBACK} | values)


# The frame-size model.

def test_frame_sizes_average_to_the_bitrate_and_keep_the_i_to_p_ratio_and_noise():
    params = stream_params(bitrate="2.5Mbps", fps=30, gop=60, i_to_p=5, noise=0.3)
    gops = 2000
    sizes = streamer.FrameSizes(params, random.Random(7))
    frames = [sizes.frame(number) for number in range(gops * params.gop)]
    i_sizes = [size for kind, size in frames if kind == streamer.I_FRAME]
    p_sizes = [size for kind, size in frames if kind == streamer.P_FRAME]
    assert len(i_sizes) == gops and [kind for kind, _ in frames[:3]] == [1, 2, 2]

    i_mean, p_mean = params.mean_frame_sizes
    rate = sum(i_sizes + p_sizes) * 8 * params.fps / len(frames)
    # Frame sizes are independent with standard deviation noise * mean, so the total's relative
    # standard deviation is noise * sqrt(sum of mean^2) / sum of means; 1% is beyond 5 of them,
    # so the bound cannot fail by chance.
    total_sd = params.noise * math.sqrt(gops * (i_mean**2 + (params.gop - 1) * p_mean**2)) / (
        gops * (i_mean + (params.gop - 1) * p_mean))
    assert 5 * total_sd < 0.01
    assert rate == pytest.approx(params.bitrate, rel=0.01)

    # The ratio of two sample means: relative standard deviations noise/sqrt(n) add in squares.
    ratio_sd = params.noise * math.sqrt(1 / len(i_sizes) + 1 / len(p_sizes))
    ratio = (sum(i_sizes) / len(i_sizes)) / (sum(p_sizes) / len(p_sizes))
    assert ratio == pytest.approx(params.i_to_p, rel=5 * ratio_sd)

    # The sample variance's relative standard deviation is sqrt((2 + kurtosis) / n), the
    # lognormal's excess kurtosis being e^{4s} + 2e^{3s} + 3e^{2s} - 6 for s = sigma^2; the
    # standard deviation's is half that.
    s = math.log1p(params.noise**2)
    kurtosis = math.exp(4 * s) + 2 * math.exp(3 * s) + 3 * math.exp(2 * s) - 6
    relative_sd = (sum((size - p_mean) ** 2 for size in p_sizes) / len(p_sizes)) ** 0.5 / p_mean
    assert relative_sd == pytest.approx(params.noise,
                                        rel=5 * math.sqrt((2 + kurtosis) / len(p_sizes)) / 2)


def test_without_noise_every_frame_has_its_mean_size():
    params = stream_params(bitrate="2Mbps", fps=25, gop=50, i_to_p=4, noise=0)
    i_mean, p_mean = params.mean_frame_sizes
    sizes = streamer.FrameSizes(params, random.Random(1))
    assert [sizes.frame(n) for n in range(51)] == (
        [(streamer.I_FRAME, round(i_mean))] + [(streamer.P_FRAME, round(p_mean))] * 49
        + [(streamer.I_FRAME, round(i_mean))])
    assert i_mean + 49 * p_mean == pytest.approx(2e6 / 8 * 50 / 25)  # one GOP is 2 s


@pytest.mark.parametrize("frame_size", [streamer.MIN_FRAME_SIZE, 500, 1199, 1200, 1201, 2399,
                                        2401, 39_062, 250_001])
def test_fragments_fill_packets_evenly_within_the_payload(frame_size):
    fragments = streamer.fragment_sizes(frame_size, 1200)
    assert sum(fragments) == frame_size
    assert len(fragments) == math.ceil(frame_size / 1200)
    assert max(fragments) <= 1200 and max(fragments) - min(fragments) <= 1
    assert min(fragments) >= MEDIA.header_size


def test_params_check_payload_bitrate_and_round_trip_as_the_runner_passes_them():
    with pytest.raises(ValidationError, match="payload"):
        stream_params(payload=1500)
    with pytest.raises(ValidationError, match="payload"):
        stream_params(payload=40)
    with pytest.raises(ValidationError, match="too low"):
        stream_params(bitrate="10kbps", fps=60)
    with pytest.raises(ValidationError, match="danmaku_to"):
        viewer.Params(danmaku_rate=1)
    params = stream_params(bitrate="3Mbps", payload="1KB", duration="100ms", noise="5%")
    assert (params.bitrate, params.payload, params.duration, params.noise) == (3e6, 1000, 0.1,
                                                                               0.05)
    assert params.frame_count == 3
    for model, values in ((streamer.Params, params.model_dump(mode="json")),
                          (camera.Params, {"to": LOOPBACK}),
                          (edge_forwarder.Params, {"to": [LOOPBACK], "budget": "1Mbps"}),
                          (viewer.Params, {"danmaku_to": LOOPBACK, "gift_rate": 0.5}),
                          (chat_collector.Params, {})):
        validated = model.model_validate(values)
        assert model.model_validate(validated.model_dump(mode="json")) == validated


def test_camera_is_the_streamer_with_camera_defaults(tmp_path):
    params = camera.Params(to=LOOPBACK)
    assert (params.bitrate, params.fps, params.gop, params.noise) == (4e6, 25, 50, 0)
    assert camera.Params(to=LOOPBACK, bitrate="1Mbps").bitrate == 1e6
    with pytest.raises(ValidationError):
        camera.Params(to=LOOPBACK, noise="150%")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind((LOOPBACK, 0))
        sink.settimeout(5)
        sent = summary_of(start("camera", "cam", tmp_path, {"to": LOOPBACK, "duration": 0.2,
                                                            "port": sink.getsockname()[1]}))
        first = MEDIA.unpack(sink.recv(2048))
    assert (sent["agent"], sent["frames"], first["bitrate_kbps"]) == ("camera", 5, 4000)
    [row] = table(tmp_path, "sender_lateness", "cam", "camera")
    assert int(row["packets"]) == sent["packets"]


def test_the_catalog_finds_the_agents_and_their_node_references():
    for name in ("streamer", "camera", "viewer", "chat_collector", "edge_forwarder"):
        assert name in catalog.available()
    assert catalog.node_reference_fields(catalog.params_model("streamer")) == ["to"]
    assert catalog.node_reference_fields(catalog.params_model("edge_forwarder")) == ["to"]
    assert catalog.node_reference_fields(catalog.params_model("viewer")) == ["danmaku_to",
                                                                             "pull"]


# The agents over loopback.

def test_packets_carry_the_frames_in_numbered_fragments_within_the_payload(tmp_path,
                                                                          send_engine):
    params = {"bitrate": "2Mbps", "gop": 10, "payload": 500, "duration": 0.5, "noise": 0.2,
              "stream": 9, "rung": 3, "spread": False}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sink.bind((LOOPBACK, 0))
        sink.settimeout(5)
        started_ns = time.time_ns()
        sender = start("streamer", "s", tmp_path, {"to": LOOPBACK, "port": sink.getsockname()[1]}
                       | params, seed=3)
        sent = summary_of(sender)
        packets = [MEDIA.unpack(sink.recv(2048)) for _ in range(sent["packets"])]
        ended_ns = time.time_ns()
    expected = stream_params(**params)
    assert sent["packets"] == expected_packets(expected, seed=3)
    assert [p["sequence"] for p in packets] == list(range(len(packets)))
    # Stamped when sent, on the wire formats' clock (CLOCK_REALTIME).
    stamps = [p["send_ns"] for p in packets]
    assert stamps == sorted(stamps) and started_ns < stamps[0] and stamps[-1] < ended_ns
    assert {(p["stream"], p["rung"], p["bitrate_kbps"]) for p in packets} == {(9, 3, 2000)}
    frames: dict[int, list[dict]] = {}
    for packet in packets:
        frames.setdefault(packet["frame"], []).append(packet)
    assert sorted(frames) == list(range(expected.frame_count))
    for number, fragments in frames.items():
        assert [p["fragment"] for p in fragments] == list(range(len(fragments)))
        assert {p["fragments"] for p in fragments} == {len(fragments)}
        assert {p["frame_type"] for p in fragments} == {1 if number % 10 == 0 else 2}


def test_packet_sizes_on_the_wire_stay_within_the_payload(tmp_path, send_engine):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sink.bind((LOOPBACK, 0))
        sink.settimeout(5)
        sender = start("streamer", "s", tmp_path, {"to": LOOPBACK, "port": sink.getsockname()[1],
                                                   "bitrate": "4Mbps", "payload": 700,
                                                   "duration": 0.3})
        sent = summary_of(sender)
        sizes = [len(sink.recv(2048)) for _ in range(sent["packets"])]
    assert max(sizes) <= 700 and min(sizes) >= MEDIA.header_size
    assert sum(sizes) == sent["bytes"]


def test_frame_sizes_restart_the_gop_when_told():
    sizes = streamer.FrameSizes(stream_params(gop=5, noise=0), random.Random(1))
    kinds = [sizes.frame(number)[0] for number in range(7)]
    sizes.restart()
    kinds += [sizes.frame(number)[0] for number in range(7, 18)]
    # I frames at 0 and 5, then from the restart at 7 every five frames: 7, 12, 17.
    assert [number for number, kind in enumerate(kinds) if kind == streamer.I_FRAME] == [
        0, 5, 7, 12, 17]


def connected_to(port: int) -> bool:
    """Whether some UDP socket of this network namespace is connected to ``port`` on
    loopback (``/proc/net/udp``'s remote address)."""
    with open("/proc/net/udp") as table:
        next(table)
        return any(line.split()[2] == f"0100007F:{port:04X}" for line in table)


def test_a_push_nobody_listened_to_restarts_the_gop_so_the_receiver_starts_on_an_i_frame(
        tmp_path, send_engine):
    """A streamer pushing before its ingest listens (a busy machine starts the ingest's agent
    late) gets its packets refused; the first frame its receiver gets whole is an I frame,
    not the rest of a GOP that began in the void. Fails without the restart: the only
    scheduled I frame is frame 0, sent before anyone listened."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((LOOPBACK, 0))
        port = probe.getsockname()[1]  # free now, and nobody listens on it
    sender = start("streamer", "s", tmp_path, {"to": LOOPBACK, "port": port, "fps": 50,
                                               "gop": 1000, "bitrate": "1Mbps",
                                               "duration": 2.5})
    deadline = time.monotonic() + HANG_GUARD_S
    while not connected_to(port) and sender.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # a dozen frames into the void
    frames: dict[int, tuple[int, set[int], int]] = {}  # frame -> type, fragments seen, count
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind((LOOPBACK, port))
        sink.settimeout(1.0)
        try:
            while True:
                data = sink.recv(2048)
                _, _, frame, kind, _, fragment, count = streamer.PER_PACKET.unpack_from(
                    data, streamer.PER_PACKET_OFFSET)
                frames.setdefault(frame, (kind, set(), count))[1].add(fragment)
        except socket.timeout:
            pass
    sent = summary_of(sender)
    assert sent["send_errors"] >= 1 and sent["gop_restarts"] >= 1, sent
    whole = [frame for frame, (_, seen, count) in sorted(frames.items()) if len(seen) == count]
    assert whole and 0 not in frames, sorted(frames)[:5]
    assert frames[whole[0]][0] == streamer.I_FRAME, (whole[:3], sent)


def test_streamer_to_viewer_loses_nothing_and_keeps_the_bitrate(tmp_path, send_engine):
    # No noise: two seconds are one GOP, whose size is then exactly the bitrate's, not a
    # sample of it.
    params = {"bitrate": "2Mbps", "fps": 30, "gop": 60, "duration": 2, "noise": 0}
    packets_per_frame = frame_packets(stream_params(**params), seed=1)
    expect = sum(packets_per_frame)
    receiver = start("viewer", "v", tmp_path, {"port": 0, "expect": expect})
    port = listening_port(receiver)
    sent = summary_of(start("streamer", "s", tmp_path, {"to": LOOPBACK, "port": port} | params))
    received = summary_of(receiver)

    assert sent["packets"] == expect and sent["send_errors"] == 0
    # The GOP's bytes are the bitrate's, to the rounding of its 60 frames (half a byte each).
    bits = sent["bytes"] * 8
    assert abs(bits - 2e6 * 2) <= 60 * 0.5 * 8
    # The sender's span is the frames' own two seconds, or longer when its last packet left
    # late: it was due a packet's share of a frame interval (4.8 ms) before the end, and left
    # at most its counted lateness after that (the microseconds of the send call itself,
    # counted by nobody, fit in those 4.8 ms).
    late_s = sent["lateness"]["late_max_us"] / 1e6
    assert bits / (2 + late_s) <= sent["achieved_bps"] <= bits / 2
    [flow] = received["streams"]
    assert (flow["lost"], flow["duplicates"], flow["unique"]) == (0, 0, expect)
    assert flow["bytes"] == sent["bytes"]
    # The viewer's span runs from the first packet's arrival to the last's. On schedule that is
    # from the first packet's due time to the last's (a frame interval short of the two
    # seconds, less a packet's share of it); each packet arrives later than due by its counted
    # lateness plus its measured delay, which can shorten or lengthen the span by as much.
    # 1 ms more for the Python steps between the pacer's clock reading and the send stamp,
    # which nobody counts (microseconds unless the sender is descheduled in exactly those).
    scheduled_s = (len(packets_per_frame) - 1 / packets_per_frame[-1]) / 30
    allowed_s = late_s + flow["delay_max_ms"] / 1e3 + 0.001
    print(f"\nviewer span {flow['duration_s']:.6f} s, scheduled {scheduled_s:.6f} s, allowed "
          f"+-{allowed_s * 1e3:.3f} ms (sender late at most {late_s * 1e3:.3f} ms)")
    assert abs(flow["duration_s"] - scheduled_s) <= allowed_s
    assert flow["goodput_bps"] == pytest.approx(bits / flow["duration_s"])
    assert (flow["frames_complete"], flow["frames_incomplete"], flow["frames_missing"]) == (
        60, 0, 0)
    frames = table(tmp_path, "frames", "v", "viewer")
    assert len(frames) == 60 and all(row["complete"] == "True" for row in frames)
    # Each frame's arrival on the tables' clock (CLOCK_REALTIME): in order, within the test.
    arrived = [float(row["arrived_s"]) for row in frames]
    assert arrived == sorted(arrived) and all(time.time() - 60 < t <= time.time() for t in arrived)
    assert [row["frame_type"] for row in frames[:2]] == ["I", "P"]
    [lateness] = table(tmp_path, "sender_lateness", "s", "streamer")
    assert (lateness["flow"], int(lateness["packets"])) == ("stream-0", expect)


def garbage(count: int, rng: random.Random) -> list[bytes]:
    """Datagrams a media port may get that are not media packets: random bytes, media headers
    cut short, and whole headers with impossible fields."""
    header = MEDIA.pack(stream=1, sequence=5, send_ns=time.time_ns(), frame=0, frame_type=1,
                        rung=0, fragment=0, fragments=3, bitrate_kbps=1000)
    impossible = [MEDIA.pack(stream=1, sequence=5, send_ns=0, frame=0, frame_type=kind, rung=0,
                             fragment=fragment, fragments=fragments, bitrate_kbps=0)
                  for kind, fragment, fragments in ((0, 0, 1), (3, 0, 1), (1, 1, 1), (2, 0, 0))]
    wrong_version = header[:2] + b"\x02" + header[3:]
    wrong_type = header[:3] + bytes([DANMAKU.type]) + header[4:]
    made = []
    for index in range(count):
        kind = index % 4
        if kind == 0:
            made.append(rng.randbytes(rng.randrange(0, 1400)))
        elif kind == 1:
            made.append(header[:rng.randrange(0, MEDIA.header_size)])
        elif kind == 2:
            made.append(rng.choice(impossible + [wrong_version, wrong_type]) + b"x" * 100)
        else:
            made.append(rng.choice(impossible) + rng.randbytes(rng.randrange(0, 200)))
    return made


def test_viewer_counts_and_skips_garbage_and_still_measures(tmp_path):
    receiver = start("viewer", "v", tmp_path, {"port": 0, "expect": 1})
    port = listening_port(receiver)
    datagrams = garbage(10_000, random.Random(11))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for index, datagram in enumerate(datagrams):
            sock.sendto(datagram, (LOOPBACK, port))
            if index % 10 == 9:
                # Gently: without root the receive buffer is the machine's default (rmem_max)
                # and a burst of 10,000 would overflow it, which is loss, not robustness.
                time.sleep(0.001)
        sock.sendto(MEDIA.pack(stream=4, sequence=0, send_ns=time.time_ns(), frame=0,
                               frame_type=1, rung=0, fragment=0, fragments=1,
                               bitrate_kbps=1) + bytes(10), (LOOPBACK, port))
    received = summary_of(receiver)
    assert received["malformed"] == 10_000
    assert [(s["flow"], s["unique"], s["frames_complete"]) for s in received["streams"]] == [
        ("stream-4", 1, 1)]
    [row] = table(tmp_path, "malformed", "v", "viewer")
    assert (int(row["port"]), int(row["count"])) == (port, 10_000)


def test_edge_over_budget_forwards_at_its_budget_and_drops_the_rest(tmp_path):
    stream = {"bitrate": "2Mbps", "duration": 3, "noise": 0}
    budget, queue = 1e6, 20
    expect = expected_packets(stream_params(**stream), seed=1)
    receiver = start("viewer", "v", tmp_path, {"port": 0, "expect": expect})
    viewer_port = listening_port(receiver)
    edge = start("edge_forwarder", "e", tmp_path, {"port": 0, "to": [LOOPBACK],
                                                   "to_port": viewer_port, "budget": budget,
                                                   "queue": queue})
    sent = summary_of(start("streamer", "s", tmp_path,
                            {"to": LOOPBACK, "port": listening_port(edge)} | stream))
    # The last packets the edge admitted leave within queue * 10 ms (a 1116-byte packet takes
    # 8.9 ms at 1 Mbit/s); a second is plenty before stopping it.
    time.sleep(1)
    forwarded = summary_of(edge, stop=True)
    received = summary_of(receiver, stop=True)

    [through] = forwarded["forwarding"].values()
    [flow] = received["streams"]
    assert through["received"] == sent["packets"] == expect
    assert through["dropped"] > 0 and through["unsent"] == 0
    assert through["backlog_max"] == queue
    assert through["forwarded"] + through["dropped"] == through["received"]
    assert flow["unique"] == through["forwarded"] and flow["lost"] == through["dropped"]
    # Offered 2 Mbit/s always exceeds the budget (even P frames arrive at 1.9 Mbit/s), so the
    # edge is never idle from the first packet to the last: the bits it forwarded are the
    # budget times the span between the first and last departures, which the viewer sees
    # give or take how late departures left (loopback delivers within the send call).
    late_s = through["lateness"]["late_max_us"] / 1e6
    first_packet_bits = 1200 * 8  # at most the payload
    assert abs(flow["bytes"] * 8 - budget * flow["duration_s"]) <= (
        budget * 2 * late_s + first_packet_bits)
    [row] = table(tmp_path, "forwarding", "e", "edge_forwarder")
    assert (int(row["dropped"]), int(row["forwarded"])) == (through["dropped"],
                                                            through["forwarded"])


def test_edge_delays_by_its_processing_delay_and_rewrites_the_rung(tmp_path):
    stream = {"bitrate": "1Mbps", "duration": 1, "noise": 0, "rung": 0}
    receiver = start("viewer", "v", tmp_path, {"port": 0})
    edge = start("edge_forwarder", "e", tmp_path, {
        "port": 0, "to": [LOOPBACK], "to_port": listening_port(receiver),
        "processing_delay": "20ms", "rung": 2, "bitrate": "500kbps"})
    sent = summary_of(start("streamer", "s", tmp_path,
                            {"to": LOOPBACK, "port": listening_port(edge)} | stream))
    time.sleep(0.5)
    forwarded = summary_of(edge, stop=True)
    received = summary_of(receiver, stop=True)

    [flow] = received["streams"]
    assert flow["unique"] == sent["packets"] and flow["lost"] == 0
    # Every packet waits its 20 ms in the edge: none arrives sooner.
    assert flow["delay_p50_ms"] >= 20
    assert {row["rung"] for row in table(tmp_path, "frames", "v", "viewer")} == {"2"}
    # The edge measured its input like a viewer: the same packets, none lost.
    [edge_input] = forwarded["input"]["streams"]
    assert edge_input["unique"] == sent["packets"]


def test_viewer_chat_reaches_the_collector_per_user(tmp_path):
    collector = start("chat_collector", "c", tmp_path, {"port": 0})
    port = listening_port(collector)
    rates = {"danmaku": 40.0, "gift": 10.0}
    duration = 2.0
    chatting = start("viewer", "v", tmp_path, {
        "port": 0, "duration": duration, "danmaku_to": LOOPBACK, "danmaku_port": port,
        "danmaku_rate": rates["danmaku"], "gift_rate": rates["gift"], "gift_value": 2.5,
        "room": 7})
    sent = summary_of(chatting)["chat"]
    # Stopped at once: the collector reads what had reached its socket before it ends.
    collected = summary_of(collector, stop=True)

    user = zlib.crc32(b"v")
    flows = {row["flow"]: row for row in table(tmp_path, "flows", "c", "chat_collector")}
    for kind, rate in rates.items():
        count = sent[kind]["sent"]
        # A Poisson count of mean rate * duration is within 4 of its standard deviations.
        assert abs(count - rate * duration) <= 4 * math.sqrt(rate * duration)
        assert collected[kind] == {"users": 1, "messages": count, "lost": 0, "duplicates": 0}
        assert int(flows[f"{kind}-{user}"]["unique"]) == count
    assert collected["gift_value"] == pytest.approx(2.5 * sent["gift"]["sent"])
    assert collected["malformed"] == 0


def test_collector_counts_malformed_chat(tmp_path):
    collector = start("chat_collector", "c", tmp_path, {"port": 0})
    port = listening_port(collector)
    danmaku = DANMAKU.pack(user=1, room=1, sequence=0, send_ns=time.time_ns(), text_length=4)
    bad = [danmaku + b"abc", danmaku + b"abcde", danmaku + b"\xff\xfe\xfd\xfc", danmaku[:10],
           GIFT.pack(user=1, room=1, sequence=0, send_ns=0, gift=1, value_cents=1)[:-1],
           b"", os.urandom(50)]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for datagram in bad + [danmaku + "弹幕"[:1].encode() + b"x"]:
            sock.sendto(datagram, (LOOPBACK, port))
    collected = summary_of(collector, stop=True)
    assert collected["malformed"] == len(bad)
    assert collected["danmaku"]["messages"] == 1
