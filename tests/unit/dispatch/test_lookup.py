"""controller.policies.dispatch.lookup: one back-to-source lookup's state machine, hand-computed at K = 3 centers,
and under any order of replies and losses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.policies.dispatch.lookup import LookupMode, LookupState

CENTERS = ("cn", "us", "eu")


def test_a_fresh_hint_takes_a_query_and_its_reply():
    state = LookupState("us", CENTERS, LookupMode.HINT, hint="cn")
    assert state.start() == ["cn"]
    assert state.on_reply("cn", True, "10.0.0.1") == []
    assert (state.done, state.node, state.center, state.messages, state.fell_back) == \
        (True, "10.0.0.1", "cn", 2, False)


def test_a_broadcast_asks_the_other_k_minus_1_centers_and_counts_late_replies():
    state = LookupState("us", CENTERS, LookupMode.BROADCAST, hint="cn")
    assert state.start() == ["cn", "eu"]
    state.on_reply("cn", True, "a1")
    assert state.done and state.center == "cn" and state.messages == 3
    state.on_reply("eu", False, None)
    assert state.messages == 2 * (len(CENTERS) - 1)


def test_a_stale_hint_falls_back_to_broadcasting_to_the_rest():
    state = LookupState("us", CENTERS, LookupMode.HINT, hint="eu")
    assert state.start() == ["eu"]
    assert state.on_reply("eu", False, None) == ["cn"]
    state.on_reply("cn", True, "a1")
    assert (state.done, state.center, state.messages, state.fell_back) == (True, "cn", 4, True)
    itself = LookupState("us", CENTERS, LookupMode.HINT, hint="us")
    assert itself.start() == ["cn", "eu"] and itself.fell_back


def test_a_lost_reply_is_asked_again_after_the_timeout():
    state = LookupState("us", CENTERS, LookupMode.BROADCAST, timeout=0.3, retries=2)
    state.start()
    state.on_reply("eu", False, None)
    assert state.on_timeout() == ["cn"]
    state.on_reply("cn", True, "a1")
    assert (state.done, state.failed, state.retransmissions, state.messages) == \
        (True, False, 1, 5)
    assert state.on_timeout() == []


def test_all_lost_fails_after_the_retransmission_limit():
    state = LookupState("us", CENTERS, LookupMode.HINT, hint="cn", retries=2)
    state.start()
    assert state.on_timeout() == ["cn"] and state.on_timeout() == ["cn"]
    assert state.on_timeout() == []
    assert (state.done, state.failed, state.node, state.retransmissions, state.messages) == \
        (True, True, None, 2, 3)


def test_replies_from_centers_not_asked_or_twice_are_ignored():
    state = LookupState("us", CENTERS, LookupMode.HINT, hint="cn")
    state.start()
    assert state.on_reply("eu", True, "forged") == [] and not state.done
    assert state.on_reply("mars", True, "forged") == [] and state.messages == 1
    state.on_reply("cn", False, None)
    assert state.on_reply("cn", True, "late") == [] and state.node is None
    with pytest.raises(KeyError, match="unknown center 'mars'"):
        LookupState("us", CENTERS, LookupMode.HINT, hint="mars")


@given(owner=st.sampled_from(CENTERS[1:]), hint=st.sampled_from(CENTERS),
       mode=st.sampled_from(LookupMode), order=st.randoms(use_true_random=False),
       lost=st.sets(st.integers(0, 20)))
def test_the_stream_is_found_unless_the_retries_run_out(owner, hint, mode, order, lost):
    """Replies in any order, some lost (the n-th reply sent is lost if n is in ``lost``):
    the lookup finds the owner or fails, and messages are the queries and retransmissions
    sent plus the replies taken in."""
    state = LookupState("cn", CENTERS, mode, hint=hint, retries=3)
    pending = state.start()
    sent, taken, n = len(pending), 0, 0
    while not state.done:
        if not pending:
            again = state.on_timeout()
            sent += len(again)
            pending += again
            continue
        center = pending.pop(order.randrange(len(pending)))
        n += 1
        if n in lost:
            continue
        taken += 1
        more = state.on_reply(center, center == owner, "node" if center == owner else None)
        sent += len(more)
        pending += more
    assert state.failed or state.center == owner
    assert state.messages == sent + taken
    if not state.failed:
        assert state.fell_back == (mode is LookupMode.HINT and hint != owner)
