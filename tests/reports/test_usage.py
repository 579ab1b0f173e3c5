"""Usage reports: each reply counted once (R1-R4), costs priced and marked, blocks and periods."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import serialize_entry
from sessiontree.layout import store_parts
from sessiontree.reports import (
    blocks,
    count_once,
    load_usage,
    parse_time,
    price,
    price_table,
    report,
    store_stats,
    time_zone,
)
from tests.conftest import examples

T0 = 1_772_359_200_000  # 2026-03-01T10:00:00Z


def iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    )


def reply(
    entry_id: str,
    parent: str | None,
    ts: int,
    tokens: tuple[int, int, int, int] = (100, 10, 0, 0),
    cost: float | None = 0.5,
    model: str = "claude-sonnet-4-5",
    provider: str = "anthropic",
    response_id: str | None = None,
) -> dict[str, Any]:
    usage: dict[str, Any] = dict(
        zip(("input", "output", "cacheRead", "cacheWrite"), tokens, strict=True)
    )
    if cost is not None:
        usage["cost"] = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": cost}
    message: dict[str, Any] = {
        "role": "assistant",
        "content": [{"type": "text", "text": f"reply {entry_id}"}],
        "provider": provider,
        "model": model,
        "usage": usage,
        "timestamp": ts,
    }
    if response_id is not None:
        message["responseId"] = response_id
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": iso(ts),
        "message": message,
    }


def prompt(entry_id: str, parent: str | None, ts: int) -> dict[str, Any]:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": iso(ts),
        "message": {"role": "user", "content": "go", "timestamp": ts},
    }


def marker(entry_id: str, parent: str | None, source_id: str, **data: Any) -> dict[str, Any]:
    return {
        "type": "custom",
        "id": entry_id,
        "parentId": parent,
        "timestamp": iso(T0 + 9_000_000),
        "customType": "foreign_session_import",
        "data": {"source": "claude", "sourceId": source_id, **data},
    }


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: list[str] = []

    def session(
        self, name: str, entries: list[dict[str, Any]], *, sid: str | None = None, **header: Any
    ) -> str:
        path = self.root / "sessions" / "--p--" / f"2026-03-01T10-00-00-000Z_{sid or name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        head = {
            "type": "session",
            "version": 3,
            "id": sid or name,
            "timestamp": iso(T0),
            "cwd": "/p",
        }
        head.update(header)
        lines = [serialize_entry(head)] + [serialize_entry(e) for e in entries]
        path.write_text("\n".join(lines) + "\n")
        self.paths.append(str(path))
        return str(path)

    def counted(self, use_index: bool = True) -> tuple[list[Any], Any]:
        data = load_usage(self.paths, store_parts(agent_dir=str(self.root)), use_index=use_index)
        return count_once(data.sessions)

    def totals(self, use_index: bool = True) -> tuple[set[tuple[str, str]], Any]:
        counted, dups = self.counted(use_index)
        ids = [(s.file.session_id or "", r.entry_id or "") for s, r in counted]
        assert len(ids) == len(set(ids))
        return set(ids), dups


@pytest.fixture
def store(agent_dir: Path) -> Store:
    agent_dir.mkdir(parents=True, exist_ok=True)
    return Store(agent_dir)


@pytest.mark.parametrize("use_index", [True, False])
def test_shared_prefixes_and_repeated_lines_count_once(store: Store, use_index: bool) -> None:
    a1 = reply("a1", "u1", T0 + 1000, (100, 10, 5, 1), 0.5)
    store.session(
        "A",
        [
            prompt("u1", None, T0),
            a1,
            reply("a2", "u1", T0 + 2000, (200, 20, 0, 0), 0.25),  # a branch off u1
            reply("a3", "a1", T0 + 3000, (300, 30, 0, 0), 0.125),
            a1,  # a writer repeated a line
        ],
    )
    ids, dups = store.totals(use_index)
    assert ids == {("A", "a1"), ("A", "a2"), ("A", "a3")}
    assert dups.repeated_lines == 1
    replies = price(store.counted(use_index)[0])
    rep = report(replies, "daily")
    t = rep.totals
    assert (t.messages, t.input, t.output, t.cache_read, t.cache_write) == (3, 600, 60, 5, 1)
    assert t.cost == pytest.approx(0.875) and t.estimated_messages == 0


def test_a_reply_split_across_lines_counts_once(store: Store) -> None:
    store.session(
        "A",
        [
            prompt("u1", None, T0),
            reply("p1", "u1", T0 + 1, (100, 5, 0, 0), 0.1, response_id="msg_1"),
            reply("p2", "p1", T0 + 2, (100, 50, 0, 0), 0.4, response_id="msg_1"),
            reply("p3", "p2", T0 + 3, (100, 50, 0, 0), 0.4, response_id="msg_1"),
            reply("q1", "p3", T0 + 4, (7, 7, 0, 0), 0.01, response_id="msg_2"),
        ],
    )
    counted, dups = store.counted()
    assert [r.entry_id for _, r in counted] == ["p2", "q1"]  # the fullest, the first of equals
    assert dups.split_replies == 2


def test_forks_count_the_parents_replies_once(store: Store) -> None:
    parent_entries = [
        prompt("u1", None, T0),
        reply("a1", "u1", T0 + 1000),
        reply("a2", "a1", T0 + 2000),
    ]
    parent = store.session("P", parent_entries)
    store.session("F", [*parent_entries, reply("a3", "a2", T0 + 3000)], parentSession=parent)
    # A fork naming its parent by session id, and a fork of the fork.
    store.session("G", [*parent_entries[:2], reply("a4", "a1", T0 + 4000)], parentSession="P")
    store.session(
        "H",
        [*parent_entries, reply("a3", "a2", T0 + 3000), reply("a5", "a3", T0 + 5000)],
        parentSession="F",
    )
    ids, dups = store.totals()
    assert ids == {("P", "a1"), ("P", "a2"), ("F", "a3"), ("G", "a4"), ("H", "a5")}
    assert dups.fork_copies == 2 + 1 + 3
    # An entry id reused by an unrelated session is not a copy.
    store.session("Q", [reply("a1", None, T0 + 7000)])
    ids, _ = store.totals()
    assert ("Q", "a1") in ids
    # The parent deleted: its forks still share what they copied from it.
    os.unlink(parent)
    store.paths.remove(parent)
    ids, _ = store.totals()
    assert {i for s, i in ids if s != "Q"} == {"a1", "a2", "a3", "a4", "a5"}
    assert len(ids) == 6


def test_one_session_read_from_two_files_counts_each_reply_once(store: Store) -> None:
    # Another machine's copy shown here by a sync (it has gone on), beside this one's.
    entries = [prompt("s0", None, T0), reply("s1", "s0", T0 + 10), reply("s2", "s1", T0 + 20)]
    here = store.session("S", entries)
    elsewhere = Path(here).parent.parent / "--q--" / os.path.basename(here)
    elsewhere.parent.mkdir()
    more = [reply("s3", "s2", T0 + 30)]
    elsewhere.write_text(Path(here).read_text() + "".join(serialize_entry(e) + "\n" for e in more))
    store.paths.append(str(elsewhere))
    ids, dups = store.totals()
    assert ids == {("S", "s1"), ("S", "s2"), ("S", "s3")}
    assert dups.session_copies == 2
    counted, _ = store.counted()
    assert {s.path for s, r in counted if r.entry_id in ("s1", "s2")} == {here}


def test_imports_count_the_source_once(store: Store) -> None:
    source = store.session(
        "X", [prompt("x0", None, T0), reply("x1", "x0", T0 + 10), reply("x2", "x1", T0 + 20)]
    )
    copies = [prompt("c0", None, T0), reply("c1", "c0", T0 + 10), reply("c2", "c1", T0 + 20)]
    # Version 1: what precedes the marker was copied; then the user went on here.
    store.session(
        "I1",
        [*copies, marker("m1", "c2", "X"), reply("l1", "m1", T0 + 10_000_000, (1, 1, 0, 0), 0.01)],
        created=None,
    )
    # Version 2: the marker lists the copied ids.
    store.session(
        "I2",
        [
            *copies,
            marker("m2", "c2", "X", version=2, sourceExtraEntryIds=["c0", "c1", "c2"]),
            reply("l2", "m2", T0 + 10_000_001, (2, 2, 0, 0), 0.02),
        ],
    )
    ids, dups = store.totals()
    assert ids == {("X", "x1"), ("X", "x2"), ("I1", "l1"), ("I2", "l2")}
    assert dups.import_copies == 4
    # Without the source, one import counts the copies (the one with most, else the oldest).
    os.unlink(source)
    store.paths.remove(source)
    ids, dups = store.totals()
    assert {i for _, i in ids} == {"c1", "c2", "l1", "l2"}
    assert dups.import_copies == 2


# ---------------------------------------------------------------------- pricing


def test_estimates_are_marked_and_recorded_costs_never_replaced(store: Store) -> None:
    table = price_table()
    tokens = (1000, 100, 500, 200)
    path = store.session(
        "A",
        [
            prompt("u", None, T0),
            reply("recorded", "u", T0 + 1, tokens, 0.3),
            reply("absent", "u", T0 + 2, tokens, None),
            reply("zero", "u", T0 + 3, tokens, 0.0),
            reply("free", "u", T0 + 4, tokens, None, "qwen/qwen3-coder:free", "openrouter"),
            reply("unknown", "u", T0 + 5, tokens, None, "my-local-model", "ollama"),
            reply("unknown0", "u", T0 + 6, tokens, 0.0, "my-local-model", "ollama"),
            reply("none", "u", T0 + 7, (0, 0, 0, 0), None),
        ],
    )
    before = Path(path).read_bytes()
    replies = {r.record.entry_id: r for r in price(store.counted()[0])}
    quote = table.quote("anthropic", "claude-sonnet-4-5", T0, *tokens)
    assert quote is not None and quote.cost > 0
    assert replies["recorded"].cost == 0.3 and not replies["recorded"].estimated
    for name in ("absent", "zero"):
        assert replies[name].estimated and replies[name].cost == pytest.approx(quote.cost)
    assert replies["free"].cost == 0 and not replies["free"].estimated
    assert not replies["free"].unpriced
    assert replies["unknown"].unpriced and replies["unknown"].cost == 0
    assert not replies["unknown0"].unpriced and not replies["unknown0"].estimated
    assert replies["none"].cost == 0 and not replies["none"].unpriced
    rep = report(list(replies.values()), "monthly")
    assert rep.totals.estimated_messages == 2 and rep.totals.unpriced_messages == 1
    assert rep.totals.cost == pytest.approx(0.3 + 2 * quote.cost)
    assert rep.prices == {"table": "genai-prices", "version": table.version}
    assert Path(path).read_bytes() == before  # nothing written back


def test_the_sonnet_estimate_matches_the_published_price() -> None:
    # $3 / $15 per MTok, cache reads $0.30, cache writes $3.75 (under 200k input).
    quote = price_table().quote("anthropic", "claude-sonnet-4-5", T0, 1000, 100, 500, 200)
    assert quote is not None
    assert quote.cost == pytest.approx(1000 * 3e-6 + 100 * 15e-6 + 500 * 0.3e-6 + 200 * 3.75e-6)


def test_one_hour_cache_writes_cost_twice_the_input_rate() -> None:
    # Anthropic's prompt caching prices: a 5-minute cache write costs 1.25x the input
    # rate, a 1-hour one 2x; Sonnet 4.5 under 200k input: $3 input, $3.75 and $6 writes;
    # over 200k (the whole input, cached included): $6 input, $7.50 and $12 writes.
    table = price_table()
    short = table.quote("anthropic", "claude-sonnet-4-5", T0, 1000, 100, 500, 200, 150)
    assert short is not None
    assert short.cost == pytest.approx(
        1000 * 3e-6 + 100 * 15e-6 + 500 * 0.3e-6 + 50 * 3.75e-6 + 150 * 6e-6
    )
    long = table.quote("anthropic", "claude-sonnet-4-5", T0, 300_000, 100, 500, 200, 200)
    assert long is not None
    assert long.cost == pytest.approx(300_000 * 6e-6 + 100 * 22.5e-6 + 500 * 0.6e-6 + 200 * 12e-6)
    # More 1-hour writes than writes: no more than the writes.
    capped = table.quote("anthropic", "claude-sonnet-4-5", T0, 0, 0, 0, 200, 999)
    assert capped is not None and capped.cost == pytest.approx(200 * 6e-6)


@pytest.mark.parametrize("use_index", [True, False])
def test_the_one_hour_writes_pi_records_are_priced_so(store: Store, use_index: bool) -> None:
    # pi 1.6 records `cacheWrite1h` (of `cacheWrite`) in an Anthropic reply's usage.
    hour = reply("hour", "u", T0 + 1, (1000, 100, 500, 200), None)
    hour["message"]["usage"]["cacheWrite1h"] = 150
    store.session("A", [prompt("u", None, T0), hour])
    (counted,) = price(store.counted(use_index)[0])
    assert counted.record.cache_write_1h == 150 and counted.estimated
    assert counted.cost == pytest.approx(
        1000 * 3e-6 + 100 * 15e-6 + 500 * 0.3e-6 + 50 * 3.75e-6 + 150 * 6e-6
    )


@settings(max_examples=examples(60), deadline=None)
@given(
    model=st.sampled_from(
        [("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o"), ("google", "gemini-2.5-pro")]
    ),
    counts=st.tuples(*(st.integers(0, 400_000) for _ in range(4))),
)
def test_the_fast_price_path_equals_the_tables_own_calculation(
    model: tuple[str, str], counts: tuple[int, int, int, int]
) -> None:
    from genai_prices import Usage, calc_price

    quote = price_table().quote(model[0], model[1], T0, *counts)
    assert quote is not None
    inp, out, read, write = counts
    expected = calc_price(
        Usage(
            input_tokens=inp + read + write,
            output_tokens=out,
            cache_read_tokens=read,
            cache_write_tokens=write,
        ),
        model[1],
        provider_id=model[0],
        genai_request_timestamp=datetime.fromtimestamp(T0 / 1000, UTC),
    ).total_price
    assert quote.cost == pytest.approx(float(expected), rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------------- periods and blocks


def test_periods_follow_the_time_zone(store: Store) -> None:
    late = T0 + 13 * 3_600_000 + 1_800_000  # 2026-03-01T23:30Z, a Sunday
    store.session("A", [prompt("u", None, T0), reply("r1", "u", T0), reply("r2", "u", late)])
    replies = price(store.counted()[0])
    berlin, name = time_zone("Europe/Berlin")
    assert [r.key for r in report(replies, "daily").rows] == ["2026-03-01"]
    assert [r.key for r in report(replies, "daily", tz=berlin, tz_name=name).rows] == [
        "2026-03-01",
        "2026-03-02",
    ]
    assert [r.key for r in report(replies, "weekly", tz=berlin).rows] == [
        "2026-02-23",
        "2026-03-02",
    ]
    assert [r.key for r in report(replies, "monthly").rows] == ["2026-03"]
    since = parse_time("2026-03-02", berlin)
    only = report(replies, "daily", tz=berlin, since=since)
    assert only.totals.messages == 1
    assert [r.key for r in report(replies, "project").rows] == ["/p"]
    assert report(replies, "project", projects=["/elsewhere"]).rows == []
    rows = report(replies, "session").rows
    assert len(rows) == 1 and rows[0].models["anthropic/claude-sonnet-4-5"].messages == 2


def test_blocks_follow_the_documented_rule(store: Store) -> None:
    h = 3_600_000
    day = T0 - 10 * h  # 2026-03-01T00:00Z
    at = [
        day + 10 * h + 20 * 60_000,  # 10:20 -> block 10:00-15:00
        day + 11 * h,
        day + 14 * h + 59 * 60_000,  # 14:59, still in it
        day + 15 * h + 10 * 60_000,  # 15:10 -> block 15:00-20:00
        day + 23 * h + 30 * 60_000,  # 23:30 -> gap 20:00-23:00, block 23:00-04:00
    ]
    entries: list[dict[str, Any]] = [prompt("u", None, day)]
    for n, ts in enumerate(at):
        entries.append(reply(f"r{n}", "u", ts, (600, 0, 0, 0), 0.6))
    store.session("A", entries)
    found = blocks(price(store.counted()[0]))
    shape = [(b.gap, (b.start - day) // h, (b.end - day) // h, b.totals.messages) for b in found]
    assert shape == [
        (False, 10, 15, 3),
        (False, 15, 20, 1),
        (True, 20, 23, 0),
        (False, 23, 28, 1),
    ]
    first = found[0]
    rate = first.burn_rate()
    assert rate is not None
    minutes = (at[2] - at[0]) / 60_000
    assert rate[0] == pytest.approx(1800 / minutes) and rate[1] == pytest.approx(1.8 / minutes * 60)
    now = day + 12 * h
    assert first.active(now) and not found[1].active(now)
    projection = first.projection(now)
    assert projection is not None
    assert projection[1] == pytest.approx(1.8 + rate[1] * 3)  # three hours left at that rate
    assert first.projection(day + 16 * h) is None


def test_stats_is_a_view_over_the_usage_report(store: Store) -> None:
    parent_entries = [prompt("u1", None, T0), reply("a1", "u1", T0 + 1, (10, 1, 0, 0), None)]
    parent = store.session("P", parent_entries)
    store.session("F", [*parent_entries, reply("a2", "a1", T0 + 2)], parentSession=parent)
    stats = store_stats(store.paths, store_parts(agent_dir=str(store.root)))
    rep = report(price(store.counted()[0]), "daily")
    assert stats.usage.to_json() == rep.totals.to_json()
    assert stats.usage.messages == 2 and stats.usage.estimated_messages == 1
    assert stats.sessions == 2 and stats.duplicates.fork_copies == 1
    assert stats.entries == 5


def test_totals_equal_a_hand_computed_sum(store: Store) -> None:
    """One store with a shared prefix, a repeated line, a split reply, a fork and an import."""
    a1 = reply("a1", "u1", T0 + 1, (100, 10, 1000, 50), 0.25)
    main = [
        prompt("u1", None, T0),
        a1,
        reply("a2", "u1", T0 + 2, (200, 20, 0, 0), 0.5),  # another branch from u1
        a1,  # repeated line
        reply("s1", "a1", T0 + 3, (300, 1, 0, 0), 0.1, response_id="r"),
        reply("s2", "s1", T0 + 4, (300, 30, 0, 0), 0.75, response_id="r"),  # same reply, full
    ]
    parent = store.session("M", main)
    store.session(
        "F", [*main[:3], reply("f1", "a2", T0 + 5, (7, 3, 0, 0), 1.0)], parentSession=parent
    )
    store.session("X", [prompt("x0", None, T0), reply("x1", "x0", T0 + 6, (40, 4, 0, 0), 2.0)])
    store.session(
        "I",
        [
            prompt("c0", None, T0),
            reply("c1", "c0", T0 + 6, (40, 4, 0, 0), 0.0),  # omp's importer writes 0
            marker("m", "c1", "X"),
            reply("l1", "m", T0 + 7, (1, 1, 0, 0), 0.125),
        ],
    )
    counted, duplicates = store.counted()
    rep = report(price(counted), "daily", duplicates=duplicates)
    t = rep.totals
    # a1 + a2 + s2 + f1 + x1 + l1
    assert t.messages == 6
    assert t.input == 100 + 200 + 300 + 7 + 40 + 1
    assert t.output == 10 + 20 + 30 + 3 + 4 + 1
    assert (t.cache_read, t.cache_write) == (1000, 50)
    assert t.cost == pytest.approx(0.25 + 0.5 + 0.75 + 1.0 + 2.0 + 0.125)
    assert t.estimated_messages == 0
    assert rep.duplicates.to_json() == {
        "repeatedLines": 1,
        "splitReplies": 1,
        "forkCopies": 2,
        "importCopies": 1,
        "sessionCopies": 0,
    }
