"""A PostgreSQL store's search index: the same hits and usage as the file store's, and a
refresh that reads only the sessions whose node changed, whoever wrote them."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontree import SessionManager, Store
from sessiontree.search import PostgresIndex, SessionSource, postgres_index, search
from tests.conftest import REPO_ROOT
from tests.helpers import assistant, user
from tests.pg_support import fresh_schema

DATA = REPO_ROOT / "tests" / "data"
_SESSION_NAME = re.compile(r"^\d{4}-\d\d-\d\dT.*_[0-9a-f-]+\.jsonl$")
WORDS = "alpha beta gamma delta Straße \u212a kelvin naïve 100% under_score back\\slash ok".split()


def _fixtures(sessions: Path) -> None:
    """Every pi-format session file the tests keep (not other agents'), one dir each."""
    found = sorted(
        p
        for p in DATA.rglob("*.jsonl")
        if "foreign" not in p.parts and (_SESSION_NAME.match(p.name) or p.parent.name == "real")
    )
    assert len(found) > 20
    for n, path in enumerate(found):
        target = sessions / f"--fixture-{n:02d}--"
        target.mkdir(parents=True)
        shutil.copy2(path, target / path.name)


def _generated(sessions: Path, count: int, seed: int = 7) -> None:
    """Sessions with branches, replies with usage, an import marker and text that JSON
    escapes or casefolding changes."""
    rng = random.Random(seed)
    for n in range(count):
        sm = SessionManager.create(f"/work/gen-{n % 3}", str(sessions / f"--gen-{n % 3}--"))
        with sm:
            for turn in range(rng.randrange(1, 8)):
                words = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 12)))
                sm.append_message({**user(words), "timestamp": 1_760_000_000_000 + turn})
                sm.append_message(
                    assistant(
                        words.upper(),
                        timestamp=1_760_000_000_000 + 1000 * (n * 10 + turn) % 7_000,
                        responseId=f"r{n}-{turn // 2}",
                    )
                )
                if turn == 2:
                    sm.branch(sm.get_entries()[1]["id"])
            if n % 5 == 0:
                sm.append_custom_entry(
                    "foreign_session_import",
                    {"source": "codex", "sourceId": f"codex-{n % 2}", "version": 1},
                )


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Store]]:
    """(the file store, the same sessions imported into PostgreSQL)."""
    work = tmp_path_factory.mktemp("pg-index")
    agent = work / "agent"
    _fixtures(agent / "sessions")
    _generated(agent / "sessions", 30)
    with fresh_schema() as (url, schema):
        db = Store(f"{url}{'&' if '?' in url else '?'}schema={schema}", agent_dir=str(work / "db"))
        files = Store(str(agent))
        try:
            db.import_files(agent)
            yield files, db
        finally:
            db.close()
            files.close()


def _hits(store: Store, root: str, query: str, **options: Any) -> list[tuple[Any, ...]]:
    result = store.search(query, **options)
    return [
        (os.path.relpath(h.path, root), h.line, h.role, h.entry_id, h.timestamp, h.snippet)
        for h in result.hits
    ]


@pytest.mark.parametrize(
    ("query", "options"),
    [
        ("alpha", {}),
        ("STRASSE", {}),
        ("\u212a", {"case_sensitive": True}),
        ("k", {}),  # one character: the database's LIKE still answers
        ("100%", {}),
        ("under_score", {}),
        ("back\\slash", {}),
        ("the", {"limit": 7}),
        ("a", {"limit": 30}),
        ("gamma", {"roles": ["assistant"]}),
        (r"na.ve\s+\w+", {"regex": True}),
        (r"(?i)ALPHA|beta", {"regex": True}),  # no literal: every session read
        ("nothing-like-this", {}),
    ],
)
def test_hits_are_the_file_stores(
    stores: tuple[Store, Store], query: str, options: dict[str, Any]
) -> None:
    files, db = stores
    expected = _hits(files, files.agent_dir, query, **options)
    assert _hits(db, db.agent_dir, query, **options) == expected
    if query != "nothing-like-this":
        assert expected


def test_a_time_window_keeps_the_same_hits(stores: tuple[Store, Store]) -> None:
    files, db = stores
    times = sorted(h.timestamp or 0 for h in files.search("delta").hits)
    window = {"since": times[len(times) // 4], "until": times[3 * len(times) // 4]}
    expected = _hits(files, files.agent_dir, "delta", **window)
    assert 0 < len(expected) < len(times)
    assert _hits(db, db.agent_dir, "delta", **window) == expected


def test_search_reads_no_session_of_an_unchanged_store(stores: tuple[Store, Store]) -> None:
    _, db = stores
    db.search("alpha")
    result = db.search("beta")
    assert result.mode == "index" and result.scanned == 0 and result.notes == []
    assert result.refreshed is not None and result.refreshed.files_read == 0


@pytest.mark.parametrize("period", ["daily", "session", "project"])
def test_usage_is_the_file_stores(stores: tuple[Store, Store], period: str) -> None:
    files, db = stores
    expected = files.usage(period, tz="UTC", use_index=False)  # every session read
    got = db.usage(period, tz="UTC")
    assert got.totals == expected.totals and got.totals.input > 0
    assert got.duplicates == expected.duplicates
    assert [r.totals for r in got.rows] == [r.totals for r in expected.rows]


def _db_store(tmp_path: Path) -> Iterator[Store]:
    with fresh_schema() as (url, schema):
        store = Store(
            f"{url}{'&' if '?' in url else '?'}schema={schema}", agent_dir=str(tmp_path / "db")
        )
        try:
            yield store
        finally:
            store.close()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Store]:
    yield from _db_store(tmp_path)


def _session(db: Store, *texts: str) -> str:
    sm = db.create("/work/p")
    with sm:
        for text in texts:
            sm.append_message(user(text))
        sm.append_message(assistant("done"))
        return sm.get_session_file() or ""


def _index(db: Store) -> PostgresIndex:
    index = postgres_index(db.storage)
    assert index is not None
    return index


def test_refresh_reads_only_what_changed(db: Store) -> None:
    first = _session(db, "alpha one")
    second = _session(db, "alpha two")
    index = _index(db)
    sources = [SessionSource(first), SessionSource(second)]
    refreshed, keys, rest = index.refresh(sources)
    assert refreshed.files_read == 2 and len(keys) == 2 and rest == []
    assert index.refresh(sources)[0].files_read == 0
    size = db.storage.stat(first).size
    with SessionManager.open(first, storage=db.storage) as sm:  # an append: read from its end
        sm.append_message(user("alpha three"))
    grown = index.refresh(sources)[0]
    assert grown.files_read == 1 and 0 < grown.bytes_read < db.storage.stat(first).size - size + 1
    assert [h.snippet for h in db.search("alpha three").hits] == ["alpha three"]


def test_a_refresh_whose_write_fails_halfway_keeps_whole_batches_and_the_next_ends_it(
    db: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is one transaction: a write that fails in the third batch leaves the first
    two indexed, nothing of the third (no file forgotten, no row twice), and the next
    refresh indexes the rest once; the sessions themselves are never touched."""
    import sessiontree.search._pg_index as pg_index

    paths = [_session(db, f"kappa {n}") for n in range(5)]
    before = {p: db.storage.read_text(p) for p in paths}
    monkeypatch.setattr(pg_index, "_BATCH_FILES", 1)
    real = PostgresIndex._write
    calls = []

    def failing(self: PostgresIndex, *args: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise OSError("the connection dropped")
        real(self, *args)

    monkeypatch.setattr(PostgresIndex, "_write", failing)
    index = _index(db)
    sources = [SessionSource(p) for p in paths]
    with pytest.raises(OSError, match="dropped"):
        index.refresh(sources)
    monkeypatch.setattr(PostgresIndex, "_write", real)
    assert index.refresh(sources)[0].files_read == 3  # the failed batch's file and the two after
    hits = sorted(h.snippet for h in db.search("kappa", sessions=paths).hits)
    assert hits == [f"kappa {n}" for n in range(5)]
    assert {p: db.storage.read_text(p) for p in paths} == before


def test_a_rewrite_rename_and_unlink_by_any_writer_are_seen(db: Store) -> None:
    """The storage's own writes never touch the index (as an older sessiontree's would
    not): the next search sees each of them."""
    first = _session(db, "omega first")
    second = _session(db, "omega second")
    assert len(db.search("omega").hits) == 2
    storage = db.storage
    data = storage.read_text(first).replace("omega first", "omega rewritten")
    storage.write_text(first, data)  # a new node
    moved = second.replace(".jsonl", "-moved.jsonl")
    storage.rename(second, moved)  # the same node, another key
    hits = db.search("omega", sessions=[first, moved]).hits
    assert sorted((h.path, h.snippet) for h in hits) == sorted(
        [(first, "omega rewritten"), (moved, "omega second")]
    )
    storage.unlink(moved)
    assert [h.snippet for h in db.search("omega").hits] == ["omega rewritten"]


def test_a_file_truncated_in_place_is_read_again_whole(db: Store) -> None:
    path = _session(db, "kappa old text")
    assert len(db.search("kappa").hits) == 1
    lines = db.storage.read_text(path).splitlines(keepends=True)
    header = lines[0]
    with db.storage.open_writer(path, "w") as writer:  # the same node, new bytes
        writer.write_line(header)
        body = json.loads(lines[1])
        body["message"]["content"] = "kappa new text, a longer line than the old one had"
        writer.write_line(json.dumps(body) + "\n")
        for line in lines[2:]:
            writer.write_line(line)
    assert [h.snippet for h in db.search("kappa").hits] == [
        "kappa new text, a longer line than the old one had"
    ]


def test_a_value_no_text_column_holds_is_read_from_the_file(db: Store) -> None:
    path = _session(db, "zeta text")
    entry = {"type": "message", "id": "nul\x00id", "parentId": None, "timestamp": "t"}
    with db.storage.open_writer(path) as writer:  # an id JSON holds and a text column cannot
        writer.write_line(json.dumps({**entry, "message": user("zeta again")}) + "\n")
    sources = [SessionSource(path)]
    refreshed, keys, _ = _index(db).refresh(sources)
    assert refreshed.stale == [path] and keys == {}
    result = search(sources, "zeta", storage=db.storage)
    assert result.mode == "mixed" and len(result.hits) == 2
    assert "could not bring up to date" in " ".join(result.notes)


def _tables(db: Store) -> list[str]:
    with _index(db).storage.connection() as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE 'search%%'"
            " ORDER BY tablename",
            (db.storage.schema,),  # type: ignore[attr-defined]
        ).fetchall()
    return [r[0] for r in rows]


def _set_version(db: Store, version: int) -> None:
    from psycopg import sql

    with _index(db).storage.connection() as conn:
        conn.execute(
            sql.SQL("UPDATE {}.search_index SET version = %s").format(
                sql.Identifier(db.storage.schema)  # type: ignore[attr-defined]
            ),
            (version,),
        )


def test_a_store_made_before_the_index_gets_it_on_first_use(db: Store) -> None:
    """The tables are no migration of the schema (an older sessiontree would refuse a
    newer schema version): the first search makes them; an older layout is made again,
    a newer one is left alone and the sessions are read."""
    from sessiontree.storage.postgres import SCHEMA_VERSION

    path = _session(db, "lambda")
    assert _tables(db) == [] and db.storage.migrate() == SCHEMA_VERSION  # type: ignore[attr-defined]
    assert [h.path for h in db.search("lambda").hits] == [path]
    assert _tables(db) == [
        "search_entries",
        "search_files",
        "search_imports",
        "search_index",
        "search_usage",
    ]
    _set_version(db, 0)  # an older sessiontree's tables: made again, read again
    result = db.search("lambda")
    assert result.mode == "index" and result.refreshed is not None
    assert result.refreshed.files_read == 1 and [h.path for h in result.hits] == [path]
    _set_version(db, 99)  # a newer one's: left alone
    result = db.search("lambda")
    assert result.mode == "scan" and [h.path for h in result.hits] == [path]
    assert "newer sessiontree" in " ".join(result.notes)
    usage = db.usage("session", tz="UTC")
    assert usage.totals.input == 100


def test_an_index_of_version_1_is_made_again_with_the_one_hour_cache_writes(db: Store) -> None:
    """Version 2 keeps each reply's 1-hour cache writes (`search_usage.cache_write_1h`,
    which pi 1.6 records as `cacheWrite1h`): the report prices them from the rows."""
    from psycopg import sql

    usage = {"input": 1000, "output": 100, "cacheRead": 500, "cacheWrite": 200}
    sm = db.create("/work/p")
    with sm:
        sm.append_message(user("hour"))
        sm.append_message(assistant("cached", usage={**usage, "cacheWrite1h": 150}))
    # Sonnet 4.5: $3 input, $15 output, $0.30 cache read; cache writes $3.75 (5 minutes)
    # and $6 (1 hour) per million tokens.
    cost = (1000 * 3 + 100 * 15 + 500 * 0.3 + 50 * 3.75 + 150 * 6) / 1e6
    assert db.usage("session", tz="UTC").totals.cost == pytest.approx(cost)
    with _index(db).storage.connection() as conn:  # the tables as version 1 made them
        conn.execute(
            sql.SQL("ALTER TABLE {}.search_usage DROP COLUMN cache_write_1h").format(
                sql.Identifier(db.storage.schema)  # type: ignore[attr-defined]
            )
        )
    _set_version(db, 1)
    report = db.usage("session", tz="UTC")
    assert report.totals.cost == pytest.approx(cost) and report.totals.cache_write == 200
    assert "cache_write_1h" in _columns(db, "search_usage")


def _columns(db: Store, table: str) -> list[str]:
    with _index(db).storage.connection() as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s",
            (db.storage.schema, table),  # type: ignore[attr-defined]
        ).fetchall()
    return [r[0] for r in rows]


def test_without_the_trigram_index_the_text_is_still_asked(db: Store) -> None:
    from psycopg import sql

    _session(db, "sigma text")
    db.search("sigma")  # the tables made
    with _index(db).storage.connection() as conn:
        conn.execute(
            sql.SQL("DROP INDEX {}.search_entries_text").format(
                sql.Identifier(db.storage.schema)  # type: ignore[attr-defined]
            )
        )
    result = db.search("sigma")
    assert result.mode == "index" and [h.snippet for h in result.hits] == ["sigma text"]
