"""Where the ``edgebed`` command writes and with which exit codes: the consoles, invalid input
reported, parameter tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from topologies.problems import ScenarioInvalid

EXIT_INVALID = 2
EXIT_NOT_READY = 3

console = Console(highlight=False)
# An error is never wrapped: it names a file or a path, and a path broken over two lines
# can be neither copied nor found by grep.
errors = Console(stderr=True, highlight=False, soft_wrap=True)


def report_invalid(error: ScenarioInvalid) -> int:
    for problem in error.problems:
        errors.print(str(problem), markup=False)
    count = len(error.problems)
    errors.print(f"{count} problem{'s' if count != 1 else ''}; nothing was built.", markup=False)
    return EXIT_INVALID


def print_parameters(title: str, model, leave_out: tuple[str, ...] = (),
                     kind: str = "parameter") -> None:
    """A parameters model (pydantic) as a table: name, default, meaning; without the fields
    in ``leave_out``."""
    table = Table(title=title, title_justify="left")
    for column in (kind, "default", "meaning"):
        table.add_column(column)
    for field_name, info in model.model_fields.items():
        if field_name in leave_out:
            continue
        default = "required" if info.is_required() else repr(info.get_default(
            call_default_factory=True))
        table.add_row(field_name, default, info.description or "")
    console.print(table)


def first_sentence(text: str | None) -> str:
    text = (text or "").strip()
    return " ".join(text.split(".")[0].split()) if text else ""
