"""The ``ryu`` package as os-ken, for users' apps written against Ryu (``from ryu.base import
app_manager``, ``app_manager.RyuApp``, ``ryu.ofproto.ofproto_v1_3`` ...) to run unmodified in
the controller process, where Ryu itself no longer installs (Python 3.10+)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

RYU, OS_KEN = "ryu", "os_ken"


class RyuAsOsKen(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``ryu[.X]`` as the already importable ``os_ken[.X]``."""

    def find_spec(self, name, path=None, target=None):
        if name != RYU and not name.startswith(RYU + "."):
            return None
        if importlib.util.find_spec(OS_KEN + name[len(RYU):]) is None:
            return None  # os-ken lacks it: the import fails naming the ryu module
        return importlib.util.spec_from_loader(name, self)

    def __init__(self):
        self.own_specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def create_module(self, spec):
        module = importlib.import_module(OS_KEN + spec.name[len(RYU):])
        self.own_specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module):
        """The os-ken module is imported whole already; it keeps its own spec (the import
        system gave it the ``ryu`` one)."""
        module.__spec__ = self.own_specs[module.__name__]


def install() -> None:
    """Answer ``ryu`` imports with os-ken in this process (once)."""
    if any(isinstance(finder, RyuAsOsKen) for finder in sys.meta_path):
        return
    from os_ken.base import app_manager

    app_manager.RyuApp = app_manager.OSKenApp
    sys.meta_path.insert(0, RyuAsOsKen())
