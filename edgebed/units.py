"""Quantities written the way people write them: ``20ms``, ``1.5%``, ``50Mbps``, ``64KiB``."""

from __future__ import annotations

import re

_NUMBER_UNIT = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]*)\s*$")

DURATION_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6,
                  "ns": 1e-9, "min": 60.0, "m": 60.0, "h": 3600.0}
RATE_UNITS = {"": 1.0, "bps": 1.0, "kbps": 1e3, "Kbps": 1e3, "mbps": 1e6, "Mbps": 1e6,
              "gbps": 1e9, "Gbps": 1e9, "kbit": 1e3, "Kbit": 1e3, "mbit": 1e6, "Mbit": 1e6,
              "gbit": 1e9, "Gbit": 1e9, "bit": 1.0}
SIZE_UNITS = {"": 1.0, "B": 1.0, "KB": 1e3, "kB": 1e3, "MB": 1e6, "GB": 1e9,
              "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3}
FRACTION_UNITS = {"%": 0.01, "": 1.0}

MAX_DURATION_S = 365 * 24 * 3600.0  # a year
MAX_RATE_BPS = 1e12  # 1 Tbit/s
MAX_SIZE_BYTES = float(1 << 40)  # 1 TiB

EXAMPLES = {"duration": "20ms, 1.5s, 2min", "rate": "50Mbps, 500kbps, 1Gbps",
            "fraction": "1.5%, 0.2%, 0.015", "size": "1500B, 64KiB, 10MB"}


class UnitError(ValueError):
    """A quantity that could not be read; the message says how to write it."""


def _parse(text: object, units: dict[str, float], quantity: str) -> float:
    if isinstance(text, bool):
        raise UnitError(f"expected a {quantity} such as {EXAMPLES[quantity]}, got {text!r}")
    if isinstance(text, (int, float)):
        return float(text)
    if not isinstance(text, str):
        raise UnitError(f"expected a {quantity} such as {EXAMPLES[quantity]}, got {text!r}")
    match = _NUMBER_UNIT.match(text)
    if not match or match.group(2) not in units:
        unit = match.group(2) if match else None
        known = ", ".join(sorted(u for u in units if u))
        detail = f"unknown unit {unit!r} (known: {known})" if unit else "not a number with a unit"
        raise UnitError(f"bad {quantity} {text!r}: {detail}; write it like {EXAMPLES[quantity]}")
    return float(match.group(1)) * units[match.group(2)]


def parse_duration(text: object) -> float:
    """Seconds from ``20ms``, ``1.5s``, ``2min``; a bare number is seconds."""
    return _parse(text, DURATION_UNITS, "duration")


def parse_rate(text: object) -> float:
    """Bits per second from ``50Mbps``, ``500kbps``; a bare number is bit/s."""
    return _parse(text, RATE_UNITS, "rate")


def parse_fraction(text: object) -> float:
    """A fraction from ``1.5%`` (0.015) or a bare ``0.015``."""
    return _parse(text, FRACTION_UNITS, "fraction")


def parse_size(text: object) -> float:
    """Bytes from ``1500B``, ``64KiB``, ``10MB``; a bare number is bytes."""
    return _parse(text, SIZE_UNITS, "size")


def describe(quantity: str, value: float) -> str:
    """``value`` written in the quantity's usual unit (for bounds in messages)."""
    if quantity == "duration":
        return format_duration(value) if value < 86400 else f"{value / 86400:g} days"
    if quantity == "rate":
        return format_rate(value)
    if quantity == "fraction":
        return f"{value:g} ({value:.0%})"
    return f"{value:g} bytes" if value < 1 << 30 else f"{value / (1 << 40):g} TiB"


def format_duration(seconds: float) -> str:
    if seconds == 0:
        return "0s"
    if abs(seconds) < 1:
        return f"{seconds * 1e3:g}ms"
    return f"{seconds:g}s"


def format_rate(bits_per_second: float) -> str:
    for factor, name in ((1e9, "Gbps"), (1e6, "Mbps"), (1e3, "kbps")):
        if bits_per_second >= factor:
            return f"{bits_per_second / factor:g}{name}"
    return f"{bits_per_second:g}bps"


def format_fraction(fraction: float) -> str:
    """A fraction as the scenario writes it: 0.05 -> ``5%``."""
    return f"{fraction * 100:g}%"
