"""`Stores.search` over a listing's rows (`SearchScope`): the hits of the listing's infos.

A differential test: for stores of generated sessions (two stores, several project dirs,
modified at the same nanosecond, microsecond and apart, titled or not, files that are
no session), `Stores.search(query, cwd=...)`, which builds no info of an untitled
session, finds what the search of the listed sessions (`sessions=Stores.list(cwd)`, the
path every search took before) finds: the same hits in the same order, the same mode
and notes, and lists the same sessions; whether the listing's rows come from scanning
the files, from this process's cache or from the kept rows of a fresh process, and
after files changed under the content index (appended to, rewritten, touched, removed).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sessiontree.cli import app
from sessiontree.cli.commands_search import _hit_json
from sessiontree.format import serialize_entry
from sessiontree.listing import clear_listing_cache
from sessiontree.store import Store, Stores, StoresSearch
from tests.helpers import user
from tests.store.test_stores_page import (  # noqa: F401 (a fixture: no rows of other tests)
    CREATED,
    PROJECTS,
    T0,
    _no_rows_of_other_tests,
    _session,
    _write,
    write_stores,
)

QUERIES = ("quokka", "named", "ZANZIBAR", "fine", "named 1")


def _found(found: StoresSearch) -> tuple[object, ...]:
    return (
        [(h.store, h.hit) for h in found.hits],
        found.mode,
        found.notes,
        [(s.info, s.store, s.agent, s.size, s.machine) for s in found.sessions],
    )


def _compare(stores: Stores, cwd: str | None, query: str, roles: list[str] | None) -> None:
    for fresh in (True, False):  # the kept rows of a fresh process, this process's rows
        if fresh:
            clear_listing_cache()
        old = stores.search(query, sessions=stores.list(cwd), roles=roles, limit=40)
        if fresh:
            clear_listing_cache()
        new = stores.search(query, cwd=cwd, roles=roles, limit=40)
        assert _found(new) == _found(old)


def _change(agent_dir: Path, how: int) -> None:
    """Change one session file of `agent_dir` under the index: `how` picks which and how."""
    files = sorted((agent_dir / "sessions").rglob("*.jsonl"))
    if not files:
        return
    path = files[how % len(files)]
    mtime = path.stat().st_mtime_ns
    match how % 4:
        case 0:  # appended to (a line with the words searched)
            line = {
                "type": "message",
                "id": "ffffffff",
                "parentId": None,
                "timestamp": "2026-01-02T00:00:00.000Z",
                "message": user("quokka named fine zanzibar"),
            }
            with path.open("a") as out:
                out.write(serialize_entry(line) + "\n")
        case 1:  # rewritten at its size and mtime, the words gone
            data = path.read_bytes()
            path.write_bytes(data.replace(b"quokka", b"wombat").replace(b"fine", b"good"))
            os.utime(path, ns=(mtime, mtime))
        case 2:  # touched
            os.utime(path, ns=(mtime + 10**9, mtime + 10**9))
        case _:
            path.unlink()


@settings(max_examples=40, deadline=None)
@given(
    sessions=st.lists(_session, min_size=3, max_size=20),
    cwd=st.sampled_from([None, *PROJECTS]),
    query=st.sampled_from(QUERIES),
    roles=st.sampled_from([None, ["title"], ["user", "custom"]]),
    changes=st.lists(st.integers(0, 63), max_size=3),
    both=st.booleans(),
)
def test_a_search_of_the_rows_finds_what_a_search_of_the_listing_finds(
    sessions: list[dict[str, object]],
    cwd: str | None,
    query: str,
    roles: list[str] | None,
    changes: list[int],
    both: bool,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dirs = write_stores(Path(tmp), sessions)
        stores = Stores([Store(str(d)) for d in (dirs if both else dirs[:1])])
        try:
            _compare(stores, cwd, query, roles)  # the index built
            for how in changes:
                _change(dirs[how % 2 if both else 0], how // 2)
                _compare(stores, cwd, query, roles)  # the index refreshed, then unchanged
                scanned = stores.search(query, cwd=cwd, roles=roles, use_index=False)
                indexed = stores.search(query, cwd=cwd, roles=roles)
                assert [h.hit for h in indexed.hits] == [h.hit for h in scanned.hits]
        finally:
            for store in stores.values():
                store.close()


def test_the_cli_json_is_the_listing_searchs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = tmp_path / "agent"
    (agent / "sessions").mkdir(parents=True)
    kinds, prompts = ("session", "session", "no header"), ("quokka", "Quokka  zanzibar", "")
    for n in range(30):
        # Every fourth titled; four mtimes a microsecond apart; a third no session.
        mtime = T0 + (n % 4) * 1_000
        _write(
            agent,
            16 * n,
            dict(
                store=0,
                project=n % 3,
                kind=kinds[n % 3],
                mtime=mtime,
                created=CREATED[0],
                prompt=prompts[n % 3],
                named=n % 4 == 0,
            ),
        )
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)
    for query in ("quokka", "named"):
        clear_listing_cache()
        result = CliRunner().invoke(app, ["search", query, "--all", "--json"])
        assert result.exit_code == 0, result.output
        clear_listing_cache()
        stores = Stores([Store(str(agent))])
        try:
            old = stores.search(query, sessions=stores.list(None), limit=100)
            hits = [{**_hit_json(h.hit), "machine": None} for h in old.hits]
        finally:
            stores.first.close()
        assert json.loads(result.stdout)["hits"] == hits
        assert json.loads(result.stdout)["mode"] == old.mode
