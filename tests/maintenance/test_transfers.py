"""`open_storage` and moving a file store into PostgreSQL and back, byte for byte."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sessiontree import FileSessionStorage, SessionManager, SessionTreeError, load_entries_from_file
from sessiontree.maintenance import export_files, import_files
from sessiontree.storage import BlobStore, close_storage, open_storage
from sessiontree.store import STORE_ENV, Store
from tests.helpers import assistant, user
from tests.pg_support import fresh_schema, pg_storage


def test_open_storage_files_for_paths() -> None:
    for arg in ("/some/agent/dir", "file:///some/agent/dir"):
        storage = open_storage(arg, agent_dir="/some/agent/dir")
        assert isinstance(storage, FileSessionStorage)
        close_storage(storage)


def test_open_storage_rejects_unknown_schemes_without_leaking_passwords() -> None:
    with pytest.raises(SessionTreeError) as info:
        open_storage("mysql://user:secret@host/db", agent_dir="/agent")
    assert "secret" not in str(info.value) and "postgresql://" in str(info.value)


def test_the_default_store_is_a_postgres_url_from_env_with_schema(
    monkeypatch: pytest.MonkeyPatch, agent_dir: Path
) -> None:
    from sessiontree.storage.postgres import PostgresSessionStorage

    with fresh_schema() as (url, schema):
        separator = "&" if "?" in url else "?"
        monkeypatch.setenv(STORE_ENV, f"{url}{separator}schema={schema}")
        with Store() as store:
            storage = store.storage
            assert isinstance(storage, PostgresSessionStorage)
            assert storage.schema == schema and storage.root == str(agent_dir)
            storage.ensure_dir(str(agent_dir / "sessions"))
            assert storage.list_dirs(str(agent_dir)) == [str(agent_dir / "sessions")]


def test_bad_schema_and_unreachable_server_are_session_tree_errors() -> None:
    from sessiontree.storage.postgres import PostgresSessionStorage, PostgresStoreError

    with pytest.raises(PostgresStoreError, match="invalid schema"):
        PostgresSessionStorage("postgresql://127.0.0.1:1/x", schema='x"; DROP TABLE y; --')
    with pytest.raises(PostgresStoreError, match="cannot connect"):
        PostgresSessionStorage("postgresql://nobody@127.0.0.1:1/x?connect_timeout=2")


def test_missing_psycopg_says_what_to_install() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None  # as if the extra were not installed
        from sessiontree import SessionTreeError
        from sessiontree.storage import open_storage
        try:
            open_storage("postgresql://localhost/db", agent_dir="/agent")
        except SessionTreeError as exc:
            assert isinstance(exc, ImportError)
            print(exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert "pip install 'sessiontree[postgres]'" in out


def _tree(top: Path) -> dict[str, tuple[str, bytes | None, int]]:
    """Every path below `top`: kind, bytes (files) and mtime_ns (files)."""
    found: dict[str, tuple[str, bytes | None, int]] = {}
    for directory, dirs, files in os.walk(top):
        for name in dirs:
            found[os.path.relpath(os.path.join(directory, name), top)] = ("d", None, 0)
        for name in files:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, top)] = (
                "f",
                Path(path).read_bytes(),
                os.stat(path).st_mtime_ns,
            )
    return found


def _make_file_store(agent: Path) -> list[str]:
    sessions = agent / "sessions"
    paths = []
    image = base64.b64encode(os.urandom(2000)).decode()
    for project in ("--proj-a--", "--proj-b--"):
        for n in range(3):
            with SessionManager.create(f"/{project}", str(sessions / project)) as sm:
                sm.append_message(
                    {
                        "role": "user",
                        "content": [{"type": "image", "data": image, "mimeType": "image/png"}],
                        "timestamp": 1,
                    }
                )
                sm.append_message(assistant(f"answer {n} é 😀"))
                for i in range(20):
                    sm.append_message(user(f"question {i}"))
                paths.append(sm.get_session_file() or "")
    odd = sessions / "--proj-a--"
    (odd / "torn.jsonl").write_bytes(b'{"type":"session","id":"x"}\n{"type":"mess\xff')
    (odd / "notes.txt").write_bytes(b"\x00\x01 binary")
    (odd / ".hidden").write_bytes(b"dotfile")
    (odd / "artifacts" / "deep").mkdir(parents=True)
    (odd / "artifacts" / "deep" / "out.log").write_bytes(b"x" * (5 << 20))  # > one read batch
    (sessions / "--empty--").mkdir()
    BlobStore(str(agent / "blobs")).put(b"sidecar image", "image/png")
    (agent / "history.db").write_bytes(b"not moved")
    return paths


def test_file_store_to_database_and_back_is_byte_identical(tmp_path: Path) -> None:
    source = tmp_path / "agent"
    session_paths = _make_file_store(source)
    # The database side is another host: a different root.
    with pg_storage(root=tmp_path / "elsewhere" / "agent") as storage:
        imported = import_files(str(source), storage)
        assert imported.files == 10 and imported.blobs == 2
        for path in session_paths:
            relative = os.path.relpath(path, source)
            in_db = storage.path_for(relative)
            assert load_entries_from_file(in_db, storage=storage) == load_entries_from_file(path)
            (meta,) = [
                m for m in storage.list_session_meta(os.path.dirname(in_db)) if m.path == in_db
            ]
            assert (meta.valid, meta.message_count, meta.size) == (True, 22, os.path.getsize(path))
        target = tmp_path / "restored"
        exported = export_files(storage, str(target))
        assert (exported.files, exported.blobs, exported.bytes) == (
            imported.files,
            imported.blobs,
            imported.bytes,
        )

    def comparable(tree: dict[str, tuple[str, bytes | None, int]]) -> dict[str, object]:
        # Session files keep their mtimes; blobs are content addressed (bytes only).
        return {k: v[:2] if k.startswith("blobs") else v for k, v in tree.items()}

    expected = {k: v for k, v in _tree(source).items() if k != "history.db"}
    assert comparable(_tree(target)) == comparable(expected)
    with SessionManager.open(str(target / os.path.relpath(session_paths[0], source))) as sm:
        assert sm.get_entries()[0]["message"]["content"][0]["data"]  # the blob resolves


def test_import_replaces_and_is_repeatable(tmp_path: Path) -> None:
    source = tmp_path / "agent"
    (source / "sessions" / "--p--").mkdir(parents=True)
    (source / "sessions" / "--p--" / "a.jsonl").write_bytes(b"one\n")
    with pg_storage(root=tmp_path / "db") as storage:
        import_files(str(source), storage)
        (source / "sessions" / "--p--" / "a.jsonl").write_bytes(b"two\n")
        import_files(str(source), storage)
        assert storage.read_text(storage.path_for("sessions/--p--/a.jsonl")) == "two\n"


def test_import_refuses_a_session_that_is_being_written(tmp_path: Path) -> None:
    from sessiontree import SessionLockError

    agent = tmp_path / "agent"
    with SessionManager.create("/p", str(agent / "sessions" / "--p--")) as sm:
        sm.append_message(assistant())
        with pg_storage(root=tmp_path / "db") as storage:
            with pytest.raises(SessionLockError):
                import_files(str(agent), storage)
        path = sm.get_session_file() or ""
    with pg_storage(root=tmp_path / "db") as storage:
        import_files(str(agent), storage)  # the writer is done: fine now
        assert (
            storage.read_text(storage.path_for(os.path.relpath(path, agent)))
            == Path(path).read_text()
        )


def test_storage_package_exports_the_backend_lazily() -> None:
    import sessiontree.storage as storage_pkg
    from sessiontree.storage.postgres import PostgresSessionStorage

    assert storage_pkg.PostgresSessionStorage is PostgresSessionStorage
    assert "PostgresSessionStorage" in storage_pkg.__all__
    with pytest.raises(AttributeError):
        _ = storage_pkg.NoSuchStorage  # type: ignore[attr-defined]


def test_export_files_never_replaces_what_changed_in_the_target(tmp_path: Path) -> None:
    # A session continued in the agent dir after it was imported: exporting the
    # database's (older) copy over it would lose the new turns.
    source = tmp_path / "agent"
    with SessionManager.create("/p", str(source / "sessions" / "--p--")) as sm:
        sm.append_message(user("q"))
        sm.append_message(assistant("a"))
        path = Path(sm.get_session_file() or "")
    with pg_storage(root=tmp_path / "db") as storage:
        import_files(str(source), storage)
        with SessionManager.open(str(path)) as sm:
            sm.append_message(user("asked after the import"))  # grew: a prefix of it is in the db
        grown = path.read_bytes()
        with SessionManager.open(str(path)) as sm:
            sm.set_session_name("renamed here")  # rewritten: no longer a prefix
        local = path.read_bytes()
        report = export_files(storage, str(source))
        assert path.read_bytes() == local
        ((skipped, why),) = report.skipped  # the source's path, and why: the target's
        assert skipped.endswith(path.name) and str(path) in why and "newer" in why
        # An older target that only holds the start of the source's bytes is brought up to
        # date; one that differs otherwise is kept beside it first.
        other = tmp_path / "other"
        export_files(storage, str(other))
        copy = other / path.relative_to(source)
        old = os.stat(copy).st_mtime_ns
        copy.write_bytes(grown[:100])
        os.utime(copy, ns=(old - 10**9, old - 10**9))
        assert export_files(storage, str(other)).skipped == []
        assert copy.read_bytes() == grown[: len(copy.read_bytes())]
        assert not list(copy.parent.glob("*.bak*"))
        copy.write_bytes(b"someone else's bytes\n")
        os.utime(copy, ns=(old - 10**9, old - 10**9))
        assert export_files(storage, str(other)).skipped == []
        (backup,) = copy.parent.glob("*.bak*")
        assert backup.read_bytes() == b"someone else's bytes\n"


def test_import_files_never_replaces_what_changed_in_the_database(tmp_path: Path) -> None:
    source = tmp_path / "agent"
    with SessionManager.create("/p", str(source / "sessions" / "--p--")) as sm:
        sm.append_message(user("q"))
        sm.append_message(assistant("a"))
        path = sm.get_session_file() or ""
    with pg_storage(root=tmp_path / "db") as storage:
        import_files(str(source), storage)
        in_db = storage.path_for(os.path.relpath(path, source))
        with SessionManager.open(in_db, storage=storage) as sm:
            sm.append_message(user("asked in the database"))
            sm.set_session_name("renamed there")
        before = storage.read_text(in_db)
        report = import_files(str(source), storage)
        assert storage.read_text(in_db) == before
        assert [p for p, _ in report.skipped] == [path] and "newer" in report.skipped[0][1]
        # A live writer in the database stops the copy, as one in the source does.
        from sessiontree import SessionLockError

        with SessionManager.open(in_db, storage=storage):
            os.utime(path)  # the source looks newer: only the lock stops it now
            with pytest.raises(SessionLockError):
                import_files(str(source), storage)
        assert storage.read_text(in_db) == before


def test_names_as_long_as_a_file_system_allows_move_both_ways(tmp_path: Path) -> None:
    # Review item 20: export-files stopped halfway on a 238-255 byte name (its temp
    # name did not fit in NAME_MAX).
    source = tmp_path / "agent"
    directory = source / "sessions" / "--p--"
    directory.mkdir(parents=True)
    names = ["2026-01-01T00-00-00-000Z_" + c * (255 - 31) + ".jsonl" for c in "ab"]
    assert all(len(n.encode()) == 255 for n in names)
    with SessionManager.create("/p", str(tmp_path / "scratch")) as sm:
        sm.append_message(user("q"))
        sm.append_message(assistant("a"))
        data = Path(sm.get_session_file() or "").read_bytes()
    for name in names:
        (directory / name).write_bytes(data)
    with pg_storage(root=tmp_path / "db") as storage:
        assert import_files(str(source), storage).files == 2
        target = tmp_path / "back"
        report = export_files(storage, str(target))
        assert (report.files, report.skipped) == (2, [])
        report = export_files(storage, str(target))  # again, over the copies: same bytes
        assert (report.files, report.skipped) == (2, [])
    assert sorted(os.listdir(target / "sessions" / "--p--")) == sorted(names)
    assert all((target / "sessions" / "--p--" / n).read_bytes() == data for n in names)
