"""What a Claude Code transcript spent, as the usage report reads it: the replies of
its inline sidechains (Claude Code 1.x subagents) count, each once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sessiontree.foreign.claude import read_claude_session
from sessiontree.format import UsageRecord, usage_record
from sessiontree.reports._pricing import price_table
from sessiontree.reports._usage import price_record, within_session
from tests.foreign_support import write_jsonl

REAL = Path(__file__).parent.parent / "data" / "real" / "foreign" / "claude"
SIDECHAINS = REAL / (
    "d-kimuson__claude-code-viewer__mock-global-claude-dir__projects__sample-project__"
    "fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
)
ONE_HOUR_CACHE = REAL / "entireio__cli__26__dcd5518fea__0__full.jsonl"
SESSION = "0f4c1d2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f"


def _line(
    uid: str, parent: str | None, kind: str, message: dict[str, Any], t: int, **extra: Any
) -> dict[str, Any]:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "type": kind,
        "message": message,
        "uuid": uid,
        "timestamp": f"2025-08-01T10:00:{t:02d}.000Z",
        "sessionId": SESSION,
        "cwd": "/work/app",
        "version": "1.0.80",
        **extra,
    }


def _reply(msg_id: str, text: str, output: int) -> dict[str, Any]:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": [{"type": "text", "text": text}],
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 1000,
            "output_tokens": output,
        },
    }


def _records(path: Path) -> list[UsageRecord]:
    session = read_claude_session(str(path), subagents=False)
    entries = session.manager.get_entries()
    found = [r for n, e in enumerate(entries, start=1) if (r := usage_record(e, n)) is not None]
    return within_session(found)


def test_sidechain_replies_count_once(tmp_path: Path) -> None:
    side = {"isSidechain": True}
    lines = [
        _line("u1", None, "user", {"role": "user", "content": "Review app.py"}, 1),
        _line(
            "a1",
            "u1",
            "assistant",
            _reply("msg_main", "I'll ask an agent", 20),
            2,
            requestId="req_1",
        ),
        _line("s1", None, "user", {"role": "user", "content": "Read app.py"}, 3, **side),
        # One streamed reply written as two lines (same message.id and requestId).
        _line(
            "s2", "s1", "assistant", _reply("msg_side", "Reading", 5), 4, requestId="req_2", **side
        ),
        _line("s3", "s2", "assistant", _reply("msg_side", "Done", 7), 5, requestId="req_2", **side),
        # The main conversation's reply replayed into the sidechain: counted there already.
        _line(
            "s4",
            "s3",
            "assistant",
            _reply("msg_main", "I'll ask an agent", 20),
            6,
            requestId="req_9",
            **side,
        ),
    ]
    path = write_jsonl(tmp_path / f"{SESSION}.jsonl", lines)
    records = _records(path)
    assert [(r.model, r.output, r.cache_write) for r in records] == [
        ("claude-sonnet-4-20250514", 20, 100),
        ("claude-sonnet-4-20250514", 7, 100),
    ]
    session = read_claude_session(str(path), subagents=False)
    leaf = session.manager.get_leaf_entry()
    assert leaf is not None and leaf["type"] == "message"  # the context stays the main chain
    spent = [e for e in session.manager.get_entries() if e["type"] == "usage"]
    assert [e["parentId"] for e in spent] == [None]  # one branch of their own


def test_real_sidechain_transcript_totals_equal_ccusage() -> None:
    # Reference (oracle) figures: ccusage 20.0.24, `CLAUDE_CONFIG_DIR=<dir holding
    # projects/p/<this file>> ccusage session --json --offline`.
    records = _records(SIDECHAINS)
    table = price_table()
    totals = (
        sum(r.input for r in records),
        sum(r.output for r in records),
        sum(r.cache_read for r in records),
        sum(r.cache_write for r in records),
    )
    assert totals == (818, 51933, 3647854, 137976)
    cost = sum(price_record(r, table)[0] for r in records)
    assert abs(cost - 2.3932151999999998) < 1e-6


def test_real_one_hour_cache_transcript_totals_equal_ccusage() -> None:
    # Reference (oracle) figures: ccusage 20.0.24, `CLAUDE_CONFIG_DIR=<dir holding
    # projects/p/<this file>> ccusage session --json --offline`. Every cache write of
    # this file is a 1-hour one.
    records = _records(ONE_HOUR_CACHE)
    assert sum(r.cache_write for r in records) == 245647
    assert sum(r.cache_write_1h for r in records) == 245647
    cost = sum(price_record(r, price_table())[0] for r in records)
    assert abs(cost - 7.589217000000004) < 1e-6
