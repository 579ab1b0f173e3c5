"""Hostile breaks of the archive, each a test named for what must hold:
restore --all after a cleanup, a damaged manifest, a FIFO swapped in, a zstd bomb, a
chunk left damaged by a crash."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import zstandard
from typer.testing import CliRunner

from sessiontree.archive import (
    ArchiveError,
    ArchiveSource,
    _sources,
    _storage,
    archive_stores,
    archive_view,
    archived_files,
    restore_files,
    restore_session,
    verify_archive,
)
from sessiontree.cli import app
from tests.conftest import REAL_FILES, unavailable

A = "aaaaaaaa-0000-0000-0000-000000000001"
B = "bbbbbbbb-0000-0000-0000-000000000002"


pytestmark = pytest.mark.usefixtures("homes_in_tmp")


def two_sessions(root: Path) -> tuple[ArchiveSource, Path, Path]:
    home = root / ".claude"
    project = home / "projects" / "-w"
    project.mkdir(parents=True)
    a, b = project / f"{A}.jsonl", project / f"{B}.jsonl"
    a.write_bytes(b'{"type":"user","n":1}\n')
    b.write_bytes(b'{"type":"user","n":2}\n')
    return ArchiveSource("claude", str(home), ("projects",)), a, b


def test_restore_all_brings_back_deleted_sessions_when_another_has_grown(
    tmp_path: Path,
) -> None:
    """After a cleanup deleted one session while another (still in use) grew,
    `restore --all` restores the deleted one and leaves the grown one alone (it was
    stopped at the first file with other bytes, restoring nothing after it)."""
    source, a, b = two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    with a.open("ab") as f:
        f.write(b'{"type":"user","n":3}\n')
    grown = a.read_bytes()
    b.unlink()
    report = restore_files(archive, archived_files(archive), to=None, keep_going=True)
    assert b.read_bytes() == b'{"type":"user","n":2}\n'
    assert a.read_bytes() == grown
    assert [c.split(":")[0] for c in report.conflicts] == [str(a)]


def test_cli_restore_all_restores_the_rest_and_exits_1_on_a_conflict(
    tmp_path: Path,
) -> None:
    source, a, b = two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    a.write_bytes(b"other bytes\n")
    b.unlink()
    result = CliRunner().invoke(app, ["restore", "--all", "--from", archive])
    assert result.exit_code == 1, result.output
    assert b.exists() and a.read_bytes() == b"other bytes\n"
    assert "never replaced" in " ".join(result.output.split())
    again = CliRunner().invoke(app, ["restore", "--all", "--from", archive])
    assert again.exit_code == 1 and a.read_bytes() == b"other bytes\n"


def test_a_damaged_manifest_never_stops_the_run_nor_the_restore_of_others(
    tmp_path: Path,
) -> None:
    """One manifest cut short (a bad sector, a crafted archive): the other sessions are
    still listed and restored, a run still archives every file (the damaged manifest
    set aside, its file archived again), and verify names it."""
    source, a, b = two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    (key_a,) = [f.key for f in archived_files(archive) if f.rel.endswith(f"{A}.jsonl")]
    (Path(archive) / key_a).write_bytes(b'{"agent": "claude", "chun')
    assert verify_archive(archive) != []
    b.unlink()
    report = restore_session(archive, B)
    assert report.written == [str(b)]
    with a.open("ab") as f:
        f.write(b'{"type":"user","n":3}\n')
    run = archive_stores(archive, [source])
    assert any("damaged" in s for s in run.skipped)
    assert os.listdir(Path(archive) / "damaged")
    assert verify_archive(archive) == []
    grown = a.read_bytes()
    a.unlink()
    restore_session(archive, A)
    assert a.read_bytes() == grown


def test_a_manifest_of_the_wrong_shape_is_refused_not_a_crash(tmp_path: Path) -> None:
    source, _, _ = two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    (key_a,) = [f.key for f in archived_files(archive) if f.rel.endswith(f"{A}.jsonl")]
    path = Path(archive) / key_a
    manifest = json.loads(path.read_bytes())
    manifest["size"] = "12"
    manifest["chunks"] = [["../../../etc/passwd"]]
    path.write_text(json.dumps(manifest))
    assert [f.rel for f in archived_files(archive)] == [f"projects/-w/{B}.jsonl"]
    assert any("damaged" in p for p in verify_archive(archive))


_FIFO_RUN = """
import os, sys
from sessiontree.archive import ArchiveSource, archive_stores
def swap(path):
    os.unlink(path)
    os.mkfifo(path)
report = archive_stores(sys.argv[1], [ArchiveSource("claude", sys.argv[2], ("projects",))],
                        progress=swap)
print(len(report.skipped))
"""


def test_a_fifo_put_in_place_of_a_session_mid_run_does_not_hang_the_run(
    tmp_path: Path,
) -> None:
    """A session file replaced by a FIFO between the walk and its read (another
    program, or an attacker sharing the dir): the run passes over it (it blocked
    forever in open)."""
    source, _, _ = two_sessions(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", _FIFO_RUN, str(tmp_path / "archive"), source.home],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == 2


def test_a_zstd_bomb_in_a_chunk_is_refused_without_being_inflated(tmp_path: Path) -> None:
    """A crafted chunk whose frame says (and holds) 64 MiB where the manifest names a
    few bytes: verify and restore refuse it with at most its named length held (the
    decompressor allocated what the frame header said, whatever the limit given)."""
    source, a, _ = two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    (file,) = [f for f in archived_files(archive) if f.rel.endswith(f"{A}.jsonl")]
    manifest = json.loads((Path(archive) / file.key).read_bytes())
    digest = manifest["chunks"][0][0]
    chunk = Path(archive) / "chunks" / digest[:2] / f"{digest}.zst"
    chunk.write_bytes(zstandard.ZstdCompressor(level=1).compress(b"\0" * (64 << 20)))
    tracemalloc.start()
    try:
        problems = verify_archive(archive)
        a.unlink()
        with pytest.raises(ArchiveError):
            restore_session(archive, A)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    assert any(digest in p for p in problems)
    assert not a.exists()


def test_a_chunk_left_damaged_by_a_crash_is_stored_again_not_named(tmp_path: Path) -> None:
    """A chunk file there but empty (a power loss after its rename, before its fsync)
    or damaged: a later file holding the same bytes stores them again instead of
    naming the damaged chunk (it was taken as stored: the file could never be restored)."""
    source, a, _ = two_sessions(tmp_path)
    archive = tmp_path / "archive"
    data = a.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    chunk = archive / "chunks" / digest[:2] / f"{digest}.zst"
    chunk.parent.mkdir(parents=True)
    (archive / "ARCHIVE").write_text('{"format": "sessiontree-archive", "version": 1}')
    chunk.write_bytes(b"")
    archive_stores(str(archive), [source])
    assert verify_archive(str(archive)) == []
    a.unlink()
    restore_session(str(archive), A)
    assert a.read_bytes() == data


def _crafted(archive: str, key: str, **fields: Any) -> None:
    path = Path(archive) / key
    manifest = json.loads(path.read_bytes())
    manifest.update(fields)
    path.write_text(json.dumps(manifest))


def test_a_crafted_manifest_cannot_restore_a_file_outside_an_agents_session_dirs(
    tmp_path: Path,
) -> None:
    """An archive from elsewhere names `home` ~/.config and `rel` autostart/x.desktop
    (a file run at the next login): `restore --all` wrote it (any rel without `..`
    was taken, under any home); now only the agent's session dirs are written."""
    source, _, _ = two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    (key,) = [f.key for f in archived_files(archive) if f.rel.endswith(f"{A}.jsonl")]
    config = tmp_path / "victim" / ".config"
    _crafted(archive, key, home=str(config), rel="autostart/evil.desktop")
    with pytest.raises(ArchiveError, match="session dirs"):
        restore_files(archive, archived_files(archive), to=None, keep_going=True)
    assert not config.exists()
    _crafted(archive, key, home=str(config) + "/../.config", rel=f"projects/-w/{A}.jsonl")
    with pytest.raises(ArchiveError, match="absolute"):
        restore_files(archive, archived_files(archive), to=None)
    assert not config.exists()


def test_a_crafted_manifest_cannot_restore_into_the_archive(tmp_path: Path) -> None:
    source, _, _ = two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    (key,) = [f.key for f in archived_files(archive) if f.rel.endswith(f"{A}.jsonl")]
    _crafted(archive, key, home=archive, rel=f"projects/{A}.jsonl")
    with pytest.raises(ArchiveError, match=r"refused|inside the archive"):
        restore_files(archive, archived_files(archive), to=None)
    assert not (Path(archive) / "projects").exists()


def test_archive_watch_follows_on_while_another_run_holds_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`archive --watch` (the systemd unit) while a one-off `archive` or the cron line
    holds the lock: the watch said the other run's error and exited for good; now it
    says so on its status line and archives at its next round."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_DATA_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("PI_CODING_AGENT_DIR", raising=False)
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "none"))
    two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    runner = CliRunner()
    assert runner.invoke(app, ["archive", "--to", archive]).exit_code == 0
    with _storage.opened(archive) as place:
        release = place.lock()
        try:
            args = ["archive", "--to", archive, "--watch", "--rounds", "2", "--interval", "0.1"]
            result = runner.invoke(app, args)
        finally:
            release()
    assert result.exit_code == 0, result.output
    assert "another archive run holds it" in result.output


def test_the_view_survives_a_file_gone_and_a_dir_made_under_its_name(tmp_path: Path) -> None:
    """A file archived, deleted at its source, then a dir made at its path (with a file
    in it): the archive holds both, and its view (what `list --agent-dir ARCHIVE`
    reads) failed as a whole ("File exists"); now the one still there wins and the
    other sessions are all in the view."""
    source, a, b = two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    data = b.read_bytes()
    b.unlink()
    b.mkdir()
    (b / "inner.jsonl").write_bytes(b'{"type":"user","n":9}\n')
    archive_stores(archive, [source])
    (view,) = archive_view(archive)
    home = Path(view.home) / "projects" / "-w"
    assert (home / b.name / "inner.jsonl").read_bytes() == b'{"type":"user","n":9}\n'
    assert (home / a.name).read_bytes() == a.read_bytes()
    (gone,) = [f for f in archived_files(archive) if f.deleted_ms is not None]
    assert gone.rel == f"projects/-w/{B}.jsonl"
    restore_files(archive, [gone], to=str(tmp_path / "out"))
    assert (tmp_path / "out" / gone.rel).read_bytes() == data


def test_a_part_updated_while_the_sessions_are_listed_is_not_cached_as_unseen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenCode (running: WAL mode) rewrites a part in place just after a listing's
    read transaction began and before it noted the database's identity on disk: the
    part signals of the older snapshot were cached under the newer identity, so every
    later listing (`archive --watch`, the web app) missed that update until the
    database changed again. The identity is now noted before the transaction."""
    from sessiontree.foreign import opencode_db
    from tests.foreign_support import OPENCODE_DB

    source = REAL_FILES / "foreign" / "opencode" / OPENCODE_DB
    if not source.exists():
        unavailable(f"fixture {source} is missing")
    database = tmp_path / "opencode.db"
    shutil.copyfile(source, database)
    writer = sqlite3.connect(database, isolation_level=None, timeout=5)
    try:
        writer.execute("PRAGMA journal_mode = WAL")
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("UPDATE session SET title = title")
        (part,) = writer.execute("SELECT id FROM part ORDER BY id LIMIT 1").fetchone()
        before = {r.id: r.parts_updated for r in opencode_db.list_db_sessions(str(database))}
        real = opencode_db._disk_identity
        calls: list[str] = []

        def identity(path: str) -> tuple[int, ...]:
            if not calls:  # OpenCode commits now
                writer.execute(
                    "UPDATE part SET time_updated = time_updated + 1000 WHERE id = ?", (part,)
                )
            calls.append(path)
            return real(path)

        monkeypatch.setattr(opencode_db, "_disk_identity", identity)
        opencode_db.list_db_sessions(str(database))
        monkeypatch.setattr(opencode_db, "_disk_identity", real)
        after = {r.id: r.parts_updated for r in opencode_db.list_db_sessions(str(database))}
    finally:
        writer.close()
    assert calls
    assert before != after


def test_an_earlier_line_rewritten_in_place_as_the_file_grows_is_archived(
    tmp_path: Path,
) -> None:
    """A file that grew is checked before its old end, not only in its last chunk
    (not archived as the old head and the new tail)."""
    source, a, _ = two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    for n in range(40):  # enough lines for several chunks
        with a.open("ab") as f:
            f.write(b'{"type":"user","line":%d}\n' % n)
    archive_stores(archive, [source])
    with a.open("r+b") as f:  # the first line rewritten, same length, then a line appended
        f.write(b'{"type":"USER","n":1}\n')
        f.seek(0, os.SEEK_END)
        f.write(b'{"type":"user","line":99}\n')
    archive_stores(archive, [source])
    expected = a.read_bytes()
    a.unlink()
    restore_session(archive, A)
    assert a.read_bytes() == expected


def test_restoring_a_pi_session_brings_back_the_images_it_refers_to(tmp_path: Path) -> None:
    """A pi-format session keeps its images in the agent dir's `blobs/` (shared,
    content-addressed), not beside it: the session deleted and `gc` run, `restore
    SESSION` wrote the session back without its images though the archive holds them."""
    home = tmp_path / ".pi" / "agent"
    project = home / "sessions" / "--w--"
    project.mkdir(parents=True)
    image = b"\x89PNG fake image bytes"
    digest = hashlib.sha256(image).hexdigest()
    other = b"another session's image"
    other_digest = hashlib.sha256(other).hexdigest()
    (home / "blobs").mkdir()
    (home / "blobs" / digest).write_bytes(image)
    (home / "blobs" / other_digest).write_bytes(other)
    session_id = "cccccccc-0000-0000-0000-000000000003"
    session = project / f"2026-01-01T00-00-00-000Z_{session_id}.jsonl"
    session.write_bytes(
        b'{"type":"session","version":3,"id":"%s"}\n'
        b'{"type":"message","message":{"role":"user","content":[{"type":"image",'
        b'"data":"blob:sha256:%s","mimeType":"image/png"}]}}\n'
        % (session_id.encode(), digest.encode())
    )
    archive = str(tmp_path / "archive")
    archive_stores(archive, [ArchiveSource("pi", str(home), ("sessions", "blobs"))])
    shutil.rmtree(home)
    report = restore_session(archive, session_id)
    assert (home / "blobs" / digest).read_bytes() == image
    assert not (home / "blobs" / other_digest).exists()
    assert sorted(report.written) == sorted([str(session), str(home / "blobs" / digest)])


def test_restore_all_goes_past_a_damaged_file_and_a_path_taken_by_a_dir(
    tmp_path: Path,
) -> None:
    """One archived file with a damaged chunk, another whose path is now a dir: the
    rest of `restore --all` is still written (it stopped at the first)."""
    source, a, b = two_sessions(tmp_path)
    c = a.parent / "cccccccc-0000-0000-0000-000000000003.jsonl"
    c.write_bytes(b'{"type":"user","n":3}\n')
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    (file_a,) = [f for f in archived_files(archive) if f.rel.endswith(f"{A}.jsonl")]
    digest = json.loads((Path(archive) / file_a.key).read_bytes())["chunks"][0][0]
    (Path(archive) / "chunks" / digest[:2] / f"{digest}.zst").write_bytes(b"rot")
    shutil.rmtree(a.parent)
    a.parent.mkdir()
    b.mkdir()  # a dir where the file was
    report = restore_files(archive, archived_files(archive), to=None, keep_going=True)
    assert report.written == [str(c)]
    assert len(report.conflicts) == 2
    assert not a.exists()


def test_a_dir_that_cannot_be_read_is_named_and_its_files_not_marked_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project dir that cannot be listed this run (its permissions changed, an I/O
    error): it was passed over without a word and its files, when not reachable, were
    marked gone at their source; now the run names it and marks nothing under it."""
    source, a, _ = two_sessions(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    real = os.scandir

    def scandir(path: Any) -> Any:
        if str(path) == str(a.parent):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(_sources.os, "scandir", scandir)
    # the dir is there, its files cannot be reached (no search permission)
    monkeypatch.setattr(_sources.os.path, "lexists", lambda p: str(p) == str(a.parent))
    report = archive_stores(archive, [source])
    assert report.files_deleted == 0
    assert any(str(a.parent) in s and "cannot be read" in s for s in report.skipped)
    assert all(f.deleted_ms is None for f in archived_files(archive))


def test_restoring_a_gemini_session_by_its_file_name_brings_its_subagents(
    tmp_path: Path,
) -> None:
    """Gemini CLI keeps a session's subagents in `chats/<parent session id>/`, a dir
    named by the whole id, while the file is named by its first 8 characters: restored
    by its file name or path (as `archive --stats` and `list` show it), the session
    came back without its subagents; only its whole id found them."""
    home = tmp_path / ".gemini"
    chats = home / "tmp" / "abc123" / "chats"
    session_id = "abcd1234-5678-90ab-cdef-1234567890ab"
    sub = chats / session_id / "subagent-1.jsonl"
    sub.parent.mkdir(parents=True)
    session = chats / "session-2026-01-01T00-00-abcd1234.jsonl"
    session.write_bytes(b'{"sessionId":"%s","kind":"main"}\n' % session_id.encode())
    sub.write_bytes(b'{"sessionId":"sub-1","kind":"subagent"}\n')
    archive = str(tmp_path / "archive")
    source = ArchiveSource("gemini", str(home), (str(Path("tmp") / "abc123" / "chats"),))
    archive_stores(archive, [source])
    for query in (session.name, str(session)):
        out = tmp_path / f"out-{len(query)}"
        report = restore_session(archive, query, to=str(out))
        assert sorted(report.written) == sorted(
            str(out / p.relative_to(home)) for p in (session, sub)
        ), query


def test_restoring_an_opencode_json_session_brings_its_messages_and_parts(
    tmp_path: Path,
) -> None:
    """OpenCode's older layout keeps a session's messages under its id and their parts
    (the text itself) under each message's id: a restore wrote the session file alone
    (by its path) or with its messages but none of their parts (by its id)."""
    home = tmp_path / "opencode"
    storage = home / "storage"
    sid, mid, other_mid = "ses_0123456789abcdef", "msg_0001", "msg_0999"
    files = {
        storage / "session" / "proj" / f"{sid}.json": b'{"id":"%s"}' % sid.encode(),
        storage / "message" / sid / f"{mid}.json": b'{"id":"%s"}' % mid.encode(),
        storage / "part" / mid / "prt_0001.json": b'{"type":"text","text":"hello"}',
        storage / "part" / other_mid / "prt_0002.json": b'{"type":"text","text":"other"}',
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [ArchiveSource("opencode", str(home), ("storage",))])
    session = next(iter(files))
    for query in (sid, str(session)):
        out = tmp_path / f"out-{len(query)}"
        report = restore_session(archive, query, to=str(out))
        expected = [p for p in files if other_mid not in str(p)]
        assert sorted(report.written) == sorted(str(out / p.relative_to(home)) for p in expected), (
            query
        )
