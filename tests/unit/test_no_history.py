"""Code, docs and the README say what is, not when or why it changed: no line of them holds a
date, a month and year, or an issue reference. History belongs to git and changelogs.

Left out: changelogs, the benchmarks' result records (benchmarks/results/), data tables (CSV)
and the experiment reports under reports/, which are generated from the experiment kinds'
text (checked here). A timestamp inside data (``2026-12-01T10:00:00Z``) is a value, not a
date of the project; the JSON Schema dialect is named by its URL.
"""

from __future__ import annotations

import re
import subprocess


from tests.conftest import ROOT

CHECKED_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".toml", ".json", ".sh", ".c", ".lua",
                    ".in", "Dockerfile")
CHECKED_NAMES = ("Makefile", "Vagrantfile", "run")
LEFT_OUT = ("benchmarks/results/", "reports/")
MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
          "December")
HISTORY = re.compile(
    r"\b20\d\d-[01]\d(?!-\d\dT\d)"  # a date, not a timestamp's
    rf"|\b(?:{MONTHS})\s+20\d\d\b"
    r"|\bissues?\s+#?\d+"
    r"|(?<![\w&/#])#\d+\b",  # a hashed number, not an entity, URL fragment or colour
    re.IGNORECASE)
ALLOWED = ("json-schema.org/draft/2020-12/schema",)


def checked_files() -> list[str]:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    return [path for path in tracked
            if (path.endswith(CHECKED_SUFFIXES) or path.rsplit("/", 1)[-1] in CHECKED_NAMES)
            and not path.startswith(LEFT_OUT)
            and "changelog" not in path.lower()]


def test_no_dates_or_issue_references_in_code_docs_or_readme():
    found = []
    for path in checked_files():
        text = (ROOT / path).read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for allowed in ALLOWED:
                line = line.replace(allowed, "")
            if HISTORY.search(line):
                found.append(f"{path}:{number}: {line.strip()}")
    assert found == []
