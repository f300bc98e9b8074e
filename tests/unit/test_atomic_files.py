"""The one atomic file writer (edgebed.files) and that the project's result writers use it."""

import os
import re
import stat
from pathlib import Path

import pytest

from edgebed.files import atomic_output, atomic_write

ROOT = Path(__file__).resolve().parents[2]


def test_writes_text_and_bytes_and_replaces(tmp_path):
    target = tmp_path / "deeper" / "summary.json"
    atomic_write(target, "{}\n")
    assert target.read_text() == "{}\n"
    atomic_write(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in target.parent.iterdir()) == ["summary.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "results.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as stream:
            stream.write("half of the new")
            # Until the block ends the target still has its old contents.
            assert target.read_text() == "old\n"
            raise RuntimeError("writer killed")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


def test_the_file_gets_the_usual_mode_not_mkstemps_private_one(tmp_path):
    target = tmp_path / "report.md"
    atomic_write(target, "# report\n")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_only_whole_file_modes():
    with pytest.raises(ValueError, match="whole files"):
        with atomic_output("/nonexistent/x", "a"):
            pass


# Writers of result files must go through edgebed.files: no other rename-into-place, and no
# plain write_text/savefig/to_csv(path) of a result file. The wire relay's once-a-second status
# (topologies/impairments/wire.py) is no result but a live reading, renamed into place without
# fsync: an fsync in the relay's real-time loop would hold every frame in flight behind the disk.
PATTERNS = re.compile(r"os\.replace\(|\.rename\(|\.replace\(path\)|mkstemp|"
                      r"\.write_text\(|\.savefig\((?!stream)|\.to_csv\((?!stream|header=False)")


def test_no_other_atomic_write_variants():
    offenders = []
    for layer in ("topologies", "controller", "agents", "experiments"):
        for path in sorted((ROOT / layer).rglob("*.py")):
            if path.name == "files.py" or path == ROOT / "topologies/impairments/wire.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if PATTERNS.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
