"""Tidy tables written as CSV, a row at a time: the agents' and the controller's records."""

from __future__ import annotations

import csv
from pathlib import Path


class TableWriter:
    """Rows of one table from one agent, appended to its CSV as they come."""

    def __init__(self, path: Path, columns: tuple[str, ...], append: bool = False,
                 flush: bool = False):
        """``append``: go on with the rows already in ``path`` (a restarted controller's);
        ``flush``: hand each row to the file at once, for tables read while the run goes on."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.columns = columns
        fresh = not (append and path.exists())
        self._stream = open(path, "a" if append else "w", newline="")
        self._writer = csv.writer(self._stream)
        self._flush = flush
        if fresh:
            self._writer.writerow(columns)

    def row(self, *values) -> None:
        self._writer.writerow(["" if v is None else (f"{v:.6g}" if isinstance(v, float) else v)
                               for v in values])
        if self._flush:
            self._stream.flush()

    def close(self) -> None:
        self._stream.close()
