"""Token counts as the usage is read: any int in any usage field of a pi session counts
as itself clamped to [0, 2**60] (a negative count spends nothing, as the cost already
took it), in the records the content index keeps, in a session's totals and in the
usage report (with the index and without)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import SessionManager, Store
from sessiontree.format import UsageTotals, usage_record
from tests.conftest import examples
from tests.helpers import assistant, user

FIELDS = ("input", "output", "cacheRead", "cacheWrite")
BIG = 1 << 60
COUNT = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
"""Any int a JSON number of the agents holds (64-bit)."""


def clamped(value: int) -> int:
    return max(0, min(BIG, value))


def _usage(counts: tuple[int, ...]) -> dict[str, Any]:
    usage: dict[str, Any] = dict(zip(FIELDS, counts, strict=True))
    usage["totalTokens"] = sum(counts)
    usage["cost"] = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0.001}
    return usage


REPLIES = st.lists(st.tuples(*([COUNT] * len(FIELDS))), min_size=1, max_size=4)


@settings(max_examples=examples(100))
@given(replies=REPLIES)
def test_a_record_and_a_sessions_totals_count_each_field_clamped(
    replies: list[tuple[int, ...]],
) -> None:
    totals = UsageTotals()
    for n, counts in enumerate(replies):
        usage = _usage(counts)
        entry = {"type": "message", "id": f"e{n}", "message": assistant("ok", usage=usage)}
        record = usage_record(entry, n)
        assert record is not None
        got = (record.input, record.output, record.cache_read, record.cache_write)
        assert got == tuple(clamped(c) for c in counts)
        totals.add_usage(usage)
    summed = (totals.input, totals.output, totals.cache_read, totals.cache_write)
    assert summed == tuple(sum(clamped(r[i]) for r in replies) for i in range(len(FIELDS)))
    assert min(summed) >= 0


@settings(max_examples=examples(25))
@given(replies=REPLIES)
def test_the_usage_report_of_a_pi_file_counts_each_field_clamped(
    replies: list[tuple[int, ...]],
) -> None:
    wanted = tuple(sum(clamped(r[i]) for r in replies) for i in range(len(FIELDS)))
    with tempfile.TemporaryDirectory() as agent:
        sessions = Path(agent) / "sessions"
        with SessionManager.create("/proj", session_dir=str(sessions / "--proj--")) as sm:
            for n, counts in enumerate(replies):
                sm.append_message(user(f"q{n}"))
                sm.append_message(assistant(f"a{n}", usage=_usage(counts), responseId=f"r{n}"))
            stats = sm.get_usage_statistics()
        assert (stats.input, stats.output, stats.cache_read, stats.cache_write) == wanted
        with Store(agent) as store:
            for use_index in (True, False):
                (row,) = store.usage("monthly", tz="UTC", use_index=use_index).rows
                t = row.totals
                assert (t.input, t.output, t.cache_read, t.cache_write) == wanted, use_index
                assert t.total_tokens == sum(wanted) >= 0
