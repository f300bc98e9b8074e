import pytest

from edgebed import units


@pytest.mark.parametrize("text, seconds", [
    ("20ms", 0.02), ("1.5s", 1.5), ("2min", 120), ("250us", 250e-6), (3, 3.0), ("0", 0.0),
    (" 10 ms ", 0.01), ("1e3ms", 1.0),
])
def test_durations(text, seconds):
    assert units.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text, bps", [
    ("50Mbps", 50e6), ("500kbps", 500e3), ("1Gbps", 1e9), ("10Mbit", 10e6), (1000, 1000.0),
])
def test_rates(text, bps):
    assert units.parse_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize("text, fraction", [("1.5%", 0.015), ("0.015", 0.015), ("100%", 1.0)])
def test_fractions(text, fraction):
    assert units.parse_fraction(text) == pytest.approx(fraction)


@pytest.mark.parametrize("text, size", [("1500B", 1500), ("64KiB", 65536), ("10MB", 10e6)])
def test_sizes(text, size):
    assert units.parse_size(text) == pytest.approx(size)


@pytest.mark.parametrize("parse, text, fragment", [
    (units.parse_duration, "10 sex", "unknown unit 'sex'"),
    (units.parse_rate, "fast", "not a number with a unit"),
    (units.parse_rate, "50Mbs", "unknown unit 'Mbs'"),
    (units.parse_duration, True, "expected a duration"),
    (units.parse_fraction, [1], "expected a fraction"),
])
def test_bad_quantities_say_how_to_write_them(parse, text, fragment):
    with pytest.raises(units.UnitError) as error:
        parse(text)
    assert fragment in str(error.value)
    assert "like" in str(error.value) or "expected" in str(error.value)


def test_formatting_round_trips():
    assert units.format_duration(0.02) == "20ms"
    assert units.format_rate(50e6) == "50Mbps"
    assert units.parse_rate(units.format_rate(2.5e6)) == 2.5e6
    assert units.format_fraction(0.05) == "5%"
    assert units.parse_fraction(units.format_fraction(0.025)) == 0.025
