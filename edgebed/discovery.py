"""Finding a layer's entries by convention: the modules of a package, each declaring its own."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Iterator, Mapping
from types import ModuleType


def modules(package: ModuleType, nested: bool = False) -> Iterator[ModuleType]:
    """The modules and subpackages directly inside ``package``, imported, in name order; names
    starting with ``_`` are private and skipped. With ``nested``, each subpackage is followed by
    its own modules, scanned the same way (a layer with a package per scheme). A module that
    fails to import raises: an entry that silently vanished would be worse."""
    found = sorted({(info.name, info.ispkg) for info in pkgutil.iter_modules(package.__path__)
                    if not info.name.startswith("_")})
    for name, is_package in found:
        module = importlib.import_module(f"{package.__name__}.{name}")
        yield module
        if nested and is_package:
            yield from modules(module, nested)


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


def declared(package: ModuleType, attribute: str, key=lambda entry: entry.name,
             nested: bool = False) -> dict:
    """Every entry the modules of ``package`` (with ``nested``, of its subpackages too) declare
    in their iterable ``attribute`` (a mapping counts by its values), by ``key``; ValueError
    naming both modules when two declare different entries under one key (a module
    re-exporting another's entry is fine)."""
    found: dict = {}
    where: dict = {}
    for module in modules(package, nested):
        entries = getattr(module, attribute, ())
        for entry in entries.values() if isinstance(entries, Mapping) else entries:
            name = key(entry)
            if name in found and found[name] is not entry:
                raise ValueError(f"{attribute} entry {name!r} is declared by both "
                                 f"{where[name]} and {module.__name__}")
            found[name] = entry
            where.setdefault(name, module.__name__)
    return found
