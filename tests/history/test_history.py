"""HistoryStorage: the SQLite prompt history (real database files in tmp_path)."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree.errors import SessionPersistenceError
from sessiontree.history import (
    MAX_LIMIT,
    MAX_QUERY_WORDS,
    SCHEMA_VERSION,
    HistoryEntry,
    HistoryStorage,
    read_history,
)
from sessiontree.history import _history as history_module
from tests.conftest import examples


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "history.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[HistoryStorage]:
    history = HistoryStorage(db_path)
    yield history
    history.close()


@pytest.fixture(autouse=True)
def _close_registered() -> Iterator[None]:
    """Close whatever a test left open through HistoryStorage.open()."""
    yield
    for history in list(HistoryStorage._registry.values()):
        history.close()


def prompts(history: HistoryStorage, limit: int = MAX_LIMIT) -> list[str]:
    return [entry.prompt for entry in history.get_recent(limit)]


def found(history: HistoryStorage, query: str, limit: int = 50) -> list[str]:
    return [entry.prompt for entry in history.search(query, limit)]


def raw_rows(path: Path) -> list[tuple[int, str, int, str | None]]:
    """Rows as another process sees them."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT id, prompt, created_at, cwd FROM history ORDER BY id"
        ).fetchall()
    finally:
        conn.close()


def schema_sql(path: Path, name: str) -> str | None:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


def assert_fts_consistent(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:  # raises "database disk image is malformed" if index and table disagree
        conn.execute("INSERT INTO history_fts(history_fts) VALUES('integrity-check')")
    finally:
        conn.close()


# --- add / get_recent -------------------------------------------------------------


def test_newest_first_with_fields(store: HistoryStorage) -> None:
    before = int(time.time())
    store.add("first", cwd="/repo/a")
    store.add("second")
    store.add("third", cwd="/repo/c")
    after = int(time.time())

    recent = store.get_recent(10)
    assert [e.prompt for e in recent] == ["third", "second", "first"]
    assert [e.cwd for e in recent] == ["/repo/c", None, "/repo/a"]
    assert recent[0].id > recent[1].id > recent[2].id
    assert all(before <= e.created_at <= after for e in recent)
    assert store.get_recent(2) == recent[:2]


def test_trims_and_ignores_empty(store: HistoryStorage) -> None:
    for text in ("", "   ", "\n\t \r\n", "\u3000"):
        store.add(text)
    store.add("  \n spaced out\t ")
    assert prompts(store) == ["spaced out"]


def test_dedupes_consecutive_only(store: HistoryStorage) -> None:
    for text in ("A", "A", " A ", "B", "A", "A"):
        store.add(text)
    assert prompts(store) == ["A", "B", "A"]


def test_last_prompt_cache_primed_from_db(db_path: Path) -> None:
    with HistoryStorage(db_path) as history:
        history.add("one")
        history.add("two")
    with HistoryStorage(db_path) as history:
        history.add("two")  # same as the last stored prompt
        assert prompts(history) == ["two", "one"]
        history.add("one")
        assert prompts(history) == ["one", "two", "one"]


def test_created_at_is_taken_at_add_time(store: HistoryStorage, db_path: Path) -> None:
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # the worker cannot write until we commit
        added_at = int(time.time())
        store.add("queued while the database was locked")
        time.sleep(1.1)
        blocker.execute("COMMIT")
    finally:
        blocker.close()
    (entry,) = store.get_recent(1)
    assert entry.created_at in (added_at, added_at + 1)  # not the commit time, 1.1 s later
    assert entry.created_at < int(time.time())


def test_stores_text_sqlite_cannot_encode(store: HistoryStorage) -> None:
    store.add("bad \udcff byte", cwd="/home/\udce9t\u00e9")  # os.fsdecode of non-UTF-8 bytes
    (entry,) = store.get_recent(1)
    assert entry.prompt == "bad \ufffd byte"
    assert entry.cwd == "/home/\ufffdt\u00e9"


def test_unicode_and_large_prompts_round_trip(store: HistoryStorage) -> None:
    texts = ["naïve café ☕", "日本語のテスト", "emoji 🚀👍🏽", "nul \0 inside", "x" * 200_000]
    for text in texts:
        store.add(text)
    assert prompts(store) == texts[::-1]


def test_entry_is_frozen_with_slots(store: HistoryStorage) -> None:
    store.add("x")
    (entry,) = store.get_recent(1)
    assert isinstance(entry, HistoryEntry)
    assert not hasattr(entry, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.prompt = "y"  # type: ignore[misc]


# --- limits -----------------------------------------------------------------------


def test_limit_is_clamped(store: HistoryStorage) -> None:
    for i in range(MAX_LIMIT + 5):
        store.add(f"prompt {i}")
    assert store.get_recent(-5) == []
    assert store.get_recent(0) == []
    assert store.search("prompt", -1) == []
    assert store.search("prompt", 0) == []
    assert len(store.get_recent(5000)) == MAX_LIMIT
    assert len(store.search("prompt", 5000)) == MAX_LIMIT
    assert prompts(store, 3) == [f"prompt {i}" for i in (1004, 1003, 1002)]
    assert found(store, "prompt", 2) == ["prompt 1004", "prompt 1003"]


# --- search -----------------------------------------------------------------------


@pytest.fixture
def corpus(store: HistoryStorage) -> HistoryStorage:
    for text in (
        "fix the failing test",
        "prefix handling in the parser",
        "fixture for the CLI",
        "refactor src/sessiontree/history.py",
        "explain the NEAR operator",
        "this AND that OR those",
        "naïve café",
        "日本語のテスト",
        "ship it 🚀",
        'say "hello" to it\'s owner',
        "a-b c:d",
        "fix the parser",
    ):
        store.add(text)
    return store


def test_search_is_word_prefix_newest_first(corpus: HistoryStorage) -> None:
    assert found(corpus, "fix") == ["fix the parser", "fixture for the CLI", "fix the failing test"]
    assert found(corpus, "FIXT") == ["fixture for the CLI"]
    assert found(corpus, "efix") == []  # prefix of a word, not a substring
    assert found(corpus, "fix", 1) == ["fix the parser"]


def test_search_requires_every_word(corpus: HistoryStorage) -> None:
    assert found(corpus, "fix pars") == ["fix the parser"]
    assert found(corpus, "  pars   fix  ") == ["fix the parser"]
    assert found(corpus, "fix fail te") == ["fix the failing test"]
    assert found(corpus, "fix nothing") == []


def test_search_matches_across_punctuation_and_scripts(corpus: HistoryStorage) -> None:
    assert found(corpus, "src/sessiontree/hist") == ["refactor src/sessiontree/history.py"]
    assert found(corpus, "history.py") == ["refactor src/sessiontree/history.py"]
    assert found(corpus, "cafe") == ["naïve café"]  # diacritics folded
    assert found(corpus, "NAÏV") == ["naïve café"]
    assert found(corpus, "日本") == ["日本語のテスト"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("NEAR", ["explain the NEAR operator"]),
        ("near(", ["explain the NEAR operator"]),
        ("AND", ["this AND that OR those"]),
        ("OR", ["this AND that OR those"]),
        ("NOT", []),
        ('"hello"', ['say "hello" to it\'s owner']),
        ('"hello', ['say "hello" to it\'s owner']),
        ("it's", ['say "hello" to it\'s owner']),
        ("c:d", ["a-b c:d"]),
        ("a-b", ["a-b c:d"]),
        ("-b", ["a-b c:d"]),
        ("prompt:fix", []),  # not a column filter: the words "prompt" and "fix"
        ("^ship", ["ship it 🚀"]),
        ("+ship", ["ship it 🚀"]),
        ("ship*", ["ship it 🚀"]),
        ("ship 🚀", ["ship it 🚀"]),  # a word with nothing indexable constrains nothing
        ("ship -", ["ship it 🚀"]),
        ("ship ( ) * : ^", ["ship it 🚀"]),
    ],
)
def test_fts_syntax_is_plain_text(corpus: HistoryStorage, query: str, expected: list[str]) -> None:
    assert found(corpus, query) == expected


ODD_QUERIES = [
    '"',
    '""',
    '"""',
    "'",
    "*",
    "**",
    "-",
    "(",
    ")",
    ":",
    "^",
    "NEAR",
    "NEAR(",
    "NEAR/2",
    "AND",
    "OR",
    "NOT",
    "{prompt}",
    "prompt:",
    "🚀",
    "👍🏽",
    "\u200b",
    "\0",
    "fix\0the",
    "\ud800",
    "",
    " ",
    "\t\n\r ",
    "x" * 100_000,
    "(" * 10_000,
    '"' * 10_000,
    " ".join(f"w{i}" for i in range(10_000)),
    "'); DROP TABLE history; --",
    "' OR 1=1 --",
    "%",
    "_",
    "\\",
]


@pytest.mark.parametrize("query", ODD_QUERIES, ids=range(len(ODD_QUERIES)))
def test_odd_queries_never_raise(corpus: HistoryStorage, query: str) -> None:
    start = time.perf_counter()
    result = corpus.search(query, 50)
    assert time.perf_counter() - start < 1.0
    assert isinstance(result, list)
    assert len(corpus.get_recent(MAX_LIMIT)) == 12  # nothing dropped or altered


def test_empty_queries_return_nothing(corpus: HistoryStorage) -> None:
    for query in ("", " ", "\t\n", "🚀", '"', "*", "-"):
        assert corpus.search(query, 50) == []


def test_search_uses_first_words_of_a_long_query(store: HistoryStorage) -> None:
    words = [f"word{i}" for i in range(MAX_QUERY_WORDS + 10)]
    store.add(" ".join(words[:MAX_QUERY_WORDS]))
    assert found(store, " ".join(words)) == [" ".join(words[:MAX_QUERY_WORDS])]
    assert found(store, " ".join(words[1:])) == []


def test_failing_fts_query_returns_empty(
    corpus: HistoryStorage, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(history_module, "_fts_query", lambda query: "NEAR(")  # invalid FTS5
    assert corpus.search("anything", 10) == []
    assert "history search failed" in caplog.text


# --- instances, paths, file modes -------------------------------------------------


def test_open_returns_one_instance_per_path(tmp_path: Path) -> None:
    first = HistoryStorage.open(tmp_path / "a.db")
    assert HistoryStorage.open(str(tmp_path / "a.db")) is first
    assert HistoryStorage.open(tmp_path / "sub" / ".." / "a.db") is first
    (tmp_path / "link").symlink_to(tmp_path)
    assert HistoryStorage.open(tmp_path / "link" / "a.db") is first
    assert HistoryStorage.open(tmp_path / "b.db") is not first
    with HistoryStorage(tmp_path / "a.db") as direct:  # the constructor makes a private one
        assert direct is not first
        assert HistoryStorage.open(tmp_path / "a.db") is first


def test_open_after_close_gives_a_fresh_instance(db_path: Path) -> None:
    first = HistoryStorage.open(db_path)
    first.add("kept")
    first.close()
    second = HistoryStorage.open(db_path)
    assert second is not first
    assert prompts(second) == ["kept"]


def test_open_is_safe_from_many_threads(db_path: Path) -> None:
    results: list[HistoryStorage] = []
    threads = [
        threading.Thread(target=lambda: results.append(HistoryStorage.open(db_path)))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert all(history is results[0] for history in results)


def test_default_path_is_in_agent_dir(agent_dir: Path) -> None:
    history = HistoryStorage.open()
    assert history.path == os.path.realpath(agent_dir / "history.db")
    assert (agent_dir / "history.db").is_file()


def test_default_agent_dir_without_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PI_CODING_AGENT_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    history = HistoryStorage.open()
    assert history.path == os.path.realpath(tmp_path / "home" / ".xcsh" / "agent" / "history.db")


def test_agent_dir_env_expands_tilde(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", "~/agents/x")
    history = HistoryStorage.open()
    assert history.path == os.path.realpath(tmp_path / "home" / "agents" / "x" / "history.db")


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_files_are_private(agent_dir: Path, umask: int) -> None:
    old_umask = os.umask(umask)  # the modes must not depend on it
    try:
        history = HistoryStorage.open()
        history.add("secret token sk-123")
        history.flush()
        db = agent_dir / "history.db"
        assert stat.S_IMODE(agent_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        for suffix in ("-wal", "-shm"):
            side = db.with_name(db.name + suffix)
            assert side.exists()
            assert stat.S_IMODE(side.stat().st_mode) == 0o600
    finally:
        os.umask(old_umask)


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_existing_file_keeps_its_mode(db_path: Path) -> None:
    db_path.touch()
    db_path.chmod(0o640)
    with HistoryStorage(db_path) as history:
        history.add("x")
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o640


def test_not_a_database_raises(db_path: Path) -> None:
    db_path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        HistoryStorage(db_path)
    assert HistoryStorage._registry == {}


# --- schema, FTS rebuild, legacy migration ----------------------------------------


def test_schema(store: HistoryStorage, db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert {"history", "history_fts", "idx_history_created_at", "history_ai"} <= names
    assert "strftime('%s','now')" in (schema_sql(db_path, "history") or "")


def test_fts_follows_deletes_and_updates(store: HistoryStorage, db_path: Path) -> None:
    store.add("alpha one")
    store.add("beta two")
    store.flush()
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            conn.execute("DELETE FROM history WHERE prompt = 'alpha one'")
            conn.execute("UPDATE history SET prompt = 'gamma three' WHERE prompt = 'beta two'")
    finally:
        conn.close()
    assert found(store, "alpha") == []
    assert found(store, "beta") == []
    assert found(store, "gamma") == ["gamma three"]
    assert_fts_consistent(db_path)


def test_rebuilds_dropped_fts_index(db_path: Path) -> None:
    with HistoryStorage(db_path) as history:
        history.add("remember the migration plan")
        history.add("second prompt")
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("DROP TABLE history_fts")
    finally:
        conn.close()

    with HistoryStorage(db_path) as history:
        assert found(history, "migr") == ["remember the migration plan"]
        history.add("third prompt")
        assert found(history, "prompt") == ["third prompt", "second prompt"]
    assert_fts_consistent(db_path)


def make_ts_database(path: Path, created_at_default: str, rows: list[tuple[int, str, int]]) -> None:
    """A history.db as the TypeScript agents write it (no prefix indexes, no version)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"""CREATE TABLE history (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            prompt TEXT NOT NULL,
            created_at INTEGER NOT NULL DEFAULT ({created_at_default}),
            cwd TEXT
        )""")
        conn.execute("CREATE INDEX idx_history_created_at ON history(created_at DESC)")
        conn.execute(
            "CREATE VIRTUAL TABLE history_fts USING fts5(prompt, content='history', content_rowid='id')"
        )
        conn.execute("""CREATE TRIGGER history_ai AFTER INSERT ON history BEGIN
            INSERT INTO history_fts(rowid, prompt) VALUES (new.id, new.prompt);
        END""")
        conn.executemany(
            "INSERT INTO history (id, prompt, created_at, cwd) VALUES (?, ?, ?, '/old')", rows
        )
    finally:
        conn.close()


LEGACY_ROWS = [(1, "legacy first prompt", 1_700_000_000), (7, "legacy last prompt", 1_700_000_100)]


def test_migrates_unixepoch_default(db_path: Path) -> None:
    # SQLite resolves functions in a DEFAULT only when an insert needs the default,
    # so this schema can be created (and its rows inserted) by any SQLite version.
    make_ts_database(db_path, "unixepoch()", LEGACY_ROWS)
    assert "unixepoch(" in (schema_sql(db_path, "history") or "")

    with HistoryStorage(db_path) as history:
        assert [(e.id, e.prompt, e.created_at, e.cwd) for e in history.get_recent(10)] == [
            (7, "legacy last prompt", 1_700_000_100, "/old"),
            (1, "legacy first prompt", 1_700_000_000, "/old"),
        ]
        assert found(history, "legacy fir") == ["legacy first prompt"]
        history.add("legacy last prompt")  # deduped against the migrated last row
        history.add("new prompt")
        assert history.get_recent(1)[0].id > 7

    table = schema_sql(db_path, "history") or ""
    assert "unixepoch(" not in table
    assert "strftime('%s','now')" in table
    assert "prefix" in (schema_sql(db_path, "history_fts") or "")
    assert schema_sql(db_path, "idx_history_created_at") is not None
    assert schema_sql(db_path, "history_legacy") is None
    assert [row[1] for row in raw_rows(db_path)] == [
        "legacy first prompt",
        "legacy last prompt",
        "new prompt",
    ]
    assert_fts_consistent(db_path)
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        # The default now works on every SQLite: an insert that relies on it.
        with conn:
            conn.execute("INSERT INTO history (prompt) VALUES ('from another tool')")
        (created_at,) = conn.execute(
            "SELECT created_at FROM history WHERE prompt = 'from another tool'"
        ).fetchone()
        assert abs(created_at - time.time()) < 60
    finally:
        conn.close()


@pytest.mark.skipif(sqlite3.sqlite_version_info < (3, 38), reason="unixepoch() needs 3.38")
def test_migrates_rows_written_through_unixepoch_default(db_path: Path) -> None:
    make_ts_database(db_path, "unixepoch()", [])
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            conn.execute("INSERT INTO history (prompt) VALUES ('used the default')")
    finally:
        conn.close()
    with HistoryStorage(db_path) as history:
        (entry,) = history.get_recent(10)
        assert entry.prompt == "used the default"
        assert abs(entry.created_at - time.time()) < 60


def test_failed_migration_changes_nothing(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    try:  # an unexpected legacy shape: no cwd column to copy
        conn.execute(
            "CREATE TABLE history (id INTEGER PRIMARY KEY AUTOINCREMENT, prompt TEXT NOT NULL,"
            " created_at INTEGER NOT NULL DEFAULT (unixepoch()))"
        )
        with conn:
            conn.execute("INSERT INTO history (prompt, created_at) VALUES ('keep me', 1)")
    finally:
        conn.close()
    before = schema_sql(db_path, "history")

    with pytest.raises(sqlite3.OperationalError):
        HistoryStorage(db_path)

    assert schema_sql(db_path, "history") == before
    assert schema_sql(db_path, "history_legacy") is None
    assert schema_sql(db_path, "history_fts") is None
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("SELECT prompt FROM history").fetchall() == [("keep me",)]
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    finally:
        conn.close()


def test_adds_prefix_indexes_to_a_typescript_fts(db_path: Path) -> None:
    make_ts_database(db_path, "CAST(strftime('%s','now') AS INTEGER)", LEGACY_ROWS)
    with HistoryStorage(db_path) as history:
        assert found(history, "l") == ["legacy last prompt", "legacy first prompt"]
    assert "prefix" in (schema_sql(db_path, "history_fts") or "")
    assert_fts_consistent(db_path)
    # Reopening leaves a current schema alone.
    fts_before = schema_sql(db_path, "history_fts")
    with HistoryStorage(db_path) as history:
        assert len(history.get_recent(10)) == 2
    assert schema_sql(db_path, "history_fts") == fts_before


# --- concurrency, flush, close ----------------------------------------------------


def test_concurrent_adders(store: HistoryStorage, db_path: Path) -> None:
    per_thread = 300
    barrier = threading.Barrier(8)

    def adder(n: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            store.add(f"thread {n} prompt {i}", cwd=f"/t{n}")
            if i % 50 == 0:
                store.search(f"thread {n}", 5)  # reads interleaved with writes

    threads = [threading.Thread(target=adder, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.flush()

    rows = raw_rows(db_path)
    expected = {f"thread {n} prompt {i}" for n in range(8) for i in range(per_thread)}
    assert len(rows) == len(expected)
    assert {row[1] for row in rows} == expected
    for n in range(8):  # each thread's prompts were stored in the order it added them
        mine = [row[1] for row in rows if row[3] == f"/t{n}"]
        assert mine == [f"thread {n} prompt {i}" for i in range(per_thread)]
    assert_fts_consistent(db_path)


def test_add_does_not_wait_for_the_database(store: HistoryStorage, db_path: Path) -> None:
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        start = time.perf_counter()
        for i in range(100):
            store.add(f"prompt {i}")
        assert time.perf_counter() - start < 0.5
        assert raw_rows(db_path) == []  # queued, not yet written
        blocker.execute("COMMIT")
    finally:
        blocker.close()
    store.flush()
    assert len(raw_rows(db_path)) == 100


def test_flush_makes_adds_visible_to_other_connections(
    store: HistoryStorage, db_path: Path
) -> None:
    store.flush()  # nothing queued: returns at once
    for i in range(50):
        store.add(f"prompt {i}")
    store.flush()
    assert [row[1] for row in raw_rows(db_path)] == [f"prompt {i}" for i in range(50)]


def test_reads_see_earlier_adds(store: HistoryStorage) -> None:
    for i in range(200):
        store.add(f"prompt {i}")
        assert store.get_recent(1)[0].prompt == f"prompt {i}"
    store.add("needle in the haystack")
    assert found(store, "needle") == ["needle in the haystack"]


def test_close_writes_queue_and_stops(db_path: Path) -> None:
    history = HistoryStorage(db_path)
    for i in range(500):
        history.add(f"prompt {i}")
    history.close()
    assert len(raw_rows(db_path)) == 500
    assert not history._worker.is_alive()
    history.close()  # idempotent
    history.flush()  # nothing left to wait for
    with pytest.raises(ValueError, match="closed"):
        history.add("late")
    with pytest.raises(ValueError, match="closed"):
        history.get_recent(1)
    with pytest.raises(ValueError, match="closed"):
        history.search("prompt", 1)
    assert "closed" in repr(history)


def test_write_errors_are_logged_not_raised(
    store: HistoryStorage, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(history_module, "_INSERT", "INSERT INTO no_such_table VALUES (?, ?, ?)")
    store.add("lost")
    store.flush()  # returns even though the batch failed
    assert "could not save 1 prompt(s)" in caplog.text
    monkeypatch.undo()
    store.add("kept")
    assert prompts(store) == ["kept"]


def test_exit_without_close_writes_queued_prompts(db_path: Path) -> None:
    script = (
        "import sys\n"
        "from sessiontree.history._history import HistoryStorage\n"
        "h = HistoryStorage.open(sys.argv[1])\n"
        "for i in range(200):\n"
        "    h.add(f'prompt {i}')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(db_path)], check=True, timeout=60)
    assert len(raw_rows(db_path)) == 200


# --- failures inside the writer thread -----------------------------------------------


def _add_as_one_batch(history: HistoryStorage, db_path: Path, texts: list[str]) -> None:
    """Add `texts` while another connection holds the write lock, so they queue up."""
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        for text in texts:
            history.add(text)
        blocker.execute("COMMIT")
    finally:
        blocker.close()


def test_a_prompt_that_cannot_be_bound_costs_only_itself(
    store: HistoryStorage,
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Without the surrogate clean-up, binding raises UnicodeEncodeError (not a
    # sqlite3.Error) in the worker; it used to kill the thread, after which adds
    # queued forever and flush() returned as if they were saved.
    monkeypatch.setattr(history_module, "_valid_text", lambda text: text)
    _add_as_one_batch(store, db_path, ["before", "hunter2 \udcff", "after"])
    store.flush()
    assert prompts(store) == ["after", "before"]
    assert "could not save a prompt of 9 chars" in caplog.text
    assert "hunter2" not in caplog.text  # prompts can hold secrets: never logged
    assert store._worker.is_alive()
    store.add("later")
    assert prompts(store) == ["later", "after", "before"]


def test_a_row_too_big_for_sqlite_costs_only_itself(
    store: HistoryStorage, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # sqlite3.DataError ("string or blob too big") used to drop the whole batch.
    store._writer.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1000)
    _add_as_one_batch(store, db_path, ["one", "x" * 5000, "two", "three"])
    store.flush()
    assert prompts(store) == ["three", "two", "one"]
    assert "could not save a prompt of 5000 chars" in caplog.text
    assert_fts_consistent(db_path)


def test_a_transient_failure_is_retried_row_by_row(
    store: HistoryStorage, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = history_module._transaction
    failures = [MemoryError("simulated")]

    def flaky(conn: sqlite3.Connection) -> Iterator[None]:
        if failures:
            raise failures.pop()
        return real(conn)

    monkeypatch.setattr(history_module, "_transaction", flaky)
    _add_as_one_batch(store, db_path, ["a", "b", "c"])
    store.flush()
    assert failures == []
    assert sorted(prompts(store)) == ["a", "b", "c"]


def test_a_dead_writer_makes_every_later_call_raise(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history = HistoryStorage(db_path)
    history.add("saved")
    history.flush()
    writing = threading.Event()
    release = threading.Event()

    def broken_write(batch: list[tuple[str, int, str | None]]) -> None:
        writing.set()
        release.wait(10)
        raise RuntimeError("bug in the writer")

    history._write = broken_write  # type: ignore[method-assign]
    history.add("in flight")
    assert writing.wait(10)
    history.add("queued 1")
    history.add("queued 2")
    release.set()
    with pytest.raises(SessionPersistenceError, match="3 prompt\\(s\\) were not saved") as info:
        history.flush()
    assert str(db_path) in str(info.value)
    assert "bug in the writer" in str(info.value)
    assert "3 prompt(s) were not saved" in caplog.text
    with pytest.raises(SessionPersistenceError):
        history.add("after the death")  # refused, not queued into the void
    with pytest.raises(SessionPersistenceError):
        history.get_recent(10)
    with pytest.raises(SessionPersistenceError):
        history.search("saved", 10)
    with pytest.raises(SessionPersistenceError):
        history.close()
    history.close()  # idempotent: reported once
    assert [row[1] for row in raw_rows(db_path)] == ["saved"]


# --- read-only reads: one query with HistoryStorage ----------------------------------

QUERY_PIECES = [
    "fix",
    "caf",
    "\udce9",
    "\ud800",
    "é",
    " ",
    "\x00",
    '"',
    "*",
    "-",
    "%",
    "_",
    "\\",
    "😀",
]


def _surrogate_corpus(store: HistoryStorage) -> None:
    for text in ("fix caf\udce9 tests", "café au lait", "saved from \udcff dir", "100% _done_"):
        store.add(text)
    store.flush()


@settings(max_examples=examples(200), deadline=None)
@given(query=st.lists(st.sampled_from(QUERY_PIECES), max_size=8).map("".join))
def test_read_history_finds_what_search_finds_for_any_text(
    tmp_path_factory: Any, query: str
) -> None:
    # The model: HistoryStorage.search (whitespace only: get_recent). The read-only
    # reader of the CLI must answer the same, never raise.
    db = str(tmp_path_factory.getbasetemp() / "read-only-model.db")
    if not os.path.exists(db):
        with HistoryStorage(db) as model:
            _surrogate_corpus(model)
    with HistoryStorage(db) as model:
        expected = model.search(query, 50) if query.split() else model.get_recent(50)
    assert read_history(db, query, 50) == expected


def test_cli_history_search_with_bytes_that_are_not_utf8(agent_dir: Path) -> None:
    # A command-line argument that is not UTF-8 arrives decoded with surrogateescape:
    # it is searched for as `add` stores such text (lone surrogates as U+FFFD).
    with HistoryStorage(agent_dir / "history.db") as store:
        _surrogate_corpus(store)
    code = "import sys; from sessiontree.cli import main; sys.exit(main())"
    for arg, expected in (
        (b"caf\xe9", ["café au lait", "fix caf\ufffd tests"]),  # "caf" is a prefix of both
        (b"fix caf\xe9", ["fix caf\ufffd tests"]),
        (b"\xff\xfe", []),
    ):
        done = subprocess.run(
            [sys.executable, "-c", code, "history", "--json", "--search", os.fsdecode(arg)],
            capture_output=True,
            env={**os.environ, "PI_CODING_AGENT_DIR": str(agent_dir)},
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert b"Traceback" not in done.stderr
        entries = json.loads(done.stdout)["entries"]
        assert sorted(e["prompt"] for e in entries) == sorted(expected), arg


def test_read_history_without_an_fts_index_or_with_a_name_not_utf8(tmp_path: Path) -> None:
    # An agent dir whose name is not UTF-8, and a file an old agent wrote (no FTS
    # index): the LIKE scan takes the same words, validated.
    directory = os.path.join(os.fsencode(tmp_path), b"agent-\xff")
    os.mkdir(directory)
    db = os.path.join(os.fsdecode(directory), "history.db")
    with HistoryStorage(db) as store:
        _surrogate_corpus(store)
        assert [e.prompt for e in read_history(db, "fix caf\udce9", 10)] == ["fix caf\ufffd tests"]
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE history_fts")
    conn.close()
    assert [e.prompt for e in read_history(db, "caf\udce9", 10)] == ["fix caf\ufffd tests"]
    assert [e.prompt for e in read_history(db, "100% x\x00", 10)] == []
    assert [e.prompt for e in read_history(db, "_done_ 100%", 10)] == ["100% _done_"]
    assert len(read_history(db, " \t", 10)) == 4


# --- oh-my-pi's history.db ------------------------------------------------------------

# oh-my-pi 18.2.3's table (src/session/history-storage.ts, HISTORY_TABLE_DDL): a prompt once
OMP_HISTORY = """CREATE TABLE history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    prompt TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL DEFAULT (CAST(strftime('%s','now') AS INTEGER)),
    cwd TEXT,
    session_id TEXT{extra}
)"""
# 18.3.4 adds `use_count` and, through its session index (src/session/session-index.ts),
# a `session_recaps` table in the same file
OMP_1834_USE_COUNT = ",\n    use_count INTEGER NOT NULL DEFAULT 1"
OMP_1834_RECAPS = """CREATE TABLE session_recaps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    cwd TEXT NOT NULL,
    recap TEXT NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST(strftime('%s','now') AS INTEGER))
)"""


def make_omp_database(path: Path, *, release: str) -> None:
    """A history.db as oh-my-pi `release` leaves it, holding "repeat me" then "other"."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        newer = release == "18.3.4"
        conn.execute(OMP_HISTORY.format(extra=OMP_1834_USE_COUNT if newer else ""))
        conn.execute("CREATE INDEX idx_history_created_at ON history(created_at DESC)")
        conn.execute(
            "CREATE VIRTUAL TABLE history_fts USING fts5(prompt, content='history', content_rowid='id')"
        )
        conn.execute("""CREATE TRIGGER history_ai AFTER INSERT ON history BEGIN
            INSERT INTO history_fts(rowid, prompt) VALUES (new.id, new.prompt);
        END""")
        conn.execute("PRAGMA user_version = 1")  # oh-my-pi's rebuild pass marks the file
        conn.executemany(
            "INSERT INTO history (prompt, created_at, cwd, session_id) VALUES (?, ?, '/old', ?)",
            [("repeat me", 1_700_000_000, "omp-session"), ("other", 1_700_000_100, None)],
        )
        if newer:
            conn.execute(OMP_1834_RECAPS)
            conn.execute(
                "INSERT INTO session_recaps (session_id, cwd, recap, created_at)"
                " VALUES ('omp-session', '/old', 'did things', 1700000000)"
            )
    finally:
        conn.close()


def dump(path: Path, query: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("release", ["18.2.3", "18.3.4"])
def test_adding_a_prompt_omp_holds_updates_its_row(
    db_path: Path, release: str, caplog: pytest.LogCaptureFixture
) -> None:
    """oh-my-pi holds a prompt once (`UNIQUE`): adding one it holds updated nothing and
    logged "UNIQUE constraint failed"; now the row takes the latest time and cwd (and no
    session), as oh-my-pi's upsert does, and 18.3.4's `use_count` counts it; its
    `session_recaps` table and its schema stay as they are."""
    make_omp_database(db_path, release=release)
    tables = dump(db_path, "SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'history_fts%'")
    before = time.time()
    with HistoryStorage(db_path) as history:
        history.add("repeat me", cwd="/new")
        history.add("brand new")
        history.flush()
        recent = history.get_recent(10)
        assert [e.prompt for e in recent] == ["brand new", "repeat me", "other"]
        assert found(history, "repeat") == ["repeat me"]
    assert "UNIQUE" not in caplog.text
    columns = "prompt, created_at >= ?, cwd, session_id" + (
        ", use_count" if release == "18.3.4" else ""
    )
    rows = {r[0]: r[1:] for r in dump_rows(db_path, columns, int(before))}
    counted = (2,) if release == "18.3.4" else ()
    assert rows["repeat me"] == (1, "/new", None, *counted)
    assert rows["other"] == (0, "/old", None, *((1,) if counted else ()))
    assert rows["brand new"] == (1, None, None, *((1,) if counted else ()))
    kept = dump(db_path, "SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'history_fts%'")
    assert [t for t in kept if t[0] != "history_au" and t[0] != "history_ad"] == tables
    if release == "18.3.4":
        assert dump(db_path, "SELECT * FROM session_recaps") == [
            (1, "omp-session", "/old", "did things", 1_700_000_000)
        ]
    assert_fts_consistent(db_path)


def dump_rows(path: Path, columns: str, since: int) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT {columns} FROM history ORDER BY id", (since,)).fetchall()
    finally:
        conn.close()
