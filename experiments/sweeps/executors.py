"""Where an experiment's cells run: in this process, on a pool of worker processes on this
machine, or on a Dask cluster. One interface, :class:`Executor`: it takes the cells and gives
back each cell with its rows as it finishes; the runner (:mod:`.runner`), in this process
only, writes them into ``results.csv``."""

from __future__ import annotations

import gc
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence

from .kinds import Cell, CellRunner, Kind

Rows = Sequence[Mapping[str, object]]

MACHINE = "machine"
"""The Dask worker resource an emulated cell holds: one unit per machine."""
CONNECT_TIMEOUT_S = 10.0
# A task per batch of model-level cells: enough batches per worker to even out cells of
# unequal cost (the exact optimum takes 100x a heuristic), few enough cells in one that a
# batch in flight is all a lost worker or a Ctrl-C costs.
BATCHES_PER_WORKER = 8
MAX_CELLS_PER_BATCH = 25


class ClusterUnavailable(Exception):
    """The cluster cannot be reached, or cannot run this experiment's cells."""


def cores() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0))


def run_batch(run: CellRunner, cells: Sequence[Cell]) -> list[Rows]:
    """What a worker does with a task: each cell's rows, in order."""
    return [run(cell) for cell in cells]


def batches(cells: Sequence[Cell], workers: int, emulated: bool) -> list[list[Cell]]:
    """``cells`` dealt into the tasks of ``workers`` workers: one cell each if emulated
    (minutes each, one per machine at a time), else :data:`BATCHES_PER_WORKER` per worker of
    at most :data:`MAX_CELLS_PER_BATCH` cells. Dealt, not cut: an experiment's costly cells
    come together (one sweep's exact optimum), and dealing spreads them over the batches."""
    size = 1 if emulated else max(1, min(MAX_CELLS_PER_BATCH,
                                         len(cells) // (BATCHES_PER_WORKER * workers)))
    count = math.ceil(len(cells) / size)
    return [list(cells[first::count]) for first in range(count)]


class Executor(ABC):
    """Runs cells and gives back each one with its rows as it finishes, in any order; a cell
    that fails raises here. Used as a context manager: leaving it stops what it started."""

    #: how many cells it runs at once
    workers: int = 1

    def check(self, kind: Kind) -> None:
        """Raises :class:`ClusterUnavailable` if it cannot run ``kind``'s cells."""

    @abstractmethod
    def results(self, run: CellRunner, cells: Sequence[Cell], emulated: bool
                ) -> Iterator[tuple[Cell, Rows]]:
        """Each of ``cells`` with what ``run`` returned for it (at least once each)."""

    def describe(self) -> str:
        return "in this process"

    def close(self) -> None:
        """Stops what it started."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()


class Serial(Executor):
    """One cell after another in this process: ``--workers 1``, and emulated cells without a
    cluster."""

    def results(self, run: CellRunner, cells: Sequence[Cell], emulated: bool
                ) -> Iterator[tuple[Cell, Rows]]:
        for cell in cells:
            yield cell, run(cell)


class Dask(Executor):
    """Cells as tasks of a Dask distributed scheduler: a cluster's (:meth:`connect`) or a
    :class:`distributed.LocalCluster` of worker processes on this machine (:meth:`local`,
    started when there is a first cell to run)."""

    def __init__(self, address: str | None = None, local_workers: int = 0):
        self.address = address
        self.local_workers = local_workers
        self.workers = local_workers or 1
        self._client = None
        self._cluster = None

    @classmethod
    def connect(cls, address: str, timeout_s: float | None = None) -> Dask:
        """The scheduler at ``address`` (``tcp://host:8786``), once it has a worker; raises
        :class:`ClusterUnavailable` naming the address if it cannot be reached or has no
        worker within ``timeout_s`` (default :data:`CONNECT_TIMEOUT_S`)."""
        from distributed import Client

        timeout_s = timeout_s or CONNECT_TIMEOUT_S
        executor = cls(address)
        try:
            executor._client = Client(address, timeout=f"{timeout_s}s", set_as_default=False)
        except (OSError, ValueError) as error:
            reason = str(error)
            del error
            # The half-made Client closes itself when collected; now, while its event loop
            # runs, rather than at exit with a traceback.
            gc.collect()
            raise ClusterUnavailable(f"cannot reach the Dask scheduler at {address}: "
                                     f"{reason}") from None
        try:
            executor._client.wait_for_workers(1, timeout=timeout_s)
        except TimeoutError:
            executor.close()
            raise ClusterUnavailable(f"the Dask scheduler at {address} has no worker (waited "
                                     f"{timeout_s:g} s); start some with: dask worker "
                                     f"{address}") from None
        executor.workers = max(1, sum(executor._worker_info("nthreads", 1)))
        return executor

    @classmethod
    def local(cls, workers: int) -> Dask:
        """A pool of ``workers`` worker processes of one thread each on this machine."""
        return cls(local_workers=workers)

    def _worker_info(self, field: str, default: object) -> list:
        workers = self._client.scheduler_info()["workers"].values()
        return [worker.get(field, default) for worker in workers]

    def _start(self) -> None:
        if self._client is not None:
            return
        from distributed import Client, LocalCluster

        # No dashboard, and the scheduler's HTTP endpoints on a free port: the fixed 8787
        # would collide with other pools on the machine.
        self._cluster = LocalCluster(n_workers=self.local_workers, threads_per_worker=1,
                                     processes=True, dashboard_address=None,
                                     scheduler_kwargs={"dashboard_address": ":0"})
        self._client = Client(self._cluster, set_as_default=False)

    def describe(self) -> str:
        if self.address:
            return f"on the Dask cluster at {self.address} ({self.workers} worker threads)"
        return f"on a pool of {self.local_workers} worker processes"

    def check(self, kind: Kind) -> None:
        if kind.emulated and self.address and not any(
                MACHINE in resources for resources in self._worker_info("resources", {})):
            raise ClusterUnavailable(
                f"kind {kind.name} runs emulated cells, one per machine at a time, and no worker "
                f"of the Dask cluster at {self.address} declares the resource {MACHINE!r}; "
                f"start one worker per machine with: dask worker {self.address} --nworkers 1 "
                f"--resources {MACHINE}=1")

    def results(self, run: CellRunner, cells: Sequence[Cell], emulated: bool
                ) -> Iterator[tuple[Cell, Rows]]:
        if not cells:
            return
        from distributed import as_completed

        self._start()
        resources = {MACHINE: 1} if emulated else None
        tasks = {self._client.submit(run_batch, run, batch, pure=False, resources=resources):
                 batch for batch in batches(cells, self.workers, emulated)}
        try:
            for task, rows in as_completed(tasks, loop=self._client.loop, with_results=True):
                yield from zip(tasks[task], rows)
        finally:
            self._client.cancel(list(tasks))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        self._client = self._cluster = None


def executor_for(kind: Kind, cluster: str | None = None, workers: int | None = None
                 ) -> Executor:
    """The executor ``edgebed experiment`` uses: the cluster at ``cluster`` if given, else
    the serial lane for emulated cells or ``workers`` == 1, else a local pool of ``workers``
    (default: :func:`cores`) processes."""
    if cluster:
        return Dask.connect(cluster)
    workers = workers or cores()
    if kind.emulated or workers == 1:
        return Serial()
    return Dask.local(workers)
