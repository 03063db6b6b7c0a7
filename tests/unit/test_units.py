"""One amount formatter (governor/config/units.py): what every view and message prints."""

from __future__ import annotations

from fractions import Fraction

import pytest

from governor.config.resources import format_amount

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
