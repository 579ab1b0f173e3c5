"""Names that come from elsewhere (a shared database, a file tree being imported) are
checked before they become paths.

A `nodes` row named `..` under `sessions/` made `export-files` walk forever and write
a database file over the host's `settings.json`. Now: the schema refuses such names
(a CHECK, added by a migration that reports the rows already there instead of
failing), every reader leaves them out, and `export-files` / `import-files` write
nothing outside `sessions/` and `blobs/`, follow no symlink, open no FIFO, stop at a
bounded depth and list what they left out.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sessiontree import SessionManager
from sessiontree._util.fs import NAME_MAX, name_problem
from sessiontree.cli import app
from sessiontree.layout import store_parts
from sessiontree.maintenance import TransferReport, export_files, import_files
from sessiontree.storage import BlobStore
from tests.conftest import examples, require_module
from tests.helpers import assistant, user
from tests.pg_support import fresh_schema, pg_storage

psycopg = require_module("psycopg")

SETTINGS = b'{"apiKey": "the host\'s own"}\n'


def _session_bytes(tmp: Path, cwd: str = "/p") -> bytes:
    with SessionManager.create(cwd, str(tmp / "scratch")) as sm:
        sm.append_message(user("q"))
        sm.append_message(assistant("a"))
        return Path(sm.get_session_file() or "").read_bytes()


def _sql(storage: Any, statement: str, params: tuple[object, ...] = ()) -> None:
    with psycopg.connect(os.environ["SESSIONTREE_TEST_PG"], autocommit=True) as conn:
        conn.execute(statement.replace("{s}", f'"{storage.schema}"'), params)


def _row(storage: Any, key: str | None, parent: str, name: str, is_dir: bool) -> None:
    _sql(
        storage,
        "INSERT INTO {s}.nodes (key, parent, name, is_dir, mtime_ns) VALUES (%s, %s, %s, %s, 1)",
        (key, parent, name, is_dir),
    )


def _drop_checks(storage: Any) -> None:
    """As a store written before the CHECK (or by a hostile client that dropped it)."""
    _sql(storage, "ALTER TABLE {s}.nodes DROP CONSTRAINT nodes_name_is_a_component")
    _sql(storage, "ALTER TABLE {s}.blobs DROP CONSTRAINT blobs_exts_are_extensions")


# (key, parent, name, is_dir) of rows no reader may turn into a path.
HOSTILE = [
    ("sessions/..", "sessions", "..", True),
    ("sessions/.", "sessions", ".", True),
    ("sessions/--p--/..", "sessions/--p--", "..", True),
    ("sessions/--p--/a/b.jsonl", "sessions/--p--", "a/b.jsonl", False),
    ("sessions/--p--/a\\b.jsonl", "sessions/--p--", "a\\b.jsonl", False),
    ("sessions/--p--/", "sessions/--p--", "", False),
    ("sessions/--p--/" + "x" * (NAME_MAX + 1), "sessions/--p--", "x" * (NAME_MAX + 1), False),
    # A fine name whose key is elsewhere (the key is what a read reads).
    ("stolen.jsonl", "sessions/--p--", "looks-fine.jsonl", False),
]


def _hostile_store(storage: Any, data: bytes) -> str:
    """A store with one good session, a `settings.json` at its root, and every row of
    HOSTILE; returns the good session's key."""
    good = "sessions/--p--/good.jsonl"
    storage.ensure_dir(storage.path_for("sessions/--p--"))
    storage.write_atomic(storage.path_for(good), [data])
    storage.write_atomic(storage.path_for("settings.json"), [b'{"from": "the database"}\n'])
    _drop_checks(storage)
    for row in HOSTILE:
        _row(storage, *row)
    digest = storage.blob_store().put(b"an image").hash
    _sql(storage, "UPDATE {s}.blobs SET exts = %s WHERE hash = %s", (["../../x", "png"], digest))
    return good


def _export_bounded(storage: Any, agent: Path, seconds: float = 60) -> TransferReport:
    """`export_files` that must end: the old walk of a `..` row never did."""
    report = TransferReport()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            export_files(storage, str(agent), report)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"export-files still walking: {report}"
    assert errors == []
    return report


def _written(agent: Path) -> set[str]:
    """Every path under `agent`, relative, without following symlinks."""
    found = set()
    for directory, dirs, files in os.walk(agent):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(directory, name), agent))
    return found


def test_export_files_writes_only_sessions_and_blobs_whatever_the_database_holds(
    tmp_path: Path,
) -> None:
    data = _session_bytes(tmp_path)
    agent = tmp_path / "host"
    agent.mkdir()
    (agent / "settings.json").write_bytes(SETTINGS)
    with pg_storage(root=tmp_path / "db") as storage:
        good = _hostile_store(storage, data)
        report = _export_bounded(storage, agent)
        paths = {p for p, _ in report.skipped}
        # Every hostile row is named, with why.
        for _, parent, name, _ in HOSTILE:
            assert os.path.join(storage.path_for(parent), name) in paths, (name, report.skipped)
        (ext,) = [why for p, why in report.skipped if p.startswith(storage.path_for("blobs"))]
        assert "'../../x'" in ext
        assert all("database row" in why for _, why in report.skipped)
        # A second run over what the first wrote: the same, nothing more.
        again = _export_bounded(storage, agent)
        assert sorted(again.skipped) == sorted(report.skipped)
    assert (agent / "settings.json").read_bytes() == SETTINGS
    written = _written(agent)
    assert "settings.json.bak" not in written
    assert all(p == "settings.json" or p.split("/")[0] in ("sessions", "blobs") for p in written)
    assert (agent / good).read_bytes() == data
    assert not (agent / "sessions" / "--p--" / "looks-fine.jsonl").exists()
    assert report.files == 1 and report.blobs == 1
    digest = hashlib.sha256(b"an image").hexdigest()  # and its good sidecar, not the bad one
    assert sorted(os.listdir(agent / "blobs")) == [digest, f"{digest}.png"]


def test_readers_leave_out_rows_whose_names_are_not_paths(tmp_path: Path) -> None:
    from sessiontree.listing import list_all_sessions

    data = _session_bytes(tmp_path)
    root = tmp_path / "db"
    with pg_storage(root=root) as storage:
        good = _hostile_store(storage, data)
        sessions = storage.path_for("sessions")
        assert storage.list_dirs(sessions) == [os.path.join(sessions, "--p--")]
        assert storage.list_dirs(os.path.join(sessions, "--p--")) == []
        listed = storage.list_files(os.path.join(sessions, "--p--"), "*")
        assert listed == [storage.path_for(good)]
        assert [m.path for m in storage.list_session_meta()] == [storage.path_for(good)]
        assert [m.path for m in storage.list_session_meta(os.path.join(sessions, "--p--"))] == [
            storage.path_for(good)
        ]
        assert [s.path for s in list_all_sessions(store_parts(storage, str(root)))] == [
            storage.path_for(good)
        ]
        assert [exts for _, exts in storage.blob_store().list()] == [["png"]]
        assert [info.exts for info in storage.blob_store().list_info()] == [("png",)]


def test_the_schema_refuses_names_that_are_not_one_path_component(tmp_path: Path) -> None:
    with pg_storage(root=tmp_path / "db") as storage:
        storage.ensure_dir(storage.path_for("sessions/--p--"))
        for key, parent, name, is_dir in HOSTILE:
            with pytest.raises(psycopg.errors.CheckViolation):
                _row(storage, key, parent, name, is_dir)
        with pytest.raises(psycopg.errors.CheckViolation):  # a row that is no root, rootless
            _row(storage, "x", None, "x", True)  # type: ignore[arg-type]
        digest = storage.blob_store().put(b"an image").hash
        for exts in (["../x"], [""], ["png", None], ["x" * 33], ["a/b"]):
            with pytest.raises(psycopg.errors.CheckViolation):
                _sql(storage, "UPDATE {s}.blobs SET exts = %s WHERE hash = %s", (exts, digest))
        _sql(storage, "UPDATE {s}.blobs SET exts = %s WHERE hash = %s", (["png", "j.p-g"], digest))
        # Through the storage: a clear OSError naming the path, nothing written.
        bad = storage.path_for("sessions/--p--") + "/a\\b.jsonl"
        with pytest.raises(OSError, match="refuses the name") as info:
            storage.write_text(bad, "x\n")
        assert info.value.filename == bad
        with pytest.raises(OSError, match="refuses the name"):
            storage.ensure_dir(storage.path_for("sessions/" + "d" * (NAME_MAX + 1)))
        assert storage.list_files(storage.path_for("sessions/--p--"), "*") == []


NAME_CHARS = st.sampled_from(
    [
        *["a", ".", "/", "\\", "é", "-", "😀", " ", "\n", "_"],
        # Look-alikes of separators and dots (fullwidth solidus and reverse solidus, one
        # and two dot leaders, the division slash), a combining accent (NFC and NFD spell
        # "é" apart: "e" + U+0301), an RTL override, a zero-width space, a BOM: names
        # like any other.
        *["\uff0f", "\uff3c", "\u2024", "\u2025", "\u2215", "\u0301", "\u202e"],
        *["\u200b", "\ufeff"],
    ]
)


@pytest.fixture(scope="module")
def names_schema() -> Iterator[str]:
    """One schema for every example of the property (a schema per example is slow)."""
    with pg_storage(root="/names-root") as storage:
        storage.ensure_dir(storage.path_for("sessions"))
        yield str(storage.schema)


class _Rollback(Exception):
    pass


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.one_of(
        st.text(NAME_CHARS, max_size=6),
        st.sampled_from(["", ".", "..", "...", "x" * NAME_MAX, "é" * 128, "é" * 127]),
    )
)
def test_the_check_and_the_readers_agree_on_every_name(names_schema: str, name: str) -> None:
    # The model: `_fs.name_problem`. The schema accepts a name exactly when it is None
    # (a NUL never reaches it: PostgreSQL text cannot hold one).
    with psycopg.connect(os.environ["SESSIONTREE_TEST_PG"], autocommit=True) as conn:
        try:
            with conn.transaction():
                conn.execute(
                    f'INSERT INTO "{names_schema}".nodes (key, parent, name, is_dir, mtime_ns) '
                    "VALUES (%s, 'sessions', %s, false, 1)",
                    (f"sessions/{name}", name),
                )
                raise _Rollback
        except _Rollback:
            accepted = True
        except psycopg.errors.CheckViolation:
            accepted = False
    assert accepted == (name_problem(name) is None), name


def test_a_store_from_before_the_check_opens_reports_its_bad_rows_and_keeps_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from sessiontree.storage.postgres import SCHEMA_VERSION, PostgresSessionStorage

    data = _session_bytes(tmp_path)
    with fresh_schema() as (url, schema):
        old = PostgresSessionStorage(url, schema=schema, root=str(tmp_path / "db"))
        try:
            good = _hostile_store(old, data)
            # Back to version 1, as a store written before the CHECK existed.
            _sql(old, "DELETE FROM {s}.schema_migrations WHERE version >= 2")
        finally:
            old.close()
        with caplog.at_level(logging.WARNING, logger="sessiontree"):
            storage = PostgresSessionStorage(url, schema=schema, root=str(tmp_path / "db"))
        try:
            with psycopg.connect(url) as conn:
                versions = conn.execute(
                    f'SELECT max(version) FROM "{schema}".schema_migrations'
                ).fetchone()
                assert versions == (SCHEMA_VERSION,)
                kept = conn.execute(f'SELECT count(*) FROM "{schema}".nodes').fetchone()
            # The root, sessions/, --p--, the good session, settings.json: nothing deleted.
            assert kept is not None and kept[0] == 5 + len(HOSTILE)
            warned = "\n".join(r.getMessage() for r in caplog.records)
            for _, parent, name, _ in HOSTILE:
                assert os.path.join(storage.path_for(parent), name) in warned
            assert "'../../x'" in warned
            assert [p for p, _ in storage.invalid_names()] == [
                *(os.path.join(storage.path_for(parent), name) for _, parent, name, _ in HOSTILE),
                os.path.join(storage.path_for("blobs"), storage.blob_store().list_hashes()[0]),
            ]
            # The rows stay, readers skip them, new ones are refused.
            assert storage.list_files(storage.path_for("sessions/--p--"), "*") == [
                storage.path_for(good)
            ]
            with pytest.raises(psycopg.errors.CheckViolation):
                _row(storage, "sessions/--q--/..", "sessions", "..", True)
        finally:
            storage.close()


def test_a_walk_deeper_than_any_agent_writes_is_cut_and_reported(tmp_path: Path) -> None:
    from sessiontree.maintenance._transfers import _MAX_DEPTH

    with pg_storage(root=tmp_path / "db") as storage:
        deep = "/".join(["sessions", *["d"] * (_MAX_DEPTH + 5)])
        storage.ensure_dir(storage.path_for(deep))
        storage.write_text(storage.path_for(deep + "/bottom.jsonl"), "x\n")
        storage.write_text(storage.path_for("sessions/d/top.jsonl"), "y\n")
        report = _export_bounded(storage, tmp_path / "host")
    ((where, why),) = report.skipped
    cut = "/".join(["sessions", *["d"] * (_MAX_DEPTH + 1)])
    assert where == str(tmp_path / "db" / cut) and f"more than {_MAX_DEPTH}" in why
    assert (tmp_path / "host" / "sessions" / "d" / "top.jsonl").read_bytes() == b"y\n"
    assert report.dirs == _MAX_DEPTH + 1 and report.files == 1


def test_export_files_never_writes_through_a_symlink_at_the_target(tmp_path: Path) -> None:
    data = _session_bytes(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    agent = tmp_path / "host"
    (agent / "sessions").mkdir(parents=True)
    (agent / "sessions" / "--p--").symlink_to(outside)
    (agent / "sessions" / "--q--").mkdir()
    (agent / "sessions" / "--q--" / "s.jsonl").symlink_to(outside / "s.jsonl")
    with pg_storage(root=tmp_path / "db") as storage:
        for project in ("--p--", "--q--"):
            storage.ensure_dir(storage.path_for(f"sessions/{project}"))
            storage.write_atomic(storage.path_for(f"sessions/{project}/s.jsonl"), [data])
        report = _export_bounded(storage, agent)
    assert os.listdir(outside) == []
    assert (agent / "sessions" / "--p--").is_symlink()
    assert (agent / "sessions" / "--q--" / "s.jsonl").is_symlink()
    reasons = dict(report.skipped)
    assert "symbolic link" in reasons[str(tmp_path / "db" / "sessions" / "--p--")]
    assert "symbolic link" in reasons[str(tmp_path / "db" / "sessions" / "--q--" / "s.jsonl")]
    assert report.files == 0


def test_import_files_takes_no_symlink_fifo_or_odd_name_from_the_file_tree(
    tmp_path: Path,
) -> None:
    data = _session_bytes(tmp_path)
    secret_dir = tmp_path / "home" / ".ssh"
    secret_dir.mkdir(parents=True)
    (secret_dir / "id_ed25519").write_bytes(b"PRIVATE KEY\n")
    agent = tmp_path / "agent"
    project = agent / "sessions" / "--p--"
    project.mkdir(parents=True)
    (project / "good.jsonl").write_bytes(data)
    links = {
        project / "key.jsonl": secret_dir / "id_ed25519",  # a file outside
        project / "ssh": secret_dir,  # a directory outside
        project / "loop": project,  # a cycle
        agent / "sessions" / "--up--": agent,  # the whole agent dir (settings.json...)
    }
    for link, to in links.items():
        link.symlink_to(to)
    fifo = project / "pipe.jsonl"
    os.mkfifo(fifo)  # opening it would block forever
    odd = project / "a\\b.jsonl"
    odd.write_bytes(data)
    (agent / "settings.json").write_bytes(SETTINGS)
    # A blob that is a symlink to a file outside (named after its content's hash).
    blobs = agent / "blobs"
    good_blob = BlobStore(str(blobs)).put(b"a real image").hash
    secret_hash = hashlib.sha256(b"PRIVATE KEY\n").hexdigest()
    (blobs / secret_hash).symlink_to(secret_dir / "id_ed25519")
    (blobs / f"{good_blob}.{'x' * 40}").hardlink_to(blobs / good_blob)  # no sidecar's name
    with pg_storage(root=tmp_path / "db") as storage:
        report = TransferReport()
        done = threading.Thread(
            target=import_files, args=(str(agent), storage, report), daemon=True
        )
        done.start()
        done.join(60)
        assert not done.is_alive()
        reasons = dict(report.skipped)
        for link in links:
            assert "symbolic link" in reasons[str(link)], report.skipped
        assert "not a regular file" in reasons[str(fifo)]
        assert "'\\'" in reasons[str(odd)]
        assert "not a regular file" in reasons[str(blobs / secret_hash)]
        assert "extension" in reasons[str(blobs / f"{good_blob}.{'x' * 40}")]
        assert (report.files, report.blobs) == (1, 1)
        with psycopg.connect(os.environ["SESSIONTREE_TEST_PG"]) as conn:
            keys = conn.execute(
                f'SELECT key FROM "{storage.schema}".nodes WHERE NOT is_dir ORDER BY key'
            ).fetchall()
            hashes = conn.execute(f'SELECT hash FROM "{storage.schema}".blobs').fetchall()
        assert keys == [("sessions/--p--/good.jsonl",)]
        assert hashes == [(good_blob,)]


def test_cli_export_files_lists_the_rows_it_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _session_bytes(tmp_path)
    monkeypatch.chdir(tmp_path)
    agent = tmp_path / "host"
    agent.mkdir()
    (agent / "settings.json").write_bytes(SETTINGS)
    with fresh_schema() as (url, schema):
        from sessiontree.storage.postgres import PostgresSessionStorage

        storage = PostgresSessionStorage(url, schema=schema, root=str(tmp_path / "db"))
        try:
            _hostile_store(storage, data)
        finally:
            storage.close()
        store = f"{url}{'&' if '?' in url else '?'}schema={schema}"
        result = CliRunner().invoke(app, ["--store", store, "export-files", str(agent)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "Exported 1 file(s)" in result.stdout
    err = result.stderr
    assert "path(s) not exported (listed above)" in err.splitlines()[-1]
    assert "sessions/..: a database row not used as a path: '..' is not a file name" in err
    assert "a/b.jsonl: a database row not used as a path: the name holds a '/'" in err
    assert (agent / "settings.json").read_bytes() == SETTINGS
    assert not (agent / "settings.json.bak").exists()
