"""A session loaded index first behaves exactly as one loaded whole.

Random sessions (every entry kind, branches, labels, names, compactions, images,
custom entries whose payload comes before their id, unknown kinds) are written to
a file, then opened twice: whole (`lazy=False`) and index first (`lazy=True`).
The two must agree on the tree, the labels, the name, usage, every entry, the
context at every leaf (asked in random order, so the lazy one is compared while
partly read), and the bytes they write on a rewrite. Then the cases only the lazy
load has: lines never read are copied byte for byte; a file replaced or deleted
behind the reader still reads; a line found damaged when read is dropped as the
full loader drops it; a line whose key is repeated is indexed by what it holds;
a rescue copy after an in-place change keeps every line still intact.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree import BlobStore, SessionManager, SessionWriteConflictError
from sessiontree.format import SessionTreeNode, loads_object, serialize_entry_bytes
from sessiontree.session import LAZY_LOAD_BYTES, EntryIndex
from tests.conftest import examples
from tests.helpers import assistant, last_entry_id, user

IMAGE = "iVBORw0KGgo" + "B" * 1500

ops = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.text(max_size=4)),
        st.tuples(st.just("assistant"), st.text(max_size=4)),
        st.tuples(st.just("anonymous"), st.text(max_size=4)),  # assistant without a model
        st.tuples(st.just("image"), st.integers(0, 9)),
        st.tuples(st.just("branch"), st.integers(0, 60)),
        st.tuples(st.just("reset"), st.none()),
        st.tuples(st.just("label"), st.integers(0, 60)),
        st.tuples(st.just("compact"), st.integers(0, 60)),
        st.tuples(st.just("summary"), st.integers(-1, 60)),
        st.tuples(st.just("custom_message"), st.text(max_size=4)),
        st.tuples(st.just("custom"), st.text(max_size=4)),
        st.tuples(st.just("model"), st.sampled_from(["default", "smol", None])),
        st.tuples(st.just("thinking"), st.sampled_from(["low", "high", None])),
        st.tuples(st.just("ttsr"), st.lists(st.sampled_from("abc"), max_size=2)),
        st.tuples(st.just("mode"), st.sampled_from(["plan", "none"])),
        st.tuples(st.just("name"), st.text(max_size=4)),
        st.tuples(st.just("init"), st.text(max_size=4)),
        st.tuples(st.just("unknown"), st.text(max_size=4)),
    ),
    min_size=1,
    max_size=45,
)


def build(script: list[tuple[str, Any]]) -> SessionManager:
    """An in-memory session from a script of operations (see `ops`)."""
    sm = SessionManager.in_memory("/proj")
    ids: list[str] = []
    for op, arg in script:
        if op == "user":
            ids.append(sm.append_message(user(arg)))
        elif op == "assistant":
            ids.append(sm.append_message(assistant(arg)))
        elif op == "anonymous":
            ids.append(sm.append_message({"role": "assistant", "content": arg, "timestamp": 1}))
        elif op == "image":
            content = [{"type": "image", "data": IMAGE + str(arg), "mimeType": "image/png"}]
            ids.append(sm.append_message({"role": "user", "content": content, "timestamp": 2}))
        elif op == "branch" and ids:
            sm.branch(ids[arg % len(ids)])
        elif op == "reset":
            sm.reset_leaf()
        elif op == "label" and ids:
            label = None if arg % 3 == 0 else f"l{arg}"
            ids.append(sm.append_label_change(ids[arg % len(ids)], label))
        elif op == "compact" and ids:
            path = sm.get_branch()
            # On the path (an appended compaction may keep only that), else keep nothing.
            target = path[arg % len(path)]["id"] if path else None
            ids.append(sm.append_compaction(f"c{arg}", f"short {arg}", target, arg))
        elif op == "summary":
            target = ids[arg % len(ids)] if ids and arg >= 0 else None
            ids.append(sm.branch_with_summary(target, f"s{arg}"))
        elif op == "custom_message":
            ids.append(sm.append_custom_message_entry("t", arg, True, {"d": arg}))
        elif op == "custom":
            ids.append(sm.append_custom_entry("t", {"state": arg}))
        elif op == "model":
            ids.append(sm.append_model_change(f"p/{arg}", arg))
        elif op == "thinking":
            ids.append(sm.append_thinking_level_change(arg))
        elif op == "ttsr":
            ids.append(sm.append_ttsr_injection(arg))
        elif op == "mode":
            ids.append(sm.append_mode_change(arg, {"n": len(ids)}))
        elif op == "name":
            entry = {"type": "session_info", "id": sm._index.new_id(), "parentId": sm.get_leaf_id()}
            entry.update(timestamp="2026-01-01T00:00:00.000Z", name=arg)
            sm._append(entry)
            ids.append(entry["id"])
        elif op == "init":
            ids.append(sm.append_session_init("system " + arg, arg, [{"name": "bash"}]))
        elif op == "unknown":
            entry = {"type": "future_kind", "id": sm._index.new_id(), "parentId": sm.get_leaf_id()}
            entry.update(timestamp="2026-01-01T00:00:00.000Z", payload=arg * 50)
            sm._append(entry)
            ids.append(entry["id"])
    return sm


def write(sm: SessionManager, directory: Path) -> Path:
    """`sm` as a session file in `directory` (images in `directory/../blobs`)."""
    copy_ = sm.persist_copy(str(directory), breadcrumb=False, blob_store=blobs_of(directory))
    path = copy_.get_session_file()
    assert path is not None
    copy_.close()
    return Path(path)


def blobs_of(directory: Path) -> BlobStore:
    return BlobStore(str(directory.parent / "blobs"))


def open_both(path: Path, **kw: Any) -> tuple[SessionManager, SessionManager]:
    blobs = blobs_of(path.parent)
    full = SessionManager.open(str(path), lazy=False, blob_store=blobs, breadcrumb=False, **kw)
    lazy = SessionManager.open(str(path), lazy=True, blob_store=blobs, breadcrumb=False, **kw)
    return full, lazy


def writable_pair(
    tmp_path_factory: Any, script: Any
) -> tuple[Path, Path, SessionManager, SessionManager]:
    """The session of `script` in two copies, opened writable: whole and index first."""
    root = tmp_path_factory.mktemp("s")
    (root / "a").mkdir()
    (root / "b").mkdir()
    path_a = write(build(script), root / "a")
    path_b = root / "b" / path_a.name
    shutil.copyfile(path_a, path_b)
    blobs = blobs_of(root / "a")
    full = SessionManager.open(str(path_a), lazy=False, blob_store=blobs, breadcrumb=False)
    lazy = SessionManager.open(str(path_b), lazy=True, blob_store=blobs, breadcrumb=False)
    return path_a, path_b, full, lazy


def shape(nodes: list[SessionTreeNode]) -> list[Any]:
    out: list[Any] = []
    stack = [(n, out) for n in reversed(nodes)]
    while stack:
        node, into = stack.pop()
        children: list[Any] = []
        into.append((node.entry, node.label, children))
        stack.extend((c, children) for c in reversed(node.children))
    return out


def is_lazy(sm: SessionManager) -> bool:
    return sm._index._source is not None


@pytest.fixture
def work(tmp_path: Path) -> Path:
    directory = tmp_path / "sessions"
    directory.mkdir()
    return directory


# ----------------------------------------------------------------------------- properties


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=ops, order=st.randoms(use_true_random=False))
def test_lazy_and_full_loads_agree(tmp_path_factory: Any, script: Any, order: Any) -> None:
    directory = tmp_path_factory.mktemp("s") / "sessions"
    directory.mkdir()
    path = write(build(script), directory)
    full, lazy = open_both(path, read_only=True)
    assert is_lazy(lazy) and not is_lazy(full)
    # Asked before anything is read: what the index alone knows.
    assert lazy.get_leaf_id() == full.get_leaf_id()
    assert lazy.get_labels() == full.get_labels()
    assert lazy.get_session_name() == full.get_session_name()
    assert lazy.get_usage_statistics() == full.get_usage_statistics()
    assert lazy.build_session_context() == full.build_session_context()
    assert lazy.get_injected_ttsr_rules() == full.get_injected_ttsr_rules()
    ids = [e["id"] for e in full.get_entries()]
    # Every leaf, in random order: the lazy session is compared while partly read.
    leaves = [*ids, None]
    order.shuffle(leaves)
    for leaf in leaves:
        if leaf is None:
            full.reset_leaf()
            lazy.reset_leaf()
        else:
            full.branch(leaf)
            lazy.branch(leaf)
            assert lazy.get_branch() == full.get_branch()
            assert lazy.get_children(leaf) == full.get_children(leaf)
        context = lazy.build_session_context()
        assert context == full.build_session_context()
        assert list(context.models) == list(full.build_session_context().models)
    assert lazy.get_children(None) == full.get_children(None)
    assert shape(lazy.get_tree()) == shape(full.get_tree())
    assert lazy.get_entries() == full.get_entries()


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=ops, reads=st.lists(st.integers(0, 100), max_size=5), name=st.text(min_size=1))
def test_rewrites_write_the_same_bytes(
    tmp_path_factory: Any, script: Any, reads: list[int], name: str
) -> None:
    path_a, path_b, full, lazy = writable_pair(tmp_path_factory, script)
    ids = [e["id"] for e in full.get_entries()]
    for r in reads if ids else []:  # some entries read, the others copied as they are
        lazy.get_entry(ids[r % len(ids)])
    renamed = full.set_session_name(name, "user")
    assert lazy.set_session_name(name, "user") == renamed
    assert path_a.read_bytes() == path_b.read_bytes()
    # And after the rewrite the lazy session reads its lines from the new file.
    assert lazy.get_entries() == full.get_entries()
    full.close()
    lazy.close()
    again = SessionManager.open(
        str(path_b), lazy=True, blob_store=blobs_of(path_a.parent), read_only=True
    )
    assert again.get_entries() == lazy.get_entries()


garbage = st.one_of(
    st.binary(max_size=40).filter(lambda b: b"\n" not in b),
    st.just(b'{"type":"message","id":"dead0001","parentId":null,"timestamp":"x","message":}'),
    st.just(b'{"type":"message","id":"dead0002","parentId":null,"timestamp":"x"'),
    st.just(b"[1,2]"),
    st.just(b"   "),
)


@settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=ops, junk=st.lists(st.tuples(st.integers(0, 60), garbage), max_size=6))
def test_damaged_files_read_as_the_full_loader_reads_them(
    tmp_path_factory: Any, script: Any, junk: list[tuple[int, bytes]]
) -> None:
    directory = tmp_path_factory.mktemp("s") / "sessions"
    directory.mkdir()
    path = write(build(script), directory)
    lines = path.read_bytes().split(b"\n")
    for at, line in junk:
        lines.insert(1 + at % len(lines), line)
    path.write_bytes(b"\n".join(lines))
    full, lazy = open_both(path, read_only=True)
    assert lazy.get_leaf_id() == full.get_leaf_id()  # a damaged last line is not the leaf
    assert lazy.get_entries() == full.get_entries()
    assert shape(lazy.get_tree()) == shape(full.get_tree())
    for entry in full.get_entries():
        full.branch(entry["id"])
        lazy.branch(entry["id"])
        assert lazy.build_session_context() == full.build_session_context()


# ----------------------------------------------------------------------------- cases


def big_session(work: Path, turns: int = 30) -> Path:
    sm = SessionManager.in_memory("/proj")
    for i in range(turns):
        sm.append_message(user(f"question {i}"))
        sm.append_message(assistant(f"answer {i}"))
    return write(sm, work)


def test_unread_lines_are_copied_byte_for_byte(work: Path) -> None:
    path = big_session(work, 5)
    lines = path.read_bytes().split(b"\n")
    # Another writer escaped its non-ASCII text: a line we never read keeps it so.
    odd = (
        b'{"type":"message","id":"e5c4a7e1","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z",'
    )
    odd += b'"message":{"role":"user","content":"caf\\u00e9","timestamp":1}}'
    lines.insert(3, odd)
    path.write_bytes(b"\n".join(lines))
    sm = SessionManager.open(str(path), lazy=True, breadcrumb=False)
    assert sm.set_session_name("renamed")
    assert odd in path.read_bytes().split(b"\n")
    assert sm.get_entry("e5c4a7e1")["message"]["content"] == "café"  # type: ignore[index]
    sm.close()


def test_a_replaced_or_deleted_file_still_reads(work: Path) -> None:
    path = big_session(work)
    sm = SessionManager.open(str(path), lazy=True, read_only=True)
    want = SessionManager.open(str(path), lazy=False, read_only=True).get_entries()
    os.unlink(path)
    path.write_bytes(b"something else entirely\n")
    assert sm.get_entries() == want


def test_a_writer_whose_file_was_deleted_recreates_it_whole(work: Path) -> None:
    path = big_session(work)
    want = path.read_bytes()
    sm = SessionManager.open(str(path), lazy=True, breadcrumb=False)
    os.unlink(path)
    sm.flush()  # answered: recreated from the session, unread lines from the old inode
    assert path.read_bytes() == want
    leaf = sm.append_message(user("after"))
    sm.close()
    again = SessionManager.open(str(path), read_only=True)
    assert again.get_leaf_id() == leaf and len(again.get_entries()) == 61


def test_a_line_damaged_further_in_is_dropped_when_read(
    work: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = big_session(work, 3)
    lines = path.read_bytes().split(b"\n")
    victim = lines[2]  # the first answer: its child is the second question
    damaged = victim[:-20] + b"@" * 19 + b"}"  # the prefix and the closing brace intact
    lines[2] = damaged
    path.write_bytes(b"\n".join(lines))
    full, lazy = open_both(path, read_only=True)
    assert len(lazy._index) == 6  # indexed by its prefix
    with caplog.at_level(logging.WARNING, "sessiontree"):
        assert lazy.get_entries() == full.get_entries()
    assert "does not parse" in caplog.text
    assert shape(lazy.get_tree()) == shape(full.get_tree())
    assert lazy.build_session_context() == full.build_session_context()


def test_a_repeated_key_is_indexed_by_what_the_line_holds(work: Path) -> None:
    path = big_session(work, 2)
    lines = path.read_bytes().split(b"\n")
    # A writer that repeats "parentId": JSON.parse keeps the last one, so do we.
    first = lines[1]
    lines[3] = lines[3][:-1] + b',"parentId":null}'
    assert first
    path.write_bytes(b"\n".join(lines))
    full, lazy = open_both(path, read_only=True)
    assert lazy.build_session_context() == full.build_session_context()
    assert shape(lazy.get_tree()) == shape(full.get_tree())
    assert len(lazy.get_tree()) == 2


def test_blob_refs_are_resolved_only_where_read(work: Path) -> None:
    sm = SessionManager.in_memory("/proj")
    content = [{"type": "image", "data": IMAGE, "mimeType": "image/png"}]
    picture = sm.append_message({"role": "user", "content": content, "timestamp": 1})
    sm.append_message(assistant())
    path = write(sm, work)
    assert b"blob:sha256:" in path.read_bytes()
    lazy = SessionManager.open(str(path), lazy=True, read_only=True, blob_store=blobs_of(work))
    assert lazy._index._entries[0] is None  # not read, not resolved
    full = SessionManager.open(str(path), lazy=False, read_only=True, blob_store=blobs_of(work))
    got = lazy.get_entry(picture)
    assert got == full.get_entry(picture)
    assert not got["message"]["content"][0]["data"].startswith("blob:")  # type: ignore[index]


@pytest.mark.parametrize("read_only", [True, False])
def test_a_context_read_in_runs_resolves_the_refs_of_each_line_that_has_them(
    work: Path, read_only: bool
) -> None:
    # Lines with images between lines without, and a line longer than one read of
    # adjacent lines: each line's refs are resolved, and only where its bytes are
    # (read-only: searched for in the bytes read; writable: where the pass found them).
    sm = SessionManager.in_memory("/proj")
    pictures = []
    for i in range(6):
        content = [{"type": "image", "data": IMAGE[:-1] + "ABCDEF"[i], "mimeType": "image/png"}]
        pictures.append(sm.append_message({"role": "user", "content": content, "timestamp": i}))
        sm.append_message(assistant("x" * (3 << 20) if i == 3 else f"reply {i}"))
        sm.append_message(user(f"words, then blob:sha256: not a ref {i}"))
    path = write(sm, work)
    assert path.read_bytes().count(b'"blob:sha256:') == 6
    blobs = blobs_of(work)
    lazy = SessionManager.open(
        str(path), lazy=True, read_only=read_only, blob_store=blobs, breadcrumb=False
    )
    assert lazy._index._source is not None
    assert (lazy._index._source.marks is None) == read_only
    full = SessionManager.open(str(path), lazy=False, read_only=True, blob_store=blobs)
    assert lazy.build_session_context() == full.build_session_context()
    for picture in pictures:
        got = lazy.get_entry(picture)
        assert got == full.get_entry(picture)
        assert not got["message"]["content"][0]["data"].startswith("blob:")  # type: ignore[index]


def test_a_rescue_after_an_in_place_cut_keeps_every_intact_line(work: Path) -> None:
    path = big_session(work, 10)
    sm = SessionManager.open(str(path), lazy=True, breadcrumb=False)
    held = {entry_id for entry_id, entry in sm._index.read_so_far() if entry is not None}
    assert len(held) == 1  # the last entry: read at once, for the leaf
    data = path.read_bytes()
    cut = len(data) // 2
    while data[cut - 1 : cut] in (b"}", b"\n"):
        cut -= 1  # in the middle of a line
    keep = data[:cut]
    with open(path, "r+b") as f:  # another program cuts the file in place
        f.truncate(len(keep))
    with pytest.raises(SessionWriteConflictError) as info:
        sm.append_message(user("x"))
    saved = info.value.saved_to
    assert saved is not None
    rescued = SessionManager.open(saved, read_only=True, lazy=False).get_entries()
    intact = {line for line in keep.split(b"\n")[1:] if line.endswith(b"}")}
    # Every intact line, and what the session holds in memory (written from there).
    want = [
        line
        for line in data.split(b"\n")[1:]
        if line in intact or (line and orjson.loads(line)["id"] in held)
    ]
    assert [serialize_entry_bytes(e) for e in rescued] == want


def test_fork_and_move_of_a_lazy_session(work: Path) -> None:
    path = big_session(work)
    want = SessionManager.open(str(path), read_only=True, lazy=False).get_entries()
    sm = SessionManager.open(str(path), lazy=True, breadcrumb=False)
    forked = sm.fork()
    assert forked is not None and is_lazy(sm)
    assert Path(forked[1]).read_bytes().split(b"\n")[1:] == path.read_bytes().split(b"\n")[1:]
    sm.move_to("/elsewhere")
    moved = sm.get_session_file()
    assert moved is not None and "--elsewhere--" in moved
    assert is_lazy(sm)
    assert sm.get_entries() == want
    sm.close()
    assert SessionManager.open(moved, read_only=True).get_entries() == want


def test_edits_of_read_entries_are_written_the_rest_copied(work: Path) -> None:
    path = big_session(work)
    sm = SessionManager.open(str(path), lazy=True, breadcrumb=False)
    leaf = sm.get_leaf_entry()
    assert leaf is not None
    leaf["message"]["content"][0]["text"] = "edited"
    sm.rewrite_entries()
    sm.close()
    full = SessionManager.open(str(path), read_only=True, lazy=False)
    entries = full.get_entries()
    assert entries[-1]["message"]["content"][0]["text"] == "edited"
    assert len(entries) == 60


def test_small_files_load_whole_by_default(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = big_session(work, 3)
    assert not is_lazy(SessionManager.open(str(path), read_only=True))
    monkeypatch.setattr("sessiontree.session._loader.LAZY_LOAD_BYTES", 0)
    assert is_lazy(SessionManager.open(str(path), read_only=True))


def test_old_versions_load_whole_and_migrate(work: Path) -> None:
    path = work / "old.jsonl"
    header = {"type": "session", "id": "old", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"}
    body = {"type": "message", "timestamp": "2026-01-01T00:00:00.000Z", "message": user()}
    path.write_bytes(serialize_entry_bytes(header) + b"\n" + serialize_entry_bytes(body) + b"\n")
    sm = SessionManager.open(str(path), lazy=True, breadcrumb=False)
    assert not is_lazy(sm)
    assert sm.get_header()["version"] == 3  # type: ignore[index]
    sm.close()


def test_memory_storage_loads_whole(work: Path) -> None:
    from sessiontree import MemorySessionStorage

    storage = MemorySessionStorage()
    sm = SessionManager.create("/proj", "/s", storage=storage)
    sm.append_message(user())
    sm.append_message(assistant())
    path = sm.get_session_file()
    assert path is not None
    sm.close()
    again = SessionManager.open(path, storage=storage, lazy=True, read_only=True)
    assert not is_lazy(again) and len(again.get_entries()) == 2


def test_get_entries_copy_is_independent(work: Path) -> None:
    path = big_session(work, 2)
    sm = SessionManager.open(str(path), lazy=True, read_only=True)
    first = sm.get_entries()
    first.append({"type": "bogus"})
    assert len(sm.get_entries()) == 4
    assert copy.deepcopy(sm.get_entries()) == sm.get_entries()


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    script=ops,
    chunk=st.sampled_from([1, 2, 3, 7, 64, 4096]),
    threaded=st.booleans(),
    before=st.sampled_from([b"", b"not json\n", b"\n  \n", b"[1]\n"]),
    bom=st.booleans(),
    tail=st.sampled_from([b"", b"\n", b"  ", b'{"type":"custom","id":"t0r1","parentId":null']),
    crlf=st.booleans(),
)
def test_the_index_pass_reads_every_chunking_as_the_full_loader(
    tmp_path_factory: Any,
    script: Any,
    chunk: int,
    bom: bool,
    tail: bytes,
    crlf: bool,
    threaded: bool,
    before: bytes,
) -> None:
    """Lines across chunk boundaries (read inline or by the reader thread), a leading
    BOM, CRLF ends, a torn or whitespace tail: the same entries and line facts as
    `read_session`, and every blob ref of the file."""
    import sessiontree.session._line_index as line_index
    from sessiontree.session import read_session
    from sessiontree.storage import FilePin, FileSessionStorage, find_blob_refs

    directory = tmp_path_factory.mktemp("s") / "sessions"
    directory.mkdir()
    path = write(build(script), directory)
    data = path.read_bytes()
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    body = before + data.rstrip(b"\n") + b"\n" + tail  # `before`: lines ahead of the header
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + body)
    want = read_session(str(path), FileSessionStorage())
    original = line_index._CHUNK, line_index._THREAD_BYTES
    line_index._CHUNK = chunk  # type: ignore[misc]
    line_index._THREAD_BYTES = 0 if threaded else 1 << 60  # type: ignore[misc]
    try:
        got = line_index.scan_pinned(FilePin.open(str(path)), lambda header: True)
        found_later = line_index.refs_in(FilePin.open(str(path)))
    finally:
        line_index._CHUNK, line_index._THREAD_BYTES = original  # type: ignore[misc]
    assert got.lines.refs is not None and got.lines.refs <= found_later
    assert (got.header, got.title_slot, got.malformed_lines) == (
        want.header,
        want.title_slot,
        want.malformed_lines,
    )
    assert (got.ends_with_newline, got.size, got.blank) == (
        want.ends_with_newline,
        want.size,
        want.blank,
    )
    raw = path.read_bytes()
    lines = got.lines
    read_back = []
    for p, entry in enumerate(lines.entries):
        line = raw[lines.offsets[p] : lines.offsets[p] + lines.lengths[p]]
        read_back.append(entry if entry is not None else loads_object(line))
    assert read_back == want.entries
    # Every blob ref of the entry lines, read or not, split by a chunk's end or not
    # (what a writable manager pins).
    assert lines.refs == find_blob_refs(raw)  # the head lines hold none


def test_fork_from_a_lazy_source_copies_its_lines(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = big_session(work)
    monkeypatch.setattr(
        "sessiontree.session._loader.LAZY_LOAD_BYTES", 0
    )  # the source opens index first
    forked = SessionManager.fork_from(str(path), "/elsewhere", str(work / "forks"))
    assert is_lazy(forked)
    new = forked.get_session_file()
    assert new is not None
    assert Path(new).read_bytes().split(b"\n")[1:] == path.read_bytes().split(b"\n")[1:]
    leaf = forked.append_message(user("after the fork"))
    forked.close()
    again = SessionManager.open(new, read_only=True, lazy=False)
    assert again.get_leaf_id() == leaf and len(again.get_entries()) == 61


def test_a_rewrite_after_a_damaged_line_was_read_keeps_the_file_as_a_backup(work: Path) -> None:
    path = big_session(work, 3)
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2][:-20] + b"@" * 19 + b"}"  # found out only when read
    path.write_bytes(b"\n".join(lines))
    before = path.read_bytes()
    sm = SessionManager.open(str(path), lazy=True, breadcrumb=False)
    assert len(sm.get_entries()) == 5  # read: the damaged line is left out
    assert sm.set_session_name("renamed")
    backups = list(work.glob("*.bak"))
    assert len(backups) == 1 and backups[0].read_bytes() == before
    sm.close()


writes = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.text(max_size=3)),
        st.tuples(st.just("assistant"), st.text(max_size=3)),
        st.tuples(st.just("branch"), st.integers(0, 100)),
        st.tuples(st.just("label"), st.integers(0, 100)),
        st.tuples(st.just("compact"), st.integers(0, 100)),
        st.tuples(st.just("name"), st.text(min_size=1, max_size=3)),
        st.tuples(st.just("edit"), st.integers(0, 100)),
        st.tuples(st.just("read"), st.integers(0, 100)),
        st.tuples(st.just("context"), st.none()),
    ),
    max_size=25,
)


@settings(
    max_examples=examples(80),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=ops, operations=writes)
def test_lazy_and_whole_managers_stay_alike_through_random_writes(
    tmp_path_factory: Any, script: Any, operations: Any
) -> None:
    """The same operations (appends, branches, labels, compactions, renames, in-place
    edits, reads) on a session opened whole and one opened index first: the same
    entries, tree and context after each, and the same bytes on disk at the end."""
    import sessiontree.session._index as index_module
    import sessiontree.session._manager_appends as appends_module

    path_a, path_b, full, lazy = writable_pair(tmp_path_factory, script)
    step = [0]
    real = index_module.generate_entry_id, appends_module.iso_now
    # Both sessions get the same new ids and times, so their files can be compared.
    index_module.generate_entry_id = lambda existing: f"f{step[0]:07x}"  # type: ignore[assignment]
    appends_module.iso_now = lambda: "2026-06-01T00:00:00.000Z"  # type: ignore[assignment]
    try:
        for n, (op, arg) in enumerate(operations):
            step[0] = n
            ids = [e["id"] for e in full.get_entries()]
            on_path = [e["id"] for e in full.get_branch()]
            for sm in (full, lazy):
                if op == "user":
                    sm.append_message(user(arg))
                elif op == "assistant":
                    sm.append_message(assistant(arg))
                elif op == "branch" and ids:
                    sm.branch(ids[arg % len(ids)])
                elif op == "label" and ids:
                    sm.append_label_change(ids[arg % len(ids)], f"l{arg}")
                elif op == "compact":
                    kept = on_path[arg % len(on_path)] if on_path else None
                    sm.append_compaction("s", None, kept, 1)
                elif op == "name":
                    sm.set_session_name(arg, "user")
                elif op == "edit" and ids:
                    entry = sm.get_entry(ids[arg % len(ids)])
                    assert entry is not None
                    entry["edited"] = arg
                    sm.rewrite_entries()
                elif op == "read" and ids:
                    sm.get_entry(ids[arg % len(ids)])
                elif op == "context":
                    sm.build_session_context()
            assert lazy.get_leaf_id() == full.get_leaf_id()
            assert lazy.build_session_context() == full.build_session_context()
        assert shape(lazy.get_tree()) == shape(full.get_tree())
        assert lazy.get_entries() == full.get_entries()
    finally:
        index_module.generate_entry_id, appends_module.iso_now = real  # type: ignore[assignment]
    full.close()
    lazy.close()
    assert path_a.read_bytes() == path_b.read_bytes()


# ----------------------------------------------------------------------------- torn tails
# A power cut ends a write anywhere, often just after an inner `}` (the end of a content
# block). Whole and index first, a file cut anywhere in its last two lines resumes
# alike: the same entries, leaf and context, the next entry's parent, the bytes the
# append writes, and what a rewrite keeps of the torn line (a `.bak`).


def test_a_giant_session_torn_after_an_inner_brace_resumes_with_its_history(
    tmp_path: Path,
) -> None:
    """A session of 8 MiB or more (loaded index first) whose last line was cut just
    after its last text block's `}` resumes with its history, and the next entry is
    not a new root (it once became one: `parentId: null`)."""
    directory = tmp_path / "sessions"
    directory.mkdir()
    sm = SessionManager.create("/proj", str(directory))
    for _ in range(20):
        sm.append_message(user("q" * 450_000))
        sm.append_message(assistant("a" * 450_000))
    path = Path(sm.get_session_file() or "")
    sm.close()
    data = path.read_bytes()
    cut = data.rindex(b'"}') + 2  # just after the last text block's `}`
    assert data[cut - 2 : cut + 3] == b'"}],"'
    path.write_bytes(data[:cut])
    assert cut >= LAZY_LOAD_BYTES  # opened index first
    whole = SessionManager.open(str(path), lazy=False, read_only=True)
    assert len(whole.build_session_context().messages) == 39
    resumed = SessionManager.continue_recent("/proj", str(directory))
    assert resumed.get_session_file() == str(path) and is_lazy(resumed)
    assert len(resumed.build_session_context().messages) == 39
    assert resumed.get_leaf_id() == whole.get_leaf_id() is not None
    next_id = resumed.append_message(user("go on"))
    assert resumed.get_entry(next_id)["parentId"] == whole.get_leaf_id()  # type: ignore[index]
    resumed.close()
    lines = path.read_bytes()[cut:].split(b"\n")
    assert lines[0] == b""  # the torn line is left as it is, ended before the new line
    assert orjson.loads(lines[1])["parentId"] == whole.get_leaf_id()


def test_a_line_glued_onto_a_torn_one_is_left_out_as_the_full_loader_leaves_it(
    work: Path,
) -> None:
    """Another writer appended a whole line onto a torn one: one line, ended by a
    newline and by `}`, whose prefix is the torn entry's. It is not the leaf; a move
    keeps the file as it was, as it keeps every line no reader parses."""
    path = big_session(work, 3)
    lines = path.read_bytes().split(b"\n")
    last = lines[-2]
    torn = last[: last.index(b'"}') + 2]
    other = b'{"type":"custom","customType":"other","id":"0ther001","parentId":null,'
    other += b'"timestamp":"2026-01-01T00:00:00.000Z"}'
    lines[-2] = torn + other
    path.write_bytes(b"\n".join(lines))
    copy_ = work.parent / "copy"
    copy_.mkdir()
    shutil.copyfile(path, copy_ / path.name)
    whole = SessionManager.open(str(copy_ / path.name), lazy=False, breadcrumb=False)
    lazy = SessionManager.open(str(path), lazy=True, breadcrumb=False)
    assert lazy.get_leaf_id() == whole.get_leaf_id() == orjson.loads(lines[-3])["id"]
    assert lazy.build_session_context() == whole.build_session_context()
    whole.move_to("/elsewhere")
    lazy.move_to("/elsewhere2")
    assert sorted(p.name for p in copy_.iterdir()) == [path.name + ".bak"]
    assert sorted(p.name for p in work.iterdir()) == [path.name + ".bak"]
    assert (work / (path.name + ".bak")).read_bytes() == b"\n".join(lines)
    whole.close()
    lazy.close()


def test_many_damaged_last_lines_are_left_out_in_a_few_rebuilds(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that ends in many lines indexed by their prefix that do not parse: the
    leaf is found reading ever bigger batches back, not rebuilding once per line."""
    path = big_session(work, 3)
    lines = path.read_bytes().split(b"\n")
    damaged = [
        b'{"type":"message","id":"d%07d","parentId":null,"timestamp":"x","message":@}' % i
        for i in range(2000)
    ]
    path.write_bytes(b"\n".join([*lines[:-1], *damaged, b""]))
    rebuilds = []
    real = EntryIndex._derive
    monkeypatch.setattr(EntryIndex, "_derive", lambda self: rebuilds.append(1) or real(self))
    full, lazy = open_both(path, read_only=True)
    assert lazy.get_leaf_id() == full.get_leaf_id() == orjson.loads(lines[-2])["id"]
    assert len(rebuilds) <= 16  # 2000 lines: a dozen batches, not 2000 rebuilds
    assert lazy.get_entries() == full.get_entries()


NOW = "2026-01-01T00:00:00.000Z"


@contextmanager
def resuming(lazy: bool) -> Iterator[None]:
    """`continue_recent` loads index first (`lazy`) or whole, whatever the size, and
    appended entries get the same ids and timestamps in every manager (so that two
    files can be compared byte for byte)."""

    def new_id(existing: Any) -> str:
        n = 0
        while f"{n:08x}" in existing:
            n += 1
        return f"{n:08x}"

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sessiontree.session._loader.LAZY_LOAD_BYTES", 0 if lazy else 1 << 62)
        mp.setattr("sessiontree.session._index.generate_entry_id", new_id)
        mp.setattr("sessiontree.session._manager_appends.iso_now", lambda: NOW)
        yield


def tail_cuts(data: bytes) -> range:
    """Every place a crash can end the file within its last two lines (the header
    stays whole: a file without one is no session to either load)."""
    body = data.rstrip(b"\r\n")
    second_last = body.rfind(b"\n", 0, body.rfind(b"\n"))
    header_end = data.index(b"\n") + 1
    return range(max(second_last + 1, header_end), len(data) + 1)


def check_torn(root: Path, name: str, torn: bytes, blobs: BlobStore, rewrite: bool) -> None:
    """The file `torn` resumed whole and index first agree (see the section above)."""
    want_leaf = last_entry_id(torn)
    paths = {}
    for mode in ("whole", "index"):
        directory = root / mode
        directory.mkdir()
        paths[mode] = directory / name
        paths[mode].write_bytes(torn)
    # Read-only: nothing is written, both read the same.
    full = SessionManager.open(str(paths["whole"]), lazy=False, read_only=True, blob_store=blobs)
    lazy = SessionManager.open(str(paths["index"]), lazy=True, read_only=True, blob_store=blobs)
    assert lazy.get_leaf_id() == full.get_leaf_id() == want_leaf
    assert lazy.build_session_context() == full.build_session_context()
    assert lazy.get_entries() == full.get_entries()
    assert paths["index"].read_bytes() == paths["whole"].read_bytes() == torn
    # Resumed and continued.
    managers = {}
    for mode in ("whole", "index"):
        with resuming(mode == "index"):
            sm = SessionManager.continue_recent("/proj", str(root / mode), blob_store=blobs)
            assert sm.get_session_file() == str(paths[mode])
            assert is_lazy(sm) == (mode == "index")
            managers[mode] = sm
            assert sm.get_leaf_id() == want_leaf
            next_id = sm.append_message(user("next"))
            assert sm.get_entry(next_id)["parentId"] == want_leaf  # type: ignore[index]
    full, lazy = managers["whole"], managers["index"]
    assert lazy.build_session_context() == full.build_session_context()
    lazy.flush()
    full.flush()
    after = paths["whole"].read_bytes()
    assert paths["index"].read_bytes() == after
    assert after.startswith(torn)  # nothing torn away or rewritten, only appended
    if rewrite:
        with resuming(True):
            lazy.set_session_name("renamed")
        with resuming(False):
            full.set_session_name("renamed")
        assert lazy.get_entries() == full.get_entries()
        kept = {mode: sorted(p.name for p in (root / mode).iterdir()) for mode in paths}
        assert kept["index"] == kept["whole"]  # a `.bak` of the torn line, or none
        for backup in kept["whole"]:
            if backup != name:
                assert (root / "index" / backup).read_bytes() == (
                    root / "whole" / backup
                ).read_bytes()
        if b"\r" not in torn:  # lines read are copied as they are (CR and all) index first
            assert paths["index"].read_bytes() == paths["whole"].read_bytes()
    lazy.close()
    full.close()
    again = SessionManager.open(str(paths["index"]), lazy=True, read_only=True, blob_store=blobs)
    assert again.get_entries() == full.get_entries()


def variant(data: bytes, form: str) -> bytes:
    """The file as another writer (or editor) left it: CRLF line ends, or a BOM."""
    if form == "crlf":
        return data.replace(b"\n", b"\r\n")
    if form == "bom":
        return b"\xef\xbb\xbf" + data
    return data


@pytest.mark.slow
@pytest.mark.parametrize("form", ["lf", "crlf", "bom"])
def test_a_tail_cut_at_every_byte_resumes_alike(tmp_path_factory: Any, form: str) -> None:
    directory = tmp_path_factory.mktemp("src") / "sessions"
    directory.mkdir()
    sm = SessionManager.in_memory("/proj")
    sm.append_message(user("first"))
    sm.append_message(assistant("one {brace} two"))
    sm.append_message(user("x é"))
    # Multi-byte UTF-8 (2, 3 and 4 bytes): cuts inside a character too.
    sm.append_message(assistant("a}b é漢😀", thinking={"x": [{}]}))
    path = write(sm, directory)
    data = variant(path.read_bytes(), form)
    blobs = blobs_of(directory)
    for cut in tail_cuts(data):
        root = tmp_path_factory.mktemp("cut")
        check_torn(root, path.name, data[:cut], blobs, rewrite=cut % 7 == 0)


def cut_at(data: bytes, cuts: range, kind: str, where: float) -> int:
    """A place in `cuts`: anywhere, or where crashes and parsers meet most often: just
    after a `}` (a content block's end), or next to a line end."""
    if kind == "brace":
        places = [p + 1 for p in cuts if p < len(data) and data[p] == 0x7D]
    elif kind == "line end":
        places = [p + d for p in cuts if p < len(data) and data[p] in b"\r\n" for d in (0, 1)]
    else:
        places = list(cuts)
    return places[min(int(where * len(places)), len(places) - 1)] if places else cuts[-1]


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    script=ops,
    form=st.sampled_from(["lf", "lf", "crlf", "bom"]),
    where=st.lists(
        st.tuples(st.sampled_from(["brace", "line end", "anywhere"]), st.floats(0, 1)),
        min_size=1,
        max_size=3,
    ),
)
def test_a_tail_cut_anywhere_resumes_alike(
    tmp_path_factory: Any, script: Any, form: str, where: list[tuple[str, float]]
) -> None:
    directory = tmp_path_factory.mktemp("src") / "sessions"
    directory.mkdir()
    path = write(build(script), directory)
    data = variant(path.read_bytes(), form)
    cuts = tail_cuts(data)
    for kind, w in where:
        root = tmp_path_factory.mktemp("cut")
        cut = cut_at(data, cuts, kind, w)
        check_torn(root, path.name, data[:cut], blobs_of(directory), rewrite=True)


@pytest.mark.parametrize("finder", ["memmem", "bytes.find"])
def test_the_index_pass_finds_every_ref_with_either_search(
    tmp_path: Path, finder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass looks for refs with the C library's `memmem` where there is one, else
    `bytes.find`: both find every ref, at every place a chunk's end can cut it."""
    import sessiontree.session._line_index as line_index
    from sessiontree.storage import FilePin

    if finder == "memmem":
        assert line_index._mark_finder() is not None  # Linux, macOS: there is one
    else:
        monkeypatch.setattr(line_index, "_finder", [None])
    hashes = [f"{i:02x}" * 32 for i in range(12)]
    header = b'{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/"}\n'
    lines = [header]
    for i, digest in enumerate(hashes):
        block = {"type": "image", "data": f"blob:sha256:{digest}", "mimeType": "image/png"}
        entry = {"type": "message", "id": f"e{i}", "parentId": f"e{i - 1}" if i else None}
        entry.update(timestamp="t", message={"role": "user", "content": ["x" * i * 7, block]})
        lines.append(serialize_entry_bytes(entry) + b"\n")
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(lines))
    for chunk in (1, 5, 13, 64, 77, 100, 4096):
        monkeypatch.setattr(line_index, "_CHUNK", chunk)
        got = line_index.scan_pinned(FilePin.open(str(path)), lambda header: True)
        assert got.lines.refs == set(hashes), chunk
        data = path.read_bytes()
        where = [i for i in range(len(data)) if data.startswith(b"blob:sha256:", i)]
        assert list(got.lines.marks or ()) == where, chunk  # each once, in order
        # A read-only pass leaves them out; `refs_in` finds them when a copy asks.
        pin = FilePin.open(str(path))
        assert line_index.scan_pinned(pin, lambda h: True, find_refs=False).lines.refs is None
        assert line_index.refs_in(pin) == set(hashes), chunk
