"""The rows a fresh process lists an unchanged directory from (`dump_rows`, `KeptRows`).

Each directory's files' identities are kept as bytes, compared with those of the files
now (never decoded); its sessions are kept in columns (file, created, id) and the rest
of their rows apart, read for a directory when the first of its infos is built: a page
of a long listing builds only its own rows' infos. Rows kept another way (an older
layout, a table of the family's version 1) are not read: the directory is listed file
by file and kept again; a damaged row (wrong kinds, cut short) is not trusted: the
files themselves are read. A file whose size, mtime, inode or ctime alone changed is
read again.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sessiontree.format import serialize_entry, session_file_name
from sessiontree.layout import encode_session_dir_name, store_parts
from sessiontree.listing import (
    SessionInfo,
    clear_listing_cache,
    list_all_sessions,
    list_rows,
    list_sessions,
)
from sessiontree.listing._listing import KeptRows
from sessiontree.storage import FileSessionStorage
from tests.helpers import assistant, user

T0 = 1_770_000_000_000_000_000  # ns, 2026-02-02: a stat of it is trusted


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    clear_listing_cache()
    yield
    clear_listing_cache()


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    """Two projects of 6 sessions each, and a file that is no session."""
    for p, cwd in enumerate(("/work/one", "/work/two")):
        d = tmp_path / "sessions" / encode_session_dir_name(cwd)
        d.mkdir(parents=True)
        for n in range(6):
            sid = f"{p}{n:03x}{'cd' * 6}"
            stamp = f"2026-01-0{n + 1}T00:00:00.000Z"
            lines = [
                {"type": "session", "version": 3, "id": sid, "timestamp": stamp, "cwd": cwd},
                _entry(n, user(f"prompt {p} {n}")),
                _entry(n + 1, assistant("ok")),
            ]
            path = d / session_file_name(stamp, sid)
            path.write_text("".join(serialize_entry(line) + "\n" for line in lines))
            os.utime(path, ns=(T0 + 10**9 * (2 * n + p),) * 2)
        nope = d / "2026-01-01T00-00-00-000Z_nope.jsonl"
        nope.write_text("not json\n")
        os.utime(nope, ns=(T0, T0))
    return tmp_path


def _entry(n: int, message: dict[str, object]) -> dict[str, object]:
    return {
        "type": "message",
        "id": f"{n:08x}",
        "parentId": None,
        "timestamp": "2026-01-01T00:00:01.000Z",
        "message": message,
    }


def _kept(agent: Path, column: str = "rows") -> dict[str, bytes]:
    with sqlite3.connect(agent / "cache" / "sessions-meta.db") as db:
        return dict(db.execute(f"SELECT dir, {column} FROM dirs"))


def _keep(agent: Path, rows: dict[str, object], column: str = "rows") -> None:
    with sqlite3.connect(agent / "cache" / "sessions-meta.db") as db:
        db.executemany(
            f"UPDATE dirs SET {column} = ? WHERE dir = ?", [(b, d) for d, b in rows.items()]
        )


def test_a_page_builds_the_infos_of_its_rows_only(agent: Path) -> None:
    parts = store_parts(FileSessionStorage(), str(agent))
    whole = list_all_sessions(parts)
    assert len(whole) == 12 and len(_kept(agent)) == 2
    clear_listing_cache()  # as a new process would start
    rows = list_rows(None, parts)
    runs = [run for run in rows._runs if isinstance(run, KeptRows)]
    assert len(runs) == 2 and rows._rows == []  # every row as the disk kept it
    page = [rows.info(handle) for _, handle in list(rows.newest_first())[:3]]
    assert page == whole[:3]
    built = [sum(info is not None for info in run._infos or []) for run in runs]
    assert sorted(built) == [1, 2]
    assert sorted(rows.ids()) == sorted(info.id for info in whole)
    assert rows.infos() == whole


def test_rows_kept_another_way_are_listed_again(agent: Path) -> None:
    parts = store_parts(FileSessionStorage(), str(agent))
    whole = list_all_sessions(parts)
    assert len(_kept(agent)) == 2
    _keep(agent, {d: orjson.dumps([[], []]) for d in _kept(agent)})  # no layout of ours
    clear_listing_cache()
    assert list_all_sessions(parts) == whole
    assert all(blob.startswith(b"[3,") for blob in _kept(agent).values())  # kept again


def test_a_damaged_rest_of_the_rows_reads_the_files(agent: Path) -> None:
    parts = store_parts(FileSessionStorage(), str(agent))
    whole = list_all_sessions(parts)
    assert len(_kept(agent)) == 2
    _keep(agent, {d: blob[: blob.index(b"\n") + 1] + b"[[1,2" for d, blob in _kept(agent).items()})
    clear_listing_cache()
    again = list_all_sessions(parts)
    assert again == whole
    assert [i.first_message for i in again] == [i.first_message for i in whole]


def test_a_forged_row_naming_a_file_that_is_no_session_fails_once_and_is_dropped(
    agent: Path,
) -> None:
    """Columns that name a file of the directory that is no session, with a damaged rest:
    no listing made that row. The listing that meets it says so, naming the file, and
    drops the row: the next one reads the files (it failed every listing before)."""
    parts = store_parts(FileSessionStorage(), str(agent))
    whole = list_all_sessions(parts)
    stats, blobs = _kept(agent, "stats"), _kept(agent)
    forged = {}
    for d, blob in blobs.items():
        paths = [s[0] for s in orjson.loads(stats[d])]
        fmt, order, created, ids = orjson.loads(blob[: blob.index(b"\n")])
        order[0] = next(i for i, p in enumerate(paths) if p.endswith("_nope.jsonl"))
        forged[d] = orjson.dumps([fmt, order, created, ids]) + b"\n[[1,2"
    _keep(agent, forged)
    clear_listing_cache()
    with pytest.raises(OSError, match=r"no session \(the row is dropped: list again\)") as failed:
        list_all_sessions(parts)
    assert failed.value.filename.endswith("_nope.jsonl")
    assert list_all_sessions(parts) == whole  # in the same process
    clear_listing_cache()
    assert list_all_sessions(parts) == whole  # and in a fresh one


def test_a_forged_row_the_locked_cache_cannot_drop_says_what_to_delete(agent: Path) -> None:
    """Another process holds the cache file locked when the forged row is met: the row
    cannot be dropped, and the message says so (no false "list again"); once the lock is
    gone, the next such listing drops it."""
    parts = store_parts(FileSessionStorage(), str(agent))
    whole = list_all_sessions(parts)
    stats, blobs = _kept(agent, "stats"), _kept(agent)
    forged = {}
    for d, blob in blobs.items():
        paths = [s[0] for s in orjson.loads(stats[d])]
        fmt, order, created, ids = orjson.loads(blob[: blob.index(b"\n")])
        order[0] = next(i for i, p in enumerate(paths) if p.endswith("_nope.jsonl"))
        forged[d] = orjson.dumps([fmt, order, created, ids]) + b"\n[[1,2"
    _keep(agent, forged)
    clear_listing_cache()
    holder = sqlite3.connect(agent / "cache" / "sessions-meta.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(OSError, match=r"no session \(delete cache/sessions-meta\.db"):
            list_all_sessions(parts)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _kept(agent) == forged  # nothing half-dropped
    clear_listing_cache()
    with pytest.raises(OSError, match="the row is dropped"):
        list_all_sessions(parts)
    assert list_all_sessions(parts) == whole


def test_a_rest_of_rows_of_the_wrong_kinds_reads_the_files(agent: Path) -> None:
    parts = store_parts(FileSessionStorage(), str(agent))
    whole = list_all_sessions(parts)
    damaged = {}
    for d, blob in _kept(agent).items():
        head, rest = blob.split(b"\n", 1)
        # JSON of the right shape whose fields are not a size, texts and a count.
        wrong = [[5, 7, 9, "many", {"a": 1}] for _ in orjson.loads(rest)]
        damaged[d] = head + b"\n" + orjson.dumps(wrong)
    _keep(agent, damaged)
    clear_listing_cache()
    again = list_all_sessions(parts)
    assert again == whole
    assert [(i.size, i.message_count) for i in again] == [(i.size, i.message_count) for i in whole]


def test_a_table_of_the_first_version_is_made_afresh(agent: Path) -> None:
    """Version 1 kept the identities inside the rows' blob: its table is dropped and made
    anew (the family's version rule), never read as this version's."""
    parts = store_parts(FileSessionStorage(), str(agent))
    whole = list_all_sessions(parts)
    v1 = "CREATE TABLE dirs (dir TEXT PRIMARY KEY, rows BLOB NOT NULL) WITHOUT ROWID"
    with sqlite3.connect(agent / "cache" / "sessions-meta.db") as db:
        dirs = [d for (d,) in db.execute("SELECT dir FROM dirs")]
        db.execute("DROP TABLE dirs")
        db.execute(v1)
        db.executemany("INSERT INTO dirs VALUES (?, ?)", [(d, b"[2,[[],[]]]\n[]") for d in dirs])
        db.execute(
            "UPDATE cache_families SET version = 1, objects = ? WHERE family = 'listing-dirs'",
            (orjson.dumps({"dirs": v1}).decode(),),
        )
    clear_listing_cache()
    assert list_all_sessions(parts) == whole
    assert sorted(_kept(agent, "stats")) == sorted(dirs)  # this version's table, kept again
    clear_listing_cache()
    assert list_all_sessions(parts) == whole


def _rewrite(path: Path, old: bytes, new: bytes, *, in_place: bool) -> None:
    """Change `old` to `new` (as long) in the file, then give it back its mtime: its size
    and mtime are as before; in place its inode too (only its ctime moved)."""
    st = path.stat()
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    if in_place:
        with open(path, "r+b") as f:
            f.write(data.replace(old, new))
    else:
        moved = path.with_suffix(".tmp")
        moved.write_bytes(data.replace(old, new))
        os.replace(moved, path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert (after.st_ino == st.st_ino) == in_place


@pytest.mark.parametrize("in_place", [True, False], ids=["same inode", "new inode"])
def test_a_file_changed_under_the_same_size_and_mtime_is_read_again(
    agent: Path, in_place: bool
) -> None:
    parts = store_parts(FileSessionStorage(), str(agent))
    list_all_sessions(parts)
    path = next((agent / "sessions").glob("*/*_0002*.jsonl"))
    _rewrite(path, b"prompt 0 2", b"PROMPT 0 2", in_place=in_place)
    clear_listing_cache()
    again = {i.path: i.first_message for i in list_all_sessions(parts)}
    assert again[str(path)] == "PROMPT 0 2"
    clear_listing_cache()
    assert list_all_sessions(parts) == list_all_sessions(parts, cache=False)


@pytest.mark.parametrize("field", [1, 2, 3, 4], ids=["size", "mtime", "inode", "ctime"])
def test_kept_rows_of_other_stats_are_not_used(agent: Path, field: int) -> None:
    """Whatever the rows say, stats that differ from the kept ones in one field make the
    directory listed from its files (the comparison is of the stats themselves)."""
    parts = store_parts(FileSessionStorage(), str(agent))
    whole = list_all_sessions(parts)
    damaged = {}
    for d, kept in _kept(agent, "stats").items():
        stats = orjson.loads(kept)
        stats[0][field] += 1
        damaged[d] = orjson.dumps(stats)
    _keep(agent, damaged, "stats")
    clear_listing_cache()
    rows = list_rows(None, parts)
    assert not rows._runs  # no kept row was taken
    assert rows.infos() == whole


_WRONG = ["x", None, 1.5, [], {"a": 1}, True]
"""Values of kinds no field of a kept row has (texts: str or None; the rest: int)."""
_TEXTS = {("rest", 0), ("rest", 1), ("rest", 2), ("rest", 4), ("head", 3)}
_DAMAGE = st.one_of(
    st.sampled_from(["cut", "text", "int", "empty"]),
    st.tuples(st.just("head"), st.integers(0, 3), st.sampled_from(_WRONG)),
    st.tuples(st.just("head"), st.just(1), st.sampled_from([-1, 99, "twice"])),
    st.tuples(st.just("rest"), st.integers(0, 4), st.sampled_from(_WRONG)),
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(column=st.sampled_from(["stats", "rows"]), damage=_DAMAGE, cut=st.floats(0, 1))
def test_a_damaged_row_is_never_trusted(
    agent: Path, column: str, damage: object, cut: float
) -> None:
    """A row of the wrong kinds, naming no file or one twice, or cut short: the listing
    is the files', never a crash."""
    if isinstance(damage, tuple):
        part, field, value = damage
        assume(not ((part, field) in _TEXTS and (value is None or isinstance(value, str))))
    parts = store_parts(FileSessionStorage(), str(agent))
    clear_listing_cache()
    whole = list_all_sessions(parts, cache=False)
    list_all_sessions(parts)
    damaged: dict[str, object] = {}
    for d, blob in _kept(agent, column).items():
        if damage == "cut":
            damaged[d] = blob[: int(len(blob) * cut)]
        elif damage == "text":
            damaged[d] = blob.decode()
        elif damage in ("int", "empty"):
            damaged[d] = {"int": 7, "empty": b""}[str(damage)]
        elif column == "stats":
            _, field, value = damage  # type: ignore[misc]
            stats = orjson.loads(blob)
            stats[0][field] = value
            damaged[d] = orjson.dumps(stats)
        else:
            part, field, value = damage  # type: ignore[misc]
            head, rest = blob.split(b"\n", 1)
            if part == "head":
                columns = orjson.loads(head)
                if field == 0:
                    columns[0] = value
                elif value == "twice":
                    columns[1][0] = columns[1][1]
                else:
                    columns[field][0] = value
                head = orjson.dumps(columns)
            else:
                rows = orjson.loads(rest)
                rows[0][field] = value
                rest = orjson.dumps(rows)
            damaged[d] = head + b"\n" + rest
    _keep(agent, damaged, column)
    clear_listing_cache()
    try:
        again = list_all_sessions(parts)
    finally:
        clear_listing_cache()
        (agent / "cache" / "sessions-meta.db").unlink()  # the next example starts afresh
    assert again == whole
    assert [(i.size, i.message_count, i.first_message) for i in again] == [
        (i.size, i.message_count, i.first_message) for i in whole
    ]


@pytest.mark.parametrize("cwd", [None, "/work/one"], ids=["every project", "one project"])
def test_a_repeated_listing_gives_the_infos_built_once_in_a_list_of_its_own(
    agent: Path, cwd: str | None
) -> None:
    parts = store_parts(FileSessionStorage(), str(agent))

    def listing() -> list[SessionInfo]:
        return list_all_sessions(parts) if cwd is None else list_sessions(cwd, parts)

    whole = listing()
    clear_listing_cache()  # as a new process would start: the kept rows
    first = listing()
    first.clear()  # the caller's list: the next listing is not touched by what it does
    again = listing()
    assert again == whole and len(whole) == (12 if cwd is None else 6)
    assert [id(i) for i in again] == [id(i) for i in listing()]


_READERS = (
    "sessiontree.listing._scan",
    "sessiontree.listing._changes",
    "sessiontree._util.forked",
    "sessiontree.format._fold",
)
"""What reads session files: the scanner, the change planner, the worker processes, the
fold."""


def test_a_fresh_process_listing_kept_rows_imports_no_reader_of_files(agent: Path) -> None:
    list_all_sessions(store_parts(FileSessionStorage(), str(agent)))
    script = (
        "import json, sys\n"
        "from sessiontree.layout import store_parts\n"
        "from sessiontree.listing import list_all_sessions\n"
        "import sessiontree.store\n"
        f"n = len(list_all_sessions(store_parts(agent_dir={str(agent)!r})))\n"
        f"print(json.dumps([n, [m for m in {_READERS!r} if m in sys.modules]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    assert json.loads(out.stdout) == [12, []]
    (agent / "sessions" / "--work-one--" / "2026-01-01T00-00-00-000Z_nope.jsonl").touch()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    assert json.loads(out.stdout)[1]  # a file changed: it is read
