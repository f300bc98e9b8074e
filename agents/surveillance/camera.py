"""A camera's video stream: the streamer (:mod:`agents.streamer`) with a surveillance camera's
defaults, 4 Mbit/s at 25 fps, an I frame every 2 s and a constant bitrate (no frame-size noise).

    python -m agents.surveillance.camera --node NAME --out RUN_DIR --params JSON [--seed N]
"""

from __future__ import annotations

import copy
import sys

from pydantic.fields import FieldInfo

from agents import streamer


def camera_default(name: str, default) -> FieldInfo:
    """The streamer's parameter ``name`` (its unit, bounds and description) with another
    default."""
    field = copy.deepcopy(streamer.Params.model_fields[name])
    field.default = default
    return field


class Params(streamer.Params):
    """A streamer's parameters with a camera's defaults."""

    # Annotated as plain floats: the copied fields carry their units' validators already.
    bitrate: float = camera_default("bitrate", 4e6)
    fps: float = camera_default("fps", 25.0)
    gop: int = camera_default("gop", 50)
    noise: float = camera_default("noise", 0.0)


def main(argv: list[str] | None = None) -> int:
    return streamer.run("camera", Params, argv)


if __name__ == "__main__":
    sys.exit(main())
