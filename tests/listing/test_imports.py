"""The import records of a store's sessions, cached per file identity: an unchanged file
is not read, one that only grew is read from its old end, any other again whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import sessiontree.listing._imports as imports_module
from sessiontree.layout import StoreParts
from sessiontree.listing import import_records
from sessiontree.storage import FileSessionStorage

OLD_NS = 1_600_000_000_000_000_000  # long past any timestamp tick


def _line(value: object) -> str:
    return json.dumps(value, separators=(",", ":")) + "\n"


def _marker(source_id: str) -> str:
    data = {"source": "codex", "sourceId": source_id, "sourcePath": "/x", "sourceBytes": 9}
    return _line({"type": "custom", "customType": "foreign_session_import", "data": data})


HEADER = _line({"type": "session", "version": 3, "id": "s", "cwd": "/p"})
MESSAGE = _line({"type": "message", "id": "m", "message": {"role": "user", "content": "x"}})


def _write(path: Path, text: str, mtime_ns: int) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def _records(path: Path, agent_dir: Path) -> list[tuple[int, str]]:
    agent_dir.mkdir(exist_ok=True)  # the cache is kept only in an agent dir that exists
    found = import_records(
        [str(path)], StoreParts(FileSessionStorage(), str(agent_dir)), cache=True
    )
    return [(line, data["sourceId"]) for line, data in found[str(path)]]


def test_a_session_that_only_grew_is_read_from_its_old_end(
    tmp_path: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.jsonl"
    _write(path, HEADER + MESSAGE + _marker("one") + MESSAGE + "\n", OLD_NS)
    assert _records(path, agent_dir) == [(3, "one")]

    def no_whole_read(*args: object) -> None:
        raise AssertionError("read from the start")

    monkeypatch.setattr(imports_module, "read_chunks", no_whole_read)
    _write(path, MESSAGE + _marker("two").rstrip("\n"), OLD_NS + 10**9)  # unterminated
    assert _records(path, agent_dir) == [(3, "one"), (7, "two")]
    _write(path, "\n" + _marker("three"), OLD_NS + 2 * 10**9)
    assert _records(path, agent_dir) == [(3, "one"), (7, "two"), (8, "three")]


def test_a_session_rewritten_is_read_again_whole(tmp_path: Path, agent_dir: Path) -> None:
    path = tmp_path / "s.jsonl"
    _write(path, HEADER + MESSAGE + _marker("one"), OLD_NS)
    assert _records(path, agent_dir) == [(3, "one")]
    path.write_text(HEADER + _marker("two") + MESSAGE + MESSAGE)  # larger, not appended to
    os.utime(path, ns=(OLD_NS + 10**9,) * 2)
    assert _records(path, agent_dir) == [(2, "two")]
