"""The run directory: ``runs/<scenario>-<UTC timestamp>/`` and the files every run leaves."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from edgebed import clock
from edgebed.files import atomic_write


def edgebed_version() -> str:
    """The installed edgebed's version ("source" when run from a checkout not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("edgebed")
    except PackageNotFoundError:
        return "source"


def utc_now() -> datetime:
    """The run's virtual wall-clock time, in UTC."""
    return datetime.fromtimestamp(clock.time(), timezone.utc)


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RunDirectory:
    """One run's directory and the files in it."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, root: Path, scenario_name: str, started: datetime) -> "RunDirectory":
        stamp = started.strftime("%Y%m%dT%H%M%SZ")
        root = root.resolve()
        root.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, 1000):
            suffix = "" if attempt == 1 else f"-{attempt}"
            path = root / f"{scenario_name}-{stamp}{suffix}"
            try:
                path.mkdir()
            except FileExistsError:
                continue
            (path / "logs").mkdir()
            return cls(path)
        raise RuntimeError(f"cannot create a run directory under {root}")

    def write_json(self, name: str, data: Any) -> None:
        atomic_write(self.path / name, json.dumps(data, indent=2, sort_keys=False) + "\n")

    def read_json(self, name: str) -> Any:
        return json.loads((self.path / name).read_text())

    def write_yaml(self, name: str, data: Any) -> None:
        atomic_write(self.path / name, yaml.safe_dump(data, sort_keys=False))

    def node_log(self, node: str) -> Path:
        return self.path / "logs" / f"{node}.log"

    def pcap(self, node: str, interface: str) -> Path:
        return self.path / "pcap" / f"{node}-{interface}.pcap"

    def update_manifest(self, **changes: Any) -> dict:
        manifest = self.read_json("manifest.json") if (self.path / "manifest.json").exists() else {}
        manifest.update(changes)
        self.write_json("manifest.json", manifest)
        return manifest
