"""Copies take their images along: a copy's refs resolve in its own agent dir.

Every operation that writes a copy of a session (fork, fork_from, create_branched_session,
persist_copy, extract, move_to, an import, `export -f jsonl -o`, import-files and
export-files) is run from agent dir A into agent dir B, with the source loaded whole and
index first; then A is deleted entirely, and the copy must verify clean in B and load
with every image. The images come in each form a session holds them: an image block
(written as a blob ref, read back as base64), a ref `put_blob` handed out, and a
snapcompact frame (a ref even in memory). Within one agent dir a copy neither adds nor
moves a blob, and a blob missing in the source is reported, naming the copy.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from sessiontree import BlobStore, SessionManager, SessionTreeError
from sessiontree.cli import app
from sessiontree.foreign import read_codex_session
from sessiontree.foreign.importer import import_session
from sessiontree.format import serialize_entry_bytes
from sessiontree.layout import get_default_session_dir, store_parts
from sessiontree.maintenance import check_session
from tests import foreign_support as fs
from tests.helpers import assistant

runner = CliRunner()

PICTURE = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 6
HANDED = b"\x89PNG\r\n\x1a\n" + bytes(range(255, -1, -1)) * 6
FRAME = b"\x89PNG\r\n\x1a\n" + b"frame" * 300
IMAGES = {"picture": PICTURE, "handed": HANDED, "frame": FRAME}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def add_images(sm: SessionManager) -> None:
    """Append one image of each form a session holds (see the module doc)."""
    picture = {"type": "image", "data": b64(PICTURE), "mimeType": "image/png"}
    content = [{"type": "text", "text": "see"}, picture]
    sm.append_message({"role": "user", "content": content, "timestamp": 1})
    sm.append_message(assistant("seen"))
    handed = {"type": "image", "data": sm.put_blob(HANDED).ref, "mimeType": "image/png"}
    sm.append_message({"role": "user", "content": [handed], "timestamp": 2})
    frame = {"data": sm.put_blob(FRAME).ref, "mimeType": "image/png"}  # a ref, even in memory
    sm.append_custom_entry("snapcompact", {"frames": [frame]})
    sm.append_message(assistant("done"))


def source_in(agent: Path) -> str:
    """A session with every form of image in agent dir `agent` (its own blobs/)."""
    (agent / "blobs").mkdir(parents=True, exist_ok=True)
    sm = SessionManager.create("/proj", str(agent / "sessions" / "--proj--"))
    add_images(sm)
    sm.close()
    path = sm.get_session_file()
    assert path is not None
    assert {sha(d) for d in IMAGES.values()} <= set(os.listdir(agent / "blobs"))
    return path


def held_images(entries: list[dict[str, Any]], blobs: Path) -> dict[str, bytes]:
    """The images a loaded session holds, by name: blocks as base64, frames as refs
    into `blobs` (an image whose ref does not resolve is left out)."""
    found: list[bytes] = []
    for entry in entries:
        if entry.get("customType") == "snapcompact":
            ref = entry["data"]["frames"][0]["data"]
            assert ref.startswith("blob:sha256:"), ref
            blob = blobs / ref.removeprefix("blob:sha256:")
            if blob.is_file():
                found.append(blob.read_bytes())
            continue
        content = entry.get("message", {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "image" and not block["data"].startswith("blob:"):
                found.append(base64.b64decode(block["data"], validate=True))
    return {name: data for name, data in IMAGES.items() if data in found}


def assert_resolves_in(copy: str, agent: Path) -> None:
    """The copy verifies clean in `agent` and loads, whole and index first, with every image."""
    assert copy.startswith(str(agent / "sessions")), copy
    assert check_session(copy, conflicts=False) == []
    for lazy in (False, True):
        with SessionManager.open(copy, read_only=True, lazy=lazy) as sm:
            assert held_images(sm.get_entries(), agent / "blobs") == IMAGES


def blob_files(agent: Path) -> dict[str, tuple[int, str]]:
    """The blobs in blobs/ of `agent` (not the live managers' pins in `.live/`):
    name -> (inode, content hash)."""
    blobs = agent / "blobs"
    if not blobs.is_dir():
        return {}
    return {p.name: (p.stat().st_ino, sha(p.read_bytes())) for p in blobs.iterdir() if p.is_file()}


# -- the operations, each writing a copy of the session at `src` into the session dir `dest`


def _fork(src: str, dest: Path, lazy: bool) -> str:
    with SessionManager.open(src, session_dir=str(dest), lazy=lazy, breadcrumb=False) as sm:
        forked = sm.fork()
    assert forked is not None
    return forked[1]


def _branched(src: str, dest: Path, lazy: bool) -> str:
    with SessionManager.open(src, session_dir=str(dest), lazy=lazy, breadcrumb=False) as sm:
        path = sm.create_branched_session(sm.get_leaf_id() or "")
    assert path is not None
    return path


def _persist_copy(src: str, dest: Path, lazy: bool) -> str:
    with SessionManager.open(src, read_only=True, lazy=lazy) as sm:
        copy = sm.persist_copy(str(dest), breadcrumb=False)
    with copy:
        return copy.get_session_file() or ""


def _extract(src: str, dest: Path, lazy: bool) -> str:
    with SessionManager.open(src, read_only=True, lazy=lazy) as sm:
        copy = sm.persist_copy(str(dest), breadcrumb=False, leaf_id=sm.get_leaf_id())
    with copy:
        return copy.get_session_file() or ""


def _move_to(src: str, dest: Path, lazy: bool) -> str:
    with SessionManager.open(src, lazy=lazy, breadcrumb=False) as sm:
        sm.move_to("/dest")  # into the configured agent dir, where `dest` is too
        return sm.get_session_file() or ""


COPIES: dict[str, Callable[[str, Path, bool], str]] = {
    "fork": _fork,
    "create_branched_session": _branched,
    "persist_copy": _persist_copy,
    "extract (persist_copy of one path)": _extract,
    "move_to": _move_to,
}


@pytest.fixture
def lazy_loads(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    """Make every load whose mode is not given index first (True) or whole (False)."""

    def use(lazy: bool) -> None:
        monkeypatch.setattr("sessiontree.session._loader.LAZY_LOAD_BYTES", 0 if lazy else 1 << 40)

    return use


@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
@pytest.mark.parametrize("operation", sorted(COPIES))
def test_a_copy_into_another_agent_dir_keeps_its_images_when_the_source_dir_is_gone(
    tmp_path: Path, agent_dir: Path, operation: str, lazy: bool
) -> None:
    a = tmp_path / "a"
    src = source_in(a)
    copy = COPIES[operation](src, Path(get_default_session_dir("/dest")), lazy)
    shutil.rmtree(a)
    assert_resolves_in(copy, agent_dir)


@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
def test_fork_from_another_agent_dir_keeps_its_images(
    tmp_path: Path, agent_dir: Path, lazy: bool, lazy_loads: Callable[[bool], None]
) -> None:
    a = tmp_path / "a"
    src = source_in(a)
    lazy_loads(lazy)  # fork_from opens its source by size
    with SessionManager.fork_from(src, "/dest") as forked:
        copy = forked.get_session_file() or ""
        shutil.rmtree(a)
        # The fork reads what it has not read yet from its own file and store.
        assert held_images(forked.get_entries(), agent_dir / "blobs") == IMAGES
        forked.append_message(assistant("after the fork"))
    assert_resolves_in(copy, agent_dir)


@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
def test_a_copy_lives_on_in_its_own_store_after_the_source_store_goes(
    tmp_path: Path, agent_dir: Path, lazy: bool
) -> None:
    # The manager of a copy reads its unread lines' images from the copy's store.
    a = tmp_path / "a"
    src = source_in(a)
    dest = get_default_session_dir("/dest")
    with SessionManager.open(src, session_dir=dest, lazy=lazy, breadcrumb=False) as sm:
        sm.fork()
        shutil.rmtree(a)
        assert held_images(sm.get_entries(), agent_dir / "blobs") == IMAGES


def test_an_import_into_another_agent_dir_takes_refs_from_the_reading_agent_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The foreign session is read while A is the agent dir (a put_blob goes there); the
    # import goes to B.
    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(a))
    parent, _ = fs.codex_rollouts(a / "codex")
    session = read_codex_session(str(parent))
    add_images(session.manager)
    done = import_session(session, store_parts(agent_dir=str(b)))
    shutil.rmtree(a)
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(b))
    assert done.path.startswith(str(b / "sessions"))
    assert check_session(done.path, conflicts=False) == []
    with SessionManager.open(done.path, read_only=True) as sm:
        found = held_images(sm.get_entries(), b / "blobs")
    assert found == IMAGES


@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
@pytest.mark.parametrize("operation", ["fork_from", *sorted(COPIES)])
def test_a_copy_within_one_agent_dir_neither_adds_nor_moves_a_blob(
    tmp_path: Path,
    agent_dir: Path,
    operation: str,
    lazy: bool,
    lazy_loads: Callable[[bool], None],
) -> None:
    src = source_in(agent_dir)
    before = {n: v for n, v in blob_files(agent_dir).items() if len(n) == 64}
    lazy_loads(lazy)
    if operation == "fork_from":
        with SessionManager.fork_from(src, "/dest") as forked:
            copy = forked.get_session_file() or ""
    else:
        copy = COPIES[operation](src, Path(get_default_session_dir("/dest")), lazy)
    after = blob_files(agent_dir)
    # The same blobs, never rewritten (the same inodes); a name added is at most an
    # image viewer's `<hash>.png`, a hard link to a blob held already.
    assert {n: v for n, v in after.items() if len(n) == 64} == before
    assert all(after[n][0] == before[n[:64]][0] for n in set(after) - set(before))
    assert [p for p in tmp_path.rglob("blobs") if p != agent_dir / "blobs"] == []
    assert_resolves_in(copy, agent_dir)


@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
@pytest.mark.parametrize("operation", ["fork_from", *sorted(COPIES)])
def test_a_copy_replaces_a_damaged_blob_of_its_own_store_with_the_sources_good_one(
    tmp_path: Path,
    agent_dir: Path,
    operation: str,
    lazy: bool,
    lazy_loads: Callable[[bool], None],
) -> None:
    """The copy's store holds a blob of the same name whose bytes are damaged (cut short
    by a writer that crashed, as omp's non-atomic writes can leave one): the copy takes
    the source's good bytes, so its images live on when the source dir goes."""
    a = tmp_path / "a"
    src = source_in(a)
    blobs = agent_dir / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for data in IMAGES.values():
        (blobs / sha(data)).write_bytes(data[: len(data) // 2])
    dest = Path(get_default_session_dir("/dest"))
    if operation == "fork_from":
        lazy_loads(lazy)
        with SessionManager.fork_from(src, "/dest") as forked:
            copy = forked.get_session_file() or ""
    else:
        copy = COPIES[operation](src, dest, lazy)
    shutil.rmtree(a)
    assert_resolves_in(copy, agent_dir)


@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
@pytest.mark.parametrize("missing", sorted(IMAGES))
def test_a_blob_missing_in_the_source_is_reported_by_the_copy(
    tmp_path: Path,
    agent_dir: Path,
    lazy: bool,
    missing: str,
    lazy_loads: Callable[[bool], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = tmp_path / "a"
    src = source_in(a)
    gone = sha(IMAGES[missing])
    (a / "blobs" / gone).unlink()
    for sidecar in (a / "blobs").glob(gone + ".*"):
        sidecar.unlink()
    lazy_loads(lazy)
    with caplog.at_level(logging.WARNING, logger="sessiontree"):
        with SessionManager.fork_from(src, "/dest") as forked:
            copy = forked.get_session_file() or ""
    reports = [r.getMessage() for r in caplog.records if r.getMessage().startswith(copy)]
    assert len(reports) == 1 and gone[:12] in reports[0], caplog.text
    shutil.rmtree(a)
    findings = check_session(copy, conflicts=False)
    assert [(f.kind, gone[:12] in f.message) for f in findings] == [("missing_blob", True)]
    with SessionManager.open(copy, read_only=True) as sm:
        found = held_images(sm.get_entries(), agent_dir / "blobs")
    assert found == {k: v for k, v in IMAGES.items() if k != missing}


# -- the command line, with --agent-dir B on a source path in A


def cli(*args: str) -> Result:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def cli_ok(*args: str) -> Result:
    result = cli(*args)
    assert result.exit_code == 0, (args, result.stdout, result.stderr, result.exception)
    return result


def _cli_fork(b: Path, src: str, out: Path) -> str:
    return cli_ok("--agent-dir", str(b), "fork", src).stdout.strip()


def _cli_extract(b: Path, src: str, out: Path) -> str:
    with SessionManager.open(src, read_only=True) as sm:
        leaf = sm.get_leaf_id() or ""
    return cli_ok("--agent-dir", str(b), "extract", src, "--leaf", leaf).stdout.strip()


def _cli_export(b: Path, src: str, out: Path) -> str:
    out.parent.mkdir(parents=True, exist_ok=True)
    cli_ok("--agent-dir", str(b), "export", src, "-f", "jsonl", "-o", str(out))
    return str(out)


CLI_COPIES: dict[str, Callable[[Path, str, Path], str]] = {
    "fork": _cli_fork,
    "extract": _cli_extract,
    "export -f jsonl -o": _cli_export,
}


@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
@pytest.mark.parametrize("command", sorted(CLI_COPIES))
def test_the_cli_copies_into_the_agent_dir_given_with_the_images(
    tmp_path: Path, command: str, lazy: bool, lazy_loads: Callable[[bool], None]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    src = source_in(a)
    lazy_loads(lazy)
    out = b / "sessions" / "--exports--" / "export.jsonl"
    copy = CLI_COPIES[command](b, src, out)
    shutil.rmtree(a)
    cli_ok("--agent-dir", str(b), "verify", copy)
    with SessionManager.open(copy, read_only=True) as sm:
        assert held_images(sm.get_entries(), b / "blobs") == IMAGES


def inline_images(path: Path) -> dict[str, bytes]:
    """The images a copy that stands alone holds as data, by name (frames included):
    read from its bytes alone, no blob store at hand. Fails on any blob ref."""
    data = path.read_bytes()
    assert b"blob:sha256:" not in data, data[:200]
    found: list[bytes] = []
    for line in data.splitlines()[1:]:
        entry = json.loads(line)
        if entry.get("customType") == "snapcompact":
            found += [base64.b64decode(f["data"], validate=True) for f in entry["data"]["frames"]]
            continue
        content = entry.get("message", {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "image":
                found.append(base64.b64decode(block["data"], validate=True))
    assert len(found) == len(IMAGES)
    return {name: image for name, image in IMAGES.items() if image in found}


def _export_outside(agent: Path, src: str, out: Path) -> Result:
    return cli("--agent-dir", str(agent), "export", src, "-f", "jsonl", "-o", str(out))


def _repair_outside(agent: Path, src: str, out: Path) -> Result:
    with open(src, "ab") as f:
        f.write(b'{"type":"message","id":"torn"')  # a torn last line: something to repair
    return cli("--agent-dir", str(agent), "repair", src, "-o", str(out))


OUTSIDE = {"export": _export_outside, "repair": _repair_outside}


@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
@pytest.mark.parametrize("command", sorted(OUTSIDE))
def test_a_copy_outside_every_agent_dir_holds_its_images_itself(
    tmp_path: Path, command: str, lazy: bool, lazy_loads: Callable[[bool], None]
) -> None:
    """`export -f jsonl -o` and `repair -o` to a path outside every agent dir: no gc
    reads it there, so the copy stands alone, every image (frames too) inline as the
    base64 it was before a writer externalized it; nothing goes into a blob store, and
    each line is JSON.stringify of what a reader of it holds."""
    a, b = tmp_path / "a", tmp_path / "b"
    src = source_in(a)
    b.mkdir()
    before = blob_files(a)
    lazy_loads(lazy)
    out = tmp_path / "elsewhere" / "copy.jsonl"
    out.parent.mkdir()
    result = OUTSIDE[command](b, src, out)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr.lower()
    assert blob_files(a) == before and blob_files(b) == {}
    shutil.rmtree(a)
    assert inline_images(out) == IMAGES
    cli_ok("--agent-dir", str(b), "verify", str(out))
    copied = out.read_bytes().splitlines()
    with SessionManager.open(str(out), read_only=True, lazy=lazy) as sm:
        entries = sm.get_entries()
    for line, entry in zip(copied[1:], entries, strict=True):
        assert line == serialize_entry_bytes(entry)


@pytest.mark.parametrize("command", ["export", "repair"])
def test_the_library_calls_behind_the_copies_outside_stand_alone_too(
    tmp_path: Path, agent_dir: Path, command: str
) -> None:
    """`repair_session` (and `Store.repair`), and `SessionManager.blob_carry(...,
    standalone=True)` with `export_jsonl`: the same rule without the CLI. Inside an
    agent dir the copy keeps its refs, carried into that dir's blobs/."""
    from sessiontree import Store
    from sessiontree.export import export_jsonl
    from sessiontree.maintenance import repair_session
    from sessiontree.storage import FileSessionStorage, find_blob_refs

    src = source_in(agent_dir)
    with open(src, "ab") as f:
        f.write(b'{"type":"message","id":"torn"')
    other = tmp_path / "other"  # an agent dir: its sessions/ beside a blobs/
    (other / "blobs").mkdir(parents=True)
    outside = tmp_path / "elsewhere" / "copy.jsonl"
    inside = other / "sessions" / "--copies--" / "copy.jsonl"
    for out in (outside, inside):
        out.parent.mkdir(parents=True)
        if command == "repair":
            repair_session(src, store_parts(agent_dir=str(agent_dir)), str(out))
        else:
            with SessionManager.open(src, read_only=True) as sm:
                data = export_jsonl(sm)
                carry = sm.blob_carry(str(out), FileSessionStorage(), standalone=True)
            FileSessionStorage().write_atomic(str(out), carry.chunks([data], str(out)))
            assert carry.report() == []
    assert inline_images(outside) == IMAGES
    # Inside, the refs stay (an export writes image blocks as memory holds them: data).
    refs = find_blob_refs(inside.read_bytes())
    assert sha(FRAME) in refs and refs <= set(blob_files(other))
    if command == "repair":
        again = tmp_path / "elsewhere" / "again.jsonl"
        with Store(agent_dir=str(agent_dir)) as store:
            store.repair(src, str(again))
        assert inline_images(again) == IMAGES


@pytest.mark.parametrize("command", sorted(OUTSIDE))
def test_a_copy_outside_keeps_the_ref_of_a_blob_it_cannot_read_and_says_so(
    tmp_path: Path, command: str
) -> None:
    """A blob missing at copy time, and one damaged in place a moment ago (bytes that do
    not hash to its name): the copy keeps those refs as they are, loses no line, holds
    the other images inline, and a warning names the copy and each blob."""
    a, b = tmp_path / "a", tmp_path / "b"
    src = source_in(a)
    b.mkdir()
    (a / "blobs" / sha(FRAME)).unlink()
    with open(a / "blobs" / sha(HANDED), "r+b") as f:
        f.write(b"\0" * 16)  # same size, other bytes
    out = tmp_path / "elsewhere" / "copy.jsonl"
    out.parent.mkdir()
    result = OUTSIDE[command](b, src, out)
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert "warning" in said.lower() and str(out) in said
    assert sha(FRAME)[:12] in said and sha(HANDED)[:12] in said
    data = out.read_bytes()
    assert f"blob:sha256:{sha(FRAME)}".encode() in data
    assert f"blob:sha256:{sha(HANDED)}".encode() in data
    assert b64(PICTURE).encode() in data
    with SessionManager.open(str(out), read_only=True) as sm:
        assert len(sm.get_entries()) == 5


@pytest.mark.parametrize("command", sorted(OUTSIDE))
def test_a_copy_outside_never_writes_over_its_source_or_through_a_link(
    tmp_path: Path, command: str
) -> None:
    """The same path as the source, and a symlink at the output naming another
    session (not the copy's to replace): refused, and nothing written."""
    a, b = tmp_path / "a", tmp_path / "b"
    src = source_in(a)
    b.mkdir()
    if command == "repair":
        with open(src, "ab") as f:
            f.write(b'{"type":"message","id":"torn"')
    other = source_in(tmp_path / "c")
    link = tmp_path / "elsewhere" / "link.jsonl"
    link.parent.mkdir()
    link.symlink_to(other)
    kept = {p: Path(p).read_bytes() for p in (src, other)}
    for target in (src, str(link)):
        args = ("export", src, "-f", "jsonl", "-o", target)
        if command == "repair":
            args = ("repair", src, "-o", target)
        result = cli("--agent-dir", str(b), *args)
        assert result.exit_code == 1, (target, result.output)
    assert {p: Path(p).read_bytes() for p in kept} == kept and link.is_symlink()
    assert sorted(os.listdir(link.parent)) == ["link.jsonl"]


@pytest.mark.parametrize("command", sorted(OUTSIDE))
def test_a_copy_outside_whose_write_fails_halfway_leaves_nothing(
    tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while the copy is written: the command fails, no file (nor temp
    file) is left where it was going, and the source is as it was."""
    a, b = tmp_path / "a", tmp_path / "b"
    src = source_in(a)
    b.mkdir()
    out = tmp_path / "elsewhere" / "copy.jsonl"
    out.parent.mkdir()
    OUTSIDE[command](b, src, tmp_path / "elsewhere" / "first.jsonl")  # (repair: tears it)
    os.unlink(tmp_path / "elsewhere" / "first.jsonl")
    before = {p: p.read_bytes() for p in a.rglob("*") if p.is_file()}
    real_write = os.write
    written = [0]

    def filling(fd: int, data: Any) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(out.parent)):
            if written[0] >= 2000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n = real_write(fd, bytes(data)[:1000])  # short writes: the rest follows
            written[0] += n
            return n
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", filling)
    if command == "repair":
        result = cli("--agent-dir", str(b), "repair", src, "-o", str(out))
    else:
        result = OUTSIDE[command](b, src, out)
    monkeypatch.undo()
    assert result.exit_code != 0 and "No space left" in result.output, result.output
    assert written[0] >= 2000  # the copy had begun
    assert os.listdir(out.parent) == []
    assert {p: p.read_bytes() for p in a.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("command", ["export", "repair"])
def test_a_copy_outside_every_agent_dir_keeps_its_images_through_gc(
    agent_dir: Path, tmp_path: Path, command: str
) -> None:
    import json
    import subprocess
    import sys

    faketime = shutil.which("faketime")
    if faketime is None:
        pytest.skip("faketime is not installed (apt-get install faketime; scripts/test does)")
    src = source_in(agent_dir)
    with SessionManager.create("/other") as other:  # gc deletes nothing without a session
        other.append_message({"role": "user", "content": "x", "timestamp": 1})
        other.append_message(assistant("y"))
    out = tmp_path / "elsewhere" / "copy.jsonl"
    out.parent.mkdir()
    if command == "export":
        cli_ok("export", src, "-f", "jsonl", "-o", str(out))
    else:
        with open(src, "ab") as f:
            f.write(b'{"type":"message","id":"torn"')  # something to repair
        cli_ok("repair", src, "-o", str(out))
    os.unlink(src)  # `sessiontree rm`, or the agent's own cleanup
    cli = os.path.join(os.path.dirname(sys.executable), "sessiontree")
    done = subprocess.run(
        [faketime, "-f", "+1h", cli, "gc", "--delete", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # The copy holds its images itself: gc may take their blobs, none of the copy's.
    assert set(json.loads(done.stdout)["deleted"]) <= {sha(d) for d in IMAGES.values()}
    cli_ok("verify", str(out))
    assert inline_images(out) == IMAGES


def test_the_cli_import_into_the_agent_dir_given_keeps_its_images(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    parent, _ = fs.codex_rollouts(a / "codex")
    result = cli_ok("--agent-dir", str(b), "import", str(parent), "--from", "codex", "--json")
    path = json.loads(result.stdout)["path"]
    shutil.rmtree(a)
    cli_ok("--agent-dir", str(b), "verify", path)
    with SessionManager.open(path, read_only=True) as sm:
        blocks = [
            block
            for entry in sm.get_entries()
            for block in (entry.get("message", {}).get("content") or [])
            if isinstance(block, dict) and block.get("type") == "image"
        ]
    assert [block["data"] for block in blocks] == [fs.PNG]


def test_the_cli_reports_a_blob_the_source_lacks(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    src = source_in(a)
    gone = sha(FRAME)
    (a / "blobs" / gone).unlink()
    result = cli_ok("--agent-dir", str(b), "fork", src)
    copy = result.stdout.strip()
    assert "warning" in result.stderr and copy in result.stderr and gone[:12] in result.stderr


def test_the_store_transfers_list_the_blobs_that_neither_store_holds(tmp_path: Path) -> None:
    from tests.pg_support import fresh_schema

    a, b = tmp_path / "a", tmp_path / "b"
    kept = source_in(a)
    with SessionManager.create("/proj", str(a / "sessions" / "--proj--")) as sm:
        image = {"type": "image", "data": b64(b"lost" * 400), "mimeType": "image/png"}
        sm.append_message({"role": "user", "content": [image], "timestamp": 3})
        sm.append_message(assistant("seen"))
        lost = sm.get_session_file() or ""
    gone = sha(b"lost" * 400)
    (a / "blobs" / gone).unlink()
    with fresh_schema() as (server, schema):
        url = f"{server}{'&' if '?' in server else '?'}schema={schema}"
        db = ("--agent-dir", str(a), "--store", url)
        result = cli(*db, "import-files", "--json")
        assert result.exit_code == 1 and "missingBlobs" in result.stderr, result.stderr
        assert json.loads(result.stdout)["missingBlobs"] == [{"path": lost, "blob": gone}]
        shutil.rmtree(a)
        checked = json.loads(cli(*db, "verify", "--all", "--json").stdout)
        assert {f["path"]: [g["kind"] for g in f["findings"]] for f in checked["files"]} == {
            kept: [],
            lost: ["missing_blob"],
        }
        result = cli(*db, "export-files", str(b), "--json")
        assert result.exit_code == 1
        moved = lost.replace(str(a), str(b))
        assert json.loads(result.stdout)["missingBlobs"] == [{"path": moved, "blob": gone}]
        text = cli(*db, "export-files", str(b)).stderr
        assert f"{moved} refers to blob {gone}" in " ".join(text.split())
    copy = kept.replace(str(a), str(b))
    cli_ok("--agent-dir", str(b), "verify", copy)
    with SessionManager.open(copy, read_only=True) as sm:
        assert held_images(sm.get_entries(), b / "blobs") == IMAGES


@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
def test_a_copy_whose_images_cannot_be_stored_leaves_nothing_behind(
    tmp_path: Path,
    agent_dir: Path,
    lazy: bool,
    lazy_loads: Callable[[bool], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = tmp_path / "a"
    src = source_in(a)
    before = {p: p.read_bytes() for p in a.rglob("*") if p.is_file()}
    real_put = BlobStore.put

    def full(self: BlobStore, data: bytes, mime_type: str | None = None) -> Any:
        if self.dir.startswith(str(agent_dir)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_put(self, data, mime_type)

    monkeypatch.setattr(BlobStore, "put", full)
    lazy_loads(lazy)
    with pytest.raises(SessionTreeError) as info:
        SessionManager.fork_from(src, "/dest")
    assert "No space left" in str(info.value)
    assert not [p for p in (agent_dir / "sessions").rglob("*") if p.is_file()]
    assert {p: p.read_bytes() for p in a.rglob("*") if p.is_file()} == before


def test_an_export_refused_over_a_session_stores_no_image(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    src = source_in(a)
    there = source_in(b)
    blobs = sorted(os.listdir(b / "blobs"))
    result = cli("--agent-dir", str(b), "export", src, "-f", "jsonl", "-o", there)
    assert result.exit_code == 1 and "is a session file" in result.stderr
    (b / "blobs" / sha(FRAME)).unlink()
    result = cli("--agent-dir", str(b), "export", src, "-f", "jsonl", "-o", there)
    assert result.exit_code == 1
    assert sorted(os.listdir(b / "blobs")) == [n for n in blobs if n != sha(FRAME)]


def test_a_repaired_copy_in_another_agent_dir_keeps_its_images(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    src = source_in(a)
    with open(src, "ab") as f:
        f.write(b'{"type":"message","id":"torn"')  # a torn last line: something to repair
    out = b / "sessions" / "--repaired--" / "repaired.jsonl"
    out.parent.mkdir(parents=True)
    cli_ok("--agent-dir", str(b), "repair", src, "-o", str(out))
    shutil.rmtree(a)
    cli_ok("--agent-dir", str(b), "verify", str(out))
    with SessionManager.open(str(out), read_only=True) as sm:
        assert held_images(sm.get_entries(), b / "blobs") == IMAGES
