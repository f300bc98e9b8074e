"""scripts/build-compiled.sh: builds the compiled wire relay when a C compiler is there, and
otherwise says so and succeeds, leaving no binary behind (runs then use the Python relay), so a
machine without gcc still sets up."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-compiled.sh"


def build(binary: Path, compiler: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "relay", str(binary)], env={"PATH": "/usr/bin:/bin",
                                                                   "CC": compiler},
                          capture_output=True, text=True, timeout=120)


def test_without_a_compiler_setup_goes_on_with_the_python_relay(tmp_path):
    binary = tmp_path / "edgebed-wire-relay"
    binary.write_text("#!/bin/sh\n")  # one built from an older source
    binary.chmod(0o755)
    result = build(binary, "no-such-cc")
    assert result.returncode == 0
    assert "no C compiler (no-such-cc" in result.stderr
    assert "Python relay" in result.stderr
    assert not binary.exists()


def test_a_failing_compiler_leaves_no_binary(tmp_path):
    compiler = tmp_path / "broken-cc"
    compiler.write_text("#!/bin/sh\necho 'fatal error: stdio.h: No such file' >&2\nexit 1\n")
    compiler.chmod(0o755)
    binary = tmp_path / "edgebed-wire-relay"
    result = build(binary, str(compiler))
    assert result.returncode == 0
    assert "did not build" in result.stderr and "stdio.h" in result.stderr
    assert not binary.exists() and not Path(f"{binary}.tmp").exists()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc on this machine")
def test_gcc_builds_it_once_without_warnings(tmp_path):
    binary = tmp_path / "edgebed-wire-relay"
    first = build(binary, "gcc")
    assert first.returncode == 0 and "built the compiled wire relay" in first.stdout
    # -Wall -Wextra: a warning is printed, and would be a defect to fix.
    assert first.stderr == ""
    # Without its arguments the relay says how it is used.
    usage = subprocess.run([str(binary)], capture_output=True, text=True)
    assert usage.returncode == 2 and "--forward-in" in usage.stderr
    built_at = binary.stat().st_mtime_ns
    again = build(binary, "gcc")
    assert again.returncode == 0 and again.stdout == "" and again.stderr == ""
    assert binary.stat().st_mtime_ns == built_at
