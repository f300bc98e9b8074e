"""live_edge at model level, its parameters: what one ``live_edge_model`` cell runs, written in
the paper's units so that a sweep reads as the paper's tables (delays in ms, bitrates and
bandwidth in Mbps, compute in vCPU, G in ms per Mbps, H in vCPU per Mbps, k per Mbps, beta in
ms; a string with a unit, ``40Mbps``, ``0.3s``, is read as written), with the model's own
defaults, and the instance they draw in the model's SI units."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field,
                      model_validator)

from controller.policies.live_edge import reconstructions
from controller.policies.live_edge.allocators import DF_BITRATES, df, mhcp, optimal
from controller.policies.live_edge.geometry import GEOMETRIES
from controller.policies.live_edge.model import (DANMAKU_MODELS, MBPS, MS, Instance, Weights,
                                                 check_ladder, generate)
from edgebed import units

# Each parameter's unit in the file, in SI (the model's units); unlisted ones are the same.
SCALE = {"access_delay": MS, "edge_delay": MS, "bandwidth": MBPS, "ladder": MBPS,
         "source": MBPS, "G": MS / MBPS, "H": 1 / MBPS, "k": 1 / MBPS, "beta": MS}
_GENERATE = inspect.signature(generate).parameters
GENERATOR_OPTIONS = [name for name, p in _GENERATE.items()
                     if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "weights"]
WEIGHTS = [field.name for field in dataclasses.fields(Weights)]


def _convert(value: Any, factor: float) -> Any:
    """``value``, a number or a tuple of numbers, times ``factor``."""
    if isinstance(value, tuple):
        return tuple(_convert(item, factor) for item in value)
    # 12 significant digits: the paper's 50 ms/Mbps, stored as 5e-8 s per bit/s, reads 50.
    return float(f"{value * factor:.12g}")


def _default(name: str) -> Any:
    """The model's default for ``name``, in the file's unit."""
    value = _GENERATE[name].default if name in _GENERATE else getattr(Weights(), name)
    return _convert(value, 1 / SCALE[name]) if name in SCALE else value


def _in_unit(parse: Callable[[object], float], unit: float) -> BeforeValidator:
    """A number as it is (already in the file's unit), a string read by ``parse`` (SI) and
    converted to ``unit``."""
    return BeforeValidator(lambda value: parse(value) / unit if isinstance(value, str)
                           else value)


def _ordered(pair: tuple[float, float]) -> tuple[float, float]:
    if pair[0] > pair[1]:
        raise ValueError("a range is written [low, high]")
    return pair


Milliseconds = Annotated[float, _in_unit(units.parse_duration, MS), Field(ge=0)]
Megabits = Annotated[float, _in_unit(units.parse_rate, MBPS), Field(gt=0)]
Share = Annotated[float, Field(ge=0, le=1)]
NonNegative = Annotated[float, Field(ge=0)]
DelayRange = Annotated[tuple[Milliseconds, Milliseconds], AfterValidator(_ordered)]
RateRange = Annotated[tuple[NonNegative, NonNegative], AfterValidator(_ordered)]


class Parameters(BaseModel):
    """One cell's parameters: what :func:`~controller.policies.live_edge.model.generate` takes, the
    model's weights, the periods and the exact solver's time limit, in the paper's units."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reconstruction: Literal[reconstructions.NAMES] = Field(
        reconstructions.DEFAULT,
        description="the values of the paper's unknowns every parameter not written takes: "
                    "spec (the spec's), fitted (fitted to the paper's figures) or sourced "
                    "(the paper's data and published values; "
                    "controller/policies/live_edge/reconstructions.py)")
    viewers: int = Field(100, ge=1, description="viewers watching each period")
    servers: int = Field(6, ge=1, description="edge servers")
    side: float = Field(_default("side"), gt=0, description="side of the square area (m)")
    radius: float = Field(_default("radius"), gt=0, description="server coverage radius (m)")
    access_delay: DelayRange = Field(_default("access_delay"),
                                     description="viewer-edge delay, 0 to radius metres (ms)")
    edge_delay: DelayRange = Field(_default("edge_delay"), description="edge-edge delay (ms)")
    bandwidth: Megabits = Field(_default("bandwidth"), description="server bandwidth D_m (Mbps)")
    compute: NonNegative = Field(_default("compute"), description="server compute C_m (vCPU)")
    streamers: int = Field(_default("streamers"), ge=1, description="streamers (rooms)")
    danmaku: RateRange = Field(_default("danmaku"),
                               description="danmaku rate range F_v (messages/s)")
    gift_share: Share = Field(_default("gift_share"), description="share of viewers who gift")
    gift_median: NonNegative = Field(_default("gift_median"), description="median gift amount")
    returning: Share = Field(_default("returning"),
                             description="share of viewers with a history in period 1")
    preference_tilt: float = Field(_default("preference_tilt"),
                                   description="tilt of preferred rungs toward the top")
    previous_is_preferred: Share = Field(
        _default("previous_is_preferred"),
        description="share of returning viewers whose previous rung is their preferred one")
    previous_nearest: Share = Field(
        _default("previous_nearest"),
        description="share of returning viewers whose previous server is their nearest")
    geometry: Literal[GEOMETRIES] = Field(
        _default("geometry"), description="where servers and viewers are: planar (a square) "
                                          "or eua (the paper's Melbourne data set)")
    danmaku_model: Literal[DANMAKU_MODELS] = Field(
        _default("danmaku_model"),
        description="danmaku rates: uniform in danmaku, or bilibili (the paper's measured "
                    "counts with the room effect)")
    demand: RateRange | None = Field(
        None, description="interaction demand range I_v; when set, danmaku rates are drawn "
                          "uniformly as I_v / gamma, whatever danmaku_model says")
    ladder: tuple[Megabits, ...] = Field(_default("ladder"), min_length=1,
                                         description="bitrate ladder (Mbps)")
    source: Megabits = Field(_default("source"), description="source bitrate R (Mbps)")
    ladder_scale: Annotated[float, Field(gt=0)] = Field(
        1.0, description="factor on the ladder and the source bitrate together")
    a: NonNegative = Field(_default("a"), description="weight of interaction experience Q")
    b: NonNegative = Field(_default("b"), description="weight of video quality U")
    c: NonNegative = Field(_default("c"), description="weight of the bitrate-drop penalty E")
    d: NonNegative = Field(_default("d"), description="weight of the server-switch penalty S")
    G: NonNegative = Field(_default("G"), description="transcoding delay per Mbps below the source "
                                                 "(ms/Mbps)")
    H: NonNegative = Field(_default("H"), description="transcoding compute per Mbps below the "
                                                 "source (vCPU/Mbps)")
    beta: Annotated[Milliseconds, Field(gt=0)] = Field(
        _default("beta"), description="latency at which interaction turns negative (ms)")
    gamma: NonNegative = Field(_default("gamma"),
                               description="interaction demand per danmaku message/s")
    alpha: NonNegative = Field(_default("alpha"), description="gift weight per ln(1 + gift amount)")
    k: NonNegative = Field(_default("k"), description="drop penalty per Mbps dropped")
    latency_shape: Annotated[float, Field(gt=0)] = Field(
        _default("latency_shape"), description="q in Q = (1 + I)(1 - (L/beta)^q)")
    quality_shape: float = Field(_default("quality_shape"),
                                 description="u in U = box_cox(min(R, R*)/r_min, u)")
    df_bitrate: Literal[DF_BITRATES] = Field(
        inspect.signature(df).parameters["bitrate"].default,
        description="DF's bitrate: the fitting rung nearest the preference (preferred) or "
                    "the highest fitting one (highest)")
    mhcp_count_exponent: NonNegative = Field(
        inspect.signature(mhcp).parameters["count_exponent"].default,
        description="e in MHCP's RS_m = (RC_m + RD_m) / (2 (1 + count_m)^e)")
    periods: int = Field(1, ge=1, description="periods decided in a row")
    churn: Share = Field(0.2, description="share of viewers replaced each period")
    optimal_time_limit: float = Field(
        inspect.signature(optimal).parameters["time_limit"].default, gt=0,
        description="seconds the MILP solver may take per period (optimal only)")

    @model_validator(mode="before")
    @classmethod
    def _reconstruction_fills_the_rest(cls, data: Any) -> Any:
        """The chosen reconstruction's values for the unknowns the file does not write."""
        if isinstance(data, dict) and data.get("reconstruction",
                                               reconstructions.DEFAULT) in reconstructions.NAMES:
            chosen = reconstructions.named(data.get("reconstruction", reconstructions.DEFAULT))
            return chosen.parameters() | data
        return data

    @model_validator(mode="after")
    def _ladder_fits_the_source(self) -> Parameters:
        # Both converted alike: a top rung written as the source stays equal to it.
        check_ladder(_convert(self.ladder, MBPS), _convert(self.source, MBPS))
        if self.demand is not None and self.gamma == 0:
            raise ValueError("an interaction-demand range needs gamma > 0 (F = I / gamma)")
        return self

    def pool(self, seed: int) -> Instance:
        """The instance holding every viewer any period watches (period 1's first)."""
        si = {name: _convert(value, SCALE[name]) if name in SCALE else value
              for name, value in self.model_dump().items()}
        si["ladder"] = _convert(si["ladder"], self.ladder_scale)
        si["source"] = _convert(si["source"], self.ladder_scale)
        if self.demand is not None:
            si["danmaku"] = _convert(self.demand, 1 / self.gamma)
            si["danmaku_model"] = "uniform"
        size = self.viewers + self.arrivals * (self.periods - 1)
        return generate(seed, size, self.servers,
                        **{name: si[name] for name in GENERATOR_OPTIONS},
                        weights=Weights(**{name: si[name] for name in WEIGHTS}))

    @property
    def arrivals(self) -> int:
        """Viewers who leave, and new ones who arrive, each period."""
        return round(self.churn * self.viewers)
