"""The archive: every session kept whatever the agents prune, restored byte
for byte; incremental, deduplicated, compressed, never deleting; and the four
questions of everything that writes (same source and target, a path that is not
ours, a file changed meanwhile, a write failing halfway)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from typer.testing import CliRunner

import sessiontree.cli.common as cli_common
from sessiontree.archive import (
    ArchiveBusyError,
    ArchiveError,
    ArchiveSource,
    _archiving,
    _chunks,
    _storage,
    archive_stats,
    archive_stores,
    archived_files,
    archived_versions,
    restore_files,
    restore_session,
    verify_archive,
)
from sessiontree.cli import app
from sessiontree.storage import _file as file_storage
from sessiontree.storage import lock_path_for
from tests.conftest import REAL_FILES, examples, unavailable

FOREIGN = REAL_FILES / "foreign"
CLAUDE = "entireio__cli__26__dcd5518fea__0__full.jsonl"
CODEX = "AcidicSoil__codex-session-viewer__docs__example.jsonl"
ID = "aaaaaaaa-1111-2222-3333-444444444444"


pytestmark = pytest.mark.usefixtures("homes_in_tmp")


def fixture(*parts: str) -> Path:
    path = FOREIGN.joinpath(*parts)
    if not path.exists():
        unavailable(f"fixture {path} is missing")
    return path


def claude_home(root: Path) -> tuple[ArchiveSource, Path]:
    home = root / ".claude"
    session = home / "projects" / "-w" / f"{ID}.jsonl"
    session.parent.mkdir(parents=True)
    shutil.copyfile(fixture("claude", CLAUDE), session)
    sub = home / "projects" / "-w" / ID / "subagents" / "agent-1.jsonl"
    sub.parent.mkdir(parents=True)
    sub.write_bytes(b'{"type":"user","message":{"role":"user","content":"sub"}}\n')
    return ArchiveSource("claude", str(home), ("projects",)), session


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_archive_survives_the_agent_deleting_and_restores_byte_for_byte(tmp_path: Path) -> None:
    source, session = claude_home(tmp_path)
    before = tree(Path(source.home))
    mtime = session.stat().st_mtime_ns
    archive = str(tmp_path / "archive")
    report = archive_stores(archive, [source])
    assert report.files_new == 2
    shutil.rmtree(Path(source.home) / "projects")  # cleanupPeriodDays
    report = archive_stores(archive, [source])
    assert report.files_deleted == 2
    files = archived_files(archive)
    assert all(f.deleted_ms is not None for f in files)
    assert verify_archive(archive) == []
    restored = restore_session(archive, ID)
    assert len(restored.written) == 2  # the session and its subagent file
    assert tree(Path(source.home)) == before
    assert session.stat().st_mtime_ns == mtime
    # Archived again as it was: no new version, no longer marked deleted.
    report = archive_stores(archive, [source])
    assert report.files_rewritten == 0
    assert all(f.deleted_ms is None for f in archived_files(archive))


def test_a_second_run_with_nothing_new_reads_nothing(tmp_path: Path) -> None:
    source, _ = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    again = archive_stores(archive, [source])
    assert (again.bytes_read, again.bytes_stored, again.files_new, again.files_grown) == (
        0,
        0,
        0,
        0,
    )


def test_a_session_that_grows_is_read_from_its_last_chunk(tmp_path: Path) -> None:
    source, session = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    first = archive_stores(archive, [source])
    with session.open("ab") as f:
        f.write(b'{"type":"user","message":{"role":"user","content":"more"}}\n' * 3)
    grown = archive_stores(archive, [source])
    assert grown.files_grown == 1
    assert grown.bytes_read < first.bytes_read / 4
    out = tmp_path / "out"
    restore_session(archive, ID, to=str(out))
    assert (out / "projects" / "-w" / f"{ID}.jsonl").read_bytes() == session.read_bytes()


def test_a_rewritten_session_keeps_its_earlier_version(tmp_path: Path) -> None:
    source, session = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    original = session.read_bytes()
    session.write_bytes(b'{"type":"summary"}\n')
    report = archive_stores(archive, [source])
    assert report.files_rewritten == 1
    (manifest,) = [f.manifest for f in archived_files(archive) if f.is_session]
    earlier = json.loads(Path(manifest).read_text())["earlier"]
    assert len(earlier) == 1 and earlier[0]["size"] == len(original)
    assert verify_archive(archive) == []


def test_forks_and_resumes_are_stored_once(tmp_path: Path) -> None:
    """Codex forks copy the whole parent; Claude Code resumes replay it: the copies'
    lines cost (almost) nothing."""
    home = tmp_path / ".codex"
    day = home / "sessions" / "2025" / "01" / "01"
    day.mkdir(parents=True)
    parent = fixture("codex", CODEX).read_bytes()
    first, rest = parent.split(b"\n", 1)
    (day / "rollout-parent.jsonl").write_bytes(parent)
    for n in range(4):  # forks: a new first line, the parent's lines, a few of their own
        meta = first.replace(b'"id":"', f'"id":"fork{n}'.encode(), 1)
        own = f'{{"type":"event_msg","payload":{{"n":{n}}}}}\n'.encode()
        (day / f"rollout-fork{n}.jsonl").write_bytes(meta + b"\n" + rest + own)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [ArchiveSource("codex", str(home), ("sessions",))])
    figures = archive_stats(archive)
    assert figures.sessions == 5
    assert figures.stored_bytes <= 0.3 * figures.original_bytes


def test_cli_archive_stats_verify_restore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    claude_home(home)
    monkeypatch.setenv("HOME", str(home))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_DATA_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "none"))
    archive = tmp_path / "arch"
    runner = CliRunner()
    done = runner.invoke(app, ["archive", "--to", str(archive), "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["filesNew"] == 2
    stats = json.loads(
        runner.invoke(app, ["archive", "--to", str(archive), "--stats", "--json"]).stdout
    )
    assert stats["sessions"] == 1 and stats["files"] == 2
    assert runner.invoke(app, ["archive", "--to", str(archive), "--verify"]).exit_code == 0
    watched = runner.invoke(
        app, ["archive", "--to", str(archive), "--watch", "--rounds", "2", "--interval", "0.1"]
    )
    assert watched.exit_code == 0, watched.output
    hint = runner.invoke(app, ["archive", "--to", str(archive), "--install-hint"])
    assert "ExecStart=" in hint.stdout and "archive --to" in hint.stdout
    out = tmp_path / "out"
    restored = runner.invoke(app, ["restore", ID, "--from", str(archive), "--to", str(out)])
    assert restored.exit_code == 0, restored.output
    assert (out / "projects" / "-w" / f"{ID}.jsonl").read_bytes() == fixture(
        "claude", CLAUDE
    ).read_bytes()
    other = runner.invoke(app, ["archive", "--to", "s3://x/y"])
    assert other.exit_code == 2 and "postgresql://" in other.output


# ---------------------------------------------------------------------------- the four questions


def test_the_archive_may_not_be_inside_a_store_it_archives(tmp_path: Path) -> None:
    source, _ = claude_home(tmp_path)
    with pytest.raises(ArchiveError, match="inside"):
        archive_stores(str(Path(source.home) / "projects" / "archive"), [source])
    with pytest.raises(ArchiveError, match="inside"):
        archive_stores(source.home, [source])


def test_restore_never_writes_into_the_archive(tmp_path: Path) -> None:
    source, _ = claude_home(tmp_path)
    archive = tmp_path / "archive"
    archive_stores(str(archive), [source])
    with pytest.raises(ArchiveError, match="archive"):
        restore_session(str(archive), ID, to=str(archive / "x"))


def test_a_non_archive_dir_is_refused(tmp_path: Path) -> None:
    source, _ = claude_home(tmp_path)
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ArchiveError, match="not an archive"):
        archive_stores(str(other), [source])
    assert (other / "notes.txt").read_text() == "mine"


def test_symlinks_in_a_store_are_not_followed(tmp_path: Path) -> None:
    source, _ = claude_home(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("not a session")
    os.symlink(secret, Path(source.home) / "projects" / "-w" / "evil.jsonl")
    archive = str(tmp_path / "archive")
    report = archive_stores(archive, [source])
    assert any("symlink" in s for s in report.skipped)
    assert not any(f.rel.endswith("evil.jsonl") for f in archived_files(archive))


def test_a_manifest_naming_a_path_outside_is_refused(tmp_path: Path) -> None:
    source, _ = claude_home(tmp_path)
    archive = tmp_path / "archive"
    archive_stores(str(archive), [source])
    (manifest,) = [f.manifest for f in archived_files(str(archive)) if f.is_session]
    value = json.loads(Path(manifest).read_text())
    value["rel"] = f"projects/../../../escape/{ID}.jsonl"
    Path(manifest).write_text(json.dumps(value))
    with pytest.raises(ArchiveError, match="not a path inside"):
        restore_files(str(archive), archived_files(str(archive)), to=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "escape").exists()


def test_restore_never_writes_through_a_symlink(tmp_path: Path) -> None:
    source, _ = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    os.symlink(elsewhere, out / "projects")
    with pytest.raises(ArchiveError, match="symlink"):
        restore_session(archive, ID, to=str(out))
    assert list(elsewhere.iterdir()) == []


def test_restore_never_replaces_a_file_with_other_bytes(tmp_path: Path) -> None:
    source, session = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    session.write_bytes(b"the agent wrote this since\n")
    with pytest.raises(ArchiveError, match="never replaced"):
        restore_session(archive, ID)
    assert session.read_bytes() == b"the agent wrote this since\n"


def test_a_file_replaced_while_read_waits_for_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program replaced the file between the stat and the read: nothing of it
    is recorded this run; the next run archives it whole."""
    source, session = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    real = _archiving.read_span

    def replace_then_read(path: str, offset: int, size: int) -> Any:
        if path == str(session) and not getattr(replace_then_read, "done", False):
            replace_then_read.done = True  # type: ignore[attr-defined]
            replacement = session.with_suffix(".new")
            replacement.write_bytes(b'{"type":"summary"}\n')
            os.replace(replacement, session)
        return real(path, offset, size)

    monkeypatch.setattr(_archiving, "read_span", replace_then_read)
    report = archive_stores(archive, [source])
    assert any("while read" in s for s in report.skipped)
    assert not any(f.is_session for f in archived_files(archive))
    monkeypatch.setattr(_archiving, "read_span", real)
    archive_stores(archive, [source])
    out = tmp_path / "out"
    restore_session(archive, ID, to=str(out))
    assert (out / "projects" / "-w" / f"{ID}.jsonl").read_bytes() == session.read_bytes()


def test_a_full_disk_stops_the_run_and_loses_nothing_archived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, session = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    kept = {f.rel: Path(f.manifest).read_bytes() for f in archived_files(archive)}
    with session.open("ab") as f:
        f.write(b'{"type":"user","message":{"role":"user","content":"later"}}\n' * 50)
    real = file_storage.atomic_write
    calls = {"n": 0}

    def full(path: str, chunks: Any, **kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] >= 2:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real(path, chunks, **kw)

    monkeypatch.setattr(file_storage, "atomic_write", full)
    with pytest.raises(ArchiveError, match="disk is full"):
        archive_stores(archive, [source])
    monkeypatch.setattr(file_storage, "atomic_write", real)
    assert {f.rel: Path(f.manifest).read_bytes() for f in archived_files(archive)} == kept
    assert verify_archive(archive) == []
    assert not list(Path(archive).rglob("*.tmp"))
    archive_stores(archive, [source])  # the next run, with room, catches up
    out = tmp_path / "out"
    restore_session(archive, ID, to=str(out))
    assert (out / "projects" / "-w" / f"{ID}.jsonl").read_bytes() == session.read_bytes()


def test_two_runs_at_once_the_second_exits(tmp_path: Path) -> None:
    source, _ = claude_home(tmp_path)
    archive = tmp_path / "archive"
    archive_stores(str(archive), [source])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,os,sys,time; fd=os.open(sys.argv[1],os.O_RDWR|os.O_CREAT,0o600); "
            "fcntl.flock(fd,fcntl.LOCK_EX); print('held',flush=True); time.sleep(30)",
            lock_path_for(str(archive / "ARCHIVE")),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with pytest.raises(ArchiveBusyError, match="exits"):
            archive_stores(str(archive), [source])
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    archive_stores(str(archive), [source])


def test_damage_in_the_archive_is_found_by_verify(tmp_path: Path) -> None:
    source, _ = claude_home(tmp_path)
    archive = tmp_path / "archive"
    archive_stores(str(archive), [source])
    chunk = next((archive / "chunks").rglob("*.zst"))
    chunk.write_bytes(b"garbage")
    problems = verify_archive(str(archive))
    assert problems and "damaged" in problems[0]


# ---------------------------------------------------------------------------- a model


LINE = st.binary(min_size=0, max_size=40).map(lambda b: b.replace(b"\n", b" ") + b"\n")
TITLE = st.text(max_size=300)
HEADER = b'{"type":"session","version":3,"id":"fresh","timestamp":"2026-12-01T00:00:00.000Z"}\n'

MODEL_COUNTS = {"examples": 0, "steps": 0, "in_place": 0, "versions_restored": 0}
"""What the archive model ran (its runs, steps and restores, for a report)."""


class ArchiveModel(RuleBasedStateMachine):
    """Agents create sessions, append to them, rewrite and prune them, and rewrite them
    in place (oh-my-pi's title slot at offset 0, a same-length edit anywhere, pi
    truncating one to a fresh header); archive runs come and go; restores write them
    back. Every version the archive saw is listed and comes back byte for byte."""

    @initialize()
    def setup(self) -> None:
        import tempfile

        self.root = Path(tempfile.mkdtemp(prefix="archive-model-"))
        self.home = self.root / "home"
        (self.home / "sessions" / "2026" / "01" / "02").mkdir(parents=True)  # Codex's layout
        # This machine's Codex home: where a restore without --to may write.
        self.codex_home = os.environ.get("CODEX_HOME")
        os.environ["CODEX_HOME"] = str(self.home)
        self.archive = str(self.root / "archive")
        self.source = ArchiveSource("codex", str(self.home), ("sessions",))
        self.live: dict[str, bytes] = {}
        self.archived: dict[str, bytes] = {}  # what the archive must give back
        self.versions: dict[str, list[bytes]] = {}  # every version it must keep
        self.replaced: set[str] = set()  # a new inode since the last run
        self.counter = 0
        MODEL_COUNTS["examples"] += 1
        # a chunk ends after one line in two (not 16): the model's few lines make files
        # of several chunks, so that a change before a file's last chunk is tried
        self.boundary, _chunks._BOUNDARY = _chunks._BOUNDARY, 2

    def teardown(self) -> None:
        if hasattr(self, "boundary"):
            _chunks._BOUNDARY = self.boundary
        shutil.rmtree(self.root, ignore_errors=True)
        if self.codex_home is None:
            os.environ.pop("CODEX_HOME", None)
        else:
            os.environ["CODEX_HOME"] = self.codex_home

    def _path(self, name: str) -> Path:
        return self.home / "sessions" / name

    @rule(lines=st.lists(LINE, min_size=1, max_size=5), fork=st.booleans(), slot=TITLE)
    def create(self, lines: list[bytes], fork: bool, slot: str) -> None:
        from sessiontree.format import title_slot_line

        self.counter += 1
        name = f"2026/01/02/rollout-{self.counter:04d}.jsonl"
        body = b"".join(lines)
        if fork and self.live:
            body = b"meta\n" + next(iter(self.live.values())) + body
        if slot:  # oh-my-pi's: a 256-byte title slot first
            body = title_slot_line(slot, "auto", "2026-12-01T00:00:00.000Z") + body
        self._path(name).write_bytes(body)
        self.live[name] = body
        self.replaced.add(name)

    @rule(data=st.data(), lines=st.lists(LINE, min_size=1, max_size=3))
    def grow(self, data: st.DataObject, lines: list[bytes]) -> None:
        if not self.live:
            return
        name = data.draw(st.sampled_from(sorted(self.live)))
        with self._path(name).open("ab") as f:
            f.write(b"".join(lines))
        self.live[name] += b"".join(lines)

    @rule(data=st.data())
    def prune(self, data: st.DataObject) -> None:
        if not self.live:
            return
        name = data.draw(st.sampled_from(sorted(self.live)))
        self._path(name).unlink()
        del self.live[name]

    @rule(data=st.data(), lines=st.lists(LINE, min_size=1, max_size=3))
    def rewrite(self, data: st.DataObject, lines: list[bytes]) -> None:
        if not self.live:
            return
        name = data.draw(st.sampled_from(sorted(self.live)))
        body = b"".join(lines)
        tmp = self._path(name + ".tmp")
        tmp.write_bytes(body)
        os.replace(tmp, self._path(name))
        self.live[name] = body
        self.replaced.add(name)

    def _in_place(self, name: str, body: bytes, *, keep_mtime: bool = False) -> None:
        """Write `body` into the file's inode (truncated first), as pi's
        `writeFileSync` and oh-my-pi's slot rewrite do. `keep_mtime`: as a write in
        the same tick of the clock as the one before (only while that tick could be
        one a run saw: within 1.5 s)."""
        path = self._path(name)
        before = path.stat()
        with path.open("r+b") as f:
            f.truncate(len(body))
            f.seek(0)
            f.write(body)
        if keep_mtime and before.st_mtime_ns >= time.time_ns() - 1_500_000_000:
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_ino == before.st_ino
        self.live[name] = body
        MODEL_COUNTS["in_place"] += 1

    @rule(data=st.data(), title=TITLE)
    def rename_slot(self, data: st.DataObject, title: str) -> None:
        """oh-my-pi's rename: the slot rewritten at offset 0, a `title_change` appended."""
        from sessiontree.format import title_slot_line

        slotted = sorted(n for n, b in self.live.items() if b.startswith(b'{"type":"title"'))
        if not slotted:
            return
        name = data.draw(st.sampled_from(slotted))
        change = json.dumps({"type": "title_change", "title": title}).encode() + b"\n"
        slot = title_slot_line(title, "user", "2026-12-02T00:00:00.000Z")
        self._in_place(name, slot + self.live[name][256:] + change)

    @rule(data=st.data(), byte=st.integers(0, 255), keep_mtime=st.booleans())
    def edit_in_place(self, data: st.DataObject, byte: int, keep_mtime: bool) -> None:
        """One byte changed anywhere, the length kept."""
        bodies = sorted(n for n, b in self.live.items() if b)
        if not bodies:
            return
        name = data.draw(st.sampled_from(bodies))
        body = bytearray(self.live[name])
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = byte
        self._in_place(name, bytes(body), keep_mtime=keep_mtime)

    @rule(data=st.data())
    def truncate_to_header(self, data: st.DataObject) -> None:
        """pi 0.73 opening an oh-my-pi session: a fresh header, same inode."""
        if not self.live:
            return
        self._in_place(data.draw(st.sampled_from(sorted(self.live))), HEADER)

    @rule()
    def run_archive(self) -> None:
        archive_stores(self.archive, [self.source])
        for name, body in self.live.items():
            kept = self.versions.setdefault(name, [])
            if kept and kept[-1] == body:
                pass
            elif kept and name not in self.replaced and body.startswith(kept[-1]):
                kept[-1] = body  # appended to only: the same version, grown
            else:
                kept.append(body)
        self.replaced.clear()
        self.archived.update(self.live)

    @rule(data=st.data())
    def restore_pruned(self, data: st.DataObject) -> None:
        gone = sorted(set(self.archived) - set(self.live))
        if not gone:
            return
        name = data.draw(st.sampled_from(gone))
        restore_session(self.archive, f"sessions/{name}")
        self.live[name] = self._path(name).read_bytes()
        self.replaced.add(name)
        assert self.live[name] == self.archived[name]

    @invariant()
    def nothing_is_lost(self) -> None:
        if not hasattr(self, "archive") or not os.path.isdir(self.archive):
            return
        MODEL_COUNTS["steps"] += 1
        out = self.root / f"check-{self.counter}"
        files = {f.rel: f for f in archived_files(self.archive)}
        assert {f"sessions/{n}" for n in self.archived} <= set(files)
        for name, body in self.archived.items():
            restore_session(self.archive, f"sessions/{name}", to=str(out))
            assert (out / "sessions" / name).read_bytes() == body
        shutil.rmtree(out, ignore_errors=True)
        for name, bodies in self.versions.items():
            _, kept = archived_versions(self.archive, f"sessions/{name}")
            assert len(kept) == len(bodies), name
            for number, body in enumerate(bodies, 1):
                where = out / str(number)
                restore_session(self.archive, f"sessions/{name}", to=str(where), version=number)
                assert (where / "sessions" / name).read_bytes() == body, (name, number)
                MODEL_COUNTS["versions_restored"] += 1
        shutil.rmtree(out, ignore_errors=True)
        assert verify_archive(self.archive) == []


ArchiveModel.TestCase.settings = settings(
    max_examples=examples(100, "SESSIONTREE_ARCHIVE_MODEL_EXAMPLES"),
    stateful_step_count=20,
    deadline=None,
)
TestArchiveModel = ArchiveModel.TestCase


def test_opencode_database_sessions_are_kept_as_export_documents(tmp_path: Path) -> None:
    """A session OpenCode deletes from its database stays in the archive, as the
    document `opencode export` writes (`opencode import` and `sessiontree import` take
    it); a part OpenCode rewrites in place is archived again."""
    import sqlite3

    from sessiontree.foreign import read_opencode_export

    home = tmp_path / "opencode"
    home.mkdir()
    database = home / "opencode.db"
    shutil.copyfile(fixture("opencode", "suhd550-dev__stunning-memory__opencode.db"), database)
    database.chmod(0o644)
    source = ArchiveSource("opencode", str(home), ())
    archive = str(tmp_path / "archive")
    first = archive_stores(archive, [source])
    assert first.files_new >= 1
    sessions = [f for f in archived_files(archive) if f.is_session]
    assert sessions
    again = archive_stores(archive, [source])
    assert (again.files_new, again.files_rewritten, again.bytes_read) == (0, 0, 0)
    conn = sqlite3.connect(database)
    with conn:
        conn.execute(
            "UPDATE part SET data = json_set(data, '$.text', 'rewritten'), "
            "time_updated = time_updated + 1 WHERE id = (SELECT MIN(id) FROM part "
            'WHERE data LIKE \'%"type":"text"%\')'
        )
    assert archive_stores(archive, [source]).files_rewritten == 1
    (session_id,) = [r[0] for r in conn.execute("SELECT id FROM session WHERE parent_id IS NULL")][
        :1
    ]
    with conn:
        conn.execute("DELETE FROM part WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM message WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM session WHERE id = ?", (session_id,))
    conn.close()
    assert archive_stores(archive, [source]).files_deleted == 1
    out = tmp_path / "out"
    restored = restore_session(archive, session_id, to=str(out))
    (document,) = restored.written
    session = read_opencode_export(document)
    assert session.source_id == session_id
    assert session.damaged == []
    assert verify_archive(archive) == []


def test_the_archive_reads_as_a_store(tmp_path: Path) -> None:
    """`list`, `search`, `usage` (and `serve`) read an archive named by --agent-dir, its
    sessions gone at their source included; a writing command is refused."""
    source, _ = claude_home(tmp_path)
    archive = tmp_path / "archive"
    archive_stores(str(archive), [source])
    shutil.rmtree(Path(source.home) / "projects")
    archive_stores(str(archive), [source])
    runner = CliRunner()
    listed = runner.invoke(app, ["--agent-dir", str(archive), "list", "--all", "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)["sessions"]
    assert row["agent"] == "claude" and row["id"] == ID
    found = runner.invoke(app, ["--agent-dir", str(archive), "search", "entire", "--all", "--json"])
    assert found.exit_code == 0, found.output
    usage = runner.invoke(app, ["--agent-dir", str(archive), "usage", "daily", "--json"])
    assert usage.exit_code == 0, usage.output
    shown = runner.invoke(app, ["--agent-dir", str(archive), "show", ID[:8]])
    assert shown.exit_code == 0, shown.output
    refused = runner.invoke(app, ["--agent-dir", str(archive), "rm", ID])
    assert refused.exit_code == 2 and "only read" in refused.output


def test_the_watch_wakes_on_a_write(tmp_path: Path) -> None:
    """inotify (where the platform has it) wakes the watch at once; else it polls."""
    import threading
    import time

    from sessiontree.archive import Waiter

    store = tmp_path / "store" / "deep"
    store.mkdir(parents=True)
    waiter = Waiter()
    try:
        if waiter.mode != "inotify":
            assert waiter.wait([str(tmp_path / "store")], 0.1) is False
            return
        assert waiter.wait([str(tmp_path / "store")], 0.05) is False  # nothing yet
        timer = threading.Timer(0.2, lambda: (store / "s.jsonl").write_bytes(b"{}\n"))
        timer.start()
        started = time.monotonic()
        assert waiter.wait([str(tmp_path / "store")], 20) is True
        assert time.monotonic() - started < 10
        timer.join()
    finally:
        waiter.close()


def test_an_archive_in_postgresql(tmp_path: Path) -> None:
    """`--to postgresql://...`: the same archive, its files rows of the database; it
    survives the source's cleanup, restores byte for byte, verifies, and one run at a
    time holds it (an advisory lock)."""
    from tests.pg_support import fresh_schema

    source, session = claude_home(tmp_path)
    original = session.read_bytes()
    with fresh_schema() as (url, schema):
        target = url + ("&" if "?" in url else "?") + f"schema={schema}"
        first = archive_stores(target, [source])
        assert first.files_new == 2
        again = archive_stores(target, [source])
        assert (again.files_new, again.bytes_read) == (0, 0)
        shutil.rmtree(Path(source.home) / "projects")
        assert archive_stores(target, [source]).files_deleted == 2
        assert verify_archive(target) == []
        figures = archive_stats(target)
        assert figures.sessions == 1 and 0 < figures.stored_bytes < figures.original_bytes
        restored = restore_session(target, ID)
        assert len(restored.written) == 2
        assert session.read_bytes() == original
        with _storage.opened(target) as place:
            release = place.lock()
            try:
                with pytest.raises(ArchiveBusyError):
                    archive_stores(target, [source])
            finally:
                release()
        runner = CliRunner()
        stats = runner.invoke(app, ["archive", "--to", target, "--stats", "--json"])
        assert stats.exit_code == 0, stats.output
        assert json.loads(stats.stdout)["sessions"] == 1


def test_restoring_onto_the_same_bytes_writes_nothing(tmp_path: Path) -> None:
    """The source and the target are the same file, unchanged: left alone (not
    rewritten, its inode and mtime kept)."""
    source, session = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    before = session.stat()
    report = restore_session(archive, ID)
    assert report.written == [] and str(session) in report.unchanged
    after = session.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_resumed_copy_is_stored_as_a_delta(tmp_path: Path) -> None:
    """Claude Code replays a resumed session's lines into a new file with the new
    session's id in each: cut where the original was, and stored against it."""
    source, session = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    alone = archive_stats(archive).stored_bytes
    other = "bbbbbbbb-1111-2222-3333-444444444444"
    body = session.read_bytes().replace(
        b'"sessionId":"062a8bdd-4322-4ffa-bc38-3e8b8bfb5a56"', f'"sessionId":"{other}"'.encode()
    )
    assert body != session.read_bytes()
    copy = session.with_name(f"{other}.jsonl")
    copy.write_bytes(body + b'{"type":"user","sessionId":"' + other.encode() + b'"}\n')
    archive_stores(archive, [source])
    figures = archive_stats(archive)
    assert figures.stored_bytes - alone < 0.1 * len(body)
    assert verify_archive(archive) == []
    out = tmp_path / "out"
    restore_session(archive, other, to=str(out))
    assert (out / "projects" / "-w" / copy.name).read_bytes() == copy.read_bytes()


def test_a_first_run_beside_another_first_run_is_not_refused(tmp_path: Path) -> None:
    """Two first runs at once (a `--watch` unit and a cron line, on a new archive dir):
    the second one found the dir holding the first one's mark still being written (its
    temporary file) and stopped with "not an archive (no ARCHIVE file) and not empty",
    which also ends a `--watch`; a run that finds only that goes on."""
    source, _ = claude_home(tmp_path)
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / ".ARCHIVE.0123456789ab.tmp").write_text("")  # the other run's, mid-write
    assert archive_stores(str(archive), [source]).files_new >= 1
    assert verify_archive(str(archive)) == []
    other = tmp_path / "not-an-archive"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ArchiveError, match="not empty"):
        archive_stores(str(other), [source])


def test_restore_never_writes_through_a_dir_swapped_for_a_symlink_meanwhile(
    tmp_path: Path,
) -> None:
    """A `--to` dir another user can write to: they swap a dir of the restore's path
    for a symlink to a place of the restoring user's between restore's look at it and
    its write. Each component is now opened without following a symlink and the file
    written through that descriptor, so the look and the write are the same dir.
    (A race: a thread flips `out/projects` between a dir and a link while restores run;
    the old code, which looked, then wrote by path, wrote into `elsewhere` within a few
    hundred of them.)"""
    source, _ = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    (file,) = [f for f in archived_files(archive) if f.rel.endswith(f"{ID}.jsonl")]
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (elsewhere / "-w").mkdir(parents=True)
    (out / "projects").mkdir(parents=True)
    os.symlink(elsewhere, out / "projects-link")
    stop = threading.Event()

    def put(source: Path, name: Path) -> None:
        """Rename `source` to `name`, over a dir the restore made there meanwhile."""
        while True:
            try:
                os.rename(source, name)
                return
            except OSError:
                shutil.rmtree(name, ignore_errors=True)

    def flip() -> None:
        real, link, name = out / "projects-real", out / "projects-link", out / "projects"
        while not stop.is_set():
            os.rename(name, real)
            put(link, name)
            os.rename(name, link)
            put(real, name)

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        for _ in range(RESTORE_RACES):
            try:
                restore_files(archive, [file], to=str(out))
            except (ArchiveError, OSError):
                pass  # refused, or a dir gone at that moment: nothing written out of it
            for kept in ("projects", "projects-real"):
                _unlink_not_through_a_link(out, kept, "-w", f"{ID}.jsonl")
            if list((elsewhere / "-w").iterdir()):
                break
    finally:
        stop.set()
        flipper.join()
    assert list((elsewhere / "-w").iterdir()) == []


RESTORE_RACES = 250


def _unlink_not_through_a_link(root: Path, *parts: str) -> None:
    """Unlink root/parts... opening each dir without following a symlink (going
    through the link would remove, and so hide, a file written there)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.unlink(parts[-1], dir_fd=fd)
    except OSError:
        pass  # not there, or a link at this moment
    finally:
        os.close(fd)


def _watch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    project = home / ".claude" / "projects" / "-w"
    project.mkdir(parents=True)
    shutil.copyfile(fixture("claude", CLAUDE), project / f"{ID}.jsonl")
    monkeypatch.setenv("HOME", str(home))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_DATA_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "none"))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "agent"))
    return home


def test_the_watch_status_into_a_pipe_is_a_line_per_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _watch_home(tmp_path, monkeypatch)
    args = ["archive", "--to", str(tmp_path / "arch"), "--watch", "--rounds", "3"]
    watched = CliRunner().invoke(app, [*args, "--interval", "0.1"])
    assert watched.exit_code == 0, watched.output
    # the first round archived the session; the next two changed nothing: no line
    lines = watched.stderr.splitlines()
    assert len(lines) == 1 and "1 new" in lines[0], watched.stderr
    assert "\r" not in watched.stderr and "\\x0d" not in watched.stderr


def test_the_watch_status_on_a_terminal_is_one_line_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _watch_home(tmp_path, monkeypatch)
    monkeypatch.setattr(cli_common.err_console, "writes_to_terminal", lambda: True)
    monkeypatch.setattr(cli_common.err_console, "width", 60)
    args = ["archive", "--to", str(tmp_path / "arch"), "--watch", "--rounds", "3"]
    watched = CliRunner().invoke(app, [*args, "--interval", "0.1"])
    assert watched.exit_code == 0, watched.output
    # each round goes back to the line's start and clears it; one newline, at the end
    rounds = watched.stderr.split("\r\x1b[2K")
    assert len(rounds) == 4 and watched.stderr.count("\n") == 1, repr(watched.stderr)
    assert all(len(status.rstrip("\n")) < 60 for status in rounds[1:])
    assert "\\x0d" not in watched.stderr


def test_a_restore_on_a_filesystem_without_hard_links_renames_to_a_free_name_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where `link` is refused (a filesystem without hard links), the restored file is
    renamed into place, and only where no file is: one that appeared at the name between
    the look and the write is left alone. No temporary file stays either way."""
    import sessiontree.archive._restore as restore_module

    source, session = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])

    linked: list[str] = []

    def no_links(*args: Any, **kwargs: Any) -> None:
        linked.append(str(args[1]))
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(restore_module.os, "link", no_links)
    out = tmp_path / "out"
    restore_session(archive, ID, to=str(out))
    target = out / "projects" / "-w" / f"{ID}.jsonl"
    assert target.read_bytes() == session.read_bytes()

    late = tmp_path / "late"
    late_target = late / "projects" / "-w" / f"{ID}.jsonl"
    real_lstat = os.lstat

    def appears(path: Any, *args: Any, **kwargs: Any) -> Any:
        # Another program writes the file after the link was refused, before the rename.
        if linked and path == f"{ID}.jsonl" and not late_target.exists():
            late_target.write_bytes(b"theirs\n")
        return real_lstat(path, *args, **kwargs)

    linked.clear()
    monkeypatch.setattr(restore_module.os, "lstat", appears)
    with pytest.raises(ArchiveError, match="appeared while it was restored"):
        restore_session(archive, ID, to=str(late))
    assert late_target.read_bytes() == b"theirs\n"
    assert not [p for p in tmp_path.rglob("*.tmp") if "archive" not in p.parts]


def test_a_restore_whose_write_fails_halfway_leaves_no_file_and_can_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk in the middle of a restored file: nothing at the target name (no
    truncated session an agent would resume), no temporary file, and the next restore
    writes it whole."""
    import sessiontree.archive._restore as restore_module

    source, session = claude_home(tmp_path)
    archive = str(tmp_path / "archive")
    archive_stores(archive, [source])
    real = restore_module.write_all

    def half(fd: int, data: Any) -> None:
        real(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(restore_module, "write_all", half)
    out = tmp_path / "out"
    with pytest.raises((ArchiveError, OSError)):
        restore_session(archive, ID, to=str(out))
    target = out / "projects" / "-w" / f"{ID}.jsonl"
    assert not target.exists()
    assert not list(out.rglob("*.tmp"))
    monkeypatch.setattr(restore_module, "write_all", real)
    restore_session(archive, ID, to=str(out))
    assert target.read_bytes() == session.read_bytes()
