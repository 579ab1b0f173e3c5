"""The listing cache and the content index notice every change to a session file,
a same-size in-place rewrite within one mtime tick included.

Both caches skip a file whose stat is unchanged. A peer's `writeFileSync` rewrites a
file in place (same inode); when the new bytes have the old size and land within
the same timestamp tick, size, mtime and inode are all unchanged. Here the tick is
played by `os.utime(ns=...)` putting the old mtime back, which is all a caller can
see of it. The ctime moves on every write (and `utime` cannot set it back), and a
scan made within a tick of a file's mtime is never trusted later (a kernel whose
ctime is as coarse as its mtime, `_coarse_kernel`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree.format import serialize_entry
from sessiontree.layout import store_parts
from sessiontree.listing import CACHE_DB_NAME, _marks, _scan, clear_listing_cache, list_all_sessions
from sessiontree.search import search, search_sessions
from tests.conftest import examples

HEADER = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00.000Z"}
OLD_NS = 1_700_000_000_123_456_789  # a past mtime: no scan is near it


def _line(n: int, text: str) -> str:
    return serialize_entry(
        {
            "type": "message",
            "id": f"e{n:07d}",
            "parentId": f"e{n - 1:07d}" if n > 1 else None,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": text},
        }
    )


def _session(texts: list[str]) -> bytes:
    lines = [serialize_entry({**HEADER, "cwd": "/p"})] + [
        _line(i + 1, t) for i, t in enumerate(texts)
    ]
    return "".join(line + "\n" for line in lines).encode()


def _rewrite_in_place(path: Path, data: bytes) -> None:
    """What `writeFileSync` does (truncate, write; same inode), then the mtime put back
    as a write within the same tick leaves it."""
    st = os.stat(path)
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        st.st_size,
        st.st_mtime_ns,
        st.st_ino,
    )


@pytest.fixture
def project(agent_dir: Path) -> Path:
    directory = agent_dir / "sessions" / "--p--"
    directory.mkdir(parents=True)
    return directory


def _first_messages(agent_dir: Path, *, cache: bool = True) -> list[str]:
    return [
        s.first_message
        for s in list_all_sessions(store_parts(agent_dir=str(agent_dir)), cache=cache)
    ]


def test_a_listing_sees_a_same_size_rewrite_in_place(project: Path, agent_dir: Path) -> None:
    path = project / "a.jsonl"
    path.write_bytes(_session(["alpha question"]))
    os.utime(path, ns=(OLD_NS, OLD_NS))
    assert _first_messages(agent_dir) == ["alpha question"]
    _rewrite_in_place(path, _session(["omega question"]))
    assert _first_messages(agent_dir) == ["omega question"]  # the in-process cache
    clear_listing_cache()
    _rewrite_in_place(path, _session(["delta question"]))
    assert _first_messages(agent_dir) == ["delta question"]  # the cache database


def test_a_search_sees_a_same_size_rewrite_in_place(project: Path, agent_dir: Path) -> None:
    path = project / "a.jsonl"
    path.write_bytes(_session(["alpha needle"]))
    os.utime(path, ns=(OLD_NS, OLD_NS))
    assert len(search([str(path)], "alpha", agent_dir=str(agent_dir)).hits) == 1
    _rewrite_in_place(path, _session(["omega needle"]))
    # Hits are verified against the file, so a stale index shows no old text; what it
    # loses is the new text, which it has no trigrams of.
    assert len(search([str(path)], "omega", agent_dir=str(agent_dir)).hits) == 1
    result = search([str(path)], "needle", agent_dir=str(agent_dir))
    assert [h.match for h in result.hits] == ["needle"]
    assert [h.before.strip() for h in result.hits] == ["omega"]
    assert search([str(path)], "alpha", agent_dir=str(agent_dir)).hits == []


def test_the_foreign_listing_cache_sees_a_same_size_rewrite_in_place(
    tmp_path: Path, agent_dir: Path
) -> None:
    from sessiontree.foreign.store import ForeignStore
    from tests.foreign_support import _cc, write_jsonl

    claude = tmp_path / "claude"
    transcript = claude / "projects" / "-work-app" / "0b7e3a52-cafe-4bad-beef-000000000001.jsonl"

    def prompt(text: str) -> list[dict[str, Any]]:
        return [_cc("u1", None, "user", {"role": "user", "content": text}, 1)]

    agent_dir.mkdir()  # the cache lives there (and is never made without it)
    write_jsonl(transcript, prompt("alpha question"))
    os.utime(transcript, ns=(OLD_NS, OLD_NS))
    store = ForeignStore.at("claude", str(claude), cache_dir=str(agent_dir))
    assert [f.meta.first_message for f in store.list()] == ["alpha question"]
    _rewrite_in_place(
        transcript, write_jsonl(tmp_path / "x", prompt("omega question")).read_bytes()
    )
    assert [f.meta.first_message for f in store.list()] == ["omega question"]


def test_the_import_record_cache_sees_a_same_size_rewrite_in_place(
    project: Path, agent_dir: Path
) -> None:
    # The import records found in this store's own sessions (which peers rewrite in place).
    from sessiontree.foreign.importer import find_imports

    def marker(source_id: str) -> str:
        return serialize_entry(
            {
                "type": "custom",
                "customType": "foreign_session_import",
                "id": "c0000001",
                "parentId": None,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "data": {"source": "claude", "sourceId": source_id},
            }
        )

    ours = project / "a.jsonl"
    header = serialize_entry({**HEADER, "cwd": "/p"})
    ours.write_text(f"{header}\n{marker('aaaa')}\n")
    os.utime(ours, ns=(OLD_NS, OLD_NS))
    assert [i.source_id for i in find_imports(store_parts(agent_dir=str(agent_dir)))] == ["aaaa"]
    _rewrite_in_place(ours, f"{header}\n{marker('bbbb')}\n".encode())
    assert [i.source_id for i in find_imports(store_parts(agent_dir=str(agent_dir)))] == ["bbbb"]


def test_caches_written_before_ctime_was_kept_are_upgraded_and_not_trusted(
    project: Path, agent_dir: Path
) -> None:
    # A listing cache and a content index from an older sessiontree (no ctime_ns):
    # their rows for a file since rewritten in place must not be trusted.
    import sqlite3

    from sessiontree.search import INDEX_DB_NAME

    path = project / "a.jsonl"
    path.write_bytes(_session(["alpha needle"]))
    os.utime(path, ns=(OLD_NS, OLD_NS))
    assert _first_messages(agent_dir) == ["alpha needle"]
    assert len(search([str(path)], "alpha", agent_dir=str(agent_dir)).hits) == 1
    for name in (CACHE_DB_NAME, INDEX_DB_NAME):
        conn = sqlite3.connect(agent_dir / name)
        conn.execute("ALTER TABLE files DROP COLUMN ctime_ns")
        conn.close()
    clear_listing_cache()
    _rewrite_in_place(path, _session(["omega needle"]))
    assert _first_messages(agent_dir) == ["omega needle"]
    assert len(search([str(path)], "omega", agent_dir=str(agent_dir)).hits) == 1
    for name in (CACHE_DB_NAME, INDEX_DB_NAME):
        conn = sqlite3.connect(agent_dir / name)
        columns = [row[1] for row in conn.execute("PRAGMA table_info(files)")]
        ctimes = conn.execute("SELECT ctime_ns FROM files").fetchall()
        conn.close()
        assert "ctime_ns" in columns and ctimes == [(os.stat(path).st_ctime_ns,)]


@pytest.fixture
def _coarse_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose ctime is as coarse as its mtime: it never tells a write within
    the tick apart (only the racy-scan rule can)."""
    monkeypatch.setattr(_marks, "_CTIME_MOVES", False)


def _racy_rewrite(path: Path, data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewrite in the tick of the file's mtime, right after a scan in that same tick:
    the clock the caches read says it is still that tick."""
    mtime = os.stat(path).st_mtime_ns
    monkeypatch.setattr(_marks, "_now_ns", lambda: mtime + 1_000)
    _rewrite_in_place(path, data)


@pytest.mark.usefixtures("_coarse_kernel")
def test_a_scan_within_the_tick_of_a_write_is_not_trusted_later(
    project: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = project / "a.jsonl"
    path.write_bytes(_session(["alpha needle"]))
    os.utime(path, ns=(OLD_NS, OLD_NS))
    monkeypatch.setattr(_marks, "_now_ns", lambda: OLD_NS + 1_000)  # scanned in its tick
    assert _first_messages(agent_dir) == ["alpha needle"]
    assert len(search([str(path)], "alpha", agent_dir=str(agent_dir)).hits) == 1
    _racy_rewrite(path, _session(["omega needle"]), monkeypatch)
    monkeypatch.setattr(_marks, "_now_ns", time.time_ns)  # the tick is long over
    assert _first_messages(agent_dir) == ["omega needle"]
    assert len(search([str(path)], "omega", agent_dir=str(agent_dir)).hits) == 1
    clear_listing_cache()
    assert _first_messages(agent_dir) == ["omega needle"]
    # Scanned after the tick: trusted, not read again.
    reads: list[str] = []
    original = _scan.scan_file

    def counting(*args: Any, **kwargs: Any) -> Any:
        reads.append(args[1])
        return original(*args, **kwargs)

    monkeypatch.setattr(_scan, "scan_file", counting)
    assert _first_messages(agent_dir) == ["omega needle"]
    clear_listing_cache()
    assert _first_messages(agent_dir) == ["omega needle"]
    assert reads == []
    result = search([str(path)], "needle", agent_dir=str(agent_dir))
    assert result.refreshed is not None and result.refreshed.files_read == 0


# -- the model: whatever happens to the files, the cached answers are the uncached ones --

WORDS = ["alpha", "omega", "delta", "sigma"]  # one length: an in-place rewrite keeps the size

op = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(WORDS)),
    st.tuples(st.just("in_place"), st.sampled_from(WORDS)),  # same size and inode
    st.tuples(st.just("rewrite"), st.sampled_from(WORDS)),  # truncate and write, new size
    st.tuples(st.just("replace"), st.sampled_from(WORDS)),  # a new inode (rename over)
    st.tuples(st.just("tick"), st.just("")),  # the clock moves past the timestamp tick
    st.tuples(st.just("list"), st.booleans()),  # a listing (True: as a fresh process)
    st.tuples(st.just("search"), st.sampled_from(WORDS)),
)


@settings(
    max_examples=examples(80),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(st.tuples(st.integers(0, 2), op), min_size=1, max_size=30))
def test_cached_answers_equal_uncached_ones_whatever_the_writes(
    tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch, ops: list[tuple[int, Any]]
) -> None:
    # A coarse kernel (ctime no finer than mtime) and a clock the test moves: a write
    # stamps the file with the clock's tick, so two writes within one tick leave size,
    # mtime, inode and ctime as they were: the worst case for any cache.
    agent = tmp_path_factory.mktemp("agent")
    project = agent / "sessions" / "--p--"
    project.mkdir(parents=True)
    clear_listing_cache()
    clock = [OLD_NS]
    with monkeypatch.context() as patch:
        patch.setattr(_marks, "_CTIME_MOVES", False)
        patch.setattr(_marks, "_now_ns", lambda: clock[0])
        texts: dict[int, list[str]] = {}
        for k in range(3):
            texts[k] = ["alpha"]
            path = project / f"s{k}.jsonl"
            path.write_bytes(_session(texts[k]))
            os.utime(path, ns=(clock[0], clock[0]))
        for k, (kind, arg) in ops:
            path = project / f"s{k}.jsonl"
            if kind == "tick":
                clock[0] += 10_000_000_000
            elif kind == "list":
                if arg:
                    clear_listing_cache()
                cached = sorted(
                    (s.path, s.first_message, s.message_count)
                    for s in list_all_sessions(store_parts(agent_dir=str(agent)))
                )
                fresh = sorted(
                    (s.path, s.first_message, s.message_count)
                    for s in list_all_sessions(store_parts(agent_dir=str(agent)), cache=False)
                )
                assert cached == fresh
            elif kind == "search":
                paths = sorted(str(p) for p in project.glob("*.jsonl"))
                indexed = search(paths, arg, agent_dir=str(agent))
                scanned = search_sessions(paths, arg)
                assert sorted((h.path, h.line) for h in indexed.hits) == sorted(
                    (h.path, h.line) for h in scanned
                )
            else:
                if kind == "in_place":
                    texts[k] = [arg for _ in texts[k]]
                    with open(path, "r+b") as f:
                        f.write(_session(texts[k]))
                elif kind == "append":
                    texts[k] = [*texts[k], arg]
                    with open(path, "ab") as f:
                        f.write(_session(texts[k])[os.path.getsize(path) :])
                elif kind == "rewrite":
                    texts[k] = [arg, arg, arg][: 1 + len(texts[k]) % 3]
                    path.write_bytes(_session(texts[k]))
                else:
                    texts[k] = [arg, arg]
                    tmp = project / ".tmp"
                    tmp.write_bytes(_session(texts[k]))
                    os.replace(tmp, path)
                os.utime(path, ns=(clock[0], clock[0]))  # stamped with the tick
    clear_listing_cache()


def test_a_file_written_after_the_listing_began_is_not_trusted(project: Path) -> None:
    """A file stamped after the time a listing started (`now_ns`) may have been stat'ed
    within its mtime's tick, however long after `now_ns` that was: its identity is not
    trusted (the content index takes these stats for its own)."""
    path = project / "a.jsonl"
    path.write_bytes(_session(["alpha"]))
    mtime = os.stat(path).st_mtime_ns
    storage = store_parts(agent_dir=str(project.parent.parent)).storage
    for started in (mtime - 5_000_000_000, mtime - 1_000, mtime):  # long before, just before
        (stat,) = _marks.stat_dir(str(project), storage, started)
        assert stat[4] == _marks.UNTRUSTED
    (stat,) = _marks.stat_dir(str(project), storage, mtime + 5_000_000_000)
    assert stat[4] == os.stat(path).st_ctime_ns
