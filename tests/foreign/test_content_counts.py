"""Token counts as the other agents' readers read them (`_content.int_field`): any int in
any usage field of a Claude Code transcript, a Codex rollout or a Gemini CLI session
counts as itself, or 0 when it is negative (no reply spends fewer than no tokens; the cost already took it so),
in the usage report's totals, which are never negative."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree.foreign._content import int_field
from sessiontree.foreign.gemini import read_gemini_session
from sessiontree.store import Store
from tests.conftest import examples
from tests.foreign.test_agents import gemini_lines, gemini_message, gemini_meta
from tests.foreign_support import write_jsonl

COUNT = st.integers(min_value=-(1 << 53), max_value=1 << 53)
"""Any int the agents' JSON numbers hold exactly (they are JavaScript's doubles, and
their files are read as JSON.parse reads them)."""
SESSION = "0f4c1d2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f"
CODEX_ID = "019e9625-802f-7e91-840a-cfe88d14117c"


def _counted(value: int) -> int:
    return max(0, value)


@given(value=st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True)))
def test_a_count_is_never_negative(value: float) -> None:
    got = int_field({"n": value}, "n")
    assert got >= 0
    if isinstance(value, int):
        assert got == max(0, value)


def _totals(home: Path, agent: str) -> tuple[int, int, int, int]:
    with Store(home, agent=agent) as store:
        (row,) = store.usage("monthly", tz="UTC", use_index=False).rows
    t = row.totals
    return t.input, t.output, t.cache_read, t.cache_write


def _claude(home: Path, replies: list[tuple[int, int, int, int]]) -> None:
    lines: list[dict[str, Any]] = []
    parent = None
    for n, (fresh, output, read, written) in enumerate(replies):
        for uid, kind, message in (
            (f"u{n}", "user", {"role": "user", "content": f"question {n}"}),
            (
                f"a{n}",
                "assistant",
                {
                    "id": f"m{n}",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-20250514",
                    "content": [{"type": "text", "text": f"answer {n}"}],
                    "usage": {
                        "input_tokens": fresh,
                        "output_tokens": output,
                        "cache_read_input_tokens": read,
                        "cache_creation_input_tokens": written,
                        "cache_creation": {"ephemeral_1h_input_tokens": written},
                    },
                },
            ),
        ):
            lines.append(
                {
                    "parentUuid": parent,
                    "isSidechain": False,
                    "type": kind,
                    "message": message,
                    "uuid": uid,
                    "timestamp": f"2025-08-01T10:{n:02d}:0{len(lines) % 2}.000Z",
                    "sessionId": SESSION,
                    "cwd": "/work/app",
                    "version": "1.0.80",
                    "requestId": f"r{n}",
                }
            )
            parent = uid
    write_jsonl(home / "projects" / "-work-app" / f"{SESSION}.jsonl", lines)


def _codex(home: Path, replies: list[tuple[int, int, int, int]]) -> None:
    def at(t: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": f"2026-06-05T04:{t:02d}:00.000Z", "type": kind, "payload": payload}

    meta = {
        "id": CODEX_ID,
        "timestamp": "2026-06-05T04:00:00.000Z",
        "cwd": "/work/app",
        "originator": "codex_exec",
        "cli_version": "0.135.0",
        "model_provider": "openai",
    }
    lines = [
        at(0, "session_meta", meta),
        at(0, "turn_context", {"cwd": "/work/app", "model": "gpt-5.5", "effort": "medium"}),
    ]
    for n, (fresh, output, cached, total) in enumerate(replies):
        prompt = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": f"question {n}"}],
        }
        answer = {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"answer {n}"}],
        }
        last = {
            "input_tokens": fresh,
            "cached_input_tokens": cached,
            "output_tokens": output,
            "reasoning_output_tokens": 0,
            "total_tokens": total,
        }
        lines += [
            at(n + 1, "response_item", prompt),
            at(n + 1, "event_msg", {"type": "user_message", "message": f"question {n}"}),
            at(n + 1, "response_item", answer),
            at(n + 1, "event_msg", {"type": "token_count", "info": {"last_token_usage": last}}),
        ]
    day = home / "sessions" / "2026" / "06" / "05"
    write_jsonl(day / f"rollout-2026-06-05T04-00-00-{CODEX_ID}.jsonl", lines)


REPLIES = st.lists(st.tuples(COUNT, COUNT, COUNT, COUNT), min_size=1, max_size=3)


@settings(max_examples=examples(25))
@given(replies=REPLIES)
def test_a_claude_transcripts_usage_counts_each_field_clamped(
    replies: list[tuple[int, int, int, int]],
) -> None:
    wanted = tuple(sum(_counted(r[i]) for r in replies) for i in range(4))
    with tempfile.TemporaryDirectory() as home:
        _claude(Path(home), replies)
        assert _totals(Path(home), "claude") == wanted


@settings(max_examples=examples(25))
@given(replies=REPLIES)
def test_a_codex_rollouts_usage_counts_each_field_clamped(
    replies: list[tuple[int, int, int, int]],
) -> None:
    # Codex counts cached input inside its input: what is not cached is fresh input.
    fresh = sum(max(_counted(r[0]) - _counted(r[2]), 0) for r in replies)
    wanted = (fresh, sum(_counted(r[1]) for r in replies), sum(_counted(r[2]) for r in replies), 0)
    with tempfile.TemporaryDirectory() as home:
        _codex(Path(home), replies)
        assert _totals(Path(home), "codex") == wanted


GEMINI_REPLIES = st.lists(st.tuples(COUNT, COUNT, COUNT, COUNT, COUNT), min_size=1, max_size=3)


@settings(max_examples=examples(25))
@given(replies=GEMINI_REPLIES)
def test_a_gemini_sessions_usage_counts_each_field_clamped(
    replies: list[tuple[int, int, int, int, int]],
) -> None:
    """Gemini CLI's `tokens` (input holding cached, output, thoughts, tool): the
    session's totals are the clamped counts' (OpenCode's and Copilot CLI's readers take
    their counts through the same `int_field`)."""
    records: list[dict[str, Any]] = [gemini_meta()]
    for n, (prompt, output, cached, thoughts, tool) in enumerate(replies):
        tokens = {
            "input": prompt,
            "output": output,
            "cached": cached,
            "thoughts": thoughts,
            "tool": tool,
            "total": prompt + output,
        }
        records += [
            gemini_message(f"u{n}", "user", 2 * n),
            gemini_message(f"a{n}", "gemini", 2 * n + 1, tokens=tokens),
        ]
    c = [tuple(_counted(v) for v in r) for r in replies]
    wanted = (
        sum(max(r[0] - r[2], 0) + r[4] for r in c),
        sum(r[1] + r[3] for r in c),
        sum(r[2] for r in c),
        0,
    )
    with tempfile.TemporaryDirectory() as home:
        path = Path(home) / "session-2026-05-01T10-00-g1.jsonl"
        path.write_text(gemini_lines(records), encoding="utf-8")
        stats = read_gemini_session(str(path)).manager.get_usage_statistics()
    assert (stats.input, stats.output, stats.cache_read, stats.cache_write) == wanted
    assert min(wanted) >= 0
