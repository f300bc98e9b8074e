"""The documentation site: `mkdocs build --strict` passes (a broken link, a missing page or a
page left out of the navigation fails it), and the reference pages come from the code."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / "docs" / "hooks"


@pytest.fixture(scope="module")
def reference():
    """The documentation hook, imported as MkDocs imports it (its folder on the path)."""
    sys.path.insert(0, str(HOOKS))
    try:
        spec = importlib.util.spec_from_file_location("reference", HOOKS / "reference.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(HOOKS))


def test_the_site_builds_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    for page in ("reference/agents", "reference/policies", "reference/scenario",
                 "reference/cli", "reference/wire", "benchmarks"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_an_agent_parameter_description_shows_on_its_page(reference, monkeypatch):
    name, (_, params) = next(iter(reference.sources.agents().items()))
    field_name, info = next(iter(params.model_fields.items()))
    monkeypatch.setattr(info, "description", "a description only this test writes")
    page = reference.agents_page()
    assert f"| `{field_name}` |" in page
    assert "a description only this test writes" in page


def test_a_policy_parameter_description_shows_on_its_page(reference, monkeypatch):
    params = next(model for _, model in reference.sources.scheduling_policies().values()
                  if model.model_fields)
    info = next(iter(params.model_fields.values()))
    monkeypatch.setattr(info, "description", "a policy description only this test writes")
    assert "a policy description only this test writes" in reference.policies_page()


def test_every_command_and_wire_message_has_its_section(reference):
    cli = reference.cli_page()
    for command in ("run", "validate", "experiment", "export", "pcap summarize"):
        assert f"## `edgebed {command}`" in cli
    wire = reference.wire_page()
    for message in reference.sources.wire_formats():
        assert f"| {message.type} | `{message.name}` |" in wire


def test_the_benchmarks_page_shows_the_latest_result_and_lists_the_earlier(reference, tmp_path):
    folder = tmp_path / "scale"
    folder.mkdir()
    (folder / "20000101T000000Z.json").write_text(
        '{"date": "first", "tables": [{"title": "t", "rows": [{"n": "1"}]}]}')
    (folder / "20000102T000000Z.json").write_text(
        '{"date": "second", "machine": {"cores": 2}, "load_average": [0.5], '
        '"tables": [{"title": "t", "rows": [{"n": "2"}]}]}')
    page = reference.benchmarks_page(tmp_path)
    assert "Latest: second; 2 cores, load average at start 0.5." in page
    assert "| 2 |" in page and "| 1 |" not in page
    assert "20000101T000000Z.json" in page


def test_a_benchmark_recording_is_what_the_benchmarks_page_reads(reference, tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from recorder import Recording
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    from rich.table import Table

    table = Table(title="[bold]decisions[/bold]")
    table.add_column("policy")
    table.add_column("per second")
    table.add_row("lua", "[green]1,234[/green]")
    recording = Recording("benchmarks/live_edge.py", "What it measures.\n\nMore detail.")
    recording.table(table)
    saved = recording.save(tmp_path)
    assert saved.parent == tmp_path / "live_edge"
    page = reference.benchmarks_page(tmp_path)
    assert "What it measures." in page and "More detail" not in page
    assert "**decisions**" in page and "| lua | 1,234 |" in page
    assert f"{os.cpu_count()} cores" in page and "load average at start" in page


def test_the_readme_stays_short_and_its_relative_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert text.count("\n") <= 300
    targets = re.findall(r'\]\(([^)#\s]+)[^)]*\)|src="([^"]+)"', text)
    missing = [t for pair in targets for t in pair
               if t and "://" not in t and not (ROOT / t).exists()]
    assert not missing, missing
