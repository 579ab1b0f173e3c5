"""The streamed usage report (records read a batch of sessions at a time, counted and
priced as they come) against the whole-store path it replaced: the same replies, in the
same order, priced the same, and the same duplicates, over random stores."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree.layout import store_parts
from sessiontree.reports import (
    Duplicates,
    blocks,
    counted_once,
    load_usage,
    price,
    priced,
    report,
)
from sessiontree.reports import _usage as usage
from tests.conftest import examples
from tests.reports.test_usage import T0, marker, prompt, reply
from tests.reports.test_usage import Store as Sessions


def whole_store_count(sessions: list[Any]) -> tuple[list[Any], Duplicates]:
    """The counting the report did before it streamed: every session's records at hand."""
    dups = Duplicates()
    valid = usage._one_per_file([s for s in sessions if s.file.valid])
    kept = {i: usage._within_file(s.records, dups) for i, s in enumerate(valid)}
    usage._imports(valid, kept, dups)
    out: list[Any] = []
    seen_by_root: dict[Any, set[Any]] = {}
    order, roots = usage._ancestors_first(valid)
    members = Counter(roots.values())
    for index in order:
        root = roots[index]
        if members[root] == 1:
            out.extend((valid[index], r) for r in kept[index])
            continue
        seen = seen_by_root.setdefault(root, set())
        for r in kept[index]:
            if r.entry_id is not None:
                if (r.entry_id, r.timestamp) in seen:
                    dups.fork_copies += 1
                    continue
                seen.add((r.entry_id, r.timestamp))
            out.append((valid[index], r))
    files = Counter(s.file.session_id for s in valid if s.file.session_id is not None)
    first: dict[Any, str] = {}
    kept_out = []
    for session, r in out:
        sid = session.file.session_id
        if sid is not None and files[sid] > 1 and r.entry_id is not None:
            if first.setdefault((sid, r.entry_id, r.timestamp), session.path) != session.path:
                dups.session_copies += 1
                continue
        kept_out.append((session, r))
    return kept_out, dups


def shown(replies: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.session.path, r.record, r.cost, r.estimated, r.unpriced) for r in replies]


def same_reports(old: list[Any], new: list[Any]) -> None:
    for kind in ("daily", "weekly", "monthly", "session", "project"):
        a, b = report(old, kind), report(new, kind)  # type: ignore[arg-type]
        assert [(r.key, r.totals.to_json(), sorted(r.models)) for r in a.rows] == [
            (r.key, r.totals.to_json(), sorted(r.models)) for r in b.rows
        ]
        assert a.totals.to_json() == b.totals.to_json()
    assert [(b.start, b.totals.to_json()) for b in blocks(old)] == [
        (b.start, b.totals.to_json()) for b in blocks(new)
    ]


MODELS = [("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o"), ("local", "nobody-prices")]


@st.composite
def stores(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Sessions described: replies (some repeated, some split), forks, imports, copies."""
    out: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 7))):
        entries: list[dict[str, Any]] = [prompt(f"{n}p", None, T0)]
        parent_of = draw(st.sampled_from([None, *range(n)])) if n else None
        if parent_of is not None:  # a fork repeats a prefix of its parent's entries
            prefix = out[parent_of]["entries"]
            entries = prefix[: draw(st.integers(1, len(prefix)))]
        for k in range(draw(st.integers(0, 6))):
            provider, model = draw(st.sampled_from(MODELS))
            ts = T0 + draw(st.integers(0, 40)) * 3_600_000 + k
            cost = draw(st.sampled_from([None, 0.0, 0.25]))
            response = draw(st.sampled_from([None, None, "r1", "r2"]))
            tokens = (draw(st.integers(0, 900)), draw(st.integers(0, 90)), 5, 1)
            entry = reply(f"{n}r{k}", entries[-1].get("id"), ts, tokens, cost, model, provider)
            if response is not None:
                entry["message"]["responseId"] = f"{n}{response}"
            entries.append(entry)
            if draw(st.integers(0, 5)) == 0:
                entries.append(entry)  # a repeated line
        imported = draw(st.sampled_from([None, *range(n), "gone"]))
        if imported is not None:
            source = f"S{imported}"
            if draw(st.booleans()):
                entries.append(marker(f"{n}m", entries[-1].get("id"), source))
            else:
                ids = [e["id"] for e in entries[1:] if draw(st.booleans())]
                entries.append(
                    marker(
                        f"{n}m", entries[-1].get("id"), source, version=2, sourceExtraEntryIds=ids
                    )
                )
            entries.append(reply(f"{n}after", f"{n}m", T0 + 99_000_000 + n))
        out.append(
            {
                "entries": entries,
                "parent": parent_of,
                "copy": draw(st.integers(0, 4)) == 0,
                "created": draw(st.sampled_from([None, "2026-03-01T09:00:00.000Z"])),
            }
        )
    return out


def write(root: Path, described: list[dict[str, Any]]) -> Sessions:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    sessions = Sessions(root)
    for n, d in enumerate(described):
        header: dict[str, Any] = {}
        if d["parent"] is not None:
            header["parentSession"] = f"S{d['parent']}"
        if d["created"] is None:
            header["created"] = None
        path = sessions.session(f"S{n}", d["entries"], **header)
        if d["copy"]:  # another machine's copy of the session, gone on further
            other = root / "sessions" / "--q--" / os.path.basename(path)
            other.parent.mkdir(parents=True, exist_ok=True)
            extra = reply(f"{n}more", d["entries"][-1].get("id"), T0 + 77_000_000)
            from sessiontree import serialize_entry

            other.write_text(Path(path).read_text() + serialize_entry(extra) + "\n")
            sessions.paths.append(str(other))
    return sessions


@pytest.mark.parametrize("batch", [1, 3, 2000])
@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(described=stores(), use_index=st.booleans())
def test_the_stream_counts_what_the_whole_store_counted(
    agent_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    batch: int,
    described: list[dict[str, Any]],
    use_index: bool,
) -> None:
    monkeypatch.setattr(usage, "_BATCH", batch)
    sessions = write(agent_dir, described)
    parts = store_parts(agent_dir=str(agent_dir))
    eager = load_usage(sessions.paths, parts, use_index=use_index).sessions
    old, old_dups = whole_store_count(eager)
    lazy = load_usage(sessions.paths, parts, use_index=use_index, lazy=True).sessions
    dups = Duplicates()
    new = list(priced(counted_once(lazy, dups)))
    assert shown(new) == shown(price(old))
    assert dups == old_dups
    same_reports(price(old), new)


def test_a_session_the_index_renamed_since_is_read_from_its_file(agent_dir: Path) -> None:
    """Ids read at listing time that name another file when the records are read (the
    index rebuilt in between by another process) are not trusted: the file is read."""
    agent_dir.mkdir(parents=True)
    sessions = Sessions(agent_dir)
    for n in range(3):
        sessions.session(f"S{n}", [prompt(f"{n}p", None, T0), reply(f"{n}r", f"{n}p", T0 + n)])
    parts = store_parts(agent_dir=str(agent_dir))
    old, old_dups = whole_store_count(load_usage(sessions.paths, parts).sessions)
    lazy = load_usage(sessions.paths, parts, lazy=True).sessions
    assert all(s.rows is not None for s in lazy)
    conn = sqlite3.connect(agent_dir / "cache" / "content-index.db")
    with conn:
        conn.execute("UPDATE files SET path = 'elsewhere' WHERE id = ?", (lazy[1].file.id,))
    conn.close()
    dups = Duplicates()
    new = list(priced(counted_once(lazy, dups)))
    assert shown(new) == shown(price(old)) and len(new) == 3
    assert dups == old_dups
