"""Cache databases (`sessiontree._util.cachedb`): families of tables that upgrade and
rebuild without touching each other, and what may be deleted when a file is damaged."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from sessiontree._util.cachedb import REGISTRY, Family, open_cache, run_cached
from sessiontree.layout import store_parts

APP = 0x54455354  # "TEST"


def family(name: str, version: int = 1, extra: str = "") -> Family:
    return Family(
        name=name,
        version=version,
        schema=(
            f"CREATE TABLE {name}_rows (k TEXT PRIMARY KEY, v INTEGER NOT NULL{extra})",
            f"CREATE INDEX {name}_rows_v ON {name}_rows (v)",
        ),
        tables=(f"{name}_rows",),
    )


A, B = family("a"), family("b")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "agent" / "cache" / "test.db"


@pytest.fixture(autouse=True)
def _agent(tmp_path: Path) -> None:
    (tmp_path / "agent").mkdir()


def put(path: Path, fam: Family, rows: dict[str, int]) -> None:
    def run(conn: sqlite3.Connection) -> None:
        conn.executemany(
            f"INSERT OR REPLACE INTO {fam.name}_rows (k, v) VALUES (?, ?)", rows.items()
        )

    assert run_cached(str(path), fam, run, application_id=APP) is None


def rows(path: Path, fam: Family) -> dict[str, int] | None:
    def run(conn: sqlite3.Connection) -> dict[str, int]:
        return dict(conn.execute(f"SELECT k, v FROM {fam.name}_rows"))

    return run_cached(str(path), fam, run, application_id=APP)


def raw(path: Path, query: str) -> list[Any]:
    with sqlite3.connect(path) as conn:
        found = conn.execute(query).fetchall()
    conn.close()
    return found


def test_a_new_cache_is_private_and_in_wal_mode(db_path: Path) -> None:
    put(db_path, A, {"x": 1})
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(db_path.parent.stat().st_mode) == 0o700
    assert raw(db_path, "PRAGMA journal_mode") == [("wal",)]
    assert raw(db_path, "PRAGMA application_id") == [(APP,)]
    assert rows(db_path, A) == {"x": 1}
    db_path.chmod(0o644)
    assert rows(db_path, A) == {"x": 1}
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600


def test_no_agent_dir_no_cache(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "cache" / "x.db"
    assert open_cache(str(path), (A,), application_id=APP) is None
    assert not (tmp_path / "missing").exists()


def test_families_survive_each_others_upgrades_and_rebuilds(db_path: Path) -> None:
    put(db_path, A, {"a": 1})
    put(db_path, B, {"b": 2})
    # A new version of A: its rows go, B's stay.
    a2 = family("a", 2, ", extra TEXT")
    assert rows(db_path, a2) == {}
    assert rows(db_path, B) == {"b": 2}
    put(db_path, a2, {"a": 3})

    # B's rows cannot be read: B rebuilds, A's rows stay.
    def unreadable(conn: sqlite3.Connection) -> None:
        raise ValueError("a row this version cannot read")

    assert run_cached(str(db_path), B, unreadable, application_id=APP) is None
    assert rows(db_path, B) == {}
    assert rows(db_path, a2) == {"a": 3}
    # A's table altered behind its back (an older program added a column): A rebuilds.
    raw(db_path, "ALTER TABLE a_rows ADD COLUMN junk INTEGER")
    put(db_path, B, {"b": 4})
    assert rows(db_path, a2) == {}
    assert rows(db_path, B) == {"b": 4}
    versions = dict(raw(db_path, f"SELECT family, version FROM {REGISTRY}"))
    assert versions == {"a": 2, "b": 1}


def test_a_table_no_family_made_is_never_dropped(db_path: Path) -> None:
    put(db_path, A, {"a": 1})
    raw(db_path, "CREATE TABLE notes (t TEXT)")
    raw(db_path, "INSERT INTO notes VALUES ('keep me')")
    assert rows(db_path, family("a", 5)) == {}
    assert raw(db_path, "SELECT t FROM notes") == [("keep me",)]


def test_a_newer_version_is_left_to_the_newer_program(db_path: Path) -> None:
    newer = family("a", 3)
    put(db_path, newer, {"n": 1})
    put(db_path, B, {"b": 1})
    assert rows(db_path, A) is None  # this (older) version goes without...
    db = open_cache(str(db_path), (A, B), application_id=APP)
    assert db is not None
    with db:
        assert not db.has(A) and db.has(B)
        with pytest.raises(ValueError):
            db.rebuild(A)
    assert rows(db_path, newer) == {"n": 1}  # ...and downgrades nothing
    assert rows(db_path, B) == {"b": 1}


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty-header"])
def test_a_damaged_file_of_ours_is_made_again(db_path: Path, damage: str) -> None:
    put(db_path, A, {"a": 1})
    put(db_path, B, {"b": 1})
    for suffix in ("-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    data = db_path.read_bytes()
    if damage == "garbage":
        db_path.write_bytes(b"not a database " * 500)
    elif damage == "truncated":
        db_path.write_bytes(data[:1500])
    else:
        db_path.write_bytes(b"\0" * 100 + data[100:])
    put(db_path, A, {"a": 2})
    assert rows(db_path, A) == {"a": 2}
    assert rows(db_path, B) == {}  # B rebuilt too: nothing could be read from the file
    assert not Path(f"{db_path}.damaged").exists()


def _damage_with_notes(db_path: Path, note: str) -> None:
    """A cache file holding a table nobody made, its family's table then damaged."""
    put(db_path, A, {f"k{i}": i for i in range(2000)})  # pages of its own
    raw(db_path, "CREATE TABLE notes (t TEXT)")
    raw(db_path, f"INSERT INTO notes VALUES ('{note}')")
    raw(db_path, "PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = raw(db_path, "PRAGMA page_size")[0][0]
    root = raw(db_path, "SELECT rootpage FROM sqlite_master WHERE name = 'a_rows'")[0][0]
    with open(db_path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)


def test_a_second_damaged_file_never_replaces_the_first_copy_or_follows_a_link(
    db_path: Path, tmp_path: Path
) -> None:
    _damage_with_notes(db_path, "first")
    assert rows(db_path, A) == {}
    first = Path(f"{db_path}.damaged")
    assert raw(first, "SELECT t FROM notes") == [("first",)]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"not a cache")
    os.symlink(elsewhere, f"{db_path}.damaged.1")  # planted under the next name
    _damage_with_notes(db_path, "second")
    assert rows(db_path, A) == {}
    assert raw(first, "SELECT t FROM notes") == [("first",)]
    assert elsewhere.read_bytes() == b"not a cache"
    assert raw(Path(f"{db_path}.damaged.2"), "SELECT t FROM notes") == [("second",)]


def test_a_damaged_file_holding_tables_nobody_made_is_moved_aside(db_path: Path) -> None:
    _damage_with_notes(db_path, "keep me")  # the family's table damaged, sqlite_master intact
    assert rows(db_path, A) == {}
    aside = Path(f"{db_path}.damaged")
    assert aside.is_file()
    assert raw(aside, "SELECT t FROM notes") == [("keep me",)]


def test_another_applications_database_is_never_touched(db_path: Path) -> None:
    db_path.parent.mkdir(mode=0o700)
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA application_id = 1234")
        conn.execute("CREATE TABLE a_rows (k TEXT)")
        conn.execute("INSERT INTO a_rows VALUES ('theirs')")
    conn.close()
    before = db_path.read_bytes()
    assert rows(db_path, A) is None
    put(db_path, A, {"x": 1})
    assert db_path.read_bytes() == before
    # Damaged, but its header names another application: still not ours to delete.
    db_path.write_bytes(before[:100] + b"\xff" * (len(before) - 100))
    damaged = db_path.read_bytes()
    assert rows(db_path, A) is None
    assert db_path.read_bytes() == damaged


def test_a_damaged_file_replaced_meanwhile_is_not_deleted(db_path: Path, tmp_path: Path) -> None:
    put(db_path, A, {"a": 1})
    db = open_cache(str(db_path), (A,), application_id=APP)
    assert db is not None
    db.close()  # found damaged; meanwhile another process made a new file at the path:
    fresh = tmp_path / "fresh.db"
    put(fresh, A, {"new": 1})
    os.replace(fresh, db_path)
    assert db.discard()  # the path holds a usable file...
    assert db_path.is_file() and rows(db_path, A) == {"new": 1}  # ...which it left alone


def test_planted_links_and_fifos_are_removed_never_followed(db_path: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.db"
    with sqlite3.connect(victim) as conn:
        conn.execute("CREATE TABLE a_rows (k TEXT)")
    conn.close()
    notes = tmp_path / "notes.txt"
    notes.write_text("keep\n")
    before = victim.read_bytes()
    db_path.parent.mkdir(mode=0o700)
    db_path.symlink_to(victim)
    Path(f"{db_path}-wal").symlink_to(notes)
    os.mkfifo(f"{db_path}-shm")
    put(db_path, A, {"x": 1})
    assert rows(db_path, A) == {"x": 1}
    assert victim.read_bytes() == before and notes.read_text() == "keep\n"
    assert not db_path.is_symlink() and not Path(f"{db_path}-wal").is_symlink()
    db_path.unlink()
    os.mkfifo(db_path)
    assert rows(db_path, A) == {}
    assert db_path.is_file()


def test_a_directory_at_the_path_means_no_cache(db_path: Path) -> None:
    db_path.mkdir(parents=True)
    (db_path / "keep").write_text("x")
    assert rows(db_path, A) is None
    assert (db_path / "keep").read_text() == "x"


def test_a_locked_cache_is_gone_without(db_path: Path) -> None:
    put(db_path, A, {"x": 1})
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        # A rebuild needs the write lock: it waits the busy timeout, then goes without.
        db = open_cache(str(db_path), (family("a", 2),), application_id=APP, timeout=0.1)
        assert db is None
        got = run_cached(
            str(db_path), A, lambda c: c.execute("SELECT 1").fetchone(), application_id=APP
        )
        assert got == (1,)  # readers never wait in WAL mode
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert rows(db_path, A) == {"x": 1}


def _worker(path: str, name: str, count: int, version: int) -> None:
    fam = family(name, version)
    for i in range(count):

        def run(conn: sqlite3.Connection, i: int = i) -> None:
            conn.execute(
                f"INSERT OR REPLACE INTO {name}_rows VALUES (?, ?)", (f"{os.getpid()}-{i}", i)
            )

        run_cached(path, fam, run, application_id=APP, timeout=5.0)


def test_concurrent_openers_in_two_processes(db_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    procs = [
        context.Process(target=_worker, args=(str(db_path), name, 40, 1))
        for name in ("a", "b", "a", "b")
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    got_a, got_b = rows(db_path, A), rows(db_path, B)
    assert got_a is not None and got_b is not None
    assert len(got_a) == len(got_b) == 80  # every write of both processes is there
    assert sorted(raw(db_path, f"SELECT family, version FROM {REGISTRY}")) == [("a", 1), ("b", 1)]


# -- the users: the listing, the foreign listings, the content index --------------------------


def test_a_listing_repair_leaves_the_foreign_tables_in_the_same_file(agent_dir: Path) -> None:
    # Both live in sessions-meta.db; the listing used to delete the whole file when its
    # own rows could not be read, the foreign listings' and import records with it.
    from sessiontree import SessionManager
    from sessiontree.listing import (
        CACHE_DB_NAME,
        IMPORT_RECORDS,
        IdentityCache,
        Known,
        clear_listing_cache,
        list_all_sessions,
    )
    from tests.helpers import assistant, user

    with SessionManager.create("/proj") as sm:
        sm.append_message(user("q"))
        sm.append_message(assistant("a"))
    assert len(list_all_sessions(store_parts())) == 1
    imports = IdentityCache(str(agent_dir), IMPORT_RECORDS)
    imports.store([("/some/file.jsonl", (1, 2, 3, 4), {"kept": True})])
    raw(agent_dir / CACHE_DB_NAME, "UPDATE files SET final = x'00'")  # unreadable rows
    clear_listing_cache()
    (info,) = list_all_sessions(store_parts())
    assert info.first_message == "q"
    assert imports.fetch(["/some/file.jsonl"]) == {
        "/some/file.jsonl": Known((1, 2, 3, 4), {"kept": True})
    }
    clear_listing_cache()
    assert list_all_sessions(store_parts()) == [
        info
    ]  # and the listing cache was rebuilt, not dropped
    assert raw(agent_dir / CACHE_DB_NAME, "SELECT count(*) FROM files") == [(1,)]


def test_a_newer_content_index_is_not_downgraded(agent_dir: Path) -> None:
    from sessiontree import SessionManager
    from sessiontree.search import INDEX_DB_NAME, ContentIndex, search
    from tests.helpers import assistant, user

    with SessionManager.create("/proj") as sm:
        sm.append_message(user("find the needle"))
        sm.append_message(assistant("a"))
        path = sm.get_session_file()
    assert path is not None
    assert search([path], "needle", agent_dir=str(agent_dir)).mode == "index"
    db = agent_dir / INDEX_DB_NAME
    raw(db, f"UPDATE {REGISTRY} SET version = version + 1 WHERE family = 'content_index'")
    raw(db, "PRAGMA wal_checkpoint(TRUNCATE)")
    before = db.read_bytes()
    assert ContentIndex.open(str(agent_dir)) is None
    found = search([path], "needle", agent_dir=str(agent_dir))
    assert found.mode == "scan" and len(found.hits) == 1
    assert db.read_bytes() == before


def test_a_side_file_moves_aside_with_its_database_never_dropped(tmp_path: Path) -> None:
    """A damaged file's -journal/-wal may hold its newest pages: it goes aside with the
    file, under a number whose three names are all free (a file planted at one of them
    is left alone), never unlinked for want of a name."""
    from sessiontree._util import cachedb

    path = tmp_path / "cache.db"
    path.write_bytes(b"damaged database")
    Path(f"{path}-journal").write_bytes(b"hot journal")
    Path(f"{path}.damaged-journal").write_bytes(b"planted")
    assert cachedb._move_aside(str(path))
    assert not path.exists()  # its side files are unlinked by the caller, once linked aside
    assert Path(f"{path}.damaged-journal").read_bytes() == b"planted"
    assert not Path(f"{path}.damaged").exists()
    assert Path(f"{path}.damaged.1").read_bytes() == b"damaged database"
    assert Path(f"{path}.damaged.1-journal").read_bytes() == b"hot journal"
