"""A store's storage, agent dir and blob store travel as one value: `StoreParts`, which
`Store` holds and the store-wide functions take; sessions are opened, migrated, checked,
repaired and deleted through the `Store`; none of it reads the configured agent dir."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import sessiontree
from sessiontree import (
    FileSessionStorage,
    MemorySessionStorage,
    Store,
)
from sessiontree.layout import StoreParts
from sessiontree.listing import list_sessions
from sessiontree.maintenance import collect_garbage, session_files
from sessiontree.storage import MemoryBlobStore
from tests.helpers import assistant, user

SOURCE = Path(sessiontree.__file__).parent
PLUMBING = {"storage", "agent_dir", "blob_store", "session_dir"}
MOST_ONE_BY_ONE = 5
"""Public functions outside `session/` and the API contract that may still take two or
more of `PLUMBING`: the rules of the agent dir the session manager applies
(`blob_store_for`, `blob_carry`, `writes_pi_form`), the one place the API functions'
defaults are filled in (`store_parts`), and `search`."""


def _taking_the_plumbing() -> list[str]:
    """`module:function` of each public function (or method of a public class) outside
    `session/` that takes two or more of `PLUMBING`, the API contract's left out: the
    names `sessiontree` exports and the methods of the classes it exports."""
    contract = set(sessiontree.__all__)
    found: list[str] = []

    def visit(node: ast.AST, module: str, owner: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
                visit(child, module, child.name)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                if child.name.startswith("_") and child.name != "__init__":
                    continue
                args = child.args
                names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
                if len(names & PLUMBING) < 2:
                    continue
                if (owner or child.name) in contract:
                    continue
                found.append(f"{module}:{owner + '.' if owner else ''}{child.name}")

    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE)
        if relative.parts[0] == "session":
            continue
        visit(ast.parse(path.read_text(encoding="utf-8")), str(relative), None)
    return found


def test_few_functions_take_a_stores_parts_one_by_one() -> None:
    found = _taking_the_plumbing()
    assert len(found) <= MOST_ONE_BY_ONE, found


def _write_session(store: Store, cwd: Path) -> str:
    with store.create(cwd) as sm:
        sm.append_message(user("hello"))
        sm.append_message(assistant("hi"))
        path = sm.get_session_file()
    assert path is not None
    return path


def test_a_session_is_opened_at_its_path_through_the_store(tmp_path: Path) -> None:
    storage = MemorySessionStorage()
    with Store(tmp_path / "agent", storage=storage) as store:
        path = _write_session(store, tmp_path)
        assert not Path(path).exists() and storage.exists(path)  # the store's storage
        with store.session(path, read_only=True) as sm:
            assert [e["message"]["role"] for e in sm.get_entries()] == ["user", "assistant"]
            assert sm.is_read_only()
        with store.session(path, breadcrumb=False) as sm:
            sm.append_message(user("again"))
        assert len(store.open(path, read_only=True).get_entries()) == 3
        prefix = Path(path).stem.split("_")[-1][:8]
        assert store.open(prefix, read_only=True).get_session_file() == path
        with pytest.raises(FileNotFoundError):
            store.session(prefix, read_only=True)  # a path, never a prefix


def test_plan_delete_deletes_nothing_and_delete_removes_what_it_planned(tmp_path: Path) -> None:
    with Store(tmp_path / "agent") as store:
        path = _write_session(store, tmp_path)
        artifacts = Path(path).with_suffix("")
        artifacts.mkdir()
        plan = store.plan_delete(path)
        assert (plan.path, plan.artifacts, plan.valid) == (path, str(artifacts), True)
        assert Path(path).exists() and artifacts.exists()
        assert store.delete(path) == [path, str(artifacts) + "/"]
        assert not Path(path).exists() and not artifacts.exists()


def test_migrate_brings_a_file_of_the_store_to_v3(tmp_path: Path) -> None:
    with Store(tmp_path / "agent") as store:
        directory = Path(store.agent_dir) / "sessions" / "--p--"
        directory.mkdir(parents=True)
        path = directory / "2026-01-01T00-00-00-000Z_0123456789abcdef.jsonl"
        lines = [
            {"type": "session", "id": "0123456789abcdef", "timestamp": "2026-01-01T00:00:00.000Z"}
            | {"cwd": "/p"},
            {"type": "message", "timestamp": "2026-01-01T00:00:01.000Z", "message": user("a")},
        ]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        before = path.read_bytes()
        planned = store.migrate(str(path), dry_run=True)
        assert (planned.from_version, planned.to_version, planned.written) == (1, 3, False)
        assert path.read_bytes() == before
        done = store.migrate(str(path))
        assert done.written and json.loads(path.read_text().splitlines()[0])["version"] == 3


def test_the_store_wide_functions_read_no_configured_agent_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured = tmp_path / "configured"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(configured))
    with Store(tmp_path / "agent") as store:
        path = _write_session(store, tmp_path)
        parts = store.parts
    assert parts == StoreParts(parts.storage, str(tmp_path / "agent"))
    assert [info.path for info in list_sessions(str(tmp_path), parts)] == [path]
    assert session_files(parts) == [path]
    assert collect_garbage(parts).blob_dir == str(tmp_path / "agent" / "blobs")
    assert not configured.exists()  # no cache, blob dir or history made there


def test_parts_given_a_blob_store_keep_every_sessions_images_there(tmp_path: Path) -> None:
    blobs = MemoryBlobStore()
    parts = StoreParts(FileSessionStorage(), str(tmp_path / "agent"), blobs)
    assert parts.blobs_for(str(tmp_path / "elsewhere" / "sessions" / "s.jsonl")) is blobs
    assert parts.blobs_for(None) is blobs
    assert parts.root == parts.agent_dir  # files: the agent dir is where they are


def test_check_reports_a_listed_file_that_cannot_be_read_and_checks_the_rest(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "agent") as store:
        path = _write_session(store, tmp_path)
        broken = Path(path).with_name("broken.jsonl")
        broken.symlink_to(tmp_path / "nowhere.jsonl")
        files = store.files()
        assert files == sorted([path, str(broken)])
        found = store.check(files)
    assert [(f.path, f.kind) for f in found] == [(str(broken), "unreadable")]
