"""Finding a layer's entries by convention: the modules of a package, each declaring its own."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Iterator, Mapping
from types import ModuleType


def modules(package: ModuleType) -> Iterator[ModuleType]:
    """The modules and subpackages directly inside ``package``, imported, in name order; names
    starting with ``_`` are private and skipped. A module that fails to import raises: an entry
    that silently vanished would be worse."""
    names = sorted({info.name for info in pkgutil.iter_modules(package.__path__)
                    if not info.name.startswith("_")})
    for name in names:
        yield importlib.import_module(f"{package.__name__}.{name}")


def walk(package: ModuleType) -> Iterator[ModuleType]:
    """The modules of ``package`` and, depth first, of every subpackage in it, imported, each
    subpackage right before its own modules."""
    for module in modules(package):
        yield module
        if hasattr(module, "__path__"):
            yield from walk(module)


def submodules(package: ModuleType, name: str) -> Iterator[ModuleType]:
    """The module ``name`` of ``package`` and of every subpackage directly in it, where there
    is one, imported, the package's own first; other modules are not imported."""
    if importlib.util.find_spec(f"{package.__name__}.{name}") is not None:
        yield importlib.import_module(f"{package.__name__}.{name}")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda info: info.name):
        if info.ispkg and not info.name.startswith("_"):
            subpackage = importlib.import_module(f"{package.__name__}.{info.name}")
            if importlib.util.find_spec(f"{subpackage.__name__}.{name}") is not None:
                yield importlib.import_module(f"{subpackage.__name__}.{name}")


def declared(package: ModuleType, attribute: str, key=lambda entry: entry.name) -> dict:
    """Every entry the modules of ``package`` declare in their iterable ``attribute`` (a mapping
    counts by its values), by ``key``; ValueError naming both modules when two declare different entries under one key
    (a module re-exporting another's entry is fine)."""
    found: dict = {}
    where: dict = {}
    for module in modules(package):
        entries = getattr(module, attribute, ())
        for entry in entries.values() if isinstance(entries, Mapping) else entries:
            name = key(entry)
            if name in found and found[name] is not entry:
                raise ValueError(f"{attribute} entry {name!r} is declared by both "
                                 f"{where[name]} and {module.__name__}")
            found[name] = entry
            where.setdefault(name, module.__name__)
    return found
