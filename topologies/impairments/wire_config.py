"""The wire relay's configuration and changes, checked with the scenario's own impairment
model and turned into the relay's units, and the delay variation tables netem uses."""

from __future__ import annotations

import functools
import statistics
from typing import Optional

from pydantic import Field, StrictInt, ValidationError

from topologies.model import BurstLoss, StrictModel, WireImpairment
from topologies.problems import dotted

PROTOCOL = """The user-space wire: forwards every Ethernet frame between two interfaces of a wire namespace,
with per-direction delay, jitter, loss, Gilbert-Elliott burst loss and link-down.

This kernel has no sch_netem, so a link that needs delay gets a small namespace spliced into it
(``a <-veth-> in [wire] out <-veth-> b``) and this relay runs inside it::

    python -m topologies.impairments.wire --forward-in wa --forward-out wb --config '<json>'

Frames arriving on ``--forward-in`` leave on ``--forward-out`` ("forward"), frames arriving on
``--forward-out`` leave on ``--forward-in`` ("reverse"). Frames are forwarded byte for byte and
never parsed. The configuration is ``{"forward": {...}, "reverse": {...}, "seed": 1}``
(:class:`WireConfig`); a direction (:class:`WireDirection`) takes the scenario's own impairment
fields, checked by the same pydantic model with the same units and bounds
(:class:`topologies.model.WireImpairment`):

* ``delay`` and ``jitter``: seconds, or a duration with its unit (``"20ms"``). Jitter is the
  standard deviation of the delay variation whatever the ``distribution`` (``normal``,
  ``uniform``, ``pareto``, ``paretonormal``); a frame's delay never goes below zero;
* ``reorder``: true lets every frame leave at its own time (jitter reorders, as with netem);
  false keeps the order, a frame is due at ``max(previous due, arrival + delay + variation)``;
* ``loss``: the fraction of frames dropped at random (``0.01`` or ``"1%"``);
* ``burst``: null or netem's gemodel ``{"p": P(good->bad), "r": P(bad->good), "bad_loss": 1.0,
  "good_loss": 0.0}``;
* ``down``: drop everything;
* ``limit``: the most frames the direction holds at once, as netem's ``limit``.

Missing keys are 0, false or null. Each line on stdin is a change of the same shape naming only
what changes (``{"forward": {"delay": 0.02}}``); it applies to frames arriving after it, and the
relay acknowledges it on stdout with ``{"applied": n}`` or ``{"rejected": n, "error": ...}``
(``n`` counts stdin lines; the error names the field, ``forward.delay: ...``; nothing of a
rejected change applies), so an empty change ``{}`` doubles as a readiness check. End of
stdin only ends the changes. SIGTERM or SIGINT stop the relay: it prints one JSON line,
``{"forward": {...}, "reverse": {...}}`` with frames in (read) and out, drops by cause, send
errors, how late frames left (``late_us``, below) and the most frames queued, and exits 0.
The causes: ``dropped_loss`` and ``dropped_down`` are what the configuration asked for;
``dropped_queue_full`` (the relay held ``limit`` frames already), ``dropped_receive_queue``
(the kernel dropped the frame because the relay's socket receive queue was full: the relay did
not keep up; ``PACKET_STATISTICS``) and ``dropped_oversize`` are made by the emulator.
Whoever reads stdout through a pipe must keep reading it, or acknowledgements fill the pipe
and stall the relay. ``--status FILE`` has the same statistics written to FILE once a second
while the relay runs, for whoever watches its load.

``late_us`` says how long after its due time each frame it sent left, in microseconds: ``mean``,
``std`` (population standard deviation: the spread the relay's own lateness adds to the delays'),
``p50``, ``p99`` and ``max`` over the frames sent so far (null before the first), and ``sum``
and ``sum_squares`` of every frame's lateness (µs, µs²; whole numbers), from which the mean and
spread of any stretch between two status readings follow exactly.

``--compiled BINARY`` has this process check the configuration and changes as above and hand
them to the compiled relay (``wire_relay.c``, built by scripts/setup.sh), which forwards: same
semantics, acknowledgements and statistics, its own random sequence, and ~10x the packet rate
(the Python relay's delay error passes 1 ms near 7,500 frames/s per direction on 2 cores).

While it runs, the relay asks the kernel to keep idle CPUs polling rather than halted (see
:func:`edgebed.realtime.request_cpu_latency`; ``--cpu-latency-us -1`` leaves the machine alone)."""

DIRECTIONS = ("forward", "reverse")
# Frames a direction holds when nothing says otherwise: far more than any link the scenarios
# describe keeps in flight, small enough that an overloaded relay does not eat the memory.
DEFAULT_LIMIT = 100_000


def _netem_pareto(quantile: float) -> float:
    """netem's pareto table entry (iproute2 netem/pareto.c): a Pareto with shape 3 shifted to
    mean zero, scaled by 4/3 and clipped where its 16-bit table saturates."""
    return min(((1.0 - quantile) ** (-1.0 / 3.0) - 1.5) * 4.0 / 3.0, 32767 / 8192)


@functools.lru_cache(maxsize=None)
def variation_table(distribution: str) -> tuple[float, ...]:
    """netem's 4096-entry table for ``distribution``, rescaled to mean 0 and standard
    deviation 1 so that ``jitter`` is the standard deviation for every distribution (netem's own
    tables, clipped at 4, have a standard deviation of about 0.82 and a mean of about -0.03)."""
    size = 4096
    quantiles = [(i + 0.5) / size for i in range(size)]
    if distribution == "pareto":
        values = [_netem_pareto(q) for q in quantiles]
    else:
        # iproute2 netem/paretonormal.c: a quarter normal, three quarters pareto, both read at
        # the same quantile.
        normal = statistics.NormalDist()
        values = [(normal.inv_cdf(q) + 3 * _netem_pareto(q)) / 4 for q in quantiles]
    mean = statistics.fmean(values)
    deviation = statistics.pstdev(values, mean)
    return tuple((value - mean) / deviation for value in values)


class WireDirection(WireImpairment):
    """One direction of the relay's configuration: the scenario's own impairment fields (same
    units and bounds, :class:`topologies.model.WireImpairment`), plus ``down``. A field left
    out, or null, means 0, false or nothing; in a change, a field left out stays as it was."""

    down: Optional[bool] = Field(None, description="drop every frame")
    limit: Optional[int] = Field(None, ge=1, le=10_000_000,
                                 description="most frames held at once (netem's limit); a "
                                             "frame arriving to a full queue is dropped and "
                                             f"counted; default {DEFAULT_LIMIT}")


class WireConfig(StrictModel):
    """The relay's whole configuration, or one change to it (naming only what changes)."""

    forward: Optional[WireDirection] = None
    reverse: Optional[WireDirection] = None
    seed: Optional[StrictInt] = Field(None, description="seeds both directions' random draws")


def _relay_units(changes: WireDirection) -> dict:
    """The fields ``changes`` sets, as :class:`Direction` attributes in the relay's units."""
    parsed = {}
    for key in changes.model_fields_set:
        value = getattr(changes, key)
        if key in ("delay", "jitter"):
            parsed[key + "_ns"] = round((value or 0.0) * 1e9)
        elif key == "distribution":
            parsed[key] = value or "normal"
        elif key in ("reorder", "down"):
            parsed[key] = bool(value)
        elif key == "loss":
            parsed[key] = value or 0.0
        elif key == "limit":
            parsed[key] = value or DEFAULT_LIMIT
        else:
            parsed[key] = value
    return parsed


def _complaint(error: ValidationError) -> str:
    """The first problem of ``error`` as one line naming the field: ``forward.delay: ...``."""
    problems = error.errors(include_url=False)
    first = problems[0]
    where = dotted(part for part in first["loc"] if isinstance(part, (str, int)))
    if first["type"] == "extra_forbidden":
        message = f"unknown key (known: {', '.join(_known_keys(first['loc']))})"
    elif first["type"] in ("model_type", "model_attributes_type", "dict_type"):
        message = f"must be a JSON object, not {first['input']!r}"
    elif first["type"] == "literal_error":
        message = f"{first['input']!r} is not one of {first['ctx']['expected']}"
    else:
        message = first["msg"].removeprefix("Value error, ")
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where or 'the configuration'}: {message}{more}"


def _known_keys(location: tuple) -> list[str]:
    model = {1: WireConfig, 2: WireDirection, 3: BurstLoss}.get(len(location), WireConfig)
    return list(model.model_fields)


def parse_config(document) -> tuple[dict[str, dict], int | None]:
    """Check a whole configuration or change (a JSON document already decoded): per-direction
    changes in the relay's units and the seed, if given. Raises ValueError naming the field."""
    try:
        config = WireConfig.model_validate(document)
    except ValidationError as error:
        raise ValueError(_complaint(error)) from None
    changes = {name: _relay_units(getattr(config, name)) for name in DIRECTIONS
               if getattr(config, name) is not None}
    return changes, config.seed
