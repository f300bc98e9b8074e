"""A host's CPU limit as cgroup control files, on a fake cgroup tree of either version."""

from topologies import cpu_limits
from topologies.naming import RunNames, prefix_of


def test_the_cgroup_carries_the_runs_prefix():
    name = RunNames("eb12ab").cgroup("viewer7")
    assert name == "eb12ab-viewer7" and prefix_of(name) == "eb12ab"


def test_v1_sets_quota_and_period_in_the_cpu_hierarchy(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_limits, "ROOT", tmp_path)
    for controller in ("cpu", "cpuacct"):
        (tmp_path / controller).mkdir()
    limit = cpu_limits.CpuLimit("eb12ab-v1", 0.25)
    limit.create()
    assert (tmp_path / "cpu" / "eb12ab-v1" / "cpu.cfs_quota_us").read_text() == "25000"
    assert (tmp_path / "cpu" / "eb12ab-v1" / "cpu.cfs_period_us").read_text() == "100000"
    assert limit.procs_files() == [tmp_path / "cpu" / "eb12ab-v1" / "cgroup.procs",
                                   tmp_path / "cpuacct" / "eb12ab-v1" / "cgroup.procs"]
    assert cpu_limits.top_level_names() == ["eb12ab-v1"]


def test_v2_enables_the_cpu_controller_and_sets_cpu_max(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_limits, "ROOT", tmp_path)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    limit = cpu_limits.CpuLimit("eb12ab-e1", 1.5)
    limit.create()
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    assert (tmp_path / "eb12ab-e1" / "cpu.max").read_text() == "150000 100000"
    assert limit.procs_files() == [tmp_path / "eb12ab-e1" / "cgroup.procs"]


def test_a_tiny_limit_keeps_its_share_with_a_longer_period(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_limits, "ROOT", tmp_path)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpuacct").mkdir()
    cpu_limits.CpuLimit("eb12ab-v1", 0.004).create()
    group = tmp_path / "cpu" / "eb12ab-v1"
    assert (group / "cpu.cfs_quota_us").read_text() == "1000"  # the kernel's smallest
    assert (group / "cpu.cfs_period_us").read_text() == "250000"
