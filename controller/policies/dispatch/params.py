"""What a dispatch scenario sets: the policy's parameters and the client and media node labels
it reads."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from controller.policy import PolicyLabels, PolicyParams

from .routing import Mode


class DispatchParams(PolicyParams):
    """The dispatch centers, the location database and the capacity control."""

    centers: dict[str, str] = Field(
        default_factory=lambda: {"center": ""},
        description="dispatch centers: name -> the region it serves ('' for none)")
    capacity_control: Literal["tickets", "shared"] = Field(
        "tickets", description="pre-sold tickets, or a shared capacity figure from load reports")
    candidates: int = Field(3, ge=1, le=16, description="candidates answered for probing")
    other_regions: int = Field(1, ge=0, description="of them, kept for other regions")
    error_share: float = Field(0.1, ge=0, le=1, description="clients the database misplaces")
    abroad_error_share: float | None = Field(None, ge=0, le=1,
                                             description="misplaced abroad (default: the same)")
    home_region: str | None = Field(None, description="the in-country region")
    same_region_share: float = Field(0.5, ge=0, le=1,
                                     description="wrong answers that stay in the region")
    seed: int = Field(0, description="seed of the location database")
    near_band: float = Field(0.020, gt=0, description="delays this close (s) rank as equal")
    origin: str | None = Field(None, description="the ingest host media nodes back-source "
                                                 "the stream from (relay chains start there)")
    relays: list[str] = Field([], description="relay/BGP hosts a back-source path may go "
                                              "through when the direct one probes poor")
    relay_insertion: bool = Field(True, description="put relays on paths that probe poor "
                                                    "(false: always direct, the baseline)")
    scheduling: Mode = Field(Mode.MULTI, description="single: viewers pull from the origin "
                                                     "(spill-over within its machine room); "
                                                     "multi: from their own best node")
    back_source: bool = Field(False, description="decisions name the stream and the origin "
                                                 "(attributes stream, upstream) for media "
                                                 "nodes that back-source from it")
    stream: int = Field(0, ge=0, lt=2**32, description="with back_source: the stream id")
    gray_failover: bool = Field(False, description="the center moves the viewers of a node "
                                                   "whose path from the origin probes poor or "
                                                   "which stalls, for detection_time "
                                                   "(false: only the switches' fast failover)")
    detection_time: float = Field(3.0, gt=0, description="with gray_failover: seconds a path "
                                                         "stays poor, or a node silent, before "
                                                         "the center acts (longer than the "
                                                         "nodes' report period)")
    transcoding: Literal["passive", "always"] | None = Field(
        None, description="viewers of another protocol than source_protocol pull from "
                          "transcoder nodes: passive starts the room's transcoder with the "
                          "first of them and stops it with the last, always keeps it running; "
                          "none: protocols are not looked at")
    source_protocol: str = Field("rtmp", min_length=1, description="with transcoding: the "
                                                                   "protocol the stream is "
                                                                   "pushed in")

    @model_validator(mode="after")
    def _some_center(self) -> DispatchParams:
        if not self.centers:
            raise ValueError("a dispatch scenario needs at least one dispatch center")
        return self


class DispatchClientLabels(PolicyLabels):
    """A client's labels the dispatch policy reads besides ``region`` and ``center``."""

    protocol: str | None = Field(None, description="with transcoding: the protocol the viewer "
                                                   "plays (default the stream's)")


class DispatchServerLabels(PolicyLabels):
    """A media node's labels the dispatch policy reads besides ``region``, ``room``, ``cost``
    and ``preference``."""

    transcoder: bool = Field(False, description="with transcoding: a transcoding node, for "
                                                "viewers of another protocol than the stream's")
