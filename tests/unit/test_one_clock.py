"""Every module reads time and sleeps through the run's clock (edgebed/clock.py): no direct
calls to the system's clocks or sleeps anywhere else, so a dilated run dilates all of it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("edgebed", "topologies", "controller", "agents", "experiments")
THE_CLOCK = "edgebed/clock.py"

FORBIDDEN = {
    "time.time", "time.time_ns", "time.sleep", "time.monotonic", "time.monotonic_ns",
    "time.perf_counter", "time.perf_counter_ns", "datetime.datetime.now",
    "datetime.datetime.utcnow", "asyncio.sleep",
}


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The full dotted name an expression like ``t.sleep`` stands for, through the module's
    imports; None when it is not a plain name or attribute chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def direct_time_uses(source: str) -> list[tuple[int, str]]:
    """(line, name) of every reference to a system clock or sleep in ``source``."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                top = name.name.split(".")[0]
                aliases[name.asname or top] = name.name if name.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for name in node.names:
                full = f"{node.module}.{name.name}"
                aliases[name.asname or name.name] = full
                if full in FORBIDDEN:
                    found.append((node.lineno, full))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)):
            name = _dotted(node, aliases)
            if name in FORBIDDEN:
                found.append((node.lineno, name))
    return sorted(set(found))


def _scanned() -> list[Path]:
    files = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative == THE_CLOCK:
                continue
            files.append(path)
    return files


def test_no_module_reads_time_or_sleeps_but_through_the_clock():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {name}"
                 for path in _scanned()
                 for line, name in direct_time_uses(path.read_text())]
    assert not offenders, ("use edgebed.clock instead of the system's clocks and sleeps:\n"
                           + "\n".join(offenders))



def test_the_scan_finds_every_spelling():
    source = "\n".join([
        "import time",
        "import time as t",
        "from time import sleep",
        "from time import monotonic_ns as now",
        "import datetime",
        "from datetime import datetime as moment",
        "import asyncio",
        "time.time()",
        "t.perf_counter_ns()",
        "sleep(1)",
        "now()",
        "datetime.datetime.now()",
        "moment.utcnow()",
        "asyncio.sleep(1)",
        "f = time.monotonic",
        "time.strftime('%H')",
        "time.process_time()",
    ])
    assert direct_time_uses(source) == [
        (3, "time.sleep"), (4, "time.monotonic_ns"),
        (8, "time.time"), (9, "time.perf_counter_ns"), (10, "time.sleep"),
        (11, "time.monotonic_ns"), (12, "datetime.datetime.now"),
        (13, "datetime.datetime.utcnow"), (14, "asyncio.sleep"), (15, "time.monotonic"),
    ]
