"""Times as typed: dates, date-times and times ago as epoch ms, time zones by name."""

from __future__ import annotations

from datetime import UTC

import pytest

from sessiontree.errors import SessionTreeError
from sessiontree.format import parse_time, time_zone

T0 = 1_772_359_200_000  # 2026-03-01T10:00:00Z


def test_parse_time() -> None:
    tz = UTC
    assert parse_time("2026-03-01", tz) == parse_time("20260301", tz) == 1772323200000
    assert parse_time("2026-03-01", tz, end=True) == 1772323200000 + 86_400_000 - 1
    assert parse_time("2026-02", tz, end=True) == 1772323200000 - 1
    assert parse_time("2026-03-01T10:00:00Z", tz) == T0
    assert parse_time("7d", tz, now=1000.0) == 1_000_000 - 7 * 86_400_000
    with pytest.raises(Exception, match="cannot read the time"):
        parse_time("yesterday", tz)


def test_a_time_zone_is_named_or_the_local_one() -> None:
    assert time_zone("utc") == (UTC, "UTC")
    zone, name = time_zone("Europe/Berlin")
    assert name == "Europe/Berlin" and str(zone) == "Europe/Berlin"
    assert time_zone(None)[1]
    with pytest.raises(SessionTreeError, match="unknown time zone"):
        time_zone("Mars/Olympus")
