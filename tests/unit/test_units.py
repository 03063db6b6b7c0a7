"""One amount formatter (governor/config/units.py): what every view and message prints."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.cli.view_common import duration
from governor.config.resources import format_amount
from governor.config.units import format_size, format_timespan, parse_quantity, parse_size

G = 1024**3


@pytest.mark.parametrize(("resource", "value", "unit", "text"), [
    ("cpu", 1.5, False, "1.5"),
    ("cpu", Fraction(2, 3), False, "0.67"),
    ("cpu", 1.0, True, "1 core"),
    ("cpu", 3.5, True, "3.5 cores"),
    ("gpu", 2, True, "2"),
    ("memory", 12 * G, False, "12.0G"),
    ("memory", 512, True, "512"),
    ("io.nvme0n1.read", 200 * 1024**2, False, "200.0M/s"),
    ("io.sda.write", 2 * 1024**4, True, "2.0T/s"),
])
def test_an_amount_reads_by_its_resource(resource, value, unit, text):
    assert format_amount(resource, value, unit=unit) == text


def test_every_view_uses_it():
    # The simulate table, the status/explain/top views and the daemon's messages: one function.
    import governor.cli.render
    import governor.cli.view_common
    import governor.host.access

    for module in (governor.cli.render, governor.cli.view_common, governor.host.access):
        assert module.format_amount is format_amount


def test_hostile_magnitudes_stay_short():
    from governor.config.resources import format_amount

    assert format_amount("cpu", 1e308) == "1e+308"
    assert format_amount("memory", 1e308) == "1e+308"
    assert format_amount("io.sda.read", 1e300) == "1e+300/s"
    assert format_amount("cpu", 1.5) == "1.5" and format_amount("memory", 4 << 30) == "4.0G"
    # A span or a size that JSON brought (a hostile daemon's ended record) is shown, not a crash.
    assert [format_timespan(v) for v in (1e308, float("nan"), -0.0, 90.5)] == ["1e+308s", "nans", "0", "1min 30.5s"]
    assert [format_size(v) for v in (1e308, float("nan"), -0.0)] == ["1e+308", "nan", "0"]
    assert [duration(v) for v in (1e308, -1e308, float("nan"), -0.0, 3 * 86400 + 7200)] == [
        "1e+308s", "0s", "nans", "0s", "3d 2h"]  # ps's "ended … ago", status' uptime


@given(st.from_regex(r"\s*(\d{1,22}(\.\d{0,6})?|\.\d{1,6})\s*[KMGTkmgt]?\s*", fullmatch=True) | st.text(max_size=8))
def test_a_size_reads_as_the_rounded_exact_quantity_with_or_without_fractions(text):
    # parse_size reads a whole size without Fraction (governor run's launch); the same value.
    try:
        expected = round(parse_quantity(text))
    except ValueError as error:
        with pytest.raises(ValueError, match=re.escape(str(error))):
            parse_size(text)
    else:
        assert parse_size(text) == expected and isinstance(parse_size(text), int)


@pytest.mark.parametrize("value, said", [
    (0, "0"), (-1, "-1"), (10**20 - 1, "99999999999999999999"), (10**20, "a 21-digit number"),
    (10**300 - 1, "a 300-digit number"), (10**300, "a 301-digit number"), (-(10**25), "a 26-digit number"),
    pytest.param(10**5000, "a 5001-digit number", id="5001-digits")])
def test_an_integer_in_a_message_is_itself_or_its_number_of_digits(value, said):
    from governor.config.units import magnitude

    assert magnitude(value) == said  # one digit too many once, for 10**20 - 1 and 10**300 - 1
