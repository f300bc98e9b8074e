"""Every file in tests/scenarios/invalid/ is refused with the problems its header announces.

A corpus file is a small scenario with exactly one thing broken. Its leading comments say what
the validator must answer::

    # expect: unknown key 'delya'          substring of a problem's message (required)
    # expect-hint: did you mean 'delay'?   substring of that problem's hint (optional)
    # expect-line: 14                      the line that problem points at (required unless
                                           the problem is about the whole file)

``expect-hint`` and ``expect-line`` belong to the ``expect`` above them; a file may announce
several problems, each matched to a distinct one. The file must produce exactly the announced
problems: one mistake gives one message, not a cascade. New files are picked up automatically.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from experiments import scenarios
from experiments import runner
from experiments.cli import main
from topologies.problems import Problem, ScenarioInvalid

CORPUS = Path(__file__).resolve().parents[1] / "scenarios" / "invalid"
FILES = sorted(CORPUS.glob("*.yaml"))
UNSET_VARIABLE = "EDGEBED_TEST_UNSET_VAR"
# The loader reads variables from this mapping, not from the machine's environment.
ENVIRON = {"EDGEBED_TEST_SET_VAR": "set"}


@dataclass
class Expectation:
    message: str
    hint: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        return (f"message containing {self.message!r}"
                + (f", hint containing {self.hint!r}" if self.hint is not None else "")
                + (f", at line {self.line}" if self.line is not None else ", whole file"))

    def matches(self, problem: Problem) -> bool:
        if self.message not in problem.message:
            return False
        if self.hint is not None and self.hint not in problem.hint:
            return False
        if self.line is None:
            return problem.path == ()  # no line: a problem about the whole document
        return problem.position.line == self.line


def expectations(path: Path) -> list[Expectation]:
    """The ``# expect...`` lines of the file's leading comment block."""
    found: list[Expectation] = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text.strip() and not text.startswith("#"):
            break  # the header ends at the first line of YAML
        match = re.match(r"#\s*expect(-hint|-line)?:\s*(.*?)\s*$", text)
        if not match:
            continue
        kind, value = match.groups()
        if kind is None:
            found.append(Expectation(value))
        elif not found:
            pytest.fail(f"{path.name}:{number}: '# expect{kind}:' before any '# expect:'")
        elif kind == "-hint":
            found[-1].hint = value
        else:
            found[-1].line = int(value)
    return found


def match_distinct(wanted: list[Expectation], problems: list[Problem]) -> dict[int, int] | None:
    """Assign each expectation its own problem (bipartite matching); None when impossible."""
    owner: dict[int, int] = {}  # problem index -> expectation index

    def assign(expectation: int, seen: set[int]) -> bool:
        for index, problem in enumerate(problems):
            if index in seen or not wanted[expectation].matches(problem):
                continue
            seen.add(index)
            if index not in owner or assign(owner[index], seen):
                owner[index] = expectation
                return True
        return False

    if all(assign(i, set()) for i in range(len(wanted))):
        return {e: p for p, e in owner.items()}
    return None


def refusal(path: Path) -> ScenarioInvalid:
    with pytest.raises(ScenarioInvalid) as raised:
        scenarios.load(path, environ=ENVIRON)
    return raised.value


def listing(problems: list[Problem]) -> str:
    return "\n".join(str(p) for p in problems)


@pytest.fixture
def no_unset_variable(monkeypatch):
    """The CLI reads the real environment: make sure the corpus's unset variable is unset."""
    monkeypatch.delenv(UNSET_VARIABLE, raising=False)


@pytest.fixture
def nothing_built(monkeypatch):
    """An invalid scenario must never reach the runner (these tests may run as root)."""

    def refuse(*arguments, **options):
        raise AssertionError("run_scenario was called for an invalid scenario")

    monkeypatch.setattr(runner, "run_scenario", refuse)


def test_corpus_is_large_enough():
    assert len(FILES) >= 30, f"only {len(FILES)} invalid scenarios in {CORPUS}"


def test_environ_lacks_the_unset_variable():
    assert UNSET_VARIABLE not in ENVIRON


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_header_announces_problems(path):
    wanted = expectations(path)
    assert wanted, f"{path.name} has no '# expect:' line"
    for expectation in wanted:
        assert expectation.message, f"{path.name}: empty '# expect:'"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_load_reports_announced_problems(path):
    wanted = expectations(path)
    problems = refusal(path).problems
    assignment = match_distinct(wanted, problems)
    assert assignment is not None, (
        f"{path.name}: wanted\n  " + "\n  ".join(str(w) for w in wanted)
        + f"\ngot\n{listing(problems)}")
    assert len(problems) == len(wanted), (
        f"{path.name}: problems nobody announced (a cascade?):\n"
        + listing([p for i, p in enumerate(problems) if i not in assignment.values()]))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_problem_strings_start_with_file_line_column(path):
    for problem in refusal(path).problems:
        text = str(problem)
        position = problem.position
        assert position.file == str(path)
        assert position.line >= 1 and position.column >= 1
        assert text.startswith(f"{path}:{position.line}:{position.column}: {problem.field}: "), text
        assert re.match(rf"^{re.escape(str(path))}:\d+:\d+: \S", text), text


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_validate_exits_2_without_traceback(path, capsys, no_unset_variable):
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "Traceback" not in captured.out
    assert "nothing was built" in " ".join(captured.err.split())


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_run_exits_2_and_creates_no_run_directory(path, tmp_path, capsys, no_unset_variable,
                                                  nothing_built):
    runs = tmp_path / "runs"
    assert main(["run", str(path), "--runs-dir", str(runs)]) == 2
    assert not runs.exists()
    assert "Traceback" not in capsys.readouterr().err


def test_alias_bomb_is_refused_before_expanding():
    problems = refusal(CORPUS / "alias-bomb.yaml").problems
    assert len(problems) == 1
    assert "expands to more than" in problems[0].message or "aliases" in problems[0].message
    assert "aliases that nest aliases multiply" in problems[0].hint


def test_zero_duration_is_refused():
    problems = refusal(CORPUS / "zero-duration.yaml").problems
    assert [p.field for p in problems] == ["duration"]
    assert "must be greater than 0" in problems[0].message


@pytest.mark.parametrize("name, field", [
    ("duplicate-node-yaml-key.yaml", "topology.nodes.v1"),
    ("duplicate-key-in-link.yaml", "topology.links[0].delay"),
    ("unset-environment-variable.yaml", "duration"),
])
def test_loader_problems_name_their_field(name, field):
    problems = refusal(CORPUS / name).problems
    assert [p.field for p in problems] == [field]


def test_merge_key_override_is_not_a_duplicate_key():
    text = """\
name: merged
topology:
  kinds:
    viewer: {role: viewer}
    switch: {role: switch}
  nodes:
    v1: {kind: viewer}
    s1: {kind: switch}
  links:
    - <<: {delay: 10ms, bw: 10Mbps}
      delay: 20ms
      endpoints: ["v1:eth1", "s1:eth1"]
"""
    loaded = scenarios.loads(text, environ=ENVIRON)
    assert loaded.links[0].forward.delay == pytest.approx(0.02)
    assert loaded.links[0].forward.bw == pytest.approx(10e6)
