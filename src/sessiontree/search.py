"""Read-only full-text search over session files and over the prompt history.

`search_sessions` looks for a plain substring (case-insensitive by default) in
the text of every entry (messages, tool calls and results, summaries, extension
messages) and yields one hit per matching entry with a snippet around the
match. A line whose raw bytes cannot contain the query is never parsed, so a
search over a large store costs little more than reading it.

`read_history` queries `history.db` without writing to it (no schema upgrade,
no file creation), unlike `HistoryStorage.open`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from .entries import is_valid_header
from .errors import SessionTreeError
from .export import entry_role, entry_text
from .history import HistoryEntry
from .jsonl import iter_jsonl_bytes, loads_line
from .loader import is_title_slot
from .paths import get_agent_dir
from .storage.base import SessionStorage
from .storage.file import FileSessionStorage

__all__ = ["SearchHit", "read_history", "search_sessions", "snippet"]

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One entry whose text contains the query."""

    path: str
    session_id: str
    entry_id: str | None
    """None in v1 files, whose entries get ids only when loaded."""
    line: int
    role: str
    before: str
    match: str
    after: str

    @property
    def snippet(self) -> str:
        return self.before + self.match + self.after


def _oneline(text: str) -> str:
    return " ".join(text.split())


def snippet(text: str, start: int, end: int, width: int = 100) -> tuple[str, str, str]:
    """(before, match, after) around `text[start:end]`, whitespace collapsed, ~`width` chars."""
    context = max(10, (width - (end - start)) // 2)
    before = text[max(0, start - context) : start]
    after = text[end : end + context]
    left = _oneline(before)
    if before[:1].isspace():
        left = " " + left
    if before[-1:].isspace() and left:
        left += " "
    right = _oneline(after)
    if after[:1].isspace() and right:
        right = " " + right
    if start - context > 0:
        left = "…" + left.lstrip()
    if end + context < len(text):
        right = right.rstrip() + "…"
    return left, _oneline(text[start:end]), right


def _prefilter(query: str, case_sensitive: bool = False) -> Callable[[bytes], bool]:
    """A cheap test on raw line bytes that never rejects a line that could match."""
    if any(c in query for c in '"\\/') or any(ord(c) < 0x20 for c in query):
        return lambda raw: True  # JSON may escape these: the raw bytes differ from the text
    if query.isascii():
        if case_sensitive:
            exact = query.encode()
            return lambda raw: exact in raw
        needle = query.lower().encode()
        folded_ascii = query.casefold()
        # casefold() maps a few non-ASCII letters to ASCII ("ß" -> "ss", Kelvin "K" -> "k").
        return lambda raw: (
            needle in raw.lower()
            or (not raw.isascii() and folded_ascii in raw.decode("utf-8", "replace").casefold())
        )
    # Writers other than JavaScript may escape non-ASCII text as \uXXXX.
    if case_sensitive:
        exact = query.encode()
        return lambda raw: exact in raw or b"\\u" in raw
    folded = query.casefold()
    return lambda raw: b"\\u" in raw or folded in raw.decode("utf-8", "replace").casefold()


def search_sessions(
    paths: Iterable[str],
    query: str,
    *,
    case_sensitive: bool = False,
    limit: int | None = None,
    storage: SessionStorage | None = None,
    progress: Progress | None = None,
) -> Iterator[SearchHit]:
    """Yield entries containing `query`, file by file, in file order.

    Files that cannot be read or are not sessions are skipped.
    """
    if not query:
        return
    storage = storage if storage is not None else FileSessionStorage()
    may_match = _prefilter(query, case_sensitive)
    needle = query if case_sensitive else query.casefold()
    found = 0
    for path in paths:
        if progress is not None:
            progress(path)
        try:
            hits = list(_search_file(path, query, needle, case_sensitive, may_match, storage))
        except OSError:
            continue
        for hit in hits:
            yield hit
            found += 1
            if limit is not None and found >= limit:
                return


def _search_file(
    path: str,
    query: str,
    needle: str,
    case_sensitive: bool,
    may_match: Callable[[bytes], bool],
    storage: SessionStorage,
) -> Iterator[SearchHit]:
    session_id: str | None = None
    for number, raw, _ in iter_jsonl_bytes(storage.iter_chunks(path)):
        if not raw or raw.isspace():
            continue
        if session_id is None:
            try:
                value = loads_line(raw)
            except (ValueError, UnicodeError):
                continue
            if number == 1 and is_title_slot(value):
                continue
            if not is_valid_header(value):
                return
            session_id = str(value["id"])
            continue
        if not may_match(raw):
            continue
        try:
            entry = orjson.loads(raw)
        except orjson.JSONDecodeError:
            try:
                entry = loads_line(raw)
            except (ValueError, UnicodeError):
                continue
        if not isinstance(entry, dict):
            continue
        text = entry_text(entry)
        haystack = text if case_sensitive else text.casefold()
        start = haystack.find(needle)
        if start < 0:
            continue
        # casefold can change lengths (ß -> ss); map back conservatively.
        end = start + len(needle) if len(haystack) == len(text) else start + len(query)
        before, match, after = snippet(text, start, min(end, len(text)))
        entry_id = entry.get("id")
        yield SearchHit(
            path,
            session_id,
            entry_id if isinstance(entry_id, str) else None,
            number,
            entry_role(entry),
            before,
            match,
            after,
        )


def _fts_query(query: str) -> str:
    words = dict.fromkeys(query.split())
    return " ".join('"' + word.replace('"', '""') + '"*' for word in words)


def read_history(
    db_path: str | None = None, query: str | None = None, limit: int = 50
) -> list[HistoryEntry]:
    """Newest-first prompts from `history.db`, opened read-only; [] when there is none.

    With `query`, every word must prefix-match (the FTS5 index when present,
    else a LIKE scan). Nothing is created, upgraded or written.
    """
    path = db_path if db_path is not None else os.path.join(get_agent_dir(), "history.db")
    if not os.path.isfile(path):
        return []
    limit = max(0, min(int(limit), 1000))
    if limit == 0:
        return []
    try:
        return _query_history(path, query, limit)
    except sqlite3.DatabaseError as exc:
        raise SessionTreeError(f"{path}: cannot read the prompt history: {exc}") from exc


def _query_history(path: str, query: str | None, limit: int) -> list[HistoryEntry]:
    # With no -wal file there is no live writer with uncommitted pages: read the
    # file as immutable, which (unlike mode=ro on a WAL database) creates no
    # -shm/-wal files. Otherwise those files exist already and mode=ro is safe.
    wal = os.path.exists(path + "-wal")
    params = "mode=ro" if wal else "mode=ro&immutable=1"
    uri = "file:" + _uri_path(os.path.abspath(path)) + "?" + params
    conn = sqlite3.connect(uri, uri=True, timeout=5.0)
    try:
        conn.execute("PRAGMA query_only = ON")
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if "history" not in tables:
            return []
        cols = "id, prompt, created_at, cwd"
        if not query or not query.split():
            rows = conn.execute(
                f"SELECT {cols} FROM history ORDER BY created_at DESC, id DESC LIMIT ?", (limit,)
            ).fetchall()
        elif "history_fts" in tables:
            try:
                rows = conn.execute(
                    f"SELECT {cols} FROM history WHERE id IN "
                    "(SELECT rowid FROM history_fts WHERE history_fts MATCH ?) "
                    "ORDER BY created_at DESC, id DESC LIMIT ?",
                    (_fts_query(query), limit),
                ).fetchall()
            except sqlite3.OperationalError:
                rows = _like_rows(conn, cols, query, limit)
        else:
            rows = _like_rows(conn, cols, query, limit)
    finally:
        conn.close()
    return [HistoryEntry(int(r[0]), str(r[1]), int(r[2]), r[3]) for r in rows]


def _like_rows(conn: sqlite3.Connection, cols: str, query: str, limit: int) -> list[Any]:
    words = list(dict.fromkeys(query.split()))
    where = " AND ".join("prompt LIKE ? ESCAPE '\\'" for _ in words)
    params: list[object] = [
        "%" + w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for w in words
    ]
    params.append(limit)
    return conn.execute(
        f"SELECT {cols} FROM history WHERE {where} ORDER BY created_at DESC, id DESC LIMIT ?",
        params,
    ).fetchall()


def _uri_path(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/")
