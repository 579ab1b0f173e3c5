"""New files read ahead in forked workers: the index is what one process builds alone."""

from __future__ import annotations

import os
import random
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import sessiontree.search._read_ahead as read_ahead
from sessiontree import serialize_entry
from sessiontree._util.forked import can_fork
from sessiontree.search import INDEX_DB_NAME, ContentIndex, SessionSource, search
from sessiontree.search._content_index import Refreshed
from tests.conftest import FRESH_CHILD, unavailable
from tests.helpers import assistant, user

WORDS = "quokka zanzibar compaction parse leaf tree index émigré 数据 path tool".split()


@pytest.fixture
def forking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read ahead even a small store's files (a test using it is marked `fresh_process`:
    in a process with other threads it runs again in a new one)."""
    if not can_fork() and (os.environ.get(FRESH_CHILD) or threading.active_count() == 1):
        unavailable("reading ahead needs fork (Linux) and a single-threaded process")
    monkeypatch.setattr(read_ahead, "_MIN_FILES", 2)
    monkeypatch.setattr(read_ahead, "_MIN_BYTES", 0)
    monkeypatch.setattr(read_ahead, "_BATCH_BYTES", 4096)
    monkeypatch.setattr(read_ahead, "idle_cores", lambda: 2)  # however busy the machine


def write_store(agent: Path, files: int, seed: int = 1) -> list[str]:
    """`files` sessions with text, usage, a malformed line here and there, a file with
    no header, an empty one, and times that collide across files."""
    rng = random.Random(seed)
    paths = []
    for n in range(files):
        project = agent / "sessions" / f"--p{n % 3}--"
        project.mkdir(parents=True, exist_ok=True)
        path = project / f"2026-01-01T00-00-00-000Z_s{n:04d}.jsonl"
        paths.append(str(path))
        if n == 5:
            path.write_text('{"type":"message","id":"x"}\n')  # no header: not a session
            continue
        if n == 6:
            path.write_text("")
            continue
        lines = [
            serialize_entry(
                {
                    "type": "session",
                    "version": 3,
                    "id": f"s{n}",
                    "timestamp": "2026-01-01T00:00:00.000Z",
                    "cwd": "/p",
                }
            )
        ]
        parent = None
        for k in range(rng.randint(1, 40)):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))
            second = rng.randint(0, 5)  # few distinct times: keys collide
            message = assistant(text) if k % 2 else user(text)
            entry = {
                "type": "message",
                "id": f"e{n}-{k}",
                "parentId": parent,
                "timestamp": f"2026-01-01T00:00:0{second}.000Z",
                "message": message,
            }
            parent = entry["id"]
            lines.append(serialize_entry(entry))
            if rng.random() < 0.05:
                lines.append('{"type": "message", broken')
        tail = "" if n % 7 == 0 else "\n"  # some end in an unterminated line
        path.write_text("\n".join(lines) + tail)
    return paths


def build(agent: Path, paths: list[str]) -> Refreshed:
    index = ContentIndex.open(str(agent))
    assert index is not None
    with index:
        return index.refresh([SessionSource(p) for p in paths])


def dump(agent: Path) -> dict[str, Any]:
    """Everything the index answers, by path (not by row id)."""
    conn = sqlite3.connect(os.path.join(agent, INDEX_DB_NAME))
    try:
        names = dict(conn.execute("SELECT id, path FROM files"))
        files = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT path, kind, size, scan_offset, head_len, head, tail, line, phase, "
                "session_id, cwd, parent, created, entries, tail_entries, text_bytes, "
                "tail_text_bytes FROM files"
            )
        }
        entries = sorted(
            (names[row[0]], *row[1:])
            for row in conn.execute(
                "SELECT file, key, line, offset, length, entry_id, role, ts, text_bytes "
                "FROM entries"
            )
        )
        usage = sorted((names[row[0]], *row[1:]) for row in conn.execute("SELECT * FROM usage"))
        terms = sorted(t for (t,) in conn.execute("SELECT term FROM terms"))
        matches = {
            term: sorted(
                k
                for (k,) in conn.execute("SELECT rowid FROM fts WHERE fts MATCH ?", (f'"{term}"',))
            )
            for term in terms
        }
        # Not the verdict: a digest of the files' identities, which are not compared
        # either (two stores of the same sessions differ in them).
        meta = sorted(
            conn.execute("SELECT key, value FROM meta WHERE key NOT IN ('dead_bytes', 'verdict')")
        )
    finally:
        conn.close()
    return {
        "files": files,
        "entries": entries,
        "usage": usage,
        "terms": terms,
        "fts": matches,
        "meta": meta,
    }


def hits(agent: Path, paths: list[str]) -> dict[str, list[tuple[str, int]]]:
    return {
        word: sorted((h.path, h.line) for h in search(paths, word, agent_dir=str(agent)).hits)
        for word in ["quokka", "émigré", "数据", "ANZIB", "tree index"]
    }


@pytest.mark.fresh_process
def test_an_index_read_ahead_is_the_index_one_process_builds(
    tmp_path: Path, forking: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = write_store(tmp_path / "ahead", 60)
    done = build(tmp_path / "ahead", paths)
    assert done.files_read == 59 and not done.stale  # the empty file reads 0 bytes
    alone_paths = write_store(tmp_path / "alone", 60)
    monkeypatch.setattr(read_ahead, "_MIN_FILES", 10**9)
    assert build(tmp_path / "alone", alone_paths) == done
    ahead, alone = dump(tmp_path / "ahead"), dump(tmp_path / "alone")
    rename = {a: b for a, b in zip(alone_paths, paths, strict=True)}
    alone["files"] = {rename[p]: v for p, v in alone["files"].items()}
    alone["entries"] = sorted((rename[e[0]], *e[1:]) for e in alone["entries"])
    alone["usage"] = sorted((rename[u[0]], *u[1:]) for u in alone["usage"])
    assert ahead == alone
    assert ahead["usage"] and ahead["entries"]
    assert hits(tmp_path / "ahead", paths) == {
        w: [(rename[p], n) for p, n in found]
        for w, found in hits(tmp_path / "alone", alone_paths).items()
    }


@pytest.mark.fresh_process
def test_a_file_a_worker_could_not_read_is_read_by_the_writer(
    tmp_path: Path, forking: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = write_store(tmp_path / "a", 30)
    real = read_ahead.read_file

    def flaky(source: SessionSource, *args: Any) -> Any:
        if source.path == paths[3]:
            raise OSError("not now")
        return real(source, *args)

    monkeypatch.setattr(read_ahead, "read_file", flaky)  # in the workers only
    build(tmp_path / "a", paths)
    monkeypatch.undo()
    clean = write_store(tmp_path / "b", 30)
    build(tmp_path / "b", clean)
    assert hits(tmp_path / "a", paths) == {
        w: [(paths[clean.index(p)], n) for p, n in found]
        for w, found in hits(tmp_path / "b", clean).items()
    }
    assert len(dump(tmp_path / "a")["entries"]) == len(dump(tmp_path / "b")["entries"])


@pytest.mark.fresh_process
def test_files_indexed_already_or_too_big_are_read_by_the_writer(
    tmp_path: Path, forking: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = write_store(tmp_path / "a", 20)
    build(tmp_path / "a", paths[:10])
    with open(paths[0], "a") as f:  # grown: read from where the index stopped
        f.write(
            "\n"
            + serialize_entry(
                {
                    "type": "label",
                    "id": "l",
                    "parentId": None,
                    "timestamp": "2026-01-02T00:00:00.000Z",
                    "label": "quokka grown",
                }
            )
            + "\n"
        )
    monkeypatch.setattr(read_ahead, "_MAX_FILE", os.path.getsize(paths[12]))
    plan = read_ahead.read_ahead(
        [(SessionSource(p), (p, os.path.getsize(p), 0, 0, 0)) for p in paths],
        set(paths[:10]),
        read_ahead.FileSessionStorage(),
    )
    plan.close()
    expected = {i for i in range(10, 20) if os.path.getsize(paths[i]) <= os.path.getsize(paths[12])}
    assert plan._next == expected
    done = build(tmp_path / "a", paths)
    assert done.files_read >= 11  # (and one written within the clock's tick, again)
    assert paths[0] in {p for p, _ in hits(tmp_path / "a", paths)["quokka"]}
