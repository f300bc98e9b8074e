"""MkDocs hook: the reference pages and the benchmarks page, generated from the code and the
benchmarks' result files at every build, so they cannot drift from what they describe."""

from __future__ import annotations

import argparse
import inspect
import json
import os
from pathlib import Path

import sources
from mkdocs.structure.files import File

ENVIRONMENT_VARIABLE = "an environment variable, expanded before validation"


def _cell(text) -> str:
    """Text fit for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(info) -> str:
    if info.is_required():
        return "required"
    return f"`{info.get_default(call_default_factory=True)!r}`"


def parameters_table(model) -> str:
    """A pydantic model's fields as a table: parameter, default, meaning."""
    if not model.model_fields:
        return "No parameters.\n"
    rows = ["| parameter | default | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{name}` | {_cell(_default(info))} | {_cell(info.description or '')} |"
             for name, info in model.model_fields.items()]
    return "\n".join(rows) + "\n"


def _summary(docstring: str) -> str:
    """A docstring's first paragraph, on one line."""
    return " ".join(inspect.cleandoc(docstring).split("\n\n")[0].split())


def catalog_page(title: str, intro: str, entries: dict[str, tuple[str, type]]) -> str:
    parts = [f"# {title}\n", intro + "\n"]
    for name, (docstring, model) in entries.items():
        parts += [f"## `{name}`\n", _summary(docstring) + "\n", parameters_table(model)]
    return "\n".join(parts)


def agents_page() -> str:
    return catalog_page(
        "Traffic agents",
        "Generated from each agent's `Params` model (`edgebed agents` prints the same). A "
        "scenario's `workload` entry names the agent and gives these as `params:`; unknown "
        "keys are errors. `command` runs a program given in the scenario and has no parameters.",
        sources.agents())


def policies_page() -> str:
    return catalog_page(
        "Scheduling policies",
        "Generated from each policy's `Params` model (`edgebed policies` prints the same). A "
        "scenario selects one with `controller: {policy: NAME, params: {...}}`.",
        sources.scheduling_policies())


def _schema_type(schema: dict, nested: bool = False) -> str:
    """A short name of a JSON Schema's type, the environment-variable alternative left out; a
    nested alternative with a description (a quantity: "a duration, e.g. 20ms") is named by it."""
    if nested and schema.get("description") and schema["description"] != ENVIRONMENT_VARIABLE:
        return schema["description"]
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "enum" in schema:
        return ", ".join(f"`{value}`" for value in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            kinds = [_schema_type(s, nested=True) for s in schema[key]
                     if s.get("description") != ENVIRONMENT_VARIABLE]
            return " or ".join(dict.fromkeys(k for k in kinds if k))
    kind = schema.get("type", "")
    if kind == "array":
        return f"list of {_schema_type(schema.get('items', {}), nested=True)}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"mapping to {_schema_type(schema['additionalProperties'], nested=True)}"
    return kind if isinstance(kind, str) else " or ".join(kind)


def _anchor(name: str) -> str:
    return name.lower().replace(".", "")


def _properties_table(schema: dict) -> str:
    required = set(schema.get("required", ()))
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key, prop in schema.get("properties", {}).items():
        default = "required" if key in required else (
            f"`{json.dumps(prop['default'])}`" if "default" in prop else "")
        rows.append(f"| `{key}` | {_cell(_schema_type(prop))} | {_cell(default)} | "
                    f"{_cell(prop.get('description', ''))} |")
    return "\n".join(rows) + "\n"


def scenario_page() -> str:
    schema = sources.scenario_schema()
    parts = ["# Scenario format reference\n",
             "Generated from the scenario JSON Schema (`edgebed schema`, committed as "
             "`topologies/schema/scenario.schema.json`). The [scenario guide](../scenarios.md) "
             "explains the format with an example; cross-references (node names, ports, "
             "addresses, policy labels) are checked by `edgebed validate` beyond this schema.\n",
             "## Scenario file\n", _properties_table(schema)]
    for name, definition in schema.get("$defs", {}).items():
        parts.append(f"## {name} {{#{_anchor(name)}}}\n")
        if definition.get("description"):
            parts.append(_cell(definition["description"]) + "\n")
        if "properties" in definition:
            parts.append(_properties_table(definition))
        elif "enum" in definition:
            parts.append("One of " + ", ".join(f"`{v}`" for v in definition["enum"]) + ".\n")
    return "\n".join(parts)


def _command_help(command: argparse.ArgumentParser) -> str:
    return f"```text\n{command.format_help().rstrip()}\n```\n"


def _subcommands(command: argparse.ArgumentParser):
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def cli_page() -> str:
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; the page is always this wide
    try:
        top = sources.cli_parser()
        parts = ["# Command line\n", "Generated from `edgebed`'s argument parser.\n",
                 _command_help(top)]
        for name, command in _subcommands(top):
            parts += [f"## `edgebed {name}`\n", _command_help(command)]
            for sub_name, sub_command in _subcommands(command):
                parts += [f"### `edgebed {name} {sub_name}`\n", _command_help(sub_command)]
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(parts)


def wire_page() -> str:
    rows = ["| type | message | fixed fields after the common four bytes | tail |",
            "| ---: | --- | --- | --- |"]
    for message in sources.wire_formats():
        fields = ", ".join(f"`{name}` {code}" for name, code in message.fields)
        tail = message.tail and f"{message.tail} `{message.tail_name}`" + (
            f" (size in `{message.tail_size}`)" if message.tail_size else "")
        rows.append(f"| {message.type} | `{message.name}` | {fields} | {tail} |")
    return "\n".join([
        "# Wire messages\n",
        "Generated from the format table the agents pack and unpack with "
        "(`agents.wire.formats()`: `agents/formats.py` and each scheme's "
        "`agents/<slug>/formats.py`). Every "
        "message starts with magic `EB`, version 1 and its type code; numbers are big-endian; "
        "field codes are Python `struct`'s (`B` u8, `H` u16, `I` u32, `Q` u64). Timestamps "
        "(`*_ns`) are nanoseconds since the epoch on CLOCK_REALTIME, which every host of a run "
        "shares. The control protocol between agents and the controller is JSON on the "
        "management network: see [Control protocol](../concepts/control-protocol.md).\n",
        "\n".join(rows) + "\n"])


def _machine(record: dict) -> str:
    machine = record.get("machine", {})
    described = [f"{machine['cores']} cores" if "cores" in machine else "",
                 f"{machine['memory_gib']} GiB" if "memory_gib" in machine else "",
                 machine.get("cpu", ""), machine.get("kernel", "")]
    load = record.get("load_average")
    if load:
        described.append("load average at start " + " / ".join(f"{v:g}" for v in load))
    return ", ".join(d for d in described if d)


def _rows_table(rows: list[dict]) -> str:
    if not rows:
        return "No rows.\n"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(_cell(c) for c in columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _tables(record: dict) -> str:
    return "\n".join((f"**{_cell(table['title'])}**\n\n" if table.get("title") else "")
                     + _rows_table(table.get("rows", [])) for table in record.get("tables", []))


def benchmarks_page(results: Path = sources.BENCHMARK_RESULTS) -> str:
    parts = ["# Benchmarks\n",
             "Rendered from the result files the benchmarks write "
             "(`benchmarks/results/<benchmark>/<UTC time>.json`): each benchmark's latest "
             "result, then the earlier ones. Run one with `.venv/bin/python "
             "benchmarks/<benchmark>.py` (`make bench` runs them all) on an otherwise idle "
             "machine; commit the JSON it writes.\n"]
    for folder in sorted(p for p in results.glob("*") if p.is_dir()):
        files = sorted(folder.glob("*.json"))
        if not files:
            continue
        latest = json.loads(files[-1].read_text())
        parts += [f"## {folder.name}\n",
                  f"`benchmarks/{folder.name}.py`. {latest.get('description', '')}\n",
                  f"Latest: {latest.get('date', files[-1].stem)}"
                  + (f" ({latest['source']})" if latest.get("source") else "")
                  + (f"; {_machine(latest)}" if _machine(latest) else "") + ".\n",
                  _tables(latest)]
        if len(files) > 1:
            parts.append("Earlier results: " + ", ".join(
                f"`benchmarks/results/{folder.name}/{f.name}`" for f in reversed(files[:-1])) + ".\n")
    return "\n".join(parts)


PAGES = {
    "reference/scenario.md": scenario_page,
    "reference/agents.md": agents_page,
    "reference/policies.md": policies_page,
    "reference/cli.md": cli_page,
    "reference/wire.md": wire_page,
    "benchmarks.md": benchmarks_page,
}


# Files of the repository the pages show as they are, served at the same path as in the
# repository (the demo's picture is the one `make demo` wrote; no copy lives under docs/).
REPOSITORY_FILES = ("reports/live_edge/demo/timeline.png",)


def on_files(files, config):
    for uri, generate in PAGES.items():
        files.append(File.generated(config, uri, content=generate()))
    for path in REPOSITORY_FILES:
        files.append(File(path, src_dir=str(sources.ROOT), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    return files
