"""One run at a time on a machine, unless runs say they may share it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Callable, Iterator

LOCK_PATH = Path(os.environ.get("EDGEBED_RUN_LOCK", "/run/edgebed/run.lock"))


class MachineBusy(RuntimeError):
    """Another run holds the machine and the caller would not wait."""


def _holder(path: Path) -> str:
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "another run"
    if not holder:
        return "runs started with --concurrent"
    return f"run {holder.get('scenario')} (pid {holder.get('pid')}, {holder.get('run_dir')})"


@contextlib.contextmanager
def machine_lock(scenario: str, run_dir: str, *, concurrent: bool = False, wait: bool = True,
                 on_wait: Callable[[str], None] = lambda message: None,
                 path: Path | None = None) -> Iterator[None]:
    """Hold the machine for one run (shared among ``concurrent`` runs) inside the block."""
    path = path or LOCK_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = fcntl.LOCK_SH if concurrent else fcntl.LOCK_EX
    with open(path, "a+") as stream:
        try:
            fcntl.flock(stream, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            message = f"the machine is busy with {_holder(path)}"
            if not wait:
                raise MachineBusy(f"{message}; wait for it, or run side by side on purpose "
                                  "with --concurrent (both runs)") from None
            on_wait(f"{message}; waiting for it to end (lock {path})")
            fcntl.flock(stream, mode)
        if not concurrent:
            stream.seek(0)
            stream.truncate()
            stream.write(json.dumps({"pid": os.getpid(), "scenario": scenario,
                                     "run_dir": run_dir}))
            stream.flush()
        try:
            yield
        finally:
            if not concurrent:
                stream.truncate(0)
            fcntl.flock(stream, fcntl.LOCK_UN)
