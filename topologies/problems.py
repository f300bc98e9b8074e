"""Problems found in a scenario, each pointing at file, line, column and field path."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable

from .loader import Position


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a scenario, written so its author can fix it without reading code."""

    position: Position
    path: tuple
    message: str
    hint: str = ""

    @property
    def field(self) -> str:
        return dotted(self.path) or "(document)"

    def __str__(self) -> str:
        text = f"{self.position}: {self.field}: {self.message}"
        return f"{text}\n    hint: {self.hint}" if self.hint else text


class ScenarioInvalid(Exception):
    """Raised with every problem of a scenario; nothing has been built when it is raised."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems, key=lambda p: (p.position.line, p.position.column))
        super().__init__("\n".join(str(p) for p in self.problems))


def dotted(path: Iterable) -> str:
    """``("links", 3, "endpoints", 0)`` -> ``links[3].endpoints[0]``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """A hint naming the closest candidate, or listing them when none is close."""
    candidates = sorted({str(c) for c in candidates})
    close = difflib.get_close_matches(str(word), candidates, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    if not candidates:
        return ""
    shown = ", ".join(candidates[:12]) + (", ..." if len(candidates) > 12 else "")
    return f"known: {shown}"
