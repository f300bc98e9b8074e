"""The reconstructions of live_edge's model: the values of what the paper leaves unknown, by name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controller.policies.live_edge.allocators import DF_BITRATES
from controller.policies.live_edge.danmaku import HOUR
from controller.policies.live_edge.geometry import GEOMETRIES
from controller.policies.live_edge.model import DANMAKU_MODELS, MBPS, check_ladder
from edgebed.files import atomic_write

FITTED = Path(__file__).with_name("fitted.json")
DEFAULT = "spec"

Share = Annotated[float, Field(ge=0, le=1)]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


class FitRecord(BaseModel):
    """How a fitted reconstruction was found: the optimiser, its seed and trials, the seed and
    repetitions of the fit instances (apart from the reported ones), and the distance to the
    paper's figures it reached there (see ``experiments/kinds/live_edge/fit.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    optimiser: str
    seed: int
    trials: int
    instance_seed: int
    repetitions: int
    distance: float
    minutes: float = Field(description="how long it took, on the machine it ran on")
    command: str


class Reconstruction(BaseModel):
    """Values for every unknown of the model, in the paper's units."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str
    ladder: tuple[Positive, ...] = Field(min_length=2, description="bitrate ladder (Mbps)")
    source: Positive = Field(description="source bitrate R (Mbps)")
    gamma: NonNegative = Field(description="interaction demand per danmaku message/s")
    alpha: NonNegative = Field(description="gift weight per ln(1 + gift amount)")
    k: NonNegative = Field(description="drop penalty per Mbps dropped")
    latency_shape: Positive = Field(description="q in Q = (1 + I)(1 - (L/beta)^q)")
    quality_shape: float = Field(description="u in U = box_cox(min(R, R*)/r_min, u)")
    mhcp_count_exponent: NonNegative = Field(
        description="e in MHCP's RS_m = (RC_m + RD_m) / (2 (1 + count_m)^e)")
    df_bitrate: Literal[DF_BITRATES] = Field(
        description="DF's bitrate: nearest the preference, or the highest that fits")
    returning: Share = Field(description="share of viewers with a history in period 1")
    preference_tilt: float = Field(description="tilt of preferred rungs toward the top")
    previous_is_preferred: Share = Field(
        description="share of returning viewers whose previous rung is their preferred one")
    previous_nearest: Share = Field(
        description="share of returning viewers whose previous server is their nearest")
    geometry: Literal[GEOMETRIES] = Field(
        "planar", description="where servers and viewers are: planar or the EUA data set")
    danmaku_model: Literal[DANMAKU_MODELS] = Field(
        "uniform", description="danmaku rates: uniform in a range, or the paper's Bilibili "
                               "counts with the room effect")
    fit: FitRecord | None = None

    @model_validator(mode="after")
    def _ladder_fits_the_source(self) -> Reconstruction:
        check_ladder(tuple(rung * MBPS for rung in self.ladder), self.source * MBPS)
        return self

    def parameters(self) -> dict[str, object]:
        """The values as parameters of the ``live_edge_model`` kind."""
        return self.model_dump(mode="json", exclude={"description", "fit"})


SPEC = Reconstruction(
    description="the spec's reconstruction: stand-in ladder, the project's gamma, alpha, k, "
                "linear Q, logarithmic U, uniform history",
    ladder=(1.0, 2.5, 5.0, 8.0), source=8.0, gamma=1.0, alpha=0.1, k=0.2, latency_shape=1.0,
    quality_shape=0.0, mhcp_count_exponent=1.0, df_bitrate="preferred", returning=0.5,
    preference_tilt=0.0,
    previous_is_preferred=0.0, previous_nearest=0.0)

# Every value below is taken from a source, none from a run of the allocators.
SOURCED = Reconstruction(
    description="sourced: the EUA Melbourne geometry and the paper's Bilibili danmaku "
                "distribution with its room effect (both the paper's data), YouTube's live "
                "ladder; the spec's values where no source says more",
    # YouTube's Live Streaming Guide, its 2013 encoder settings (as reported at
    # ytlive.blogspot.com/2013/03/youtube-changes-live-encoder-settings.html): 360p 1000
    # kbps, 480p 2000 kbps, 720p 4000 kbps, and one 6 Mbps stream that YouTube's servers
    # transcode to the lower rungs: the 1080p rung and the source R. The paper's rungs are
    # these four resolutions ("480P", "1080P" in section 1.2; Table 2, the values, is lost),
    # its source R "the highest version" (section 2.1).
    ladder=(1.0, 2.0, 4.0, 6.0), source=6.0,
    # Checked against the paper's sentences by arithmetic, not by a run: at 50 viewers on 6
    # servers of 40 Mbps, 6 servers x floor(40 / 6) = 36 viewers fit at the 6 Mbps top rung,
    # "most" of 50 ("MHCP中大部分用戶均可以選擇最高碼率視頻", section 4.2); 100 viewers preferring the
    # four rungs alike want 325 Mbps, 8.1 servers' bandwidth, so QoE levels off only once
    # 10-12 servers leave room for the coverage's unevenness ("邊緣服務器數量增加到10和12的情況，
    # 平均QoE表現趨于穩定").
    # I = gamma * F, F in messages per second: gamma = 0.1 per message an hour puts a viewer
    # sending 10 an hour (96% of the paper's users send at most that) at I = 1, the top of
    # the paper's lowest demand range (0, 1), and a heavy user above.
    gamma=0.1 * HOUR,
    # The spec's values: the paper gives no number for these.
    alpha=SPEC.alpha, k=SPEC.k, latency_shape=SPEC.latency_shape,
    quality_shape=SPEC.quality_shape, mhcp_count_exponent=SPEC.mhcp_count_exponent,
    df_bitrate=SPEC.df_bitrate, preference_tilt=SPEC.preference_tilt,
    # The paper's one-shot setting (section 4.1): every viewer has a previous period, its
    # resolution drawn from the same Twitch distribution as the preferred one, independently
    # ("根據數據集中用戶的直播視頻分辨率分布情況生成實驗中各直播用戶所期望的分辨率和前一時間段觀看直播的分辨率"); the
    # previous server is not described: a uniform covering one.
    returning=1.0, previous_is_preferred=0.0, previous_nearest=0.0,
    geometry="eua", danmaku_model="bilibili")


@cache
def named(name: str) -> Reconstruction:
    """The reconstruction called ``name`` (KeyError naming the known ones otherwise)."""
    if name == "spec":
        return SPEC
    if name == "sourced":
        return SOURCED
    if name == "fitted":
        return Reconstruction.model_validate_json(FITTED.read_text())
    raise KeyError(f"no reconstruction {name!r}; known: {', '.join(NAMES)}")


NAMES = ("spec", "fitted", "sourced")


@dataclass(frozen=True)
class Unknown:
    """One unknown's plausible range, searched on a log scale if ``log`` (or, with
    ``choices``, one of those); ``why`` says where the range comes from."""

    name: str
    low: float
    high: float
    why: str
    log: bool = False
    choices: tuple[str, ...] = ()

    @property
    def range(self) -> str:
        if self.choices:
            return " or ".join(self.choices)
        return f"{self.low:g} to {self.high:g}" + (" (log)" if self.log else "")


# The ladder is searched as the source R and three ratios between neighbouring rungs (so it is
# ascending by construction); the other unknowns as themselves.
UNKNOWNS = (
    Unknown("source", 2.5, 8.0,
            "Twitch's ingest guidance for 720p-1080p streams: 2.5-8 Mbps (the paper's "
            "Table 2, from a Twitch data set, is lost)"),
    Unknown("top_ratio", 0.35, 0.8,
            "720p rung over the source: Twitch's transcodes put 720p at 40-60 % of a 1080p "
            "source"),
    Unknown("middle_ratio", 0.3, 0.8, "480p rung over the 720p rung"),
    Unknown("low_ratio", 0.25, 0.8, "360p rung over the 480p rung"),
    Unknown("gamma", 0.1, 3.0,
            "I = gamma F with F uniform in (0, 1): the base interaction-demand range (0, gamma) "
            "spans the paper's demand ranges (0,1) to (2,3)", log=True),
    Unknown("alpha", 0.0, 1.0, "Y_v from 1 to about 1 + 7 alpha for the largest gifts"),
    Unknown("k", 0.0, 1.0,
            "per Mbps dropped: up to the whole quality range for a fall across the ladder"),
    Unknown("latency_shape", 0.5, 3.0,
            "any q > 0 keeps Q falling in L and turning on I at beta (Theorem 2 needs Q "
            "falling in L only)", log=True),
    Unknown("quality_shape", -1.0, 1.0,
            "any u keeps U rising up to R* and saturating (1/x-like to linear)"),
    Unknown("mhcp_count_exponent", 0.0, 2.0,
            "RS_m rising in RC_m and RD_m and falling in count_m for any e >= 0"),
    Unknown("df_bitrate", 0, 0,
            "the paper's DF sets the bitrate from the server's room and the preference 'for "
            "the best experience': nearest the preference, or the highest that fits (QoE "
            "rises with the bitrate)", choices=DF_BITRATES),
    Unknown("returning", 0.2, 0.9, "share of viewers watching last period too"),
    Unknown("preference_tilt", -1.0, 3.0,
            "Twitch viewers prefer high resolutions: 0 uniform, 3 about 8:1 top over bottom"),
    Unknown("previous_is_preferred", 0.0, 1.0,
            "a returning viewer's last rung was its preferred one"),
    Unknown("previous_nearest", 0.0, 1.0, "a returning viewer's last server was its nearest"),
)
LADDER_UNKNOWNS = ("source", "top_ratio", "middle_ratio", "low_ratio")


def from_point(point: dict[str, float | str], description: str,
               fit: FitRecord | None = None) -> Reconstruction:
    """The reconstruction at ``point``, a value for every name of :data:`UNKNOWNS`, rungs
    rounded to 0.01 Mbps as a ladder is written."""
    source = round(point["source"], 2)
    top = source * point["top_ratio"]
    middle = top * point["middle_ratio"]
    low = middle * point["low_ratio"]
    rest = {name: value for name, value in point.items() if name not in LADDER_UNKNOWNS}
    return Reconstruction(description=description,
                          ladder=tuple(round(rung, 2) for rung in (low, middle, top, source)),
                          source=source, fit=fit, **rest)


def to_point(reconstruction: Reconstruction) -> dict[str, float | str]:
    """The point of :data:`UNKNOWNS` that gives ``reconstruction`` (four-rung ladders)."""
    low, middle, top, source = reconstruction.ladder
    return ({"source": reconstruction.source, "top_ratio": top / source,
             "middle_ratio": middle / top, "low_ratio": low / middle}
            | {u.name: getattr(reconstruction, u.name) for u in UNKNOWNS
               if u.name not in LADDER_UNKNOWNS})


def write_fitted(reconstruction: Reconstruction, path: Path = FITTED) -> None:
    """Save ``reconstruction`` as the fitted one (what ``named("fitted")`` reads)."""
    atomic_write(path, json.dumps(reconstruction.model_dump(mode="json"), indent=2) + "\n")
    named.cache_clear()
