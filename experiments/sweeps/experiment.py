"""An experiment file turned into the cells to run."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from experiments.kinds import registered as registered_kinds
from topologies.loader import SourceMap, load_scenario_file, load_scenario_text
from topologies.model import SAFE_NAME
from topologies.problems import (Problem, ScenarioInvalid, did_you_mean, syntax_checked,
                                 validation_problems)
# The scenario checks' translation of pydantic errors (messages, missing and unknown keys).

from .kinds import Cell, Kind

QUICK_REPETITIONS = 2

# Where the schemes' experiment files live, experiments/<slug>/<name>.yaml.
SCHEMES_EXPERIMENTS = Path(__file__).resolve().parents[1]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SweepSpec(_Strict):
    """One sweep as written: a parameter varied over values, with optional overrides."""

    name: str = Field(pattern=SAFE_NAME, description="names the sweep's plots and tables")
    vary: str = Field(description="the parameter varied")
    values: list[Any] = Field(min_length=1, description="its values, in plotting order")
    policies: list[str] | None = Field(None, min_length=1,
                                       description="instead of the experiment's policies")
    base: dict[str, Any] = Field({}, description="parameters for this sweep only")
    periods: int | None = Field(None, ge=1, description="shorthand for base: {periods: N}")
    paired: bool = Field(False, description="every value on the same instances: a "
                                            "repetition's seed does not depend on the value "
                                            "(for a parameter the instance does not draw on, "
                                            "so values compare without instance noise)")


class PaperEntry(_Strict):
    """A number the paper reports for one of the kind's claims, and the sweep ours is
    measured on; ``value`` is in the claim's unit (percent for a relative claim), a number or
    a [low, high] range."""

    sweep: str
    value: float | tuple[float, float]

    @model_validator(mode="after")
    def _ordered(self) -> PaperEntry:
        if isinstance(self.value, tuple) and self.value[0] > self.value[1]:
            raise ValueError("a range is written [low, high]")
        return self

    @property
    def range(self) -> tuple[float, float]:
        return self.value if isinstance(self.value, tuple) else (self.value, self.value)


class ExperimentDocument(_Strict):
    """An experiment file as written."""

    name: str = Field(pattern=SAFE_NAME, description="names the output directory")
    kind: str = Field(description="what one cell runs: the name of a kind in "
                                  "experiments/kinds/")
    seed: int = Field(0, ge=0, description="root of every cell's seed")
    repetitions: int = Field(ge=1, description="instances per sweep value")
    policies: list[str] = Field(min_length=1, description="the policies compared")
    base: dict[str, Any] = Field({}, description="parameters every cell starts from")
    sweeps: list[SweepSpec] = Field(min_length=1)
    paper: dict[str, PaperEntry] = Field({}, description="claim key -> the paper's number")


@dataclass(frozen=True)
class Sweep:
    """A resolved sweep: ``parameter`` at each of ``values`` (JSON values, as validated;
    ``labels`` their text in results), the ``policies`` it compares and each value's full
    ``parameters``."""

    name: str
    parameter: str
    values: tuple[Any, ...]
    labels: tuple[str, ...]
    policies: tuple[str, ...]
    parameters: tuple[BaseModel, ...]
    overrides: Mapping[str, Any]
    paired: bool = False

    @property
    def numeric(self) -> bool:
        """Whether the values are plain numbers, to plot on a numeric axis."""
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values)

    def ends(self) -> Sweep:
        """The sweep cut to its first and last value."""
        keep = sorted({0, len(self.values) - 1})
        return dataclasses.replace(
            self, values=tuple(self.values[i] for i in keep),
            labels=tuple(self.labels[i] for i in keep),
            parameters=tuple(self.parameters[i] for i in keep))


@dataclass(frozen=True)
class Experiment:
    """A resolved experiment file. ``base`` is the kind's parameters with the file's ``base``
    applied; ``quick`` marks a smoke run cut down by :meth:`quick_version`."""

    file: str
    name: str
    kind: Kind
    seed: int
    repetitions: int
    base: BaseModel
    sweeps: tuple[Sweep, ...]
    paper: Mapping[str, PaperEntry]
    quick: bool = False

    @property
    def report_directory(self) -> Path:
        """Where the report goes unless told: a scheme's ``experiments/<slug>/<name>.yaml`` to
        ``reports/<slug>/<name>/``, so the reports mirror the experiment files; any other file
        to ``reports/<its name>/``."""
        file = Path(self.file).resolve()
        if file.parent.parent == SCHEMES_EXPERIMENTS:
            return Path("reports") / file.parent.name / file.stem
        return Path("reports") / self.name

    def cells(self) -> Iterator[Cell]:
        """Every cell, sweep by sweep and value by value, the policies side by side on each
        repetition's instance."""
        for sweep in self.sweeps:
            for label, parameters in zip(sweep.labels, sweep.parameters):
                for repetition in range(self.repetitions):
                    seed = repetition_seed(self.seed, sweep.name,
                                           "" if sweep.paired else label, repetition)
                    for policy in sweep.policies:
                        yield Cell(self.name, sweep.name, sweep.parameter, label, policy,
                                   repetition, seed, parameters)

    def quick_version(self) -> Experiment:
        """A smoke run: at most :data:`QUICK_REPETITIONS` repetitions and each sweep's first
        and last value. Its cells are cells of the full experiment, so a full run after it
        reuses them."""
        return dataclasses.replace(self, repetitions=min(self.repetitions, QUICK_REPETITIONS),
                                   sweeps=tuple(sweep.ends() for sweep in self.sweeps),
                                   quick=True)

    def sweep(self, name: str) -> Sweep:
        return next(sweep for sweep in self.sweeps if sweep.name == name)


def repetition_seed(seed: int, sweep: str, value: str, repetition: int) -> int:
    """The seed of one repetition of one sweep value: a hash (numpy's SeedSequence) of the
    experiment's seed, the sweep's name, the value's label and the repetition, the same on
    every machine and Python (CRC-32 of the names, not Python's salted ``hash``)."""
    words = [seed, zlib.crc32(sweep.encode()), zlib.crc32(value.encode()), repetition]
    return int(np.random.SeedSequence(words).generate_state(1)[0])


def value_label(value: Any) -> str:
    """How a sweep value is written in results: ``50``, ``0.5``, ``(1, 2)``."""
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(map(value_label, value)) + ")"
    return format(value, ".12g") if isinstance(value, float) else str(value)


def load(path: str | Path, environ: dict[str, str] | None = None) -> Experiment:
    """Read and resolve an experiment file; raises :class:`ScenarioInvalid`."""
    return _parse_and_resolve(lambda: load_scenario_file(path, environ))


def loads(text: str, file: str = "<experiment>",
          environ: dict[str, str] | None = None) -> Experiment:
    """Like :func:`load`, from text."""
    return _parse_and_resolve(lambda: load_scenario_text(text, file, environ))


def _parse_and_resolve(parse: Callable[[], tuple[object, SourceMap]]) -> Experiment:
    data, source_map = syntax_checked(parse)
    if not isinstance(data, dict):
        raise ScenarioInvalid([Problem(source_map.position(()), (),
                                       "an experiment is a mapping of keys such as name, kind "
                                       "and sweeps", "start the file with 'name: my-experiment'")])
    try:
        document = ExperimentDocument.model_validate(data)
    except ValidationError as error:
        raise ScenarioInvalid(validation_problems(error, data, source_map,
                                                  fields=_document_fields)) from None
    return _Resolver(document, source_map).run()


def _document_fields(path: tuple) -> list[str]:
    """The keys allowed in the mapping at ``path`` of an experiment document."""
    model = {0: ExperimentDocument, 2: SweepSpec if path[:1] == ("sweeps",) else PaperEntry}
    return list(model[len(path)].model_fields) if len(path) in model else []


class _Resolver:
    """Checks a schema-valid document against its kind and builds the :class:`Experiment`,
    collecting every problem."""

    def __init__(self, document: ExperimentDocument, source_map: SourceMap):
        self.document = document
        self.source_map = source_map
        self.problems: list[Problem] = []

    def problem(self, path: tuple, message: str, hint: str = "") -> None:
        self.problems.append(Problem(self.source_map.position(path), path, message, hint))

    def run(self) -> Experiment:
        document = self.document
        kinds = registered_kinds()
        kind = kinds.get(document.kind)
        if kind is None:
            self.problem(("kind",), f"unknown kind {document.kind!r}",
                         did_you_mean(document.kind, kinds))
            raise ScenarioInvalid(self.problems)
        self._check_policies(kind, document.policies, ("policies",))
        written = {name: ("base", name) for name in document.base}
        base = self._parameters(kind, document.base, written | {"": ("base",)})
        sweeps = [sweep for i, spec in enumerate(document.sweeps)
                  if (sweep := self._sweep(kind, i, spec)) is not None]
        self._check_paper(kind, sweeps)
        if self.problems:
            # One mistake in base shows in every cell it reaches; say it once.
            unique = {(p.path, p.message): p for p in self.problems}
            raise ScenarioInvalid(list(unique.values()))
        return Experiment(self.source_map.file, document.name, kind, document.seed,
                          document.repetitions, base, tuple(sweeps), document.paper)

    def _check_policies(self, kind: Kind, policies: list[str], path: tuple) -> None:
        for j, policy in enumerate(policies):
            if policy not in kind.policies:
                self.problem(path + (j,), f"kind {kind.name} has no policy {policy!r}",
                             did_you_mean(policy, kind.policies))
        for j, policy in enumerate(policies):
            if policy in policies[:j]:
                self.problem(path + (j,), f"policy {policy!r} is listed twice")

    def _parameters(self, kind: Kind, values: dict, origins: Mapping[str, tuple]
                    ) -> BaseModel | None:
        """``values`` validated as the kind's parameters; ``origins`` maps each parameter to
        where it was written, the path a problem with it points at (``""``: where a problem
        of no one parameter points)."""
        try:
            return kind.parameters.model_validate(values)
        except ValidationError as error:
            fallback = origins.get("", ())

            def origin(path: tuple) -> tuple:
                return origins[path[0]] + path[1:] if path and path[0] in origins else fallback

            self.problems.extend(validation_problems(
                error, values, self.source_map, origin=origin,
                fields=lambda path: list(kind.parameters.model_fields)))
            return None

    def _sweep(self, kind: Kind, i: int, spec: SweepSpec) -> Sweep | None:
        path = ("sweeps", i)
        if spec.name in [other.name for other in self.document.sweeps[:i]]:
            self.problem(path + ("name",), f"sweep {spec.name!r} is defined twice",
                         "sweep names name plots and results; make them unique")
        if spec.policies is not None:
            self._check_policies(kind, spec.policies, path + ("policies",))
        if spec.vary not in kind.parameters.model_fields:
            self.problem(path + ("vary",), f"kind {kind.name} has no parameter {spec.vary!r}",
                         did_you_mean(spec.vary, kind.parameters.model_fields))
            return None
        overrides = spec.base | ({} if spec.periods is None else {"periods": spec.periods})
        origins = ({name: ("base", name) for name in self.document.base}
                   | {name: path + ("base", name) for name in spec.base}
                   | ({} if spec.periods is None else {"periods": path + ("periods",)}))
        values, labels, parameters = [], [], []
        for j, value in enumerate(spec.values):
            where = path + ("values", j)
            cell = self._parameters(kind, self.document.base | overrides | {spec.vary: value},
                                    origins | {spec.vary: where, "": path})
            if cell is None:
                continue
            canonical = cell.model_dump(mode="json")[spec.vary]
            label = value_label(canonical)
            if label in labels:
                self.problem(where, f"value {label} is listed twice")
                continue
            values.append(canonical)
            labels.append(label)
            parameters.append(cell)
        policies = spec.policies or self.document.policies
        return Sweep(spec.name, spec.vary, tuple(values), tuple(labels), tuple(policies),
                     tuple(parameters), overrides, spec.paired)

    def _check_paper(self, kind: Kind, sweeps: list[Sweep]) -> None:
        by_name = {sweep.name: sweep for sweep in sweeps}
        for key, entry in self.document.paper.items():
            path = ("paper", key)
            claim = kind.claims.get(key)
            if claim is None:
                self.problems.append(Problem(self.source_map.position(path, key=True), path,
                                             f"kind {kind.name} has no claim {key!r}",
                                             did_you_mean(key, kind.claims)))
                continue
            sweep = by_name.get(entry.sweep)
            if sweep is None:
                if entry.sweep not in [spec.name for spec in self.document.sweeps]:
                    self.problem(path + ("sweep",), f"no sweep {entry.sweep!r}",
                                 did_you_mean(entry.sweep, [s.name for s in
                                                            self.document.sweeps]))
                continue
            missing = sorted(claim.policies - set(sweep.policies))
            if missing:
                self.problem(path + ("sweep",), f"claim {key!r} compares {', '.join(missing)}, "
                                                f"which sweep {sweep.name!r} does not run",
                             f"add {', '.join(missing)} to the sweep's policies")
            if claim.across_values and len(sweep.values) < 2:
                self.problem(path + ("sweep",), f"claim {key!r} compares the sweep's last "
                                                f"value with another; {sweep.name!r} has one")
