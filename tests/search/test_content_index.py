"""The content index: it finds what a scan finds, sees every change, and survives damage."""

from __future__ import annotations

import os
import random
import re
import sqlite3
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessiontree.search._content_index as content_index
import sessiontree.search._index_db as index_db
import sessiontree.search._index_rows as index_rows
from sessiontree import SessionManager, serialize_entry
from sessiontree.search import (
    INDEX_DB_NAME,
    ContentIndex,
    SessionSource,
    regex_literals,
    search,
    search_sessions,
)
from sessiontree.search._query import CASE_SAFE
from tests.conftest import examples
from tests.helpers import assistant, user
from tests.search.test_search import (
    case_variant,
    foreign_dumps,
    operations,
    rendered,
    write_session,
)

HEADER = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00.000Z"}


def entry_line(n: int, text: str, ts: str = "2026-01-01T00:00:00.000Z", role: str = "user") -> str:
    message: dict[str, Any] = {"role": role, "content": text}
    if role == "assistant":
        message["content"] = [{"type": "text", "text": text}]
    return serialize_entry(
        {
            "type": "message",
            "id": f"e{n:07d}",
            "parentId": f"e{n - 1:07d}" if n > 1 else None,
            "timestamp": ts,
            "message": message,
        }
    )


def write(path: Path, *lines: str, header: dict[str, Any] | None = None) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = serialize_entry({**HEADER, "cwd": "/p", **(header or {})}) + "\n"
    path.write_text(text + "".join(line + "\n" for line in lines))
    return str(path)


def lines_of(result: Any) -> set[tuple[str, int]]:
    return {(hit.path, hit.line) for hit in result.hits}


def found(paths: list[str], query: str, agent: Path, **kw: Any) -> Any:
    return search(paths, query, agent_dir=str(agent), **kw)


@pytest.fixture
def store(agent_dir: Path) -> Path:
    agent_dir.mkdir(parents=True, exist_ok=True)
    return agent_dir / "sessions" / "--p--"


# ---------------------------------------------------------------------- agreement


@pytest.mark.slow
@settings(
    max_examples=examples(150, "SESSIONTREE_FUZZ_EXAMPLES"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    sessions=st.lists(st.lists(operations, min_size=1, max_size=5), min_size=1, max_size=3),
    foreign=st.sampled_from([0.0, 0.3]),
    rng=st.randoms(use_true_random=False),
    data=st.data(),
)
def test_the_index_finds_what_a_brute_force_scan_finds(
    sessions: list[list[tuple[str, Any]]], foreign: float, rng: random.Random, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as agent:
        paths = []
        for ops in sessions:
            path = write_session(os.path.join(agent, "sessions"), ops)
            lines = Path(path).read_bytes().split(b"\n")
            for n in range(1, len(lines)):
                if lines[n].strip() and rng.random() < foreign:
                    from sessiontree.format import loads_line

                    lines[n] = foreign_dumps(loads_line(lines[n]), rng).encode()
            Path(path).write_bytes(b"\n".join(lines))
            paths.append(path)
        texts = [(p, n, t) for p in paths for n, t in rendered(p)]
        candidates = [(p, n, t) for p, n, t in texts if len(t) >= 3]
        kind = data.draw(st.sampled_from(["substring", "substring", "random", "regex"]))
        case_sensitive = data.draw(st.booleans())
        if kind == "random" or not candidates:
            query = data.draw(st.text(min_size=3, max_size=6))
        else:
            _, _, text = data.draw(st.sampled_from(candidates))
            start = data.draw(st.integers(0, len(text) - 3))
            end = data.draw(st.integers(start + 3, min(len(text), start + 30)))
            query = text[start:end]
            if not case_sensitive:
                query = case_variant(query, rng)
        regex = kind == "regex"
        if regex:
            middle = data.draw(st.sampled_from(["", ".", ".*", r"\w*", "[a-z]?"]))
            cut = len(query) // 2
            query = re.escape(query[:cut]) + middle + re.escape(query[cut:])
            flags = 0 if case_sensitive else re.IGNORECASE
            expected = {(p, n) for p, n, t in texts if re.search(query, t, flags)}
        elif case_sensitive:
            expected = {(p, n) for p, n, t in texts if query in t}
        else:
            expected = {(p, n) for p, n, t in texts if query.casefold() in t.casefold()}
        result = search(paths, query, regex=regex, case_sensitive=case_sensitive, agent_dir=agent)
        assert lines_of(result) == expected
        assert len(result.hits) == len(expected)
        scan = search_sessions(paths, query, regex=regex, case_sensitive=case_sensitive)
        assert {(h.path, h.line) for h in scan} == expected
        if len(result.hits) > 1:  # newest first
            times = [h.timestamp or 0 for h in result.hits]
            assert times == sorted(times, reverse=True)


def test_filters_agree_with_brute_force(store: Path, agent_dir: Path) -> None:
    rng = random.Random(5)
    words = ["alpha", "beta", "gamma"]
    paths = []
    truth = []
    for f in range(4):
        lines = []
        for n in range(1, 40):
            day = rng.randrange(1, 28)
            role = rng.choice(["user", "assistant"])
            text = " ".join(rng.choice(words) for _ in range(4))
            ts = f"2026-02-{day:02d}T10:00:00.000Z"
            lines.append(entry_line(n, text, ts, role))
            truth.append((str(store / f"s{f}.jsonl"), n + 1, text, role, day))
        paths.append(write(store / f"s{f}.jsonl", *lines, header={"id": f"s{f}"}))
    from sessiontree.format import parse_iso_ms

    since = parse_iso_ms("2026-02-10T00:00:00.000Z")
    until = parse_iso_ms("2026-02-20T23:59:59.999Z")
    result = found(paths, "gamma", agent_dir, roles=["assistant"], since=since, until=until)
    expected = {
        (p, n) for p, n, t, r, d in truth if "gamma" in t and r == "assistant" and 10 <= d <= 20
    }
    assert result.mode == "index" and lines_of(result) == expected and expected
    limited = found(paths, "gamma", agent_dir, limit=5)
    assert len(limited.hits) == 5
    newest = max(d for _, _, t, _, d in truth if "gamma" in t)
    assert limited.hits[0].timestamp == parse_iso_ms(f"2026-02-{newest:02d}T10:00:00.000Z")


# ---------------------------------------------------------------------- changes


def test_appends_rewrites_deletions_and_replacements_are_seen(store: Path, agent_dir: Path) -> None:
    a = write(store / "a.jsonl", entry_line(1, "the first needle"), entry_line(2, "plain"))
    b = write(store / "b.jsonl", entry_line(1, "nothing here"), header={"id": "s2"})
    paths = [a, b]
    # Written an hour ago: a file read within its mtime's tick is read again next time
    # (the racy rule of `discovery.stat_identity`), which would count `b` below.
    hour_ago = time.time() - 3600
    for path in paths:
        os.utime(path, (hour_ago, hour_ago))
    assert lines_of(found(paths, "needle", agent_dir)) == {(a, 2)}

    # An append is read from the end of the last complete line, and only that.
    size = os.path.getsize(a)
    with open(a, "a") as f:
        f.write(entry_line(3, "a second needle") + "\n")
    grown = os.path.getsize(a) - size
    result = found(paths, "needle", agent_dir)
    assert lines_of(result) == {(a, 2), (a, 4)}
    assert result.refreshed is not None and result.refreshed.bytes_read == grown

    # A rewrite (atomic, new inode), same size: the old text is gone, the new found.
    text = Path(a).read_text().replace("first needle", "first pickle")
    tmp = store / "tmp"
    tmp.write_text(text)
    os.replace(tmp, a)
    assert lines_of(found(paths, "needle", agent_dir)) == {(a, 4)}
    assert lines_of(found(paths, "pickle", agent_dir)) == {(a, 2)}

    # An in-place rewrite that keeps inode and size, only the mtime changes.
    with open(a, "r+") as f:
        data = f.read().replace("pickle", "tickle")
        f.seek(0)
        f.write(data)
    os.utime(a, ns=(os.stat(a).st_atime_ns, os.stat(a).st_mtime_ns + 5_000_000))
    assert lines_of(found(paths, "tickle", agent_dir)) == {(a, 2)}
    assert lines_of(found(paths, "pickle", agent_dir)) == set()

    # A file replaced by another session at the same path.
    write(store / "b.jsonl", entry_line(1, "the needle of b"), header={"id": "s3"})
    result = found(paths, "needle", agent_dir)
    assert lines_of(result) == {(a, 4), (b, 2)}
    assert {h.session_id for h in result.hits} == {"s1", "s3"}

    # A deleted file: no hit, and the index forgets it when asked to prune.
    os.unlink(a)
    assert lines_of(found(paths, "needle", agent_dir)) == {(b, 2)}
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        assert index.refresh([SessionSource(b)], prune=True).removed == 0
        assert [f.path for f in index.files()] == [b]


def test_an_unterminated_last_line_is_indexed_and_replaced_when_completed(
    store: Path, agent_dir: Path
) -> None:
    a = write(store / "a.jsonl", entry_line(1, "one"))
    with open(a, "a") as f:
        f.write(entry_line(2, "torn needle"))  # no newline yet: valid, as the loader says
    assert lines_of(found([a], "needle", agent_dir)) == {(a, 3)}
    with open(a, "a") as f:
        f.write("\n" + entry_line(3, "more needle") + "\n")
    result = found([a], "needle", agent_dir)
    assert lines_of(result) == {(a, 3), (a, 4)} and len(result.hits) == 2
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        assert index.stats().entries == 3


def test_a_grown_header_or_title_slot_change_reads_the_file_again(
    store: Path, agent_dir: Path
) -> None:
    a = write(store / "a.jsonl", entry_line(1, "needle"))
    assert found([a], "needle", agent_dir).hits[0].session_id == "s1"
    text = Path(a).read_text().replace('"id":"s1"', '"id":"s9"')
    with open(a, "w") as f:
        f.write(text + entry_line(2, "needle too") + "\n")
    result = found([a], "needle", agent_dir)
    assert {h.session_id for h in result.hits} == {"s9"} and len(result.hits) == 2


def test_not_a_session_and_junk_before_the_header(store: Path, agent_dir: Path) -> None:
    bad = store / "bad.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"type":"message","id":"x"}\n' + entry_line(1, "needle") + "\n")
    junk = store / "junk.jsonl"
    junk.write_text("not json\n[1]\n" + serialize_entry({**HEADER, "cwd": "/"}) + "\n")
    with open(junk, "a") as f:
        f.write(entry_line(1, "needle") + "\n")
    paths = [str(bad), str(junk)]
    expected = {(str(junk), 4)}
    assert lines_of(found(paths, "needle", agent_dir)) == expected
    assert {(h.path, h.line) for h in search_sessions(paths, "needle")} == expected


# ---------------------------------------------------------------------- damage and safety


def test_a_corrupt_index_is_rebuilt(store: Path, agent_dir: Path) -> None:
    a = write(store / "a.jsonl", entry_line(1, "needle"))
    assert lines_of(found([a], "needle", agent_dir)) == {(a, 2)}
    db = agent_dir / INDEX_DB_NAME
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 500)
    result = found([a], "needle", agent_dir)
    assert result.mode == "index" and lines_of(result) == {(a, 2)}
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == 0x53544958


def test_damaged_pages_are_rebuilt(store: Path, agent_dir: Path) -> None:
    """Pages SQLite finds damaged (it keeps no checksums: a flipped bit inside a page
    may go unseen; deleting the cache file always helps)."""
    paths = [
        write(store / f"s{i}.jsonl", *(entry_line(n, f"needle {n}") for n in range(1, 300)))
        for i in range(3)
    ]
    assert len(found(paths, "needle", agent_dir, limit=None).hits) == 3 * 299
    db = agent_dir / INDEX_DB_NAME
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(db.read_bytes())
    for at in range(page, len(data), page):
        data[at] = 0xFF  # no valid b-tree page type
    db.write_bytes(bytes(data))
    result = found(paths, "needle", agent_dir, limit=None)
    assert result.mode == "index" and len(result.hits) == 3 * 299


def test_a_foreign_database_is_replaced(store: Path, agent_dir: Path) -> None:
    a = write(store / "a.jsonl", entry_line(1, "needle"))
    db = agent_dir / INDEX_DB_NAME
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE files (x)")
        conn.execute("INSERT INTO files VALUES (1)")
    conn.close()
    assert lines_of(found([a], "needle", agent_dir)) == {(a, 2)}
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert {"entries", "fts", "usage"} <= tables


def test_index_files_are_private_and_symlinks_are_not_followed(
    store: Path, agent_dir: Path, tmp_path: Path
) -> None:
    a = write(store / "a.jsonl", entry_line(1, "needle"))
    cache = agent_dir / "cache"
    cache.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (cache / "content-index.db").symlink_to(victim)
    (cache / "content-index.db-wal").symlink_to(victim)
    assert lines_of(found([a], "needle", agent_dir)) == {(a, 2)}
    assert victim.read_text() == "keep me"
    for p in cache.iterdir():
        assert not p.is_symlink()
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_a_locked_index_falls_back_to_reading_the_changed_files(
    store: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = write(store / "a.jsonl", entry_line(1, "needle one"))
    b = write(store / "b.jsonl", entry_line(1, "needle b"), header={"id": "s2"})
    assert len(found([a, b], "needle", agent_dir).hits) == 2
    with open(a, "a") as f:
        f.write(entry_line(2, "needle two") + "\n")
    monkeypatch.setattr(index_db, "_LOCK_TIMEOUT", 0.05)
    other = sqlite3.connect(agent_dir / INDEX_DB_NAME, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process is writing the index
    try:
        result = found([a, b], "needle", agent_dir)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert lines_of(result) == {(a, 2), (a, 3), (b, 2)}
    assert result.mode == "mixed" and any("could not bring up to date" in n for n in result.notes)


def test_dead_rows_trigger_a_rebuild(
    store: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(content_index, "_REBUILD_DEAD_BYTES", 10)
    a = write(store / "a.jsonl", entry_line(1, "needle " * 20))
    found([a], "needle", agent_dir)
    write(store / "a.jsonl", entry_line(1, "pickle"), header={"id": "s2"})  # new inode
    found([a], "pickle", agent_dir)  # the old text is dead now
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None and index.stats().dead_bytes > 0
        assert index.refresh([SessionSource(a)]).rebuilt
        assert index.stats().dead_bytes == 0
    assert lines_of(found([a], "pickle", agent_dir)) == {(a, 2)}


def test_no_agent_dir_means_a_scan_and_no_cache(tmp_path: Path) -> None:
    a = write(tmp_path / "s" / "a.jsonl", entry_line(1, "needle"))
    missing = tmp_path / "no-agent"
    result = search([a], "needle", agent_dir=str(missing))
    assert result.mode == "scan" and lines_of(result) == {(a, 2)} and result.notes
    assert not missing.exists()


# ---------------------------------------------------------------------- queries the index cannot answer


def test_short_queries_and_regexes_without_literals_are_scanned(
    store: Path, agent_dir: Path
) -> None:
    a = write(store / "a.jsonl", entry_line(1, "xy needle"), entry_line(2, "nothing"))
    short = found([a], "xy", agent_dir)
    assert short.mode == "scan" and lines_of(short) == {(a, 2)}
    assert "3+ characters" in short.notes[0]
    rx = found([a], r"n[aeiou]+dle|zzz", agent_dir, regex=True)
    assert rx.mode == "scan" and lines_of(rx) == {(a, 2)}
    rx = found([a], r"need(le)?\b", agent_dir, regex=True)
    assert rx.mode == "index" and lines_of(rx) == {(a, 2)}


def test_regex_literals() -> None:
    assert regex_literals(r"foo\.bar[0-9]+baz") == ["foo.bar", "baz"]
    assert regex_literals(r"(?i)quick") == ["qu", "ck"]  # "i" may match "ı" or "İ"
    assert regex_literals(r"a|b") == []
    assert regex_literals(r"x(yz)w") == ["x", "w"]


def test_the_case_safe_characters_casefold_like_everything_re_matches_them() -> None:
    """Under IGNORECASE, `re` matches a case-safe character only to characters whose
    casefold equals its own: so the index (casefolded) holds what such a regex finds."""
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    for char in sorted(CASE_SAFE):
        if not char.isalpha():
            continue
        for other in re.findall(re.escape(char), everything, re.IGNORECASE):
            assert other.casefold() == char.casefold(), (char, other)
    bad = {o for o in re.findall("i", everything, re.IGNORECASE) if o.casefold() != "i"}
    assert bad  # why "i" is not safe


# ---------------------------------------------------------------------- other sources


def _loader(path: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """A made-up format: one message per line, `role: text`."""
    lines = Path(path).read_text().splitlines()
    entries = []
    for n, line in enumerate(lines, start=1):
        role, _, text = line.partition(": ")
        entries.append(
            {
                "type": "message",
                "id": f"x{n}",
                "timestamp": f"2026-03-01T00:00:0{n % 10}.000Z",
                "message": {"role": role, "content": text},
            }
        )
    return {"id": "foreign-1", "cwd": "/elsewhere"}, entries


def test_a_loader_source_is_indexed_and_searched_like_our_files(
    store: Path, agent_dir: Path
) -> None:
    other = store.parent / "other.txt"
    other.parent.mkdir(parents=True, exist_ok=True)
    other.write_text("user: find the needle\nassistant: no needle here\nuser: bye\n")
    a = write(store / "a.jsonl", entry_line(1, "our needle"))
    sources = [SessionSource(a), SessionSource(str(other), load=_loader, kind="made-up")]
    result = search(sources, "needle", agent_dir=str(agent_dir))
    assert result.mode == "index"
    assert {(h.path, h.line, h.session_id, h.role) for h in result.hits} == {
        (a, 2, "s1", "user"),
        (str(other), 1, "foreign-1", "user"),
        (str(other), 2, "foreign-1", "assistant"),
    }
    assert {h.snippet for h in result.hits if h.path == str(other)} == {
        "find the needle",
        "no needle here",
    }
    with open(other, "a") as f:
        f.write("user: last needle\n")
    assert len(search(sources, "needle", agent_dir=str(agent_dir)).hits) == 4


# ---------------------------------------------------------------------- size


def test_the_index_stores_no_text_and_stays_small(store: Path, agent_dir: Path) -> None:
    rng = random.Random(3)
    words = [("".join(rng.choice("abcdefghij") for _ in range(6))) for _ in range(500)]
    paths = []
    texts = []
    for f in range(20):
        texts += [" ".join(rng.choice(words) for _ in range(60)) for _ in range(1, 60)]
        lines = [entry_line(n, text) for n, text in enumerate(texts[-59:], start=1)]
        paths.append(write(store / f"s{f}.jsonl", *lines, header={"id": f"s{f}"}))
    found(paths, "abcdef", agent_dir)
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        stats = index.stats()
    assert stats.entries == 20 * 59 and stats.text_bytes > 0
    assert stats.fts_bytes < 3 * stats.text_bytes
    db = (agent_dir / INDEX_DB_NAME).read_bytes()
    # Contentless: the text is not in the database, only its words (the vocabulary).
    assert not any(" ".join(text.split()[:2]).encode() in db for text in texts)


def test_the_same_sessions_through_the_manager(agent_dir: Path) -> None:
    with SessionManager.create("/proj") as sm:
        sm.append_message(user("where is the needle?"))
        first = sm.append_message(assistant("In the haystack."))
        sm.append_label_change(first, "needlework")
        path = sm.get_session_file()
    assert path is not None
    result = search([path], "needle", agent_dir=str(agent_dir))
    assert sorted(h.role for h in result.hits) == ["label", "user"]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_chunk_boundaries_and_a_bom_do_not_change_what_is_indexed(
    store: Path, agent_dir: Path, size: int
) -> None:
    from tests.search.test_search import SmallChunks

    a = write(store / "a.jsonl", entry_line(1, "alpha needle"), entry_line(2, "beta"))
    b = store / "b.jsonl"
    b.write_bytes(b"\xef\xbb\xbf" + Path(a).read_bytes().replace(b'"s1"', b'"s2"'))
    with open(a, "a") as f:
        f.write(entry_line(3, "torn needle"))
    paths = [a, str(b)]
    result = search(paths, "needle", agent_dir=str(agent_dir), storage=SmallChunks(size))
    assert result.mode == "index"
    assert lines_of(result) == {(a, 2), (a, 4), (str(b), 2)}
    hit = next(h for h in result.hits if h.path == str(b))
    assert hit.session_id == "s2" and hit.snippet == "alpha needle"
    with open(a, "a") as f:
        f.write("\n" + entry_line(4, "last needle") + "\n")
    grown = search(paths, "needle", agent_dir=str(agent_dir), storage=SmallChunks(size))
    assert lines_of(grown) == {(a, 2), (a, 4), (a, 5), (str(b), 2)}


# ---------------------------------------------------------------------- big files


def _index_view(agent: Path, paths: list[str]) -> tuple[Any, ...]:
    """What the index holds of `paths`, by path: files, entries found, usage records."""
    with ContentIndex.open(str(agent)) as index:
        assert index is not None
        index.refresh([SessionSource(p) for p in paths])
        files = {f.path: f for f in index.files(paths)}
        ids = index.file_ids(paths)
        usage = index.usage_records(ids.values())
        return (
            {p: (f.session_id, f.entries) for p, f in files.items()},
            {p: usage[i] for p, i in ids.items()},
        )


def _big_store(store: Path) -> list[str]:
    lines = []
    for n in range(1, 120):
        role = "assistant" if n % 2 == 0 else "user"
        lines.append(entry_line(n, f"needle {n} " + "word " * (n * 7), role=role))
    a = write(store / "a.jsonl", *lines)
    b = write(store / "b.jsonl", entry_line(1, "needle in b"), header={"id": "s2"})
    return [a, b]


def test_a_file_indexed_in_pieces_is_indexed_as_if_whole(
    store: Path, agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big file's rows are written as it is read (bounded memory), in many pieces
    here: the index holds the same files, hits and usage as one written at once."""
    paths = _big_store(store)
    whole = _index_view(agent_dir, paths)
    expected = lines_of(found(paths, "needle", agent_dir))
    assert len(expected) == 120
    pieces = tmp_path / "pieces-agent"
    pieces.mkdir()
    monkeypatch.setattr(index_rows, "_HELD_BYTES", 1)  # a write after every entry
    assert _index_view(pieces, paths) == whole
    result = found(paths, "needle", pieces)
    assert result.mode == "index" and lines_of(result) == expected


def test_a_file_failing_halfway_leaves_none_of_its_rows(
    store: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose reading fails after some of its rows were written keeps none of
    them (a savepoint per file); the other files of the same write are kept, and the
    failed one is read again next time."""
    a, b = _big_store(store)
    monkeypatch.setattr(index_rows, "_HELD_BYTES", 1)

    def fail() -> None:
        raise OSError("the disk went away")

    _, stop = _once_at(monkeypatch, "e0000050", fail)  # halfway through a.jsonl, not in b
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        result = index.refresh([SessionSource(a), SessionSource(b)])
        assert result.stale == [a]
        assert [f.path for f in index.files([a, b])] == [b]
        ids = index.file_ids([a, b])
        assert a not in ids
        with index._conn:  # the test looks inside: no row names a file that is not there
            orphans = index._conn.execute(
                "SELECT count(*) FROM entries WHERE file NOT IN (SELECT id FROM files)"
            ).fetchone()[0]
            keys = {k for (k,) in index._conn.execute("SELECT key FROM entries")}
            words = index._conn.execute("SELECT rowid FROM fts WHERE fts MATCH '\"needle\"'")
            in_fts = {k for (k,) in words}
        assert orphans == 0
        assert in_fts and in_fts <= keys  # nor any text of the failed file's
    stop()
    assert lines_of(found([a, b], "needle", agent_dir)) == {(a, n) for n in range(2, 121)} | {
        (b, 2)
    }


def _once_at(
    monkeypatch: pytest.MonkeyPatch, entry_id: str, action: Callable[[], None]
) -> tuple[list[bool], Callable[[], None]]:
    """Run `action` once, as the content index reads the line of `entry_id` (the read
    goes on after it). Returns whether it ran, and what puts the reader back."""
    real = index_rows._feed
    done: list[bool] = []

    def feed(rows: Any, st: Any, raw: bytes, number: int, offset: int, order: int) -> None:
        if f'"id":"{entry_id}"'.encode() in raw and not done:
            done.append(True)
            action()
        real(rows, st, raw, number, offset, order)

    monkeypatch.setattr(index_rows, "_feed", feed)
    return done, lambda: monkeypatch.setattr(index_rows, "_feed", real)


def _rewrite_in_place(path: str, data: bytes) -> None:
    with open(path, "r+b") as f:  # the same inode, as a writer that truncates
        f.truncate(0)
        f.write(data)


def test_a_file_rewritten_in_place_while_it_is_read_is_found_as_a_scan_finds_it(
    store: Path, agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = [entry_line(n, f"needle {n} " + "word " * (n * 7)) for n in range(1, 120)]
    new = [entry_line(n, f"fresh {n} " + "word " * (n * 7)) for n in range(1, 130)]
    a = write(store / "a.jsonl", *old)
    rewritten = Path(write(tmp_path / "new.jsonl", *new)).read_bytes()
    monkeypatch.setattr(index_rows, "_HELD_BYTES", 1)
    done, stop = _once_at(monkeypatch, "e0000050", lambda: _rewrite_in_place(a, rewritten))
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        # The mark taken after the read holds other bytes than the read saw: nothing
        # of the file is kept, and the next refresh reads it again.
        assert index.refresh([SessionSource(a)]).stale == [a]
        assert index.files([a]) == []
    stop()
    assert done
    scanned = {(hit.path, hit.line) for hit in search_sessions([a], "fresh")}
    assert len(scanned) == 129
    assert lines_of(found([a], "fresh", agent_dir)) == scanned


def test_a_file_rewritten_in_place_while_its_appended_lines_are_read_is_found_as_a_scan_finds_it(
    store: Path, agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read of lines appended (the incremental path) saw no head and less than the
    16 KB tail window, so the check passed whatever the file became: a file rewritten in
    place meanwhile, longer, was taken as one only appended to, and the rows of the old
    file's first part stayed in the index (the new lines there were never found)."""
    a = write(
        store / "a.jsonl", *[entry_line(n, f"needle {n} " + "word " * 40) for n in range(1, 120)]
    )
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        assert index.refresh([SessionSource(a)]).entries_added == 119
    with open(a, "a") as f:
        f.write(entry_line(120, "needle 120") + "\n")
    new = [entry_line(n, f"fresh {n} " + "word " * 40) for n in range(1, 130)]
    rewritten = Path(write(tmp_path / "new.jsonl", *new)).read_bytes()
    done, stop = _once_at(monkeypatch, "e0000120", lambda: _rewrite_in_place(a, rewritten))
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        index.refresh([SessionSource(a)])
    stop()
    assert done
    for query in ("fresh", "needle"):
        scanned = {(hit.path, hit.line) for hit in search_sessions([a], query)}
        assert lines_of(found([a], query, agent_dir)) == scanned, query


def test_a_file_that_is_not_a_session_and_spans_chunks_is_indexed_once_not_stale_forever(
    store: Path, agent_dir: Path
) -> None:
    """The read of a file that is not a session stops after the chunk that shows it: its
    last bytes were taken for the file's and did not match the mark, so every refresh
    read it again and said it could not bring it up to date (and every search scanned it)."""
    store.mkdir(parents=True, exist_ok=True)
    other = store / "other.jsonl"
    line = '{"type":"message","id":"%d","text":"needle ' + "word " * 20 + '"}\n'
    other.write_text('{"type":"not-a-session"}\n' + "".join(line % n for n in range(20000)))
    assert other.stat().st_size > 2 * index_rows._CHUNK
    a = write(store / "a.jsonl", entry_line(1, "needle 1"))
    sources = [SessionSource(str(other)), SessionSource(a)]
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        assert index.refresh(sources).stale == []
        assert index.refresh(sources).stale == []
    result = found([str(other), a], "needle", agent_dir)
    assert lines_of(result) == {(a, 2)} and result.mode == "index", result.notes


def test_a_file_appended_to_while_it_is_read_is_kept_and_caught_up(
    store: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live session grows while it is indexed: what was read is kept (the bytes read
    are still the file's), and the next refresh reads only the lines added."""
    a = write(store / "a.jsonl", *[entry_line(n, f"needle {n}") for n in range(1, 60)])
    monkeypatch.setattr(index_rows, "_HELD_BYTES", 1)

    def append() -> None:
        with open(a, "a") as f:
            f.write(entry_line(60, "needle 60") + "\n")

    done, stop = _once_at(monkeypatch, "e0000030", append)
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        first = index.refresh([SessionSource(a)])
        assert done and first.stale == [] and first.entries_added == 59
        stop()
        again = index.refresh([SessionSource(a)])
        assert again.entries_added == 1 and again.bytes_read < 1000
    assert lines_of(found([a], "needle", agent_dir)) == {(a, n) for n in range(2, 62)}


def test_a_refresh_of_an_unchanged_store_reads_no_session_file(
    store: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [write(store / f"s{n}.jsonl", entry_line(1, f"needle {n}")) for n in range(5)]
    for path in paths:  # written before the mtime's tick: trusted once read
        os.utime(path, (time.time() - 60, time.time() - 60))
    assert len(found(paths, "needle", agent_dir).hits) == 5

    def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a session file was read")

    for module in (index_rows, content_index):
        for name in ("read_jsonl", "read_range", "read_chunks", "mark_file", "head_len_of"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, no_read)
    result = found(paths, "needle", agent_dir)
    assert result.mode == "index" and len(result.hits) == 5
    assert result.refreshed is not None and result.refreshed.files_read == 0
