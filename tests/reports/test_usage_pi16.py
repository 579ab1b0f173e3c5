"""Usage totals as pi 1.6 sums them (`AgentSession.getSessionStats`): assistant replies,
tool results' `usage`, `usage` entries, compactions' and branch summaries' `usage`.

pi 1.6.0 is the judge: its oracle's `usage` command sums a file with pi's own helpers
(`usage-totals.js`). `tests/data/pi16/usage-sample.jsonl` was written by pi 1.6.0 itself
(`tests/data/pi16/gen_usage_sample.mjs`, see tests/data/README.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sessiontree import SessionManager, serialize_entry
from sessiontree.cli import app
from sessiontree.reports import summarize_session
from tests import peers
from tests.conftest import FIXTURES, examples

SAMPLE = FIXTURES / "pi16" / "usage-sample.jsonl"


def pi16_totals(path: Path) -> dict[str, Any]:
    totals: dict[str, Any] = json.loads(peers.oracle("pi16", "usage", path))
    return totals


def ours(path: Path, lazy: bool | None = None) -> dict[str, Any]:
    """Our totals; `lazy`: lines read only when asked (the tool results' usage is then
    found in their bytes), or all parsed at open."""
    with SessionManager.open(str(path), read_only=True, lazy=lazy) as sm:
        stats = sm.get_usage_statistics()
    return {
        "input": stats.input,
        "output": stats.output,
        "cacheRead": stats.cache_read,
        "cacheWrite": stats.cache_write,
        "cost": stats.cost,
    }


def test_sample_totals_are_pi16s() -> None:
    """The issue's sample: pi 1.6 says 10,800 in / 1,220 out / 54,000 cache read / $0.0616
    (sessiontree said 8,000 / 800 / 4,000 / $0.0336, the assistant replies alone)."""
    expected = pi16_totals(SAMPLE)
    assert ours(SAMPLE, lazy=True) == ours(SAMPLE, lazy=False) == expected
    assert expected["input"] > 8000  # the sample holds usage beyond the replies


def test_show_and_usage_session_count_what_pi16_counts(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = pi16_totals(SAMPLE)
    with SessionManager.open(str(SAMPLE), read_only=True) as sm:
        shown = summarize_session(sm).usage
    assert (shown.input, shown.output, shown.cache_read, shown.cache_write) == (
        expected["input"],
        expected["output"],
        expected["cacheRead"],
        expected["cacheWrite"],
    )
    assert shown.cost == pytest.approx(expected["cost"], abs=1e-12)
    # `usage session` over a store holding the sample, through the content index and without
    project = agent_dir / "sessions" / "--work-demo--"
    project.mkdir(parents=True)
    shutil.copy(SAMPLE, project / "2026-12-06T19-50-36-276Z_usage-sample.pi16.jsonl")
    for extra in ([], ["--no-index"]):
        result = CliRunner().invoke(app, ["usage", "session", "--json", *extra])
        assert result.exit_code == 0, result.output
        totals = json.loads(result.stdout)["totals"]
        for key in ("input", "output", "cacheRead", "cacheWrite"):
            assert totals[key] == expected[key], (extra, key)
        assert totals["cost"] == pytest.approx(expected["cost"], abs=1e-12)


def test_append_usage_writes_pis_line() -> None:
    """`append_usage` writes the line pi 1.6's `appendUsage` wrote into the sample (its id,
    parent and time aside), and leaves out an empty note as pi does."""
    lines = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    written = next(e for e in lines if e["type"] == "usage")
    sm = SessionManager.in_memory("/work/demo")
    sm.append_message({"role": "user", "content": "hi", "timestamp": 1})
    entry_id = sm.append_usage(
        written["kind"], written["provider"], written["model"], written["usage"], written["note"]
    )
    entry = sm.get_entry(entry_id)
    assert entry is not None
    for key in ("id", "parentId", "timestamp"):
        entry = {**entry, key: written[key]}
    assert serialize_entry(entry) == serialize_entry(written)
    bare = sm.get_entry(sm.append_usage("k", "p", "m", written["usage"], ""))
    assert bare is not None and "note" not in bare
    assert list(bare) == [
        "type",
        "id",
        "parentId",
        "timestamp",
        "kind",
        "provider",
        "model",
        "usage",
    ]


# ---------------------------------------------------------------------------- property


def _usage(draw: st.DrawFn) -> dict[str, Any]:
    tokens = st.integers(min_value=0, max_value=200_000)
    usage: dict[str, Any] = {
        "input": draw(tokens),
        "output": draw(tokens),
        "cacheRead": draw(tokens),
        "cacheWrite": draw(tokens),
    }
    if draw(st.booleans()):
        usage["cacheWrite1h"] = draw(st.integers(min_value=0, max_value=usage["cacheWrite"]))
    if draw(st.booleans()):
        usage["reasoning"] = draw(st.integers(min_value=0, max_value=usage["output"]))
    usage["totalTokens"] = sum(usage[k] for k in ("input", "output", "cacheRead", "cacheWrite"))
    cost: dict[str, Any] = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
    cost["total"] = draw(st.integers(min_value=0, max_value=10**6)) / 10**5
    if draw(st.booleans()):
        cost["totalFromProvider"] = draw(st.booleans())
    usage["cost"] = cost
    return usage


@st.composite
def usage_sessions(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Entries of a pi 1.6 session in which every kind pi counts (or not) carries usage."""
    entries: list[dict[str, Any]] = []
    ids: list[str] = []
    for n in range(draw(st.integers(min_value=1, max_value=12))):
        entry_id = f"{n:08x}"
        parent = (
            draw(st.sampled_from(ids))
            if ids and draw(st.booleans())
            else (ids[-1] if ids else None)
        )
        base = {"id": entry_id, "parentId": parent, "timestamp": "2026-11-20T10:00:00.000Z"}
        kind = draw(
            st.sampled_from(
                [
                    "assistant",
                    "toolResult",
                    "toolResult-bare",
                    "user",
                    "usage",
                    "compaction",
                    "branch_summary",
                    "branch_summary-bare",
                    "custom",
                ]
            )
        )
        if kind == "assistant":
            message = {
                "role": "assistant",
                "content": [],
                "provider": "p",
                "model": "m",
                "usage": _usage(draw),
                "stopReason": "stop",
                "timestamp": 1,
            }
            entry = {"type": "message", **base, "message": message}
        elif kind.startswith("toolResult"):
            message = {
                "role": "toolResult",
                "toolCallId": "c",
                "toolName": "t",
                "content": [],
                "isError": False,
            }
            if kind == "toolResult":
                message["usage"] = _usage(draw)
            entry = {"type": "message", **base, "message": {**message, "timestamp": 1}}
        elif kind == "user":
            entry = {
                "type": "message",
                **base,
                "message": {"role": "user", "content": "hi", "timestamp": 1},
            }
        elif kind == "usage":
            entry = {
                "type": "usage",
                **base,
                "kind": "cache_warm",
                "provider": "p",
                "model": "m",
                "usage": _usage(draw),
            }
        elif kind == "compaction":
            entry = {
                "type": "compaction",
                **base,
                "summary": "s",
                "firstKeptEntryId": entry_id,
                "tokensBefore": 1,
                "usage": _usage(draw),
            }
        elif kind.startswith("branch_summary"):
            entry = {"type": "branch_summary", **base, "fromId": "root", "summary": "s"}
            if kind == "branch_summary":
                entry["usage"] = _usage(draw)
        else:  # a custom entry's usage-like data counts nowhere
            entry = {"type": "custom", "customType": "x", "data": {"usage": _usage(draw)}, **base}
        entries.append(entry)
        ids.append(entry_id)
    return entries


@settings(max_examples=examples(20))
@given(entries=usage_sessions())
def test_totals_are_pi16s_on_any_session(
    entries: list[dict[str, Any]], tmp_path_factory: Any
) -> None:
    path = tmp_path_factory.mktemp("usage") / "s.jsonl"
    header = {
        "type": "session",
        "version": 3,
        "id": "usage-prop",
        "timestamp": "2026-11-20T10:00:00.000Z",
        "cwd": "/w",
    }
    path.write_text("".join(serialize_entry(e) + "\n" for e in [header, *entries]))
    assert ours(path, lazy=True) == ours(path, lazy=False) == pi16_totals(path)


def test_pi16_reads_back_what_append_usage_wrote(tmp_path: Path) -> None:
    """A session with `usage` entries written from Python: pi 1.6 reads the same entries,
    builds the same context (the usage entries are not in it) and the same totals."""
    lines = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    spent = next(e for e in lines if e["type"] == "usage")["usage"]
    with SessionManager.create("/work/demo", str(tmp_path)) as sm:
        sm.append_message({"role": "user", "content": "warm the cache", "timestamp": 1})
        sm.append_usage("cache_warm", "anthropic", "claude-sonnet-4-5", spent, "warm")
        sm.append_message(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "done"}],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "usage": spent,
                "stopReason": "stop",
                "timestamp": 2,
            }
        )
        sm.append_usage("cache_warm", "anthropic", "claude-sonnet-4-5", spent)
        sm.flush()
        path = Path(str(sm.get_session_file()))
        ours_messages = sm.build_session_context().messages
        entries = sm.get_entries()
    read = json.loads(peers.oracle("pi16", "entries", path))
    assert read["entries"] == entries
    assert peers.peer_context("pi16", path)["messages"] == ours_messages
    assert ours(path) == pi16_totals(path)
