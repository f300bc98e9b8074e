"""CPU accounting per component from synthetic /proc trees."""

from pathlib import Path

import pytest

from experiments.cpu_accounting import (CLOCK_TICKS, CpuAccounting, datagrams, machine_times,
                                        read_process, thread_groups)


class FakeProc:
    """A /proc directory in a temporary folder: processes, their threads and the machine."""

    def __init__(self, root: Path):
        self.root = root
        self.machine(busy=0, idle=0)

    def machine(self, busy: int, idle: int) -> None:
        (self.root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0\ncpu0 0 0 0 0\n")

    @staticmethod
    def _stat(pid: int, comm: str, ppid: int, ticks: int) -> str:
        # utime and stime are the 14th and 15th fields; the rest need only be there.
        return f"{pid} ({comm}) S {ppid} 0 0 0 0 0 0 0 0 0 {ticks} {ticks} 0 0 20 0 1 0\n"

    def process(self, pid: int, ppid: int, cmdline: list[str], ticks: int,
                comm: str = "python", children: tuple[int, ...] = ()) -> None:
        directory = self.root / str(pid)
        (directory / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
        (directory / "stat").write_text(self._stat(pid, comm, ppid, ticks))
        (directory / "cmdline").write_bytes(b"\0".join(p.encode() for p in cmdline) + b"\0")
        self.thread(pid, pid, comm, ticks)
        (directory / "task" / str(pid) / "children").write_text(" ".join(map(str, children)))

    def thread(self, pid: int, tid: int, comm: str, ticks: int) -> None:
        task = self.root / str(pid) / "task" / str(tid)
        task.mkdir(parents=True, exist_ok=True)
        (task / "stat").write_text(self._stat(tid, comm, pid, ticks))
        (task / "comm").write_text(comm + "\n")

    def udp(self, pid: int, received: int, sent: int) -> None:
        (self.root / str(pid) / "net").mkdir(exist_ok=True)
        (self.root / str(pid) / "net" / "snmp").write_text(
            "Ip: Forwarding\nIp: 1\n"
            "Udp: InDatagrams NoPorts InErrors OutDatagrams\n"
            f"Udp: {received} 0 0 {sent}\n")

    def gone(self, pid: int) -> None:
        for path in sorted((self.root / str(pid)).rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        (self.root / str(pid)).rmdir()


@pytest.fixture
def proc(tmp_path):
    return FakeProc(tmp_path)


def by_program(process):
    return process.cmdline[0] if process.cmdline else "other"


def seconds(ticks: int) -> float:
    return 2 * ticks / CLOCK_TICKS  # the fake's utime and stime are equal


def test_a_process_is_read_from_its_stat_and_command_line(proc):
    proc.process(7, 1, ["python", "-m", "agents.viewer"], ticks=30, comm="odd ) name")
    process = read_process(7, proc.root)
    assert (process.pid, process.ppid) == (7, 1)
    assert process.cmdline == ("python", "-m", "agents.viewer")
    assert process.cpu_s == pytest.approx(seconds(30))
    assert read_process(8, proc.root) is None


def test_threads_are_grouped_by_their_name_without_its_number(proc):
    proc.process(5, 1, ["ovs-vswitchd"], ticks=10, comm="ovs-vswitchd")
    proc.thread(5, 51, "handler12", 3)
    proc.thread(5, 52, "handler13", 4)
    proc.thread(5, 53, "revalidator2", 1)
    assert thread_groups(5, proc.root) == pytest.approx(
        {"ovs-vswitchd": seconds(10), "handler": seconds(7), "revalidator": seconds(1)})


def test_the_machine_and_a_namespace_datagram_counters(proc):
    proc.machine(busy=40, idle=60)
    assert machine_times(proc.root) == (40, 100)
    proc.process(9, 1, ["agent"], ticks=0)
    assert datagrams(9, proc.root) is None
    proc.udp(9, received=3, sent=4)
    assert datagrams(9, proc.root) == 7


def test_the_tree_under_the_root_is_counted_per_component(proc):
    """The root and the pinned counted from the start; a child from its birth, still counted
    after it exits; a process outside the tree, not at all."""
    proc.process(100, 1, ["runner"], ticks=50, children=(101,))
    proc.process(101, 100, ["agent"], ticks=5)
    proc.process(200, 1, ["switch"], ticks=1000)
    proc.process(300, 1, ["agent"], ticks=70)  # someone else's
    accounting = CpuAccounting(100, by_program, pinned={200: "ovs"}, proc=proc.root)
    accounting.sample(first=True)
    proc.process(100, 1, ["runner"], ticks=60, children=(101, 102))
    proc.process(101, 100, ["agent"], ticks=15)
    proc.process(102, 100, ["agent"], ticks=20)
    proc.process(200, 1, ["switch"], ticks=1100)
    accounting.sample()
    proc.gone(102)
    proc.process(100, 1, ["runner"], ticks=60, children=(101,))
    accounting.sample()
    assert accounting.totals() == pytest.approx(
        {"runner": seconds(10), "agent": seconds(10 + 20), "ovs": seconds(100)})


def test_a_child_takes_its_component_once_it_runs_its_program(proc):
    proc.process(100, 1, ["runner"], ticks=0, children=(101,))
    proc.process(101, 100, ["runner"], ticks=1)  # forked, not yet exec'd
    accounting = CpuAccounting(100, by_program, proc=proc.root)
    accounting.sample(first=True)
    proc.process(101, 100, ["agent"], ticks=4)
    accounting.sample()
    assert accounting.totals() == pytest.approx({"runner": 0.0, "agent": seconds(4) - seconds(1)})


def test_an_exited_process_without_a_command_line_keeps_its_component(proc):
    proc.process(100, 1, ["runner"], ticks=0, children=(101,))
    proc.process(101, 100, ["agent"], ticks=1)
    accounting = CpuAccounting(100, by_program, proc=proc.root)
    accounting.sample()
    proc.process(101, 100, [], ticks=3)  # a zombie: its command line is empty
    accounting.sample()
    assert accounting.totals() == pytest.approx({"runner": 0.0, "agent": seconds(3)})


def test_start_up_is_the_cpu_until_the_first_datagram(proc):
    proc.process(100, 1, ["runner"], ticks=0, children=(101,))
    proc.process(101, 100, ["agent"], ticks=10)
    proc.udp(101, received=0, sent=0)
    accounting = CpuAccounting(100, by_program, startup=frozenset({"agent"}), proc=proc.root)
    accounting.sample()
    proc.process(101, 100, ["agent"], ticks=25)
    accounting.sample()
    proc.process(101, 100, ["agent"], ticks=40)
    proc.udp(101, received=0, sent=1)
    accounting.sample()
    proc.process(101, 100, ["agent"], ticks=90)
    accounting.sample()
    # Read at the first sample that sees the datagram.
    assert accounting.startups()["agent"] == pytest.approx([seconds(40)])


def test_start_and_stop_give_the_machine_busy_time_and_the_switch_threads(proc):
    proc.process(100, 1, ["runner"], ticks=0)
    proc.process(200, 1, ["switch"], ticks=0, comm="ovs-vswitchd")
    proc.thread(200, 201, "handler1", 5)
    accounting = CpuAccounting(100, by_program, pinned={200: "ovs"}, proc=proc.root,
                               period_s=0.01)
    accounting.start()
    proc.machine(busy=3 * CLOCK_TICKS, idle=CLOCK_TICKS)
    proc.thread(200, 201, "handler1", 5 + CLOCK_TICKS)
    accounting.stop()
    assert accounting.machine_busy_s() == pytest.approx(3.0)
    assert accounting.thread_totals(200) == pytest.approx({"ovs-vswitchd": 0.0, "handler": 2.0})
