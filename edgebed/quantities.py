"""Quantities written with a unit (``20ms``, ``50Mbps``, ``1.5MB``, ``5%``): pydantic field types
that parse the text, bound the value and show themselves in the JSON Schema as a string."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from edgebed import units


def _quantity(parse, kind: str, pattern: str, minimum: float, maximum: float | None = None,
              exclusive_minimum: bool = False):
    """A float field read from text with a unit, bounded, shown in the schema as a string."""

    def check(value: Any) -> float:
        number = parse(value)
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} is not a finite {kind}")
        if number < minimum or (exclusive_minimum and number == minimum):
            bound = "greater than" if exclusive_minimum else "at least"
            raise ValueError(f"{kind} must be {bound} {minimum:g}, got {value!r}")
        if maximum is not None and number > maximum:
            raise ValueError(f"{kind} must be at most {units.describe(kind, maximum)}, "
                             f"got {value!r}")
        return number

    return Annotated[float, BeforeValidator(check),
                     WithJsonSchema({"anyOf": [{"type": "string", "pattern": pattern},
                                               {"type": "number", "minimum": minimum}],
                                     "description": f"a {kind}, e.g. {units.EXAMPLES[kind]}"})]


_NUM = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*"
# Upper bounds: past them the agents' timers, counters and buffers cannot represent a value
# (time.sleep overflows, a pacing interval rounds to zero), so validation refuses what could
# only fail at run time.
Duration = _quantity(units.parse_duration, "duration", _NUM + r"(s|sec|ms|us|µs|ns|min|m|h)?\s*$",
                     0.0, maximum=units.MAX_DURATION_S)
PositiveDuration = _quantity(units.parse_duration, "duration",
                             _NUM + r"(s|sec|ms|us|µs|ns|min|m|h)?\s*$", 0.0,
                             maximum=units.MAX_DURATION_S, exclusive_minimum=True)
Rate = _quantity(units.parse_rate, "rate", _NUM + r"([kKmMgG]?(bps|bit))?\s*$", 0.0,
                 maximum=units.MAX_RATE_BPS)
Fraction = _quantity(units.parse_fraction, "fraction", _NUM + r"%?\s*$", 0.0, maximum=1.0)
Size = _quantity(units.parse_size, "size", _NUM + r"(B|KB|kB|MB|GB|KiB|MiB|GiB)?\s*$", 1.0,
                 maximum=units.MAX_SIZE_BYTES)
