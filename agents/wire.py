"""The wire formats' common ground: the bytes every message starts with, how a message is
declared, and the table of every message the agents' packages declare.

Every message starts with the same four bytes: magic ``b"EB"``, version (1) and a message
type; numbers are big-endian (network order). Timestamps are nanoseconds since the epoch on
CLOCK_REALTIME, which all hosts of a run share, so one-way delay is receive time minus the
timestamp. A tail whose size a fixed field gives (a text length, a length, a count) ends there;
bytes after it are padding and ignored.

The messages are declared where they are used: the shared agents' in :mod:`agents.formats`, a
scheme's in ``agents/<slug>/formats.py``, each module listing its own in ``MESSAGES``.
:func:`formats` finds them all. A type code never changes once published, and a retired one is
never reused, so a capture always dissects as what it was: each package's ``wire_codes.json``,
beside its formats module, records its own, and a unit test holds every declared message to
them.

The agents' hot paths pack and unpack these headers with :mod:`struct` (Scapy is far too slow
per packet); :mod:`agents.protocols` builds Scapy layers from the same table for building
templates, dissecting captures and fuzzing, and :mod:`agents.dissector` the Wireshark dissector.
"""

from __future__ import annotations

import functools
import json
import struct
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from edgebed import discovery

MAGIC = b"EB"
VERSION = 1
COMMON = struct.Struct("!2sBB")
CODES = "wire_codes.json"  # beside each formats module: the codes its package published


@dataclass(frozen=True)
class MessageFormat:
    """One message: its type code, the fixed fields after the common bytes (name, struct
    code), for messages with a variable tail what the tail is, which fields are timestamps and
    which have named values (shown by name in Scapy and Wireshark)."""

    name: str
    type: int
    fields: tuple[tuple[str, str], ...]
    tail: str = ""  # "", "payload", "text", "u16 list"
    tail_name: str = ""  # what the tail is called (Scapy field, dissector)
    tail_size: str = ""  # the fixed field giving the tail's length or count; "": to the end
    timestamps: frozenset[str] = frozenset()
    named_values: Mapping[str, Mapping[int, str]] = field(default_factory=dict)

    @functools.cached_property
    def struct(self) -> struct.Struct:
        return struct.Struct("!2sBB" + "".join(code for _, code in self.fields))

    @property
    def header_size(self) -> int:
        return self.struct.size

    def field_offset(self, name: str) -> int:
        """Byte offset of a fixed field, for patching it in place in a preallocated buffer."""
        codes = "!2sBB"
        for field_name, code in self.fields:
            if field_name == name:
                return struct.calcsize(codes)
            codes += code
        raise KeyError(name)

    def pack(self, **values) -> bytes:
        return self.struct.pack(MAGIC, VERSION, self.type,
                                *(values[name] for name, _ in self.fields))

    def unpack(self, data) -> dict:
        magic, version, kind, *values = self.struct.unpack_from(data)
        if magic != MAGIC or version != VERSION or kind != self.type:
            raise ValueError(f"not a {self.name} message")
        return dict(zip((name for name, _ in self.fields), values))


def formats() -> dict[int, MessageFormat]:
    """Every message the agents' packages declare, by type code; ValueError naming both
    modules when two messages share a code or a name."""
    import agents

    by_code: dict[int, MessageFormat] = {}
    by_name: dict[str, MessageFormat] = {}
    where: dict[str, str] = {}
    for module in discovery.submodules(sys.modules[agents.__name__], "formats"):
        for message in getattr(module, "MESSAGES", ()):
            for known, what in ((by_code.get(message.type), f"type code {message.type}"),
                                (by_name.get(message.name), f"the name {message.name!r}")):
                if known is not None and known is not message:
                    raise ValueError(f"{where[known.name]} and {module.__name__} both declare "
                                     f"a message with {what}")
            by_code[message.type] = by_name[message.name] = message
            where.setdefault(message.name, module.__name__)
    return dict(sorted(by_code.items()))


def published_codes() -> tuple[dict[str, int], dict[int, str]]:
    """The codes the packages recorded beside their formats modules: published message name
    -> type code, and retired code -> what it was; ValueError when two records claim one."""
    import agents

    published: dict[str, int] = {}
    retired: dict[int, str] = {}
    for module in discovery.submodules(sys.modules[agents.__name__], "formats"):
        record = Path(module.__file__).with_name(CODES)
        if not record.is_file():
            continue
        recorded = json.loads(record.read_text())
        claimed = {int(code) for code in recorded["retired"]} | set(recorded["published"].values())
        if clash := (claimed & (set(published.values()) | set(retired))
                     | recorded["published"].keys() & published.keys()):
            raise ValueError(f"{record} records {sorted(map(str, clash))} another package's "
                             f"{CODES} records too")
        published |= recorded["published"]
        retired |= {int(code): what for code, what in recorded["retired"].items()}
    return published, retired


def message_type(data, expected: Iterable[MessageFormat]) -> MessageFormat | None:
    """The message among ``expected`` that ``data``'s common bytes name, or None for anything
    else."""
    if len(data) < COMMON.size:
        return None
    magic, version, kind = COMMON.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        return None
    return next((message for message in expected if message.type == kind), None)


def pack_u16_list(values) -> bytes:
    return struct.pack(f"!{len(values)}H", *values)


def unpack_u16_list(data, offset: int, count: int) -> list[int]:
    """``count`` u16 values from ``offset``; ValueError when the datagram is too short."""
    if len(data) < offset + 2 * count:
        raise ValueError(f"list of {count} entries runs past the end of the message")
    return list(struct.unpack_from(f"!{count}H", data, offset))
