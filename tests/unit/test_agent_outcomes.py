"""The run's account of agents whose measurements are missing: started too late to measure,
or killed before they wrote their tables."""

import signal

from experiments.run_accounts import agents_not_accounted


def outcome(command: str, stopped: str, exit_code: int, node: str = "h1") -> dict:
    return {"node": node, "command": command, "exit_code": exit_code, "stopped": stopped,
            "failed": False, "may_fail": False}


AGENT = "/venv/bin/python -m agents.streamer --node h1 --out /run"


def test_agents_that_stopped_cleanly_are_not_flagged():
    assert agents_not_accounted([outcome(AGENT, "terminated", 0),
                                 outcome(AGENT, "exited", 0)]) == []


def test_an_agent_killed_after_the_grace_period_is_flagged_with_its_node():
    flags = agents_not_accounted([outcome(AGENT, "killed", -signal.SIGKILL, node="s1")])
    assert flags == ["1 agents did not stop within the grace period and were killed: their "
                     "tables are missing: streamer on s1"]


def test_an_agent_ended_by_sigterm_s_default_action_was_still_starting():
    flags = agents_not_accounted([outcome(AGENT, "terminated", -signal.SIGTERM)])
    assert len(flags) == 1 and "still starting" in flags[0] and "streamer on h1" in flags[0]


def test_other_programs_are_not_agents():
    assert agents_not_accounted([outcome("tcpdump -i eth1 -w x.pcap", "killed", -9),
                                 outcome("iperf3 -s", "terminated", -signal.SIGTERM)]) == []


def test_a_long_list_is_cut_after_five():
    flags = agents_not_accounted([outcome(AGENT, "killed", -9, node=f"h{i}") for i in range(7)])
    assert flags[0].startswith("7 agents") and flags[0].endswith(" ...")
    assert "h5" not in flags[0]
