"""Validation has no crash path: whatever bytes a scenario file holds, ``edgebed validate``
answers valid (exit 0) or a list of problems (exit 2), never a traceback.

Hypothesis feeds random bytes, random text, and mutations of the shipped scenarios (bytes
flipped, inserted, deleted, lines shuffled) to the loader and validator, in process.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments import scenarios
from experiments.cli import main
from tests.conftest import EXAMPLES
from topologies.problems import ScenarioInvalid

SEEDS = [path.read_bytes() for path in EXAMPLES]


@st.composite
def mutated_scenarios(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 8))):
        operation = draw(st.sampled_from(("flip", "insert", "delete", "swap_lines")))
        where = draw(st.integers(0, max(0, len(data) - 1)))
        if operation == "flip" and data:
            data[where] = draw(st.integers(0, 255))
        elif operation == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=12))
        elif operation == "delete" and data:
            data[where:where + draw(st.integers(1, 40))] = b""
        else:
            lines = bytes(data).split(b"\n")
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            data = bytearray(b"\n".join(lines))
    return bytes(data)


YAMLISH = st.lists(st.sampled_from(list(":-[]{}&*!|>'\"#%@`,?\n\t ${}=") +
                                   ["name", "topology", "nodes", "links", "x", "1", "\x01",
                                    "\x7f", "\ufeff", "é", "${A:=3}", "<<", "!!int", "~"]),
                   max_size=80).map("".join)
INPUTS = st.one_of(st.binary(max_size=300), YAMLISH.map(str.encode), mutated_scenarios())


def assert_refused_or_valid(data: bytes, tmp_path) -> None:
    path = tmp_path / "fuzzed.yaml"
    path.write_bytes(data)
    try:
        scenarios.load(path, {})
    except ScenarioInvalid as error:
        assert error.problems and all(str(p) for p in error.problems)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=INPUTS)
def test_loader_and_validator_never_crash(data, tmp_path):
    assert_refused_or_valid(data, tmp_path)


@pytest.mark.parametrize("data", [b"name: x\x01y\n", b"\x00", b"\xff\xfe", b"name: [\n",
                                  b"a: 1999-13-45\n", b"!!python/object:os.system x\n",
                                  b"topology: {nodes: {a: {kind: 1e999}}}\n"])
def test_validate_exits_2_without_a_traceback(data, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert str(path) in captured.err
