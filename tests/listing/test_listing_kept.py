"""The rows a fresh process lists an unchanged directory from (`dump_rows`, `KeptRows`).

Each directory's sessions are kept in columns (sort key, id) and the rest of their rows
apart, read for a directory when the first of its infos is built: a page of a long
listing builds only its own rows' infos. Rows kept another way (an older layout) are
not read: the directory is listed file by file and kept again; a damaged rest of the
rows is not trusted: the file itself is read.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from sessiontree.format import serialize_entry, session_file_name
from sessiontree.layout import encode_session_dir_name, store_parts
from sessiontree.listing import clear_listing_cache, list_all_sessions, list_rows
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


def _kept(agent: Path) -> dict[str, bytes]:
    with sqlite3.connect(agent / "cache" / "sessions-meta.db") as db:
        return dict(db.execute("SELECT dir, rows FROM dirs"))


def _keep(agent: Path, rows: dict[str, bytes]) -> None:
    with sqlite3.connect(agent / "cache" / "sessions-meta.db") as db:
        db.executemany("UPDATE dirs SET rows = ? WHERE dir = ?", [(b, d) for d, b in rows.items()])


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
    assert all(blob.startswith(b"[2,") for blob in _kept(agent).values())  # kept again


def test_a_damaged_rest_of_the_rows_reads_the_files(agent: Path) -> None:
    parts = store_parts(FileSessionStorage(), str(agent))
    whole = list_all_sessions(parts)
    assert len(_kept(agent)) == 2
    _keep(agent, {d: blob[: blob.index(b"\n") + 1] + b"[[1,2" for d, blob in _kept(agent).items()})
    clear_listing_cache()
    again = list_all_sessions(parts)
    assert again == whole
    assert [i.first_message for i in again] == [i.first_message for i in whole]


def test_a_rest_of_rows_of_the_wrong_kinds_reads_the_files(agent: Path) -> None:
    parts = store_parts(FileSessionStorage(), str(agent))
    whole = list_all_sessions(parts)
    damaged = {}
    for d, blob in _kept(agent).items():
        head, rest = blob.split(b"\n", 1)
        # JSON of the right shape whose fields are not a size, texts and a count.
        wrong = [["big", 5, 7, 9, "many", {"a": 1}] for _ in orjson.loads(rest)]
        damaged[d] = head + b"\n" + orjson.dumps(wrong)
    _keep(agent, damaged)
    clear_listing_cache()
    again = list_all_sessions(parts)
    assert again == whole
    assert [(i.size, i.message_count) for i in again] == [(i.size, i.message_count) for i in whole]
