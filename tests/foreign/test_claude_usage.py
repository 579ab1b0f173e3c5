"""What a Claude Code transcript spent, as the usage report counts it (and ccusage does):
the replies of its inline sidechains (Claude Code 1.x subagents) each once, and 1-hour
cache writes priced apart; neither changes the session its views show."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from sessiontree.foreign.claude import read_claude_session
from sessiontree.foreign.storage import session_bytes
from sessiontree.store import Store
from tests.foreign_support import write_jsonl

REAL = Path(__file__).parent.parent / "data" / "real" / "foreign" / "claude"
SIDECHAINS = REAL / (
    "d-kimuson__claude-code-viewer__mock-global-claude-dir__projects__sample-project__"
    "fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
)
"""A Claude Code 1.0.98 transcript: 244 of its 262 assistant lines are inline sidechains."""
ONE_HOUR = REAL / "entireio__cli__26__dcd5518fea__0__full.jsonl"
"""A Claude Code 2.1 transcript whose cache writes all went to the 1-hour cache."""
SESSION = "0f4c1d2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f"

# Anthropic's published prices, USD per million tokens: input, output, cache read,
# 5-minute cache write (1.25x input), 1-hour cache write (2x input).
PRICES = {
    "claude-sonnet-4-20250514": (3.0, 15.0, 0.30, 3.75, 6.0),
    "claude-opus-4-5-20251101": (5.0, 25.0, 0.50, 6.25, 10.0),
}


def _ccusage_days(path: Path) -> dict[str, tuple[int, int, int, int, float]]:
    """Per UTC day, what ccusage counts of a transcript, computed from its lines by
    ccusage's rule: every assistant line with usage, main chain and sidechains alike,
    one per `message.id` + `requestId` (the last line's: the final output count), priced
    at the published rates, 1-hour cache writes at theirs."""
    replies: dict[tuple[Any, ...], tuple[str, str, dict[str, Any]]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        message = value.get("message") if isinstance(value, dict) else None
        if value.get("type") != "assistant" or not isinstance(message, dict):
            continue
        usage = message.get("usage")
        if not isinstance(usage, dict):
            continue
        key = (message.get("id"), value.get("requestId"))
        replies[key if None not in key else ("line", number)] = (
            value["timestamp"][:10],
            message["model"],
            usage,
        )
    days: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0, 0.0])
    for day, model, usage in replies.values():
        counts = [
            usage.get(k, 0)
            for k in (
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
            )
        ]
        hour = (usage.get("cache_creation") or {}).get("ephemeral_1h_input_tokens", 0)
        rates = PRICES[model]
        total = days[day]
        for i, count in enumerate(counts):
            total[i] += count
        total[4] += (
            counts[0] * rates[0]
            + counts[1] * rates[1]
            + counts[2] * rates[2]
            + (counts[3] - hour) * rates[3]
            + hour * rates[4]
        ) / 1e6
    return {
        day: (int(t[0]), int(t[1]), int(t[2]), int(t[3]), t[4]) for day, t in sorted(days.items())
    }


def _claude_home(tmp_path: Path, *files: Path) -> Path:
    home = tmp_path / "claude"
    project = home / "projects" / "-work-app"
    project.mkdir(parents=True)
    for file in files:
        name = file.name if file.stem.count("-") == 4 else f"{file.stem}.jsonl"
        shutil.copyfile(file, project / name.rsplit("__", 1)[-1])
    return home


def _daily(home: Path, use_index: bool) -> dict[str, tuple[int, int, int, int, float]]:
    with Store(home, agent="claude") as store:
        rows = store.usage("daily", tz="UTC", use_index=use_index).rows
    return {
        r.key: (
            r.totals.input,
            r.totals.output,
            r.totals.cache_read,
            r.totals.cache_write,
            r.totals.cost,
        )
        for r in rows
    }


@pytest.mark.parametrize("read", ["index", "loaded", "view"])
def test_the_real_transcripts_count_as_ccusage_counts_them(
    tmp_path: Path, read: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _claude_home(tmp_path, SIDECHAINS, ONE_HOUR)
    use_index = read == "index"
    if read == "view":
        # No listing cache (the agent dir is inside the Claude Code home): the sessions
        # are read as the v3 files the storage shows.
        monkeypatch.setenv("PI_CODING_AGENT_DIR", str(home / "agent"))
    wanted = {**_ccusage_days(SIDECHAINS), **_ccusage_days(ONE_HOUR)}
    # What ccusage 20.0.24 reported for the sidechains' day (docs/performance.md): the
    # rule above is ccusage's.
    assert wanted["2025-09-03"][:4] == (818, 51_933, 3_647_854, 137_976)
    found = _daily(home, use_index)
    assert sorted(found) == sorted(wanted) == ["2025-09-03", "2026-02-02", "2026-02-03"]
    for day, figures in wanted.items():
        assert found[day][:4] == figures[:4], day
        assert found[day][4] == pytest.approx(figures[4], rel=1e-9), day
    assert round(found["2026-02-02"][4], 2) == 0.29 and round(found["2026-02-03"][4], 2) == 7.30


def test_the_sidechains_are_not_the_sessions_entries(tmp_path: Path) -> None:
    home = _claude_home(tmp_path, SIDECHAINS)
    session = read_claude_session(str(SIDECHAINS), subagents=False)
    main_lines = [
        json.loads(line)
        for line in SIDECHAINS.read_text(encoding="utf-8").splitlines()
        if '"isSidechain":true' not in line.replace(" ", "")
    ]
    assert len(session.extra_usage.replies) == 161  # the sidechains' responses
    # The session is the main conversation's: no entry for a sidechain reply.
    assert len(session.manager.get_entries()) == 24
    assert sum(1 for v in main_lines if v.get("type") == "assistant") == 18
    with Store(home, agent="claude") as store:
        (listed,) = store.list()
        assert listed.message_count == 22
        manager = store.open(listed.path, read_only=True)
        assert len(manager.get_entries()) == 24
        assert not [e for e in manager.get_entries() if e.get("type") == "usage"]


def _line(uid: str, parent: str | None, kind: str, message: Any, t: int, **extra: Any) -> Any:
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


def _reply(msg_id: str, text: str, output: int, hour: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 1000,
        "output_tokens": output,
    }
    if hour:
        usage["cache_creation"] = {
            "ephemeral_5m_input_tokens": 100 - hour,
            "ephemeral_1h_input_tokens": hour,
        }
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": [{"type": "text", "text": text}],
        "usage": usage,
    }


def test_each_sidechain_reply_counts_once_and_one_hour_writes_are_priced_apart(
    tmp_path: Path,
) -> None:
    side = {"isSidechain": True}
    lines = [
        _line("u1", None, "user", {"role": "user", "content": "Review app.py"}, 1),
        _line("a1", "u1", "assistant", _reply("m_main", "Asking", 20, 60), 2, requestId="r1"),
        _line("s1", None, "user", {"role": "user", "content": "Read app.py"}, 3, **side),
        # One streamed response in two lines (same message.id and requestId): the last
        # line's output count.
        _line("s2", "s1", "assistant", _reply("m_side", "Reading", 5), 4, requestId="r2", **side),
        _line("s3", "s2", "assistant", _reply("m_side", "Done", 7), 5, requestId="r2", **side),
        # The main conversation's response replayed into the sidechain: counted there.
        _line("s4", "s3", "assistant", _reply("m_main", "Asking", 20), 6, requestId="r9", **side),
    ]
    home = tmp_path / "claude"
    path = write_jsonl(home / "projects" / "-work-app" / f"{SESSION}.jsonl", lines)
    session = read_claude_session(str(path), subagents=False)
    assert [(r.response_id, r.output) for r in session.extra_usage.replies] == [("m_side", 7)]
    assert session.extra_usage.hour_writes == {"m_main": 60}
    # Kept beside the session, never in it: its usage objects are pi's.
    assert b"cacheWrite1h" not in session_bytes(session)
    assert [e["message"]["role"] for e in session.manager.get_entries() if "message" in e] == [
        "user",
        "assistant",
    ]
    imported = read_claude_session(str(path))  # what an import writes: the same session
    assert [e["id"] for e in imported.manager.get_entries()] == [
        e["id"] for e in session.manager.get_entries()
    ]
    assert imported.extra_usage == session.extra_usage
    for use_index in (True, False):
        (day,) = _daily(home, use_index).values()
        assert day[:4] == (20, 27, 2000, 200)
        sonnet = PRICES["claude-sonnet-4-20250514"]
        cost = (20 * sonnet[0] + 27 * sonnet[1] + 2000 * sonnet[2]) / 1e6
        cost += (140 * sonnet[3] + 60 * sonnet[4]) / 1e6
        assert day[4] == pytest.approx(cost, rel=1e-9)


def test_hostile_usage_numbers_neither_crash_nor_lose_the_transcript(tmp_path: Path) -> None:
    side = {"isSidechain": True}
    huge = _reply("m_side", "Reading", 5)
    # JSON.parse reads a number beyond a double as Infinity: so does our slow path.
    huge["usage"]["cache_creation"] = {"ephemeral_1h_input_tokens": "INF"}
    huge["usage"]["input_tokens"] = "INF"
    huge["usage"]["cache_read_input_tokens"] = "BIG"  # 400 digits: no float holds it
    negative = _reply("m_neg", "Done", 7)
    negative["usage"]["cache_creation"] = {"ephemeral_1h_input_tokens": -7}
    lines = [
        _line("u1", None, "user", {"role": "user", "content": "Review app.py"}, 1),
        _line("a1", "u1", "assistant", _reply("m_main", "Asking", 20, 60), 2, requestId="r1"),
        _line("s1", None, "user", {"role": "user", "content": "Read app.py"}, 3, **side),
        _line("s2", "s1", "assistant", huge, 4, **side),  # no requestId
        _line("s3", "s2", "assistant", negative, 5, requestId="r2", **side),
        _line("s4", "s3", "assistant", negative, 6, requestId="r2", **side),  # the same twice
    ]
    home = tmp_path / "claude"
    path = write_jsonl(home / "projects" / "-work-app" / f"{SESSION}.jsonl", lines)
    path.write_text(
        path.read_text(encoding="utf-8")
        .replace('"INF"', "1e400")
        .replace('"BIG"', "1" + "0" * 400),
        encoding="utf-8",
    )
    session = read_claude_session(str(path), subagents=False)
    assert [r.response_id for r in session.extra_usage.replies] == ["m_side", "m_neg"]
    assert session.extra_usage.hour_writes == {"m_main": 60}
    for use_index in (True, False):
        (day,) = _daily(home, use_index).values()
        assert day[1] == 20 + 5 + 7  # the main reply and each sidechain reply once
