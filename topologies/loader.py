"""Reading a scenario file into plain data while remembering where every value was written."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_ALIASES = 100
MAX_NODES = 200_000

Path_ = tuple  # a path into the document: mapping keys and sequence indexes

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:=|:-)([^}]*))?\}")


@dataclass(frozen=True)
class Position:
    """A place in a source file, 1-based as editors count."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass
class SourceMap:
    """Where each path of the document was written; the nearest written ancestor answers
    for a path that has no position of its own (for example a missing key)."""

    file: str
    positions: dict[Path_, Position] = field(default_factory=dict)
    key_positions: dict[Path_, Position] = field(default_factory=dict)

    def position(self, path: Path_, *, key: bool = False) -> Position:
        path = tuple(path)
        while True:
            if key and path in self.key_positions:
                return self.key_positions[path]
            if path in self.positions:
                return self.positions[path]
            if not path:
                return Position(self.file, 1, 1)
            path = path[:-1]


class ScenarioSyntaxError(Exception):
    """The file is not a readable scenario document at all (YAML syntax, size, aliases, ...)."""

    def __init__(self, position: Position, message: str, hint: str = "", path: Path_ = ()):
        super().__init__(f"{position}: {message}")
        self.position = position
        self.message = message
        self.hint = hint
        self.path = path  # the field the problem is in, when it is known


def _position(file: str, node_or_mark) -> Position:
    mark = getattr(node_or_mark, "start_mark", node_or_mark)
    return Position(file, mark.line + 1, mark.column + 1)


class _ScenarioLoader(yaml.SafeLoader):
    """SafeLoader that expands variables, counts aliases and rejects duplicate keys."""

    def __init__(self, stream: str, file: str, environ: dict[str, str]):
        super().__init__(stream)
        self.file = file
        self.environ = environ
        self.aliases = 0
        self.paths: dict[int, Path_] = {}  # id(node) -> its path, filled by _index_positions
        self.unset: list[tuple[Node, ScenarioSyntaxError]] = []  # scalars naming unset variables

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                event = self.peek_event()
                raise ScenarioSyntaxError(
                    _position(self.file, event), f"more than {MAX_ALIASES} YAML aliases",
                    "a scenario does not need that many; anchors are for sharing a few blocks")
        return super().compose_node(parent, index)

    def compose_scalar_node(self, anchor):
        event = self.peek_event()
        unset = None
        if "${" in event.value:
            try:
                event.value = self._expand(event.value, event)
            except ScenarioSyntaxError as error:
                unset = error  # raised once the node's path is known
            else:
                if event.implicit[0]:
                    # Let the expanded text choose its own type (``${N:=3}`` -> int).
                    event.tag = None
        node = super().compose_scalar_node(anchor)
        if unset is not None:
            self.unset.append((node, unset))
        return node

    def _expand(self, text: str, event) -> str:
        def substitute(match: re.Match) -> str:
            name, operator, default = match.groups()
            value = self.environ.get(name)
            if value is None or (operator == ":-" and value == ""):
                if operator is None:
                    raise ScenarioSyntaxError(
                        _position(self.file, event), f"environment variable {name} is not set",
                        f"set it, or give a default: ${{{name}:=value}}")
                return default
            return value

        return _VARIABLE.sub(substitute, text)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (ArithmeticError, LookupError, ValueError, TypeError) as error:
            if isinstance(error, ScenarioSyntaxError):
                raise
            # PyYAML's own constructors give up with plain exceptions (a date such as
            # 1999-13-45 matches the timestamp pattern, then datetime refuses it).
            raise ScenarioSyntaxError(_position(self.file, node),
                                      f"cannot read {node.value!r}: {error}",
                                      "quote the value to keep it as text",
                                      self.paths.get(id(node), ())) from None

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            # Only keys written in this mapping count: a key written next to a merge
            # (``<<: *base``) overrides the merged one, as YAML intends.
            path = self.paths.get(id(node), ())
            seen: dict[object, Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    raise ScenarioSyntaxError(_position(self.file, key_node),
                                              "a mapping key must be a plain scalar", path=path)
                if key in seen:
                    first = _position(self.file, seen[key])
                    raise ScenarioSyntaxError(
                        _position(self.file, key_node), f"duplicate key {key!r}",
                        f"it is already defined at line {first.line}; "
                        "names must be unique, and YAML keeps only the last",
                        path + (key_node.value,))
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _index_positions(file: str, root: Node, source_map: SourceMap,
                     paths: dict[int, Path_]) -> None:
    """Fill ``source_map`` and ``paths`` (id(node) -> first path it appears at) from the node
    tree, refusing trees that expand too far."""
    visited = 0
    stack: list[tuple[Path_, Node]] = [((), root)]
    while stack:
        path, node = stack.pop()
        visited += 1
        if visited > MAX_NODES:
            raise ScenarioSyntaxError(
                _position(file, root), f"the document expands to more than {MAX_NODES} values",
                "aliases that nest aliases multiply; write the scenario out or use node ranges")
        source_map.positions[path] = _position(file, node)
        paths.setdefault(id(node), path)
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                if not isinstance(key_node, ScalarNode):
                    continue
                child = path + (key_node.value,)
                source_map.key_positions[child] = _position(file, key_node)
                paths.setdefault(id(key_node), child)
                stack.append((child, value_node))
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                stack.append((path + (index,), item))


def load_scenario_text(text: str, file: str = "<scenario>",
                       environ: dict[str, str] | None = None) -> tuple[object, SourceMap]:
    """Parse scenario YAML text into plain data and its :class:`SourceMap`."""
    environ = dict(os.environ) if environ is None else environ
    if len(text.encode("utf-8", "replace")) > MAX_FILE_BYTES:
        raise ScenarioSyntaxError(Position(file, 1, 1),
                                  f"file is larger than {MAX_FILE_BYTES // 1024} KiB",
                                  "use node ranges such as viewer[1-100] instead of listing")
    source_map = SourceMap(file)
    loader = None
    try:
        # The reader checks every character as the loader is made (control characters raise
        # here), so making it is part of parsing.
        loader = _ScenarioLoader(text, file, environ)
        root = loader.get_single_node()
        if root is None:
            raise ScenarioSyntaxError(Position(file, 1, 1), "the file is empty",
                                      "a scenario needs at least name and topology")
        _index_positions(file, root, source_map, loader.paths)
        if loader.unset:
            node, error = loader.unset[0]
            raise ScenarioSyntaxError(error.position, error.message, error.hint,
                                      loader.paths.get(id(node), ()))
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        position = _position(file, mark) if mark else Position(file, 1, 1)
        hint = error.context or ""
        if error.context and error.context_mark and error.context_mark is not mark:
            # The cause is often where that construct began (an unclosed '[' or quote).
            hint += (f" started at line {error.context_mark.line + 1}, "
                     f"column {error.context_mark.column + 1}")
        raise ScenarioSyntaxError(position, f"YAML syntax: {error.problem or error.context}",
                                  hint) from None
    except yaml.reader.ReaderError as error:
        line, column = _line_column(text, error.position)
        raise ScenarioSyntaxError(Position(file, line, column),
                                  f"control character U+{_code_point(error.character):04X} is not allowed "
                                  "in YAML",
                                  "only tab, newline and printable characters can be written in a "
                                  "scenario; remove it") from None
    except yaml.YAMLError as error:
        raise ScenarioSyntaxError(Position(file, 1, 1), f"YAML error: {error}") from None
    except RecursionError:
        raise ScenarioSyntaxError(Position(file, 1, 1), "the document nests too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, source_map


def _code_point(character: int | str) -> int:
    return character if isinstance(character, int) else ord(character)


def _line_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of character ``offset`` in ``text``."""
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def load_scenario_file(path: str | os.PathLike,
                       environ: dict[str, str] | None = None) -> tuple[object, SourceMap]:
    """Read and parse a scenario file; see :func:`load_scenario_text`."""
    path = Path(path)
    file = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ScenarioSyntaxError(Position(file, 1, 1),
                                      f"file is larger than {MAX_FILE_BYTES // 1024} KiB",
                                      "use node ranges such as viewer[1-100] instead of listing")
        raw = path.read_bytes()
    except OSError as error:
        raise ScenarioSyntaxError(Position(file, 1, 1), f"cannot read: {error.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScenarioSyntaxError(Position(file, 1, 1),
                                  f"not UTF-8 text (byte {error.start})") from None
    return load_scenario_text(text, file, environ)
