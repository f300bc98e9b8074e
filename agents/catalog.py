"""The agents a scenario's ``workload`` can start, and what their parameters look like.

Every agent but ``command`` is a module ``agents.<name>`` with a ``Params`` model; this module
finds them, so the scenario checks can validate ``params:`` and the runner can start them.
"""

from __future__ import annotations

import importlib
import string
import typing

from pydantic import BaseModel

AGENTS = ("streamer", "camera", "viewer", "chat_collector", "edge_forwarder", "live_edge",
          "ai_terminal", "ai_receiver", "request_client", "request_server", "iperf")
COMMAND = "command"  # runs a program given in the scenario; no module, no params
COMMAND_PLACEHOLDERS = ("node", "ip", "run_dir")  # what {name} in a command is replaced with
RUN_DIR_VARIABLE = "EDGEBED_RUN_DIR"  # every program a run starts finds its run directory here


def command_placeholder_problem(part: str) -> str | None:
    """Why one word of a command cannot be filled per node (None: it can): a placeholder
    other than :data:`COMMAND_PLACEHOLDERS`, or braces that are not a placeholder."""
    try:
        fields = [name for _, name, spec, conversion in string.Formatter().parse(part)
                  if name is not None]
    except ValueError as error:
        return f"{error} in {part!r}; write {{{{ and }}}} for literal braces"
    for name in fields:
        if name not in COMMAND_PLACEHOLDERS:
            known = ", ".join("{" + p + "}" for p in COMMAND_PLACEHOLDERS)
            return (f"unknown placeholder {{{name}}} in {part!r} (known: {known}); "
                    "write {{ and }} for literal braces")
    return None


def available() -> list[str]:
    """Agents whose module is present, plus ``command``."""
    return [COMMAND] + [name for name in AGENTS if _module(name) is not None]


def _module(name: str):
    try:
        return importlib.import_module(f"agents.{name}")
    except ModuleNotFoundError as error:
        if error.name == f"agents.{name}":
            return None
        raise


def params_model(name: str) -> type[BaseModel]:
    return _module(name).Params


def module_name(name: str) -> str:
    return f"agents.{name}"


def node_reference_fields(model: type[BaseModel]) -> list[str]:
    """Fields that name other nodes (``NodeRef``, alone or in a list)."""
    found = []
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra
        annotation = info.annotation
        inner = [a for a in typing.get_args(annotation)] or [annotation]
        if (isinstance(extra, dict) and extra.get("node_ref")) or any(
                _is_node_ref(a) for a in inner):
            found.append(name)
    return found


def _is_node_ref(annotation) -> bool:
    for metadata in getattr(annotation, "__metadata__", ()):
        extra = getattr(metadata, "json_schema_extra", None)
        if isinstance(extra, dict) and extra.get("node_ref"):
            return True
    return any(_is_node_ref(a) for a in typing.get_args(annotation)
               if a is not type(None))
