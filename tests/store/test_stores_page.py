"""`Stores.list_page`: the first page of a listing, built without the infos of the rest.

A differential test: for stores of generated sessions (files of several stores and
project dirs, modified at the same nanosecond, at the same microsecond and apart,
created alike or not, files that are no session: empty, without a header), the page
is the first `limit` sessions of `Stores.list` with its filters, its total and ids
that listing's, whether the rows come from scanning the files, from this process's
cache or from the kept rows of a fresh process, and then with a file of them touched
(its directory's kept rows stale, the others' used) or every kept row damaged (cut
short: the files are read). The CLI's page (`list -n N`) prints the first N sessions of
`list -n 0`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sessiontree.cli import app
from sessiontree.format import serialize_entry, session_file_name
from sessiontree.layout import encode_session_dir_name
from sessiontree.listing import clear_listing_cache
from sessiontree.store import ListingPage, Store, Stores
from tests.helpers import assistant, user

T0 = 1_770_000_000_000_000_000
"""ns, 2026-02-02: far enough in the past for a stat to be trusted (no racy read)."""
PROJECTS = ("/work/alpha", "/work/beta", "/work/gamma")
MTIMES = (T0, T0 + 1, T0 + 999, T0 + 1_000, T0 + 5_000_000, T0 + 86_400 * 10**9)
"""Modified at the same microsecond (T0, +1, +999 ns), the next one, and later."""
CREATED = ("2026-01-01T00:00:00.000Z", "2026-01-01T00:00:00.001Z", "not a time")
WORDS = ("quokka", "zanzibar", "Quokka  zanzibar", "")

_session = st.fixed_dictionaries(
    {
        "store": st.integers(0, 1),
        "project": st.integers(0, len(PROJECTS) - 1),
        "kind": st.sampled_from(["session", "session", "session", "empty", "no header"]),
        "mtime": st.sampled_from(MTIMES),
        "created": st.sampled_from(CREATED),
        "prompt": st.sampled_from(WORDS),
        "named": st.booleans(),
    }
)


def _write(agent_dir: Path, n: int, spec: Mapping[str, object]) -> None:
    cwd = PROJECTS[int(str(spec["project"]))]
    directory = agent_dir / "sessions" / encode_session_dir_name(cwd)
    directory.mkdir(parents=True, exist_ok=True)
    sid = f"{n:04x}{'ab' * 6}"  # ids sharing their first characters: short ids grow
    created = str(spec["created"])
    stamp = created if created[0].isdigit() else "2026-01-01T00:00:00.000Z"
    path = directory / session_file_name(stamp, sid)
    lines: list[dict[str, object]] = []
    if spec["kind"] != "empty":
        if spec["kind"] == "session":
            lines.append(
                {"type": "session", "version": 3, "id": sid, "timestamp": created, "cwd": cwd}
            )
        if spec["prompt"]:
            lines.append(_entry(n, "message", message=user(str(spec["prompt"]))))
            lines.append(_entry(n + 1, "message", message=assistant("fine")))
        if spec["named"]:
            lines.append(_entry(n + 2, "session_info", name=f"named {n}"))
    path.write_text("".join(serialize_entry(line) + "\n" for line in lines))
    mtime = int(str(spec["mtime"]))
    os.utime(path, ns=(mtime, mtime))


def write_stores(tmp: Path, sessions: list[dict[str, object]]) -> tuple[Path, Path]:
    """Two agent dirs, `a` and `b` under `tmp`, holding `sessions` (each in its store's)."""
    dirs = (tmp / "a", tmp / "b")
    for d in dirs:
        (d / "sessions").mkdir(parents=True)
    for n, spec in enumerate(sessions):
        _write(dirs[int(str(spec["store"]))], 16 * n, spec)
    return dirs


def _entry(n: int, kind: str, **fields: object) -> dict[str, object]:
    return {
        "type": kind,
        "id": f"{n:08x}",
        "parentId": None,
        "timestamp": "2026-01-01T00:00:01.000Z",
        **fields,
    }


@pytest.fixture(autouse=True)
def _no_rows_of_other_tests() -> Iterator[None]:
    clear_listing_cache()
    yield
    clear_listing_cache()


def _as_listed(page: ListingPage) -> tuple[object, ...]:
    return (
        page.total,
        [(s.info, s.info.size, s.store, s.agent, s.size, s.machine) for s in page.sessions],
        sorted(page.every_id()),
        page.made_by,
    )


@settings(max_examples=60, deadline=None)
@given(
    sessions=st.lists(_session, min_size=4, max_size=30),
    limit=st.integers(1, 30),
    cwd=st.sampled_from([None, *PROJECTS]),
    text=st.sampled_from([None, "", "quokka", "ZANZIBAR", "named 1", "/work/beta"]),
    since=st.sampled_from([None, (T0 + 1_000) // 1_000_000]),
    until=st.sampled_from([None, (T0 + 5_000_000) // 1_000_000]),
    disturb=st.sampled_from([None, "touched", "damaged", "rest damaged"]),
)
def test_a_page_is_the_first_sessions_of_the_listing(
    sessions: list[dict[str, object]],
    limit: int,
    cwd: str | None,
    text: str | None,
    since: int | None,
    until: int | None,
    disturb: str | None,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dirs = write_stores(Path(tmp), sessions)
        stores = Stores([Store(str(dirs[0])), Store(str(dirs[1]))])
        try:
            _compare(stores, cwd, limit, text, since, until)
            if disturb is not None:
                _compare_kept(stores, dirs, disturb, cwd, limit, text, since, until)
        finally:
            for store in stores.values():
                store.close()


def _compare(
    stores: Stores,
    cwd: str | None,
    limit: int,
    text: str | None,
    since: int | None,
    until: int | None,
) -> None:
    for fresh in (True, False, True):  # scanned, this process's rows, the kept rows
        # Unfiltered: the page's own way; filtered, the listing's.
        filters: list[dict[str, Any]] = [{}, {"text": text, "since": since, "until": until}]
        for where in filters:
            if fresh:
                clear_listing_cache()
            whole = ListingPage.of(stores.list(cwd, **where), limit)
            if fresh:
                clear_listing_cache()
            page = stores.list_page(cwd, limit=limit, **where)
            assert _as_listed(page) == _as_listed(whole)


def _disturb(dirs: tuple[Path, Path], how: str, n: int) -> None:
    """Make the kept rows of a fresh process stale in one directory ("touched": a file
    of it modified, for the `n`th time) or damaged in all (each row cut short: "damaged"
    in its columns, "rest damaged" after them, where a page reads only its own rows')."""
    if how == "touched":
        files = [f for d in dirs for f in sorted(d.glob("sessions/*/*.jsonl"))]
        os.utime(files[0], ns=(T0 + 3_000 + n, T0 + 3_000 + n))
        return
    for d in dirs:
        db = d / "cache" / "sessions-meta.db"
        if db.exists():
            with sqlite3.connect(db) as conn:
                cut = "length(rows) / 2" if how == "damaged" else "instr(rows, x'0a') + 2"
                conn.execute(f"UPDATE dirs SET rows = substr(rows, 1, {cut})")
            conn.close()


def _compare_kept(
    stores: Stores,
    dirs: tuple[Path, Path],
    how: str,
    cwd: str | None,
    limit: int,
    text: str | None,
    since: int | None,
    until: int | None,
) -> None:
    """The page of a fresh process that meets the kept rows as `_disturb` left them is
    the head of the listing of the files (no cache at all)."""
    for n, where in enumerate(({}, {"text": text, "since": since, "until": until})):
        clear_listing_cache()
        stores.list(cwd)  # keeps the rows of the directories listed
        _disturb(dirs, how, n)
        clear_listing_cache()
        page = stores.list_page(cwd, limit=limit, **where)
        for d in dirs:
            for side in ("", "-wal", "-shm"):
                (d / "cache" / f"sessions-meta.db{side}").unlink(missing_ok=True)
        clear_listing_cache()
        whole = ListingPage.of(stores.list(cwd, **where), limit)
        assert _as_listed(page) == _as_listed(whole)


def test_sessions_modified_at_one_microsecond_keep_the_listing_order(tmp_path: Path) -> None:
    """In the order of their stores, then each store's (newest nanosecond first)."""
    dirs = (tmp_path / "a", tmp_path / "b")
    for d in dirs:
        (d / "sessions").mkdir(parents=True)
    for n, (store, mtime) in enumerate([(0, T0), (1, T0 + 999), (0, T0 + 1), (1, T0), (1, T0)]):
        spec = {"store": store, "project": n % 2, "kind": "session", "mtime": mtime}
        _write(dirs[store], 16 * n, {**spec, "created": CREATED[0], "prompt": "", "named": False})
    stores = Stores([Store(str(dirs[0])), Store(str(dirs[1]))])
    for limit in range(1, 6):
        _compare(stores, None, limit, None, None, None)
    page = stores.list_page(limit=5)
    assert [s.store for s in page.sessions] == ["xcsh", "xcsh", "xcsh-2", "xcsh-2", "xcsh-2"]


def test_the_cli_page_is_the_head_of_the_whole_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = tmp_path / "agent"
    (agent / "sessions").mkdir(parents=True)
    for n in range(40):
        spec = {
            "store": 0,
            "project": n % 3,
            "kind": ("session", "empty", "no header", "session")[n % 4],
            "mtime": MTIMES[n % len(MTIMES)],
            "created": CREATED[n % 2],
            "prompt": WORDS[n % len(WORDS)],
            "named": n % 5 == 0,
        }
        _write(agent, 16 * n, spec)
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)

    def listing(*args: str) -> dict[str, object]:
        clear_listing_cache()  # each a fresh process's
        result = CliRunner().invoke(app, ["list", "--all", "--json", *args])
        assert result.exit_code == 0, result.output
        document: dict[str, object] = json.loads(result.stdout)
        return document

    whole = listing("-n", "0")
    for limit in ("1", "7", "20", "50"):
        page = listing("-n", limit)
        sessions = whole["sessions"]
        assert isinstance(sessions, list)
        assert page == {**whole, "sessions": sessions[: int(limit)]}
