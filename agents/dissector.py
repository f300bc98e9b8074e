"""The Wireshark dissector, generated from the wire formats' declarative field lists."""

from __future__ import annotations

import argparse
from pathlib import Path

from edgebed.files import atomic_write

from agents import probe, wire

WIRESHARK = Path(__file__).resolve().parent / "wireshark"
TEMPLATE = WIRESHARK / "edgebed.lua.in"
OUTPUT = WIRESHARK / "edgebed.lua"

# struct codes -> the dissector's field kinds (agents/wireshark/edgebed.lua.in, KINDS)
KINDS = {"B": "u8", "H": "u16", "I": "u32", "Q": "u64"}
# MessageFormat.tail -> the dissector's tail kinds (TAILS)
TAILS = {"payload": "bytes", "text": "text", "u16 list": "u16_list"}
LINE = 96


def field_kind(name: str, code: str, timestamp: bool = False) -> str:
    if code not in KINDS:
        raise ValueError(f"field {name}: no dissector kind for struct code {code!r}")
    if timestamp:
        if code != "Q":
            raise ValueError(f"timestamp field {name} must be a u64, not {code!r}")
        return "time"
    return KINDS[code]


def lua_string(text: str) -> str:
    if not text.isascii() or any(c in text for c in '"\\\n'):
        raise ValueError(f"not a plain name: {text!r}")
    return f'"{text}"'


def lua_field(name: str, code: str, timestamps=frozenset(), named_values=None) -> str:
    spec = f"{lua_string(name)}, {lua_string(field_kind(name, code, name in timestamps))}"
    if name in (named_values or {}):
        spec += f", values = VALUE_NAMES.{name}"
    return "{" + spec + "}"


def wrapped(items: list[str], first: str, indent: str, last: str) -> list[str]:
    """``first`` then ``items`` separated by commas and ``last``, broken into lines of at most
    :data:`LINE` characters, continuation lines indented by ``indent``."""
    lines, line = [], first
    for index, item in enumerate(items):
        text = item + ("," if index < len(items) - 1 else last)
        if line != first and len(line) + 1 + len(text) > LINE:
            lines.append(line)
            line = indent + text
        else:
            line += ("" if line == first else " ") + text
    lines.append(line)
    return lines


def lua_message(lead: str, message: wire.MessageFormat) -> list[str]:
    """A message's entry, ``lead`` then ``{name = ..., fields = {...}, tail = {...}}``, as
    Lua lines."""
    name, tail, tail_name, tail_size = (message.name, message.tail, message.tail_name,
                                        message.tail_size)
    items = [lua_field(field, code, message.timestamps, message.named_values)
             for field, code in message.fields]
    indent = " " * (len(lead) - len(lead.lstrip()) + 4)
    lines = wrapped(items, f"{lead}{{name = {lua_string(name)}, fields = {{", indent + "    ",
                    "}" + ("," if tail else "}"))
    if tail:
        if tail not in TAILS:
            raise ValueError(f"message {name}: no dissector kind for tail {tail!r}")
        spec = f"{lua_string(tail_name)}, {lua_string(TAILS[tail])}"
        if tail_size:
            spec += f", size = {lua_string(tail_size)}"
        lines.append(f"{indent}tail = {{{spec}}}}}")
    return lines


def value_names(messages) -> dict[str, dict[int, str]]:
    """The names of field values, by field name, from every message; ValueError when two
    messages name the values of one field differently (the dissector keys them by field)."""
    found: dict[str, dict[int, str]] = {}
    for message in messages:
        for name, named in message.named_values.items():
            if found.setdefault(name, dict(named)) != dict(named):
                raise ValueError(f"field {name} has other value names in {message.name} than "
                                 "in another message")
    return found


def constants(formats: dict[int, wire.MessageFormat]) -> str:
    values = ", ".join(
        f"{name} = {{{', '.join(f'[{code}] = {lua_string(text)}' for code, text in named.items())}}}"
        for name, named in sorted(value_names(formats.values()).items()))
    return "\n".join([
        f"local MAGIC, PROBE_MAGIC, VERSION = {lua_string(wire.MAGIC.decode())}, "
        f"{lua_string(probe.MAGIC.decode())}, {wire.VERSION}",
        "-- Fields whose values have names (each message's named_values).",
        f"local VALUE_NAMES = {{{values}}}"])


def messages(formats: dict[int, wire.MessageFormat]) -> str:
    lines = ["-- The wire formats, as the agents declare them: type code -> name, fixed fields "
             "after the",
             "-- common four bytes (name, kind), and the tail (field name, kind, and the fixed "
             "field",
             "-- giving its size).",
             "local MESSAGES = {"]
    for code, message in sorted(formats.items()):
        entry = lua_message(f"    [{code}] = ", message)
        entry[-1] += ","
        lines += entry
    lines.append("}")
    lines.append('-- The probe\'s packets (magic "EBPR" instead of the common four bytes), zero '
                 "padding after.")
    lines += lua_message("local PROBE = ", wire.MessageFormat(
        "probe", 0, probe.FIELDS, "payload", "padding",
        timestamps=probe.TIMESTAMPS))
    return "\n".join(lines)


def lua(formats: dict[int, wire.MessageFormat] | None = None) -> str:
    """The dissector's Lua source, from the template and the Python formats (by default every
    message the agents declare)."""
    formats = wire.formats() if formats is None else formats
    text = TEMPLATE.read_text()
    generated = ("Generated by `python -m agents.dissector` from the agents' formats modules and "
                 "agents/probe.py:\n-- edit those (or edgebed.lua.in), not this file.")
    for placeholder, value in (("@GENERATED@", generated), ("@CONSTANTS@", constants(formats)),
                               ("@MESSAGES@", messages(formats))):
        if text.count(placeholder) != 1:
            raise ValueError(f"{TEMPLATE} must hold {placeholder} once")
        text = text.replace(placeholder, value)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.dissector",
                                     description="Write the Wireshark dissector from "
                                                 "the agents' wire formats.")
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT,
                        help=f"where to write it (default {OUTPUT})")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the file differs from what would be "
                             "written")
    arguments = parser.parse_args(argv)
    text = lua()
    if arguments.check:
        current = arguments.output.read_text() if arguments.output.exists() else ""
        if current != text:
            print(f"{arguments.output} is out of date: run python -m agents.dissector")
            return 1
        return 0
    atomic_write(arguments.output, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
