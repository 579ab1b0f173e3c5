"""Times as people type them (`--since`, `--until`, `--tz`): a time zone by name, and a
date, a date-time or a time ago as epoch milliseconds.

Apart from the reports that use them most, so that a listing filtered by time does not
import the reports.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo

from sessiontree._util.env import time_zone_name
from sessiontree.errors import SessionTreeError

__all__ = ["parse_time", "time_range", "time_zone"]

_HOUR_MS = 3_600_000


def time_zone(name: str | None) -> tuple[tzinfo, str]:
    """The zone `--tz` names (IANA name or UTC), else the local one; and its name."""
    if name:
        if name.upper() in ("UTC", "Z"):
            return UTC, "UTC"
        # Imported here: the zone database is read for a zone named, not by every command.
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            return ZoneInfo(name), name
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise SessionTreeError(f"unknown time zone {name!r}") from exc
    local = datetime.now().astimezone().tzinfo
    assert local is not None
    key = time_zone_name()
    return local, key or (local.tzname(None) or "local")


_RELATIVE = re.compile(r"^([0-9]+)\s*([mhdw])$")
_FIRST_MS = int(datetime(1, 1, 2, tzinfo=UTC).timestamp() * 1000)
_LAST_MS = int(datetime(9999, 12, 30, tzinfo=UTC).timestamp() * 1000)
"""The times `--since`/`--until` may name: what `datetime` represents in every time
zone (and far inside the 64-bit integers of milliseconds that the content index and
PostgreSQL compare with)."""


def parse_time(text: str, tz: tzinfo, *, end: bool = False, now: float | None = None) -> int:
    """Epoch ms of `--since`/`--until` text: a date (YYYY-MM-DD, YYYYMMDD, YYYY-MM) in
    `tz` (with `end`, the end of that day or month), an ISO date-time, or a time ago
    (30m, 12h, 7d, 2w). A time before 0001-01-02 or after 9999-12-30 is an error."""
    try:
        ms = _parse_time(text, tz, end, now)
    except (ValueError, OverflowError):
        ms = None
    if ms is None:
        raise SessionTreeError(
            f"cannot read the time {text!r} (YYYY-MM-DD, an ISO date-time, or 30m/12h/7d/2w)"
        )
    if not _FIRST_MS <= ms <= _LAST_MS:
        raise SessionTreeError(f"the time {text!r} is out of range (from 0001-01-02 to 9999-12-30)")
    return ms


def _parse_time(text: str, tz: tzinfo, end: bool, now: float | None) -> int | None:
    value = text.strip()
    relative = _RELATIVE.match(value)
    if relative is not None:
        digits = relative.group(1).lstrip("0")
        if len(digits) > 12:  # more weeks than `datetime` holds
            return _FIRST_MS - 1
        unit = {"m": 60_000, "h": _HOUR_MS, "d": 24 * _HOUR_MS, "w": 7 * 24 * _HOUR_MS}
        base = now if now is not None else datetime.now(UTC).timestamp()
        return int(base * 1000) - int(digits or "0") * unit[relative.group(2)]
    if re.fullmatch(r"[0-9]{8}", value):
        value = f"{value[:4]}-{value[4:6]}-{value[6:]}"
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}", value):
        first = datetime.strptime(value, "%Y-%m").replace(tzinfo=tz)
        if not end:
            return int(first.timestamp() * 1000)
        if first.year == 9999 and first.month == 12:
            return _LAST_MS + 1
        following = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
        return int(following.timestamp() * 1000) - 1
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        day = datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=tz)
        if end:
            return int((day + timedelta(days=1)).timestamp() * 1000) - 1
        return int(day.timestamp() * 1000)
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    return int(moment.timestamp() * 1000)


def time_range(since: str | None, until: str | None) -> tuple[int | None, int | None]:
    """`--since` and `--until` as epoch ms (None where not given), in the local zone."""
    if not since and not until:
        return None, None
    tz, _ = time_zone(None)
    return (
        parse_time(since, tz) if since else None,
        parse_time(until, tz, end=True) if until else None,
    )
