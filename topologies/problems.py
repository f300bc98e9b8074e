"""Problems found in a scenario, each pointing at file, line, column and field path.

:func:`validation_problems` is the one translation of pydantic's errors into problems, for
every file edgebed reads: scenarios (the document, agent params, policy params) and experiment
files (the document, a kind's parameters).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from . import model
from .loader import Position, ScenarioSyntaxError, SourceMap


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


def validation_problems(error: ValidationError, data: object, source_map: SourceMap, *,
                        at: tuple = (), origin: Callable[[tuple], tuple] | None = None,
                        fields: Callable[[tuple], Iterable[str] | Mapping[str, Any]] =
                        lambda path: (), subject: str = "") -> list[Problem]:
    """``error`` (from validating ``data``) as problems, one per field, each at the file, line
    and column where the field was written. A field's path into ``data`` is placed under
    ``at`` in the file (``origin(path)`` instead, when parts of ``data`` were written in
    different places). ``fields(path)`` gives the keys allowed at ``path`` of ``data`` (names,
    or pydantic's name -> ``FieldInfo``): an unknown key is hinted with the closest one, a
    wrong value with the field's description. ``subject`` (``"policy lua"``) says whose
    fields these are, in front of each message."""
    problems: dict[tuple, Problem] = {}
    for item in error.errors(include_url=False):
        path = data_path(item["loc"], data)
        where = origin(path) if origin is not None else at + path
        if where in problems:
            continue  # a union reports once per member; the first says enough
        problem = schema_problem(item, where, source_map)
        if path:
            allowed = fields(path[:-1])
            if item["type"] == "extra_forbidden":
                hint = did_you_mean(path[-1], allowed)
                if not hint and subject:
                    hint = f"{subject} takes no {'params' if len(path) == 1 else 'keys here'}"
            else:
                info = allowed.get(path[-1]) if isinstance(allowed, Mapping) else None
                described = getattr(info, "description", None)
                hint = problem.hint
                if not hint and described:
                    hint = (f"{subject} reads {dotted(path)} as {described}" if subject
                            else f"{path[-1]}: {described}")
            problem = dataclasses.replace(problem, hint=hint)
        if subject:
            problem = dataclasses.replace(problem, message=f"{subject}: {problem.message}")
        problems[where] = problem
    return list(problems.values())


def data_path(loc: tuple, data: object) -> tuple:
    """Pydantic's location with union and validator tags removed, keeping a missing last key."""
    path: list = []
    current = data
    for depth, part in enumerate(loc):
        if isinstance(current, dict) and part in current:
            current = current[part]
            path.append(part)
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            current = current[part]
            path.append(part)
        elif depth == len(loc) - 1 and isinstance(current, dict) and isinstance(part, str):
            path.append(part)
    return tuple(path)


def schema_problem(item: dict, path: tuple, source_map: SourceMap) -> Problem:
    """One pydantic error item at ``path`` of the file, in words its author can act on."""
    kind = item["type"]
    message = item["msg"].removeprefix("Value error, ")
    hint = ""
    if kind == "extra_forbidden":
        return Problem(source_map.position(path, key=True), path, f"unknown key {path[-1]!r}")
    if kind == "missing":
        message = f"missing required key {path[-1]!r}"
        return Problem(source_map.position(path[:-1]), path, message)
    if kind in ("enum", "literal_error"):
        expected = item.get("ctx", {}).get("expected", "")
        choices = re.findall(r"'([^']*)'", expected)
        message = f"{item['input']!r} is not one of {', '.join(choices)}"
        hint = did_you_mean(str(item["input"]), choices)
    elif kind == "string_pattern_mismatch" and item["ctx"]["pattern"] == model.SAFE_NAME:
        message = f"{item['input']!r} is not a safe name"
        hint = "use letters, digits, '-' and '_', start with a letter, at most 32 characters"
    elif kind in ("too_short", "too_long") and path and path[-1] == "endpoints":
        message = "a link has exactly two endpoints"
        hint = 'write endpoints: ["a:eth1", "s1:eth2"]'
    elif kind == "too_short" and path and path[-1] == "nodes":
        message = "a topology needs at least one node"
    return Problem(source_map.position(path), path, message, hint)


def syntax_checked(parse: Callable[[], tuple[object, SourceMap]]) -> tuple[object, SourceMap]:
    """What ``parse`` reads (a loader call), its syntax error raised as :class:`ScenarioInvalid`."""
    try:
        return parse()
    except ScenarioSyntaxError as error:
        raise ScenarioInvalid([Problem(error.position, error.path, error.message,
                                       error.hint)]) from None


def fields_at(path: tuple, root: type = model.ScenarioDocument) -> dict[str, Any]:
    """The fields (name -> pydantic ``FieldInfo``) of the model found at ``path`` in a ``root``
    document (a scenario, or a policy's params), for did-you-mean hints and descriptions."""
    annotation: Any = root
    for part in path:
        fields = _model_fields(_unwrap(annotation))
        if fields is not None:
            info = fields.get(part)
            if info is None:
                return {}
            annotation = info.annotation
        else:
            args = typing.get_args(_unwrap(annotation))
            annotation = args[-1] if args else Any
    return _model_fields(_unwrap(annotation)) or {}


def _model_fields(annotation: Any) -> dict[str, Any] | None:
    """The fields of a pydantic model or pydantic dataclass; None for anything else."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.model_fields
    return getattr(annotation, "__pydantic_fields__", None)


def _unwrap(annotation: Any) -> Any:
    """Strip Optional/Annotated down to the model or container inside."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin is typing.Union:
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = members[0] if len(members) == 1 else annotation
            if len(members) != 1:
                return annotation
        else:
            return annotation
