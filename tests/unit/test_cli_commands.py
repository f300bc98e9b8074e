"""The edgebed commands of ``edgebed run --cli``: what ``impair`` accepts and refuses, and that
a refused change leaves every direction of the link as it was. The live commands run through a
pty in tests/integration/test_cli_pty.py."""

import pytest

from experiments import scenarios
from experiments.mininet_cli import CommandError, parse_changes
from topologies.impairments.backends import FallbackBackend, ImpairmentError
from topologies.impairments.control import LinkControl
from topologies.model import Impairment

LINE = """
name: line
topology:
  nodes:
    a: {role: viewer}
    b: {role: edge}
    s1: {role: switch}
  links:
    - endpoints: ["a:eth1", "s1:eth1"]
    - {endpoints: ["b:eth1", "s1:eth2"], delay: 5ms}
"""


def test_changes_are_read_as_a_schedules_set():
    changes, directions = parse_changes(["delay=50ms", "loss=1%", "reorder=false", "queue=100",
                                         "burst.p=1%", "burst.r=30%", "direction=forward"])
    assert directions == ("forward",)
    assert changes.delay == pytest.approx(0.05) and changes.loss == pytest.approx(0.01)
    assert changes.reorder is False and changes.queue == 100
    assert (changes.burst.p, changes.burst.r) == (pytest.approx(0.01), pytest.approx(0.3))
    assert changes.model_fields_set == {"delay", "loss", "reorder", "queue", "burst"}
    assert parse_changes(["delay=0"])[1] == ("forward", "reverse")


@pytest.mark.parametrize("words, message", [
    ([], "nothing to change"),
    (["delay"], "is not key=value"),
    (["delay="], "is not key=value"),
    (["delay=fast"], "delay:"),
    (["loss=150%"], "loss: fraction must be at most"),
    (["dealy=5ms"], "did you mean 'delay'"),
    (["direction=up"], "direction 'up'"),
    (["burst=1", "burst.p=1%"], "burst is given both"),
    (["burst.p=1%"], "burst.r"),
])
def test_bad_changes_say_what_is_wrong(words, message):
    with pytest.raises(CommandError, match=message):
        parse_changes(words)


class Untouchable:
    """A network and backend that fail the test if anything is applied."""

    name = "fallback"

    def needs_wire(self, impairment):
        return FallbackBackend().needs_wire(impairment)

    def apply(self, placement, impairment):
        raise AssertionError("a refused change was applied")


def test_a_change_the_link_cannot_take_changes_nothing(tmp_path):
    loaded = scenarios.loads(LINE)
    links = LinkControl(loaded, network=None, backend=Untouchable(), log_dir=tmp_path)
    links.relays[1] = object()  # the delayed link was built with a wire
    before = dict(links.current)
    with pytest.raises(ImpairmentError, match="jitter 9ms is larger than delay"):
        links.set(1, Impairment(jitter=0.009), ("forward", "reverse"))
    with pytest.raises(ImpairmentError, match="built without one"):
        links.set(0, Impairment(delay=0.01))
    with pytest.raises(ImpairmentError, match="both loss and burst"):
        links.set(1, Impairment.model_validate({"loss": "1%", "burst": {"p": 0.1, "r": 0.5}}))
    assert links.current == before
