"""NACK-based loss recovery on a real Mininet path (experiments.fidelity's v1 - s1 - s2 - e1,
fallback backend): a streamer in v1 pushes a stream to a media node (the edge_server) in e1,
which serves it to a viewer in v1 that pulls it; the switches' link loses 3% of the packets each
way, so both media hops (streamer -> node, node -> viewer) lose. The same stream runs with NACKs
off and on, and what the agents measured must show the recovery: the viewer's frames whole far
more often, the NACKs sent at both hops, repairs counted, and the bytes resent recorded.

The bounds are counts far from what chance gives either arm: a frame of n packets crossing two
hops at 3% loss is whole with probability about 0.97^(2n), a quarter of the frames lost for this
stream's five-packet frames; with one NACK per missing packet a packet stays lost only when the
NACK or its repair is lost too (about 6% of 3%) or comes back after the node gave it up.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from experiments.fidelity import SWITCH_SWITCH
from tests.conftest import ROOT
from tests.unit.test_media_agents import agent_argv, listening_port, summary_of
from topologies.model import Impairment

V1, E1 = "10.9.0.1", "10.9.0.2"
SERVICE_PORT, SOURCE_PORT, VIEWER_PORT = 5004, 5008, 5006
LOSS = 0.03
# 20 s at 25 frames a second: 500 frames, about 2,700 packets a hop.
STREAM = {"bitrate": "1Mbps", "fps": 25, "gop": 50, "payload": 1000, "duration": 20}
# After the stream ends, the viewer listens this long for the last repairs (a NACK's wait and
# round trip are tens of milliseconds; only against a slow machine).
TAIL_S = 2.0


@pytest.fixture(scope="module")
def path(fallback_path):
    fallback_path.only(SWITCH_SWITCH, Impairment(loss=LOSS))
    fallback_path.links.set(SWITCH_SWITCH, Impairment(loss=LOSS))  # both ways
    return fallback_path


def popen(path, host: str, agent: str, out, params: dict) -> subprocess.Popen:
    return path.host(host).popen(agent_argv(agent, host, out, params), cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stream_through_the_node(path, out, nack: bool) -> tuple[dict, dict, dict]:
    """The stream from v1 through the media node in e1 back to the viewer in v1; the
    streamer's, the node's and the viewer's summaries."""
    node = popen(path, "e1", "edge_server", out,
                 {"port": SERVICE_PORT, "source_port": SOURCE_PORT, "transcoding_delay": 0,
                  "payload": 1000, "nack": nack})
    listening_port(node)
    listening_port(node)
    viewer = popen(path, "v1", "viewer", out,
                   {"port": VIEWER_PORT, "pull": E1, "pull_port": SERVICE_PORT,
                    "preferred_bitrate": "1Mbps", "nack": nack})
    listening_port(viewer)
    streamer = popen(path, "v1", "streamer", out,
                     {"to": E1, "port": SOURCE_PORT, "nack": nack} | STREAM)
    sent = summary_of(streamer)
    time.sleep(TAIL_S)
    return sent, summary_of(node, stop=True), summary_of(viewer, stop=True)


def frames_not_whole(viewer: dict) -> tuple[int, int]:
    """The viewer's frames not whole (incomplete or missing) and all its frames."""
    [flow] = viewer["streams"]
    lost = flow["frames_incomplete"] + flow["frames_missing"]
    return lost, lost + flow["frames_complete"]


def test_nacks_repair_the_losses_of_both_media_hops(path, tmp_path):
    plain = stream_through_the_node(path, tmp_path / "plain", nack=False)
    recovered = stream_through_the_node(path, tmp_path / "nack", nack=True)

    _, plain_node, plain_viewer = plain
    assert plain_node["nack"] is None and "nack" not in plain_viewer
    lost_plain, frames_plain = frames_not_whole(plain_viewer)
    lost_nack, frames_nack = frames_not_whole(recovered[2])
    # Without NACKs about a quarter of the frames are lost (at least 10% whatever chance
    # does); with them a few in a hundred: a tenth of the share would be 8 standard deviations
    # of the plain arm's count away.
    assert frames_plain >= 400 and frames_nack >= 400
    assert lost_plain / frames_plain >= 0.10, (lost_plain, frames_plain)
    assert lost_nack / frames_nack <= lost_plain / frames_plain / 3, (lost_nack, lost_plain)

    streamer, node, viewer = recovered
    # Each hop lost about 3% of its ~2,700 packets and asked for them once each. An ask comes
    # back repaired (in time or late: a machine that stalls the path delays some past the
    # playout deadline), or the hop asked no longer holds the packet (the node never got
    # what it could not repair itself, and sends that frame incomplete), or the NACK or the
    # repair was lost: about 6% of the asks at 3% loss each way.
    for asker, answered in ((node["nack"]["asked_upstream"], streamer["nack"]),
                            (viewer["nack"], node["nack"]["answered"])):
        assert asker["nacks_sent"] > 0 and asker["asked"] >= 20, asker
        assert asker["asked"] == (asker["repaired"] + asker["repaired_late"]
                                  + asker["unrepaired"] + asker["pending"])
        assert (asker["repaired"] + asker["repaired_late"] + answered["missed"]
                >= 0.8 * asker["asked"]), (asker, answered)
    # The senders answered what reached them and counted the bytes resent: the recovery's
    # bandwidth cost, a few percent of the stream's.
    for answered, asker, stream_bytes in (
            (streamer["nack"], node["nack"]["asked_upstream"], streamer["bytes"]),
            (node["nack"]["answered"], viewer["nack"], None)):
        # One ask per missing packet: what reached the sender is at most what was asked.
        assert 0 < answered["nacks_received"] <= asker["nacks_sent"]
        assert 0 < answered["resent"] <= answered["asked"] <= asker["asked"]
        # Every frame of this stream is two packets or more, each over half the payload.
        assert answered["resent_bytes"] >= answered["resent"] * 500
        if stream_bytes is not None:
            assert answered["resent_bytes"] <= 0.2 * stream_bytes
