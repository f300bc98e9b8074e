"""``edgebed agents`` describes every workload a scenario can start, the ``command`` workload
(which has no agent module) as well as the agents."""

from topologies import commands as command_workload
from experiments.cli import main


def test_the_command_workload_is_described_with_its_keys_and_placeholders(capsys):
    assert main(["agents", command_workload.COMMAND]) == 0
    shown = capsys.readouterr().out
    for key in ("nodes", "command", "start", "may_fail"):
        assert key in shown
    for placeholder in command_workload.COMMAND_PLACEHOLDERS:
        assert "{" + placeholder + "}" in shown


def test_an_agent_is_described_with_its_parameters(capsys):
    assert main(["agents", "streamer"]) == 0
    assert "streamer:" in capsys.readouterr().out
