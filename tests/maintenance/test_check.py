"""The consistency checker and the repair: findings with line numbers, byte-exact copies."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from sessiontree import (
    BlobStore,
    InvalidSessionFileError,
    SessionLockError,
    SessionManager,
    serialize_entry,
)
from sessiontree.layout import store_parts
from sessiontree.maintenance import check_session, repair_session, scan_session
from sessiontree.storage import FileLock
from tests.conftest import FIXTURES, real_file
from tests.helpers import assistant, user

LARGE_FIXTURE = "pi-v1-large-session.jsonl"


def header(session_id: str = "0123456789abcdef") -> dict[str, Any]:
    return {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/proj",
    }


def entry(entry_id: str, parent: str | None, text: str = "x", **extra: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-01-01T00:00:01.000Z",
        "message": user(text),
    }
    value.update(extra)
    return value


def write_lines(path: Path, values: list[Any], tail: bytes = b"") -> Path:
    body = b"".join(
        (v if isinstance(v, bytes) else serialize_entry(v).encode()) + b"\n" for v in values
    )
    path.write_bytes(body + tail)
    return path


def kinds(findings: list[Any]) -> list[tuple[str, int | None]]:
    return [(f.kind, f.line) for f in findings]


def sound_session(agent_dir: Path) -> str:
    """A branched session with labels, a compaction and an externalized image."""
    sm = SessionManager.create("/proj")
    first = sm.append_message(user("question"))
    answer = sm.append_message(assistant("answer"))
    sm.append_label_change(answer, "good")
    image = base64.b64encode(os.urandom(3000)).decode()
    sm.append_message(
        {
            "role": "user",
            "content": [{"type": "image", "data": image, "mimeType": "image/png"}],
            "timestamp": 1,
        }
    )
    sm.append_compaction("summary", "short", answer, 100)
    sm.branch(first)
    sm.append_message(assistant("other branch"))
    sm.close()
    path = sm.get_session_file()
    assert path is not None
    return path


def test_sound_session_has_no_findings(agent_dir: Path) -> None:
    path = sound_session(agent_dir)
    assert "blob:sha256:" in Path(path).read_text()
    assert check_session(path) == []


def test_check_never_writes(agent_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMUX_PANE", "%1")  # a terminal: a writable open would leave a breadcrumb
    path = Path(sound_session(agent_dir))
    shutil.rmtree(agent_dir / "terminal-sessions", ignore_errors=True)
    with path.open("ab") as f:
        f.write(b'{"type":"message","id":"torn')
    before = {
        p: (p.stat().st_mtime_ns, p.read_bytes()) for p in agent_dir.rglob("*") if p.is_file()
    }
    findings = check_session(str(path))
    assert kinds(findings) == [("torn_final_line", 8)]
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in agent_dir.rglob("*") if p.is_file()}
    assert after == before


def test_line_findings_carry_physical_line_numbers(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "s.jsonl",
        [header(), entry("a1", None), b"{not json", b"[1,2]", entry("a2", "a1"), b""],
        tail=b'{"type":"mess',
    )
    findings = check_session(str(path))
    assert kinds(findings) == [
        ("unparseable_line", 3),
        ("unparseable_line", 4),
        ("torn_final_line", 7),
    ]
    assert "{not json" in findings[0].message


def test_title_slot_line_is_not_a_problem(tmp_path: Path) -> None:
    slot = {"type": "title", "v": 1, "title": "t", "updatedAt": "2026-01-01T00:00:00.000Z"}
    unpadded = serialize_entry({**slot, "pad": ""})
    slot["pad"] = " " * (255 - len(unpadded))
    path = write_lines(tmp_path / "s.jsonl", [slot, header(), entry("a1", None)])
    assert check_session(str(path)) == []


def test_invalid_header_and_empty_file(tmp_path: Path) -> None:
    bad = write_lines(tmp_path / "bad.jsonl", [entry("a1", None), header()])
    assert kinds(check_session(str(bad))) == [("invalid_header", 1)]
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert kinds(check_session(str(empty))) == [("empty_file", None)]
    with pytest.raises(FileNotFoundError):
        check_session(str(tmp_path / "missing.jsonl"))


def test_tree_findings(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "s.jsonl",
        [
            header(),
            entry("a1", None),  # 2
            entry("a2", "a1"),  # 3
            entry("a2", "a1"),  # 4 duplicate id
            entry("a3", "gone"),  # 5 dangling parent
            entry("c1", "c2"),  # 6 cycle c1 <-> c2
            entry("c2", "c1"),  # 7
            {  # 8 compaction keeping an entry that is not on its path
                "type": "compaction",
                "id": "k1",
                "parentId": "a2",
                "timestamp": "2026-01-01T00:00:02.000Z",
                "summary": "s",
                "firstKeptEntryId": "a3",
                "tokensBefore": 1,
            },
            {  # 9 label on an unknown entry
                "type": "label",
                "id": "l1",
                "parentId": "k1",
                "timestamp": "2026-01-01T00:00:03.000Z",
                "targetId": "nope",
                "label": "x",
            },
            entry("s1", "s1"),  # 10 self-parented: a cycle of one
        ],
    )
    found = kinds(check_session(str(path)))
    assert found == [
        ("duplicate_id", 4),
        ("dangling_parent", 5),
        ("cycle", 6),
        ("compaction_off_path", 8),
        ("label_unknown_target", 9),
        ("cycle", 10),
    ]


def test_retain_none_compactions_pi_wrote_are_no_finding() -> None:
    """pi 1.6 writes "retain none" as a compaction whose firstKeptEntryId is its own
    id (the corpus pi 1.6.0 wrote has them): nothing to report."""
    corpus = FIXTURES / "pi16"
    retain_none = 0
    for path in sorted(corpus.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            value = json.loads(line)
            retain_none += value.get("firstKeptEntryId", 0) == value.get("id")
        assert check_session(str(path)) == [], path.name
    assert retain_none > 0


def test_compaction_keeping_an_ancestor_is_fine(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "s.jsonl",
        [
            header(),
            entry("a1", None),
            entry("a2", "a1"),
            {
                "type": "compaction",
                "id": "k1",
                "parentId": "a2",
                "timestamp": "2026-01-01T00:00:02.000Z",
                "summary": "s",
                "firstKeptEntryId": "a1",
                "tokensBefore": 1,
            },
        ],
    )
    assert check_session(str(path)) == []


def test_missing_blob_and_conflict_copy(agent_dir: Path) -> None:
    path = sound_session(agent_dir)
    blobs = agent_dir / "blobs"
    for blob in blobs.iterdir():
        blob.unlink()
    Path(path + ".conflict-1700000000000").write_text("x")
    found = check_session(path)
    assert [f.kind for f in found] == ["missing_blob", "conflict_file"]
    assert found[0].line == 5 and found[0].entry_id is not None


def test_explicit_blob_store_is_used(agent_dir: Path, tmp_path: Path) -> None:
    path = sound_session(agent_dir)
    assert [f.kind for f in check_session(path, blobs=BlobStore(str(tmp_path / "empty")))] == [
        "missing_blob"
    ]


def test_v1_fixture_is_sound(tmp_path: Path) -> None:
    fixture = real_file(LARGE_FIXTURE)
    copy = tmp_path / "big.jsonl"
    shutil.copyfile(fixture, copy)
    assert check_session(str(copy)) == []
    scanned = scan_session(str(copy))
    assert scanned.version == 1 and len(scanned.entries) == 1018
    assert copy.read_bytes() == fixture.read_bytes()


# ---------------------------------------------------------------------- repair


def damaged(tmp_path: Path) -> Path:
    return write_lines(
        tmp_path / "s.jsonl",
        [
            header(),
            entry("a1", None, "one"),  # 2
            b"garbage",  # 3
            entry("a2", "a1", "two"),  # 4
            entry("a2", "a1", "dup"),  # 5: a second a2
            entry("a3", "a2", "after dup"),  # 6: written after the duplicate, means it
            entry("a4", "gone", "orphan"),  # 7
            entry("c1", "c2"),  # 8
            entry("c2", "c1"),  # 9
        ],
        tail=b'{"type":"message","id":"zz',
    )


def test_repair_writes_a_copy_and_reports_every_change(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    original = path.read_bytes()
    report = repair_session(str(path), store_parts())
    assert path.read_bytes() == original  # never in place by default
    assert report.out_path == str(path) + ".repaired"
    assert [(c.kind, c.line) for c in report.changes] == [
        ("dropped_line", 3),
        ("renamed_duplicate_id", 5),
        ("cleared_dangling_parent", 7),
        ("broke_cycle", 8),
        ("dropped_torn_line", 10),
    ]
    assert report.remaining == []
    out = Path(report.out_path)
    assert check_session(str(out)) == []
    lines = out.read_bytes().split(b"\n")
    assert lines[-1] == b""
    original_lines = original.split(b"\n")
    # Untouched lines are copied byte for byte.
    assert lines[0] == original_lines[0]
    assert lines[1] == original_lines[1]
    assert lines[2] == original_lines[3]
    values = [json.loads(line) for line in lines[:-1]]
    renamed = report.changes[1].entry_id
    assert values[3]["id"] == renamed != "a2"
    assert values[4]["parentId"] == renamed  # a3 follows the duplicate it was written after
    assert values[5]["parentId"] is None
    assert values[6]["parentId"] is None and values[7]["parentId"] == "c1"
    with SessionManager.open(str(out), read_only=True) as sm:
        # The leaf is c2, whose loop was broken at c1 (now a root).
        assert [m["content"] for m in sm.build_session_context().messages] == ["x", "x"]
        sm.branch("a3")
        contents = [m["content"] for m in sm.build_session_context().messages]
    assert contents == ["one", "dup", "after dup"]


def test_repair_in_place_keeps_a_backup(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    original = path.read_bytes()
    report = repair_session(str(path), store_parts(), in_place=True)
    assert report.backup_path == str(path) + ".bak"
    assert Path(report.backup_path).read_bytes() == original
    assert report.out_path == str(path)
    assert check_session(str(path)) == []
    second = damaged(tmp_path)
    report2 = repair_session(str(second), store_parts(), in_place=True)
    assert report2.backup_path == str(path) + ".bak.1"


def test_repair_in_place_that_fails_halfway_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The repaired copy's write dies after its first chunk (a full disk): the file
    # keeps its bytes, its backup stays, and no temp file is left.
    from sessiontree.storage import _base as base_module

    path = damaged(tmp_path)
    original = path.read_bytes()
    real = base_module.write_whole

    def dying(storage: Any, target: str, chunks: Any) -> Any:
        def stream() -> Any:
            for n, chunk in enumerate(chunks):
                if n == 1:
                    raise OSError(28, "No space left on device")
                yield chunk

        return real(storage, target, stream())

    monkeypatch.setattr(base_module, "write_whole", dying)
    with pytest.raises(OSError):
        repair_session(str(path), store_parts(), in_place=True)
    monkeypatch.undo()
    assert path.read_bytes() == original
    assert Path(str(path) + ".bak").read_bytes() == original
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_repair_with_nothing_to_do_writes_nothing(agent_dir: Path) -> None:
    path = sound_session(agent_dir)
    before = sorted(os.listdir(os.path.dirname(path)))
    report = repair_session(path, store_parts())
    assert not report.changed and report.out_path is None
    assert sorted(os.listdir(os.path.dirname(path))) == before


def test_repair_dry_run_and_unterminated_line(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "s.jsonl", [header()], tail=serialize_entry(entry("a1", None)).encode()
    )
    report = repair_session(str(path), store_parts(), dry_run=True)
    assert [c.kind for c in report.changes] == ["terminated_last_line"]
    assert report.out_path is None and not Path(str(path) + ".repaired").exists()
    report = repair_session(str(path), store_parts(), str(tmp_path / "fixed.jsonl"))
    assert (tmp_path / "fixed.jsonl").read_bytes() == path.read_bytes() + b"\n"


def test_repair_refuses_a_file_without_header(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", [entry("a1", None)])
    with pytest.raises(InvalidSessionFileError):
        repair_session(str(path), store_parts())
    assert not Path(str(path) + ".repaired").exists()


def test_repair_in_place_refuses_a_live_writer(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    original = path.read_bytes()
    lock = FileLock(str(path))
    try:
        with pytest.raises(SessionLockError):
            repair_session(str(path), store_parts(), in_place=True)
    finally:
        lock.release()
    assert path.read_bytes() == original


def test_repair_keeps_unresolvable_problems_as_remaining(agent_dir: Path) -> None:
    path = sound_session(agent_dir)
    for blob in (agent_dir / "blobs").iterdir():
        blob.unlink()
    with open(path, "ab") as f:
        f.write(b"oops\n")
    report = repair_session(path, store_parts())
    assert [c.kind for c in report.changes] == ["dropped_line"]
    assert [f.kind for f in report.remaining] == ["missing_blob"]
    digest = hashlib.sha256(b"").hexdigest()
    assert digest not in report.remaining[0].message


def _image_blob(agent_dir: Path) -> Path:
    [blob] = [p for p in (agent_dir / "blobs").iterdir() if "." not in p.name]
    return blob


@pytest.mark.parametrize("how", ["same-size", "truncated"])
def test_a_damaged_blob_is_reported(agent_dir: Path, how: str) -> None:
    path = sound_session(agent_dir)
    blob = _image_blob(agent_dir)
    good = blob.read_bytes()
    with open(blob, "r+b") as f:  # in place, as a disk fault would
        if how == "same-size":
            f.write(bytes(b ^ 0xFF for b in good[:8]))
        else:
            f.truncate(len(good) // 2)
    found = check_session(path)
    assert [f.kind for f in found] == ["damaged_blob"]
    assert found[0].line == 5 and found[0].entry_id is not None
    assert blob.name[:12] in found[0].message
    assert [f.kind for f in repair_session(path, store_parts(), dry_run=True).remaining] == [
        "damaged_blob"
    ]
    BlobStore(str(agent_dir / "blobs")).put(good)  # the image's owner puts it back
    assert check_session(path) == []


class _TrustingBlobs:
    """A third-party store that hands out whatever bytes it holds, unchecked."""

    def __init__(self, held: dict[str, bytes]) -> None:
        self.held = held

    def put(self, data: bytes, mime_type: str | None = None) -> Any:
        raise AssertionError("check never writes")

    def get(self, hash: str) -> bytes | None:
        return self.held.get(hash)

    def has(self, hash: str) -> bool:
        return hash in self.held

    def sync(self) -> None:
        pass


def test_a_store_that_does_not_check_hashes_still_gets_damaged_blobs_reported(
    agent_dir: Path,
) -> None:
    path = sound_session(agent_dir)
    blob = _image_blob(agent_dir)
    store = _TrustingBlobs({blob.name: blob.read_bytes()})
    assert check_session(path, blobs=store) == []
    store.held[blob.name] = b"not the image"
    assert [f.kind for f in check_session(path, blobs=store)] == ["damaged_blob"]
    del store.held[blob.name]
    assert [f.kind for f in check_session(path, blobs=store)] == ["missing_blob"]


def test_verify_command_reports_a_damaged_blob_and_exits_1(agent_dir: Path) -> None:
    from typer.testing import CliRunner

    from sessiontree.cli import app

    path = sound_session(agent_dir)
    _image_blob(agent_dir).write_bytes(b"\0" * 3000)
    runner = CliRunner()
    result = runner.invoke(app, ["verify", path, "--json"])
    assert result.exit_code == 1, result.output
    [checked] = json.loads(result.stdout)["files"]
    assert [f["kind"] for f in checked["findings"]] == ["damaged_blob"]
    human = runner.invoke(app, ["verify", path])
    assert human.exit_code == 1 and "damaged_blob" in human.stdout


def test_verify_command_reports_a_damaged_blob_in_postgresql(
    agent_dir: Path, tmp_path: Path
) -> None:
    import psycopg
    from psycopg import sql
    from typer.testing import CliRunner

    from sessiontree.cli import app
    from sessiontree.storage.postgres import PostgresSessionStorage
    from tests.pg_support import fresh_schema

    with fresh_schema() as (server, schema):
        storage = PostgresSessionStorage(server, schema=schema)
        try:
            sm = SessionManager.create("/proj", storage=storage)
            image = os.urandom(3000)
            sm.append_message(
                {
                    "role": "user",
                    "content": [{"type": "image", "data": base64.b64encode(image).decode()}],
                    "timestamp": 1,
                }
            )
            sm.append_message(assistant("seen"))
            sm.close()
            path = sm.get_session_file()
            assert path is not None
        finally:
            storage.close()
        url = f"{server}{'&' if '?' in server else '?'}schema={schema}"
        runner = CliRunner()
        assert runner.invoke(app, ["--store", url, "verify", path]).exit_code == 0
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(
                sql.SQL("UPDATE {}.blobs SET data = %s").format(sql.Identifier(schema)),
                (b"\0" * 3000,),
            )
        result = runner.invoke(app, ["--store", url, "verify", path, "--json"])
        assert result.exit_code == 1, result.output
        [checked] = json.loads(result.stdout)["files"]
        assert [f["kind"] for f in checked["findings"]] == ["damaged_blob"]
        assert hashlib.sha256(image).hexdigest()[:12] in checked["findings"][0]["message"]


def test_repair_in_place_never_replaces_a_line_appended_while_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked before the repaired file was written; an append by another program while
    # it was being written went into the replaced inode.
    from sessiontree import SessionWriteConflictError
    from sessiontree.storage import _base as base_module  # replace_checked writes with it

    path = damaged(tmp_path)
    line = b'{"type":"custom","customType":"other","id":"ffff0000","parentId":null}\n'
    real = base_module.write_whole

    def meanwhile(storage: Any, target: str, chunks: Any) -> Any:
        def stream() -> Any:
            for n, chunk in enumerate(chunks):
                if n == 0 and ".bak" not in target:
                    with open(path, "ab") as f:
                        f.write(line)
                yield chunk

        return real(storage, target, stream())

    monkeypatch.setattr(base_module, "write_whole", meanwhile)
    with pytest.raises(SessionWriteConflictError):
        repair_session(str(path), store_parts(), in_place=True)
    assert path.read_bytes().endswith(line)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_torn_title_slot_is_found_and_repaired_at_every_byte(tmp_path: Path) -> None:
    """oh-my-pi rewrites its 256-byte title slot in place; a write torn at byte k leaves
    the new slot's first k bytes and the old one's rest. Where that still parses as JSON
    but is no valid slot (an empty `source`, say), every reader (oh-my-pi's too) takes
    the file for no session: it leaves every listing. `verify` names the slot, and
    `repair` drops it and keeps every entry (the header's title stands)."""
    from sessiontree.format import title_slot_line

    old = title_slot_line("old title é", "auto", "2026-01-01T00:00:00.000Z")
    new = title_slot_line("a new 😀 title", "user", "2026-01-02T00:00:00.000Z")
    body = write_lines(
        tmp_path / "body.jsonl",
        [{**header(), "title": "the header's"}, entry("a1", None), entry("a2", "a1", "y")],
    ).read_bytes()
    unreadable = 0
    for k in range(len(old) + 1):
        path = tmp_path / f"torn-{k}.jsonl"
        path.write_bytes(new[:k] + old[k:] + body)
        try:
            SessionManager.open(str(path), read_only=True).close()
            continue  # a slot (or a line) every reader reads or skips
        except InvalidSessionFileError:
            unreadable += 1
        assert kinds(check_session(str(path), conflicts=False)) == [("damaged_title_slot", 1)]
        report = repair_session(str(path), store_parts())
        assert [c.kind for c in report.changes] == ["dropped_title_slot"]
        assert report.out_path is not None
        assert Path(report.out_path).read_bytes() == body  # every byte after the slot
        with SessionManager.open(report.out_path, read_only=True) as sm:
            assert [e["id"] for e in sm.get_entries()] == ["a1", "a2"]
            assert sm.get_session_name() == "the header's"
    assert unreadable > 0  # the case exists
