"""The ``command`` workload: a program named in the scenario, run on each of its nodes with
placeholders filled per node; it has no agent module and no params."""

from __future__ import annotations

import shlex
import string

COMMAND = "command"  # runs a program given in the scenario; no module, no params
COMMAND_PLACEHOLDERS = {  # what {name} in a command is replaced with, per node
    "node": "the node's name",
    "ip": "the node's address",
    "run_dir": "the run directory (also in $EDGEBED_RUN_DIR)",
}
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


def command_argv(command: str | list[str], node: str, ip: str, run_dir: str) -> list[str]:
    """A ``command`` workload's program and arguments with the placeholders filled for
    ``node``."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    return [part.format(node=node, ip=ip, run_dir=run_dir) for part in argv]
