"""A host's CPU limit (``cpu:`` in the scenario, in cores) as a cgroup of its own, enforced by
the CFS bandwidth controller: ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` on cgroup v1,
``cpu.max`` on v2, whichever the machine has for the cpu controller.

Mininet's CPULimitedHost does this with cgroup-tools on v1 only and names each cgroup after
the host (``/viewer1``), so two runs with a host of the same name would share, and delete, one
cgroup; here the cgroup is named ``<prefix>-<host>`` (:meth:`RunNames.cgroup`), so it carries
the run's prefix like everything else a run makes, and ``edgebed clean`` finds it.
"""

from __future__ import annotations

from pathlib import Path

from mininet.node import Host

from edgebed import clock

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # the kernel's default period: a 0.25-core host runs 25 ms of every 100 ms
MIN_QUOTA_US, LONGEST_PERIOD_US = 1000, 1_000_000  # the kernel's bounds
REMOVE_TRIES = 20


def _set(control: Path, value: str) -> None:
    """Write a cgroup control file: one write, which the kernel takes or refuses whole."""
    with open(control, "w") as stream:
        stream.write(value)


def unified() -> bool:
    """Whether the cpu controller is on cgroup v2 (mounted at the root, no v1 hierarchy)."""
    return (ROOT / "cgroup.controllers").exists() and not (ROOT / "cpu").is_dir()


def directories(name: str) -> list[Path]:
    """The cgroup directories of ``name``: v1's cpu and cpuacct hierarchies (one when they are
    mounted together), or v2's one."""
    if unified():
        return [ROOT / name]
    return list(dict.fromkeys((ROOT / controller).resolve() / name
                              for controller in ("cpu", "cpuacct")))


class CpuLimit:
    """One host's cgroup, limited to ``cores`` of CPU time."""

    def __init__(self, name: str, cores: float):
        self.name = name
        self.cores = cores

    def create(self) -> None:
        # The kernel's smallest quota is 1 ms: a smaller share gets a longer period instead.
        period = max(PERIOD_US, min(LONGEST_PERIOD_US, round(MIN_QUOTA_US / self.cores)))
        quota = max(MIN_QUOTA_US, round(self.cores * period))
        if unified():
            control = ROOT / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                _set(control, "+cpu")
        for directory in directories(self.name):
            directory.mkdir()  # the name carries a fresh prefix: one found is not ours
        directory = directories(self.name)[0]
        if unified():
            _set(directory / "cpu.max", f"{quota} {period}")
        else:
            _set(directory / "cpu.cfs_period_us", str(period))
            _set(directory / "cpu.cfs_quota_us", str(quota))

    def procs_files(self) -> list[Path]:
        return [directory / "cgroup.procs" for directory in directories(self.name)]

    def add(self, pid: int) -> None:
        for procs in self.procs_files():
            _set(procs, str(pid))

    def remove(self) -> None:
        """Remove the cgroup once its processes are gone; RuntimeError if it stays busy."""
        for directory in directories(self.name):
            for _ in range(REMOVE_TRIES):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy: a process still exiting
                    clock.sleep(0.1)
            else:
                raise RuntimeError(f"cgroup {directory} still has processes")


def top_level_names() -> list[str]:
    """The cgroups directly under the cpu and cpuacct controllers' roots, whoever made them
    (:func:`topologies.cleanup.find_leftovers` picks a run's by their prefix)."""
    parents = [ROOT] if unified() else [ROOT / "cpu", ROOT / "cpuacct"]
    return sorted({path.name for parent in parents if parent.is_dir()
                   for path in parent.iterdir() if path.is_dir()})


class CpuLimitedHost(Host):
    """A Mininet host whose shell and every process it starts run in its :class:`CpuLimit`.

    ``Host.popen`` starts a process as the runner's child through ``mnexec``, which enters the
    host's namespaces, so a shell in the runner's own mount namespace (the host's has a /sys
    of its own, without the cgroup mounts) moves itself into the cgroup first and then
    ``exec``s ``mnexec``: nothing the host runs escapes the limit, not even for a moment."""

    def __init__(self, name: str, limit: CpuLimit, **params):
        self.limit = limit
        limit.create()
        super().__init__(name, **params)
        limit.add(self.pid)

    def popen(self, *args, **kwargs):
        enter = " && ".join(f"echo $$ > {procs}" for procs in self.limit.procs_files())
        # Whatever mnexec the caller chose (Host.popen's default or its own), exec'd in place:
        # the program keeps the pid Popen gave the shell.
        mnexec = kwargs.pop("mncmd", ["mnexec", "-da", str(self.pid)])
        return super().popen(*args, mncmd=["sh", "-c", f'{enter} && exec "$@"', "sh", *mnexec],
                             **kwargs)
