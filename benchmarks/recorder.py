"""The benchmarks' result files: each run of a benchmark writes
``benchmarks/results/<benchmark>/<UTC time>.json`` with the date, the machine (cores, memory,
kernel, CPU model), the load average when it started and the tables it printed. The
documentation's benchmarks page is rendered from these files."""

from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

from rich.table import Table
from rich.text import Text

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _memory_gib() -> float:
    return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)


def machine() -> dict:
    return {"cores": os.cpu_count(), "memory_gib": _memory_gib(), "kernel": platform.release(),
            "cpu": _cpu_model()}


def _plain(cell) -> str:
    return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain


def table_rows(table: Table) -> list[dict[str, str]]:
    """A rich table's cells as rows keyed by column header."""
    headers = [_plain(column.header) for column in table.columns]
    cells = [[_plain(cell) for cell in column.cells] for column in table.columns]
    return [dict(zip(headers, row)) for row in zip(*cells)]


class Recording:
    """One run of a benchmark: started when it starts (the load average is read then), given
    each table the benchmark prints, saved when it ends."""

    def __init__(self, benchmark_file: str, docstring: str | None = None):
        self.benchmark = Path(benchmark_file).stem
        self.description = " ".join((docstring or "").strip().split("\n\n")[0].split())
        self.started = datetime.now(timezone.utc)
        self.load_average = [round(value, 2) for value in os.getloadavg()]
        self.tables: list[dict] = []

    def table(self, table: Table) -> Table:
        """Record ``table`` (and hand it back, for printing)."""
        self.tables.append({"title": _plain(table.title or ""), "rows": table_rows(table)})
        return table

    def save(self, results: Path = RESULTS) -> Path:
        folder = results / self.benchmark
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.started.strftime('%Y%m%dT%H%M%SZ')}.json"
        path.write_text(json.dumps({
            "benchmark": self.benchmark, "description": self.description,
            "date": self.started.strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "load_average": self.load_average, "tables": self.tables}, indent=2) + "\n")
        return path
