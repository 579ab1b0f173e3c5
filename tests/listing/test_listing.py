"""Session discovery: listings, their caches, recent sessions and resume matching."""

from __future__ import annotations

import os
import pickle
import random
import sqlite3
import stat
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sessiontree.errors import AmbiguousSessionError
from sessiontree.format import content_text, serialize_entry, session_file_name
from sessiontree.layout import encode_session_dir_name, home_relative_dir_name, store_parts
from sessiontree.listing import (
    CACHE_DB_NAME,
    RecentSessionInfo,
    SessionInfo,
    _listing,
    _resume,
    _scan,
    clear_listing_cache,
    find_most_recent_session,
    get_recent_sessions,
    list_all_sessions,
    list_sessions,
    resolve_resumable_session,
)
from sessiontree.listing._cache import MetaDB
from sessiontree.storage import FileSessionStorage, MemorySessionStorage

CWD = "/work/proj"
T0 = 1_770_000_000_000_000_000  # ns, 2026-02-02


# ---------------------------------------------------------------------------- storages


class CountingMixin:
    """Records every read of file content: (method, path, offset, bytes returned)."""

    reads: list[tuple[str, str, int, int]]

    def _log(self, method: str, path: str, offset: int, n: int) -> None:
        if not hasattr(self, "reads"):
            self.reads = []
        self.reads.append((method, os.path.abspath(path), offset, n))

    def read_text(self, path: str) -> str:
        text: str = super().read_text(path)  # type: ignore[misc]
        self._log("read_text", path, 0, len(text.encode()))
        return text

    def read_text_prefix(self, path: str, max_bytes: int) -> str:
        text: str = super().read_text_prefix(path, max_bytes)  # type: ignore[misc]
        self._log(f"read_text_prefix:{max_bytes}", path, 0, len(text.encode()))
        return text

    def read_bytes_range(self, path: str, offset: int, length: int) -> bytes:
        data: bytes = super().read_bytes_range(path, offset, length)  # type: ignore[misc]
        self._log("read_bytes_range", path, offset, len(data))
        return data

    def iter_chunks(self, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        inner = super().iter_chunks(path, chunk_size)  # type: ignore[misc]

        def counted() -> Iterator[bytes]:
            for chunk in inner:
                self._log("iter_chunks", path, 0, len(chunk))
                yield chunk

        return counted()

    def read_log(self) -> list[tuple[str, str, int, int]]:
        return list(getattr(self, "reads", []))

    def reset(self) -> None:
        self.reads = []

    def bytes_read(self, path: str | None = None) -> int:
        return sum(r[3] for r in self.read_log() if path is None or r[1] == path)


class CountingFile(CountingMixin, FileSessionStorage):
    pass


class CountingMemory(CountingMixin, MemorySessionStorage):
    pass


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    clear_listing_cache()
    yield
    clear_listing_cache()


@pytest.fixture(params=["file", "memory"])
def storage(request: pytest.FixtureRequest) -> CountingFile | CountingMemory:
    return CountingFile() if request.param == "file" else CountingMemory()


@pytest.fixture
def fstorage() -> CountingFile:
    return CountingFile()


# ---------------------------------------------------------------------------- builders


def iso(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, UTC)
    return f"{dt:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def header(
    sid: str, ts: str = "2026-02-16T10:20:30.000Z", cwd: str = CWD, **extra: Any
) -> dict[str, Any]:
    h: dict[str, Any] = {"type": "session", "version": 3, "id": sid, "timestamp": ts, "cwd": cwd}
    h.update(extra)
    return h


_n = 0


def _eid() -> str:
    global _n
    _n += 1
    return f"{_n:08x}"


def message(role: str, content: Any, **extra: Any) -> dict[str, Any]:
    msg = {"role": role, "content": content, "timestamp": 1_770_000_000_000}
    msg.update(extra)
    return {
        "type": "message",
        "id": _eid(),
        "parentId": None,
        "timestamp": "2026-02-16T10:21:00.000Z",
        "message": msg,
    }


def user(text: str) -> dict[str, Any]:
    return message("user", text)


def assistant(text: str) -> dict[str, Any]:
    return message("assistant", [{"type": "text", "text": text}], stopReason="stop")


def entry(kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "id": _eid(),
        "parentId": None,
        "timestamp": "2026-02-16T10:22:00.000Z",
        **fields,
    }


def jsonl(*entries: dict[str, Any]) -> str:
    return "".join(serialize_entry(e) + "\n" for e in entries)


def slot_line(title: str, source: str = "user") -> str:
    base = {
        "type": "title",
        "v": 1,
        "title": title,
        "source": source,
        "updatedAt": "2026-02-16T10:30:00.000Z",
        "pad": "",
    }
    pad = 256 - len(serialize_entry(base).encode()) - 1
    base["pad"] = " " * pad
    line = serialize_entry(base) + "\n"
    assert len(line.encode()) == 256
    return line


class Store:
    """Writes session files into one storage with increasing, explicit mtimes."""

    def __init__(self, storage: Any, root: Path) -> None:
        self.storage = storage
        self.root = root
        self.tick = 0

    def dir(self, name: str) -> str:
        path = str(self.root / "sessions" / name)
        self.storage.ensure_dir(path)
        return path

    def write(self, directory: str, name: str, content: str | bytes) -> str:
        path = os.path.join(directory, name)
        data = content.encode() if isinstance(content, str) else content
        self.storage.write_atomic(path, [data])
        self.touch(path)
        return path

    def session(
        self,
        directory: str,
        sid: str,
        *entries: dict[str, Any],
        ts: str = "2026-02-16T10:20:30.000Z",
        slot: str | None = None,
        **hdr: Any,
    ) -> str:
        text = (slot_line(slot) if slot is not None else "") + jsonl(
            header(sid, ts, **hdr), *entries
        )
        return self.write(directory, session_file_name(ts, sid), text)

    def touch(self, path: str) -> None:
        """Make `path` the newest file (explicit mtime on disk; write order in memory)."""
        self.tick += 1
        if isinstance(self.storage, FileSessionStorage):
            ns = T0 + self.tick * 1_000_000_000
            os.utime(path, ns=(ns, ns))
        else:
            writer = self.storage.open_writer(path, "a")
            writer.write_bytes(b"")  # an empty write still bumps the mtime
            writer.close()

    def append(self, path: str, text: str | bytes) -> None:
        writer = self.storage.open_writer(path, "a")
        try:
            if isinstance(text, bytes):
                writer.write_bytes(text)
            else:
                writer.write_line(text)
        finally:
            writer.close()
        self.touch(path)


@pytest.fixture
def store(storage: Any, agent_dir: Path) -> Store:
    return Store(storage, agent_dir)


@pytest.fixture
def fstore(fstorage: CountingFile, agent_dir: Path) -> Store:
    return Store(fstorage, agent_dir)


def project_dir(store: Store, cwd: str = CWD) -> str:
    return store.dir(encode_session_dir_name(cwd))


def ids(infos: list[SessionInfo]) -> list[str]:
    return [i.id for i in infos]


# ---------------------------------------------------------------------------- records


def test_session_info_record_semantics() -> None:
    now = datetime.now(UTC)
    kwargs: dict[str, Any] = dict(
        path="/p.jsonl",
        id="a",
        cwd="/",
        title=None,
        parent_session_path=None,
        created=now,
        modified=now,
        message_count=1,
        first_message="hi",
    )
    info = SessionInfo(**kwargs, all_messages_text="hi\nthere")
    assert info.all_messages_text == "hi\nthere"
    assert SessionInfo(**kwargs).all_messages_text == ""
    assert info == SessionInfo(**kwargs, all_messages_text="other")  # text not compared
    assert "all_messages_text" not in repr(info)
    with pytest.raises(AttributeError):
        info.title = "x"  # type: ignore[misc]
    copy = pickle.loads(pickle.dumps(info))
    assert copy == info and copy.all_messages_text == "hi\nthere"
    recent = RecentSessionInfo("/p", now, "full", "full", "just now")
    assert recent.name == "full"


# ---------------------------------------------------------------------------- listing


def test_list_fields_and_order(store: Store) -> None:
    d = project_dir(store)
    a = store.session(
        d,
        "aaaa000000000001",
        user("first prompt"),
        assistant("answer one"),
        message("toolResult", [{"type": "text", "text": "tool out"}], toolCallId="t"),
        user("second"),
        ts="2026-02-16T10:00:00.000Z",
    )
    b = store.session(
        d,
        "bbbb000000000002",
        message("user", [{"type": "text", "text": "block"}, {"type": "image", "data": "x"}]),
        message("user", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
        ts="2026-02-16T11:00:00.000Z",
        parentSession="/old/session.jsonl",
    )
    c = store.session(d, "cccc000000000003", ts="2026-02-16T12:00:00.000Z")
    infos = list_sessions(CWD, store_parts(store.storage))
    assert [i.path for i in infos] == [c, b, a]  # newest mtime first
    ic, ib, ia = infos
    assert ia.id == "aaaa000000000001" and ia.cwd == CWD
    assert ia.message_count == 4
    assert ia.first_message == "first prompt"
    # Joined by a space, as both TypeScript peers join them (`allMessages.join(" ")`).
    assert ia.all_messages_text == "first prompt answer one second"
    assert ia.created == datetime(2026, 2, 16, 10, 0, tzinfo=UTC)
    st = store.storage.stat(a)
    assert ia.modified == datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
        microseconds=st.mtime_ns // 1000
    )
    assert ia.title is None and ia.parent_session_path is None
    assert ib.first_message == "block"
    assert ib.all_messages_text == "block a b"
    assert ib.parent_session_path == "/old/session.jsonl"
    assert ic.message_count == 0 and ic.first_message == "(no messages)"
    assert ic.all_messages_text == ""
    # SessionManager.list's signature: an explicit session_dir, and list_all.
    assert ids(list_sessions("/elsewhere", store_parts(store.storage), session_dir=d)) == ids(infos)
    assert ids(list_all_sessions(store_parts(store.storage))) == ids(infos)


def test_invalid_files_are_skipped(store: Store) -> None:
    d = project_dir(store)
    good = store.session(d, "good000000000001", user("hello"))
    store.write(d, "garbage.jsonl", b"\x00\x01\xffnot json at all\n{{{\n")
    store.write(d, "empty.jsonl", "")
    store.write(d, "blank.jsonl", "\n  \n\t\n")
    store.write(d, "headerless.jsonl", jsonl(user("no header"), header("late000000000001")))
    store.write(d, "half-header.jsonl", serialize_entry(header("half000000000001"))[:40])
    store.write(d, "wrong-type.jsonl", jsonl({"type": "sessionx", "id": "x"}))
    store.write(d, "no-id.jsonl", jsonl({"type": "session", "id": 5}))
    store.write(d, "notes.txt", jsonl(header("txt0000000000001")))
    store.write(d, ".hidden.jsonl", jsonl(header("hide000000000001")))
    store.dir(encode_session_dir_name(CWD) + "/sub.jsonl")  # a directory, not a file
    infos = list_sessions(CWD, store_parts(store.storage))
    assert [i.path for i in infos] == [good]
    assert find_most_recent_session(d, storage=store.storage) == good
    assert [r.path for r in get_recent_sessions(d, 10, storage=store.storage)] == [good]


def test_lenient_lines_like_the_loader(store: Store) -> None:
    d = project_dir(store)
    text = (
        "\ufeff"  # a BOM before line 1
        + "[1,2]\n"  # JSON but not an object: skipped, the header still decides
        + serialize_entry(header("lenient000000001"))
        + "\r\n\n   \n"
        + serialize_entry(user("crlf prompt"))
        + "\r\n"
        + '{"type":"message","id":"trunc{"type":"message","id":"x"}\n'  # glued, invalid
        + serialize_entry(assistant("ok"))[:-5]
        + "\n"  # cut line in the middle: skipped
        + '{"type": "message", "message": {"role": "assistant", "content": "spaced"}}\n'
        + '{"type":"m\\u0065ssage","message":{"role":"user","content":"escaped"}}\n'
        + '{"type":"label","id":"l1","targetId":"x"}\n'
        + '{"type":"custom","customType":"c","data":{"type":"message"},"id":"c1"}\n'
        + '{"type":"custom","id":"d1","type":"message","message":{"role":"user","content":"dup"}}\n'
        + '{"type":"message","id":"s","message":{"role":"user","content":"\\ud800 lone"}}\n'
    )
    store.write(
        d,
        "lenient.jsonl",
        text.encode() + b'{"type":"message","message":{"role":"user","content":"bad \xff byte"}}\n',
    )
    (info,) = list_sessions(CWD, store_parts(store.storage))
    # crlf prompt, spaced, escaped, dup, lone, bad byte = 6 messages
    assert info.message_count == 6
    assert info.first_message == "crlf prompt"
    assert info.all_messages_text.startswith("crlf prompt spaced escaped dup \ud800 lone")


def test_unterminated_last_line(store: Store) -> None:
    d = project_dir(store)
    base = jsonl(header("tail000000000001"), user("one"))
    complete = store.write(d, "complete.jsonl", base + serialize_entry(assistant("two")))
    torn = store.write(d, "torn.jsonl", base + serialize_entry(assistant("two"))[:-3])
    only_header = store.write(d, "only-header.jsonl", serialize_entry(header("hdr0000000000001")))
    infos = {i.path: i for i in list_sessions(CWD, store_parts(store.storage))}
    assert infos[complete].message_count == 2  # a last line without \n that parses counts
    assert infos[torn].message_count == 1
    assert infos[only_header].message_count == 0


def test_titles(store: Store) -> None:
    d = project_dir(store)

    def title_of(*entries: dict[str, Any], slot: str | None = None, **hdr: Any) -> str | None:
        sid = _eid() * 2
        path = store.session(d, sid, *entries, slot=slot, **hdr)
        (info,) = [i for i in list_sessions(CWD, store_parts(store.storage)) if i.path == path]
        return info.title

    assert title_of(title="Header title") == "Header title"
    assert title_of(user("x"), slot="Slot title", title="stale") == "Slot title"
    # omp: an empty slot title removes the header's; later names still count
    assert title_of(entry("title_change", title="renamed"), slot="", title="stale") == "renamed"
    assert title_of(entry("session_info", name="  pi name  ")) == "pi name"
    assert title_of(entry("session_info", name="a"), entry("session_info", name="b")) == "b"
    assert title_of(entry("session_info", name="a"), entry("session_info", name=" ")) is None
    assert (
        title_of(
            entry("title_change", title="t1", source="auto"), entry("title_change", title="t2")
        )
        == "t2"
    )
    assert (
        title_of(
            entry(
                "compaction",
                summary="s",
                shortSummary="short",
                firstKeptEntryId="x",
                tokensBefore=1,
            )
        )
        == "short"
    )
    assert (
        title_of(
            entry(
                "compaction", summary="s", shortSummary="old", firstKeptEntryId="x", tokensBefore=1
            ),
            entry("compaction", summary="s", firstKeptEntryId="x", tokensBefore=1),
            entry(
                "compaction", summary="s", shortSummary="new", firstKeptEntryId="x", tokensBefore=1
            ),
        )
        == "new"
    )
    assert (
        title_of(
            entry("session_info", name="named"),
            entry(
                "compaction",
                summary="s",
                shortSummary="short",
                firstKeptEntryId="x",
                tokensBefore=1,
            ),
        )
        == "named"
    )
    assert title_of(entry("session_info", name="named"), title="Header") == "Header"


def test_both_dir_namings(
    storage: Any, agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    cwd = str(home / "code" / "proj")
    newer = home_relative_dir_name(cwd)
    assert newer is not None
    store = Store(storage, agent_dir)
    spec_dir = store.dir(encode_session_dir_name(cwd))
    new_dir = store.dir(newer)
    other = store.dir(encode_session_dir_name("/somewhere/else"))
    a = store.session(spec_dir, "spec000000000001", user("in spec dir"), cwd=cwd)
    b = store.session(new_dir, "newr000000000001", user("in newer dir"), cwd=cwd)
    store.session(other, "othr000000000001", user("other project"))
    assert [i.path for i in list_sessions(cwd, store_parts(storage))] == [b, a]
    assert storage.exists(spec_dir) and storage.exists(new_dir)  # nothing renamed
    assert [i.path for i in list_sessions(cwd, store_parts(storage), session_dir=spec_dir)] == [a]
    assert len(list_all_sessions(store_parts(storage))) == 3
    assert list_sessions("/no/such/project", store_parts(storage)) == []


def test_list_all_orders_across_projects(store: Store) -> None:
    paths = []
    for i in range(6):
        d = store.dir(encode_session_dir_name(f"/proj/{i % 3}"))
        paths.append(store.session(d, f"{i:016x}", user(f"p{i}"), cwd=f"/proj/{i % 3}"))
    store.storage.ensure_dir(os.path.join(store.dir("--proj-0--"), "artifacts"))
    infos = list_all_sessions(store_parts(store.storage))
    assert [i.path for i in infos] == paths[::-1]
    assert list_all_sessions(store_parts(store.storage, str(store.root / "nothing"))) == []


def test_many_sessions_in_memory_and_file_agree(tmp_path: Path, agent_dir: Path) -> None:
    mem, fs = MemorySessionStorage(), FileSessionStorage()
    results = []
    for st in (mem, fs):
        s = Store(st, agent_dir)
        for p in range(3):
            d = s.dir(f"--p{p}--")
            for k in range(40):
                entries = [user(f"u{p}-{k}")] + [assistant(f"a{j}") for j in range(k % 5)]
                if k % 7 == 0:
                    entries.append(entry("session_info", name=f"name {k}"))
                s.session(d, f"{p:04x}{k:012x}", *entries, slot=("slot" if k % 11 == 0 else None))
        results.append(
            [
                (os.path.basename(i.path), i.message_count, i.title, i.first_message)
                for i in list_all_sessions(store_parts(st))
            ]
        )
    assert results[0] == results[1]
    assert len(results[0]) == 120


# ---------------------------------------------------------------------------- recent / most recent


def test_get_recent_sessions_reads_only_prefixes(store: Store) -> None:
    d = project_dir(store)
    big_tool = message("toolResult", [{"type": "text", "text": "x" * 20000}])
    store.session(d, "old0000000000001", user("oldest"), big_tool)
    titled = store.session(d, "ttl0000000000001", user("prompt"), big_tool, title="My title")
    slotted = store.session(d, "slt0000000000001", user("prompt"), big_tool, slot="Slot name")
    blocks = store.session(
        d,
        "blk0000000000001",
        message("user", [{"type": "text", "text": "block\nprompt"}]),
        big_tool,
    )
    noprompt = store.session(d, "nop0000000000001", assistant("only assistant"), big_tool)
    store.write(d, "broken.jsonl", "garbage\n")
    store.storage.reset()
    recent = get_recent_sessions(d, limit=4, storage=store.storage)
    assert [r.path for r in recent] == [noprompt, blocks, slotted, titled]
    assert [r.full_name for r in recent] == ["nop0000000000001", "block", "Slot name", "My title"]
    log = store.storage.read_log()
    assert {r[0] for r in log} == {"read_text_prefix:4096"}
    assert len(log) == 5  # the 4 sessions + the broken file, never the oldest
    assert all(r[3] <= 4096 for r in log)
    assert all(r.time_ago for r in recent)
    assert get_recent_sessions(d, limit=0, storage=store.storage) == []
    assert len(get_recent_sessions(d, storage=store.storage)) == 3  # default limit
    assert get_recent_sessions(str(store.root / "missing"), storage=store.storage) == []


def test_recent_names_are_cleaned_and_cut(store: Store) -> None:
    d = project_dir(store)
    long_title = "A" * 39 + "BCDEF"
    store.session(d, "s000000000000001", title=long_title)
    store.session(d, "s000000000000002", user("\x1b[31mred\x07 text\r\nsecond line"))
    store.session(d, "s000000000000003", user("x" * 40))
    # the first user message is cut off by the 4 KB prefix
    store.session(
        d, "s000000000000004", assistant("a" * 3000), user('cut \\"prompt\\" ' + "y" * 5000)
    )
    store.session(d, "s000000000000005", user("   "), title="  ")
    recent = get_recent_sessions(d, limit=10, storage=store.storage)
    by_id = {os.path.basename(r.path).split("_")[1][:-6]: r for r in recent}
    r1 = by_id["s000000000000001"]
    assert r1.full_name == long_title and r1.name == "A" * 39 + "…" and len(r1.name) == 40
    assert by_id["s000000000000002"].full_name == "[31mred text"
    r3 = by_id["s000000000000003"]
    assert r3.name == r3.full_name == "x" * 40
    assert by_id["s000000000000004"].full_name.startswith('cut \\"prompt\\" yyy')
    assert by_id["s000000000000005"].full_name == "s000000000000005"


def test_recent_session_with_title_slot_and_prefix_header(store: Store) -> None:
    d = project_dir(store)
    path = store.session(d, "slot000000000001", user("p"), slot="Named by slot", title="old")
    (recent,) = get_recent_sessions(d, storage=store.storage)
    assert recent.path == path and recent.full_name == "Named by slot"
    # a header beyond the 4 KB prefix is not found there: skipped silently
    store.session(d, "long000000000001", cwd="/" + "d" * 5000)
    assert [r.path for r in get_recent_sessions(d, storage=store.storage)] == [path]
    assert find_most_recent_session(d, storage=store.storage) == path


def test_time_ago() -> None:
    now = datetime(2026, 2, 16, 12, 0, tzinfo=UTC)
    ts = now.timestamp()
    assert _resume._time_ago(now - timedelta(seconds=59), ts) == "just now"
    assert _resume._time_ago(now + timedelta(seconds=30), ts) == "just now"
    assert _resume._time_ago(now - timedelta(minutes=5, seconds=3), ts) == "5m ago"
    assert _resume._time_ago(now - timedelta(hours=3, minutes=59), ts) == "3h ago"
    assert _resume._time_ago(now - timedelta(days=2, hours=1), ts) == "2d ago"
    old = now - timedelta(days=7, minutes=1)
    assert _resume._time_ago(old, ts) == old.astimezone().strftime("%Y-%m-%d")


def test_find_most_recent_session(store: Store) -> None:
    d = project_dir(store)
    assert find_most_recent_session(d, storage=store.storage) is None
    a = store.session(d, "a000000000000001")
    assert find_most_recent_session(d, storage=store.storage) == a
    b = store.session(d, "b000000000000001", user("x"))
    store.write(d, "zzz-invalid.jsonl", "not a session\n")
    assert find_most_recent_session(d, storage=store.storage) == b
    store.touch(a)
    assert find_most_recent_session(d, storage=store.storage) == a
    assert find_most_recent_session(str(store.root / "missing"), storage=store.storage) is None


# ---------------------------------------------------------------------------- caches


def reads_of(storage: CountingMixin, path: str) -> list[tuple[str, str, int, int]]:
    return [r for r in storage.read_log() if r[1] == os.path.abspath(path)]


def test_unchanged_sessions_are_not_read_again(store: Store) -> None:
    d = project_dir(store)
    for i in range(30):
        store.session(d, f"{i:016x}", user(f"prompt {i}"), assistant("a"))
    first = list_sessions(CWD, store_parts(store.storage))
    assert store.storage.bytes_read() > 0
    store.storage.reset()
    again = list_sessions(CWD, store_parts(store.storage))
    assert store.storage.read_log() == []
    assert again == first
    assert all(x is y for x, y in zip(again, first, strict=True))  # same cached records


def test_an_unchanged_directory_is_listed_from_its_last_rows(
    fstore: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = project_dir(fstore)
    paths = [fstore.session(d, f"{i:016x}", user(f"prompt {i}")) for i in range(5)]
    parts = store_parts(fstore.storage)
    first = list_sessions(CWD, parts)
    built: list[str] = []
    real = _listing.session_info

    def counted(rec: Any, path: str, storage: Any) -> SessionInfo | None:
        built.append(path)
        return real(rec, path, storage)

    monkeypatch.setattr(_listing, "session_info", counted)
    assert list_sessions(CWD, parts) == first
    assert built == []  # every file as listed last: its rows again, none built
    fstore.append(paths[0], serialize_entry(assistant("more")))
    again = list_sessions(CWD, parts)
    assert len(built) == 5  # one file grew: the directory's rows are built again
    assert [i.message_count for i in again] == [2, 1, 1, 1, 1]
    os.remove(paths[1])
    assert [i.path for i in list_sessions(CWD, parts)] == [
        os.path.abspath(p) for p in (paths[0], paths[4], paths[3], paths[2])
    ]


def test_persistent_cache_serves_a_fresh_process(fstore: Store, agent_dir: Path) -> None:
    storage = fstore.storage
    d = project_dir(fstore)
    for i in range(30):
        fstore.session(d, f"{i:016x}", user(f"prompt {i}"), entry("session_info", name=f"n{i}"))
    fstore.write(d, "invalid.jsonl", "nope\n")
    first = list_sessions(CWD, store_parts(storage))
    db = agent_dir / "cache" / "sessions-meta.db"
    assert db.is_file()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    clear_listing_cache()  # as a new process would start
    storage.reset()
    again = list_sessions(CWD, store_parts(storage))
    assert storage.read_log() == []  # not even the invalid file
    assert again == first
    assert [i.title for i in again] == [i.title for i in first]
    # all_messages_text is not cached: read lazily, once, on access
    assert storage.read_log() == []
    assert repr(again[0]) and again[0] == first[0]
    assert storage.read_log() == []
    assert again[0].all_messages_text == first[0].all_messages_text == again[0].first_message
    assert {r[1] for r in storage.read_log()} == {os.path.abspath(again[0].path)}
    storage.reset()
    assert again[0].all_messages_text
    assert storage.read_log() == []


def test_a_fresh_process_lists_an_unchanged_directory_from_its_kept_rows(
    fstore: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = project_dir(fstore)
    paths = [
        fstore.session(d, f"{i:016x}", user(f"prompt {i}"), entry("session_info", name=f"n{i}"))
        for i in range(4)
    ]
    fstore.session(d, "f" * 16, ts="not a time")  # created: the file's mtime
    fstore.write(d, "invalid.jsonl", "nope\n")
    parts = store_parts(fstore.storage)
    first = list_sessions(CWD, parts)
    fetched: list[object] = []
    real_fetch = MetaDB.fetch

    def counted(self: MetaDB, directories: Any) -> Any:
        fetched.append(directories)
        return real_fetch(self, directories)

    monkeypatch.setattr(MetaDB, "fetch", counted)
    clear_listing_cache()  # as a new process would start
    again = list_sessions(CWD, parts)
    assert fetched == []  # not a row per file: the directory's one
    assert again == first
    assert [(i.title, i.created, i.size) for i in again] == [
        (i.title, i.created, i.size) for i in first
    ]
    assert again[0].all_messages_text == first[0].all_messages_text
    fstore.append(paths[1], serialize_entry(assistant("more")))
    clear_listing_cache()
    grown = list_sessions(CWD, parts)
    assert len(fetched) == 1  # a file changed: read file by file again
    assert grown[0].path == os.path.abspath(paths[1])
    assert grown[0].message_count == 2


def test_listing_times_are_exact_to_the_microsecond() -> None:
    for us in (0, 1, 999_999, 1_770_000_000_123_457, 2**32 * 10**6 - 1, 2**32 * 10**6, 2**40):
        assert _listing._from_us(us) == datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
            microseconds=us
        )


def test_cache_disabled(fstore: Store, agent_dir: Path) -> None:
    d = project_dir(fstore)
    fstore.session(d, "a000000000000001", user("x"))
    list_sessions(CWD, store_parts(fstore.storage), cache=False)
    assert not (agent_dir / "cache").exists()
    fstore.storage.reset()
    list_sessions(CWD, store_parts(fstore.storage), cache=False)
    assert fstore.storage.bytes_read() > 0


def test_no_cache_db_without_an_agent_dir(fstorage: CountingFile, tmp_path: Path) -> None:
    s = Store(fstorage, tmp_path / "custom")
    d = s.dir("x")
    path = s.write(d, "a.jsonl", jsonl(header("a000000000000001")))
    missing = tmp_path / "none"
    infos = list_sessions("/x", store_parts(fstorage, str(missing)), session_dir=d)
    assert [i.path for i in infos] == [path]
    assert not missing.exists()


def test_sessions_written_by_the_manager(agent_dir: Path) -> None:
    from sessiontree.session import SessionManager

    with SessionManager.create(CWD) as sm:
        sm.append_message(user("hello manager")["message"])
        sm.append_message(assistant("hi")["message"])
        sm.flush()
        path = sm.get_session_file()
        sid = sm.get_session_id()
        sm.set_session_name("Named", "user")
        sm.flush()
    (info,) = SessionManager.list(CWD)
    assert (info.path, info.id, info.cwd) == (path, sid, CWD)
    assert (info.message_count, info.first_message, info.title) == (2, "hello manager", "Named")
    assert info.all_messages_text == "hello manager hi"
    assert [i.id for i in SessionManager.list_all()] == [sid]
    match = resolve_resumable_session(sid[:10], CWD)
    assert match is not None and match.session == info and match.scope == "local"
    assert find_most_recent_session(os.path.dirname(path or "")) == path
    (recent,) = get_recent_sessions(os.path.dirname(path or ""))
    assert recent.full_name == "Named" and recent.time_ago == "just now"


def test_grown_file_is_scanned_incrementally(store: Store) -> None:
    d = project_dir(store)
    padding = [message("toolResult", [{"type": "text", "text": "z" * 3000}]) for _ in range(20)]
    path = store.session(d, "grow000000000001", user("first"), assistant("reply"), *padding)
    (before,) = list_sessions(CWD, store_parts(store.storage))
    assert before.message_count == 22
    old_size = store.storage.stat(path).size
    store.append(path, jsonl(user("more"), entry("session_info", name="grown name")))
    store.storage.reset()
    (after,) = list_sessions(CWD, store_parts(store.storage))
    log = reads_of(store.storage, path)
    assert after.message_count == 23
    assert after.title == "grown name"
    assert after.first_message == "first"
    # no full read: the start checked (16 KB), the 16 KB before the old end, the new bytes
    window = 16 * 1024
    assert old_size > 3 * window
    assert [r[0] for r in log] == ["read_bytes_range"] * len(log)
    assert (log[0][2], log[0][3]) == (0, window)
    assert (log[1][2], log[1][3]) == (old_size - window, window)
    assert all(r[2] >= old_size - window for r in log[1:])
    appended = store.storage.stat(path).size - old_size
    # (and the new end's window, for the next time)
    assert store.storage.bytes_read(os.path.abspath(path)) <= 3 * window + appended
    assert "more" in after.all_messages_text
    # the same as a full scan
    full = list_sessions(CWD, store_parts(store.storage), cache=False)[0]
    assert after == full and after.all_messages_text == full.all_messages_text


def test_a_rewrite_that_keeps_the_start_and_the_old_end_but_grows_is_read_again(
    store: Store,
) -> None:
    """Found by tests/listing/test_cache_file_identity.py's model: the first message rewritten (same
    length, same inode: a peer's writeFileSync) and an entry added, so the file grew
    and its header and last line are as they were; the listing must not resume."""
    d = project_dir(store)
    path = store.session(d, "grow000000000002", user("alpha"), user("omega"))
    (before,) = list_sessions(CWD, store_parts(store.storage))
    assert before.first_message == "alpha"
    text = store.storage.read_text(path).replace('"alpha"', '"gamma"')
    store.storage.write_text(path, text + jsonl(user("omega")))
    (after,) = list_sessions(CWD, store_parts(store.storage))
    assert after.first_message == "gamma"
    assert after == list_sessions(CWD, store_parts(store.storage), cache=False)[0]


def test_growth_over_an_unterminated_line(store: Store) -> None:
    d = project_dir(store)
    line = serialize_entry(assistant("half"))
    path = store.session(d, "torn000000000001", user("u"))
    store.append(path, line[:20].encode())
    assert list_sessions(CWD, store_parts(store.storage))[0].message_count == 1
    store.append(path, (line[20:] + "\n").encode())
    (info,) = list_sessions(CWD, store_parts(store.storage))
    assert info.message_count == 2
    assert info.all_messages_text == "u half"
    # the unterminated line becomes valid as it is
    store.append(path, serialize_entry(user("last")).encode())
    assert list_sessions(CWD, store_parts(store.storage))[0].message_count == 3
    store.append(path, b"\n" + jsonl(user("after")).encode())
    assert list_sessions(CWD, store_parts(store.storage))[0].message_count == 4


def test_header_written_in_pieces(store: Store) -> None:
    d = project_dir(store)
    path = store.write(d, "late.jsonl", "")
    assert list_sessions(CWD, store_parts(store.storage)) == []
    line = serialize_entry(header("late000000000001"))
    store.append(path, line[:30].encode())
    assert list_sessions(CWD, store_parts(store.storage)) == []
    store.append(path, (line[30:] + "\n").encode())
    (info,) = list_sessions(CWD, store_parts(store.storage))
    assert info.id == "late000000000001"
    store.append(path, jsonl(user("x")))
    assert list_sessions(CWD, store_parts(store.storage))[0].message_count == 1


def test_rewritten_files_are_rescanned_fully(store: Store) -> None:
    d = project_dir(store)
    path = store.session(d, "rewr000000000001", user("one"), assistant("two"), title="T1")
    list_sessions(CWD, store_parts(store.storage))
    # atomic rewrite that grew (a new inode): full scan
    store.storage.reset()
    store.session(d, "rewr000000000001", user("one"), assistant("two"), user("three"), title="T2")
    (info,) = list_sessions(CWD, store_parts(store.storage))
    assert (info.title, info.message_count) == ("T2", 3)
    assert reads_of(store.storage, path)[0][0] == "iter_chunks"
    # shrunk: full scan
    store.session(d, "rewr000000000001", user("one"), title="T3")
    (info,) = list_sessions(CWD, store_parts(store.storage))
    assert (info.title, info.message_count) == ("T3", 1)


def test_in_place_edit_before_the_end_is_detected(store: Store) -> None:
    """Same inode, grown, but earlier bytes changed (e.g. a truncate+rewrite): full scan."""
    d = project_dir(store)
    path = store.session(d, "edit000000000001", user("aaaa"), assistant("b" * 200))
    list_sessions(CWD, store_parts(store.storage))
    new = jsonl(header("edit000000000001"), user("zzzz"), assistant("c" * 200), user("new"))
    writer = store.storage.open_writer(path, "w")
    writer.write_line(new)
    writer.close()
    store.touch(path)
    (info,) = list_sessions(CWD, store_parts(store.storage))
    assert (info.first_message, info.message_count) == ("zzzz", 3)


def test_title_slot_updated_in_place(store: Store) -> None:
    """omp renames by overwriting the 256-byte slot and appending a title_change."""
    d = project_dir(store)
    path = store.session(d, "slot000000000001", user("p"), slot="Before")
    assert list_sessions(CWD, store_parts(store.storage))[0].title == "Before"
    if isinstance(store.storage, FileSessionStorage):
        with open(path, "r+b") as f:
            f.write(slot_line("After").encode())
        with open(path, "ab") as f:
            f.write(jsonl(entry("title_change", title="After")).encode())
    else:
        node = store.storage._files[os.path.abspath(path)]
        node.data[:256] = slot_line("After").encode()
        node.data += jsonl(entry("title_change", title="After")).encode()
        node.mtime_ns = store.storage._tick()
    store.touch(path)
    assert list_sessions(CWD, store_parts(store.storage))[0].title == "After"
    # the same-size case: only the slot changes
    if isinstance(store.storage, FileSessionStorage):
        with open(path, "r+b") as f:
            f.write(slot_line("Third").encode())
    else:
        node.data[:256] = slot_line("Third").encode()
        node.mtime_ns = store.storage._tick()
    store.touch(path)
    assert list_sessions(CWD, store_parts(store.storage))[0].title == "Third"


def test_deleted_and_added_files(store: Store) -> None:
    d = project_dir(store)
    a = store.session(d, "a000000000000001")
    b = store.session(d, "b000000000000001")
    assert len(list_sessions(CWD, store_parts(store.storage))) == 2
    store.storage.unlink(a)
    c = store.session(d, "c000000000000001")
    assert [i.path for i in list_sessions(CWD, store_parts(store.storage))] == [c, b]
    clear_listing_cache()
    assert [i.path for i in list_sessions(CWD, store_parts(store.storage))] == [c, b]


def test_odd_text_and_file_names_round_trip_the_cache(fstore: Store, agent_dir: Path) -> None:
    d = project_dir(fstore)
    lone = '{"type":"message","id":"s","message":{"role":"user","content":"\\ud83d half"}}\n'
    a = fstore.write(
        d, "a.jsonl", jsonl(header("lone000000000001", title="t \ud800")) + lone + jsonl(user("x"))
    )
    b = fstore.write(d, os.fsdecode(b"b-\xff.jsonl"), jsonl(header("name000000000001")))
    first = list_sessions(CWD, store_parts(fstore.storage))
    assert [i.path for i in first] == [b, a]
    assert first[1].first_message == "\ud83d half" and first[1].title == "t \ud800"
    clear_listing_cache()
    fstore.storage.reset()
    again = list_sessions(CWD, store_parts(fstore.storage))
    assert again == first
    # the odd-named file is not in the db, so it alone is read again
    assert {r[1] for r in fstore.storage.read_log()} == {os.path.abspath(b)}
    with sqlite3.connect(agent_dir / "cache" / "sessions-meta.db") as conn:
        assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 1
    conn.close()


def test_stale_db_rows_are_pruned(fstore: Store, agent_dir: Path) -> None:
    d = project_dir(fstore)
    a = fstore.session(d, "a000000000000001")
    fstore.session(d, "b000000000000001")
    list_sessions(CWD, store_parts(fstore.storage))
    os.unlink(a)
    clear_listing_cache()
    fstore.session(d, "c000000000000001")
    list_sessions(CWD, store_parts(fstore.storage))
    with sqlite3.connect(agent_dir / "cache" / "sessions-meta.db") as conn:
        rows = {r[0] for r in conn.execute("SELECT path FROM files")}
    conn.close()
    assert a not in rows and len(rows) == 2


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate", "wrong-schema"])
def test_damaged_cache_db_is_rebuilt(fstore: Store, agent_dir: Path, damage: str) -> None:
    d = project_dir(fstore)
    for i in range(5):
        fstore.session(d, f"{i:016x}", user(f"p{i}"))
    first = list_sessions(CWD, store_parts(fstore.storage))
    db = agent_dir / "cache" / "sessions-meta.db"
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    if damage == "delete":
        db.unlink()
    elif damage == "garbage":
        db.write_bytes(b"this is not a database" * 400)
    elif damage == "truncate":
        db.write_bytes(db.read_bytes()[:1000])
    else:
        db.unlink()
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE files (path TEXT PRIMARY KEY, junk)")
            conn.execute("INSERT INTO files VALUES ('x', 1)")
            conn.execute("PRAGMA user_version = 1")
        conn.close()
    clear_listing_cache()
    assert list_sessions(CWD, store_parts(fstore.storage)) == first
    clear_listing_cache()
    fstore.storage.reset()
    assert list_sessions(CWD, store_parts(fstore.storage)) == first
    assert fstore.storage.read_log() == []  # served by the rebuilt cache
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 5
    conn.close()


def test_unwritable_cache_dir_still_lists(fstore: Store, agent_dir: Path) -> None:
    d = project_dir(fstore)
    fstore.session(d, "a000000000000001")
    (agent_dir / "cache").write_text("a file where the cache dir should be")
    assert len(list_sessions(CWD, store_parts(fstore.storage))) == 1


def test_parallel_scan_matches_sequential(fstore: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    for p in range(2):
        d = fstore.dir(f"--p{p}--")
        for k in range(24):
            fstore.session(d, f"{p:04x}{k:012x}", user(f"u{k}"), *[assistant("x" * 500)] * (k % 6))
    expected = [
        (i.path, i.message_count, i.first_message)
        for i in list_all_sessions(store_parts(FileSessionStorage()), cache=False)
    ]
    monkeypatch.setattr(_scan, "PARALLEL_MIN_FILES", 8)
    monkeypatch.setattr(_scan, "PARALLEL_MIN_BYTES", 1)
    calls: list[int] = []
    real = _scan.map_forked

    def spy(work: Any, items: Any, weight: Any, workers: int) -> Any:
        calls.append(workers)
        return real(work, items, weight, workers)

    monkeypatch.setattr(_scan, "map_forked", spy)
    got = list_all_sessions(store_parts(FileSessionStorage()))
    assert [(i.path, i.message_count, i.first_message) for i in got] == expected
    if threading.active_count() == 1 and (os.cpu_count() or 1) > 1 and sys.platform == "linux":
        assert calls and calls[0] >= 2
    # never with another thread alive (fork would copy its locks), nor for other storages
    jobs = [((f"/x/{i}", 1 << 20, 0, 0), None) for i in range(64)]
    assert _scan._workers_for(jobs, MemorySessionStorage()) == 1  # type: ignore[arg-type]
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert _scan._workers_for(jobs, FileSessionStorage()) == 1  # type: ignore[arg-type]


def reference(storage: Any, path: str) -> tuple[Any, ...] | None:
    """What a listing must say about `path`, computed from a full load."""
    from sessiontree.session import read_session

    loaded = read_session(path, storage)
    if loaded.header is None:
        return None
    count, first, texts, name, short = 0, None, [], None, None
    for e in loaded.entries:
        kind = e.get("type")
        if kind == "message":
            count += 1
            m = e.get("message")
            if isinstance(m, dict) and m.get("role") in ("user", "assistant"):
                text = content_text(m.get("content"))
                if text:
                    texts.append(text)
                    if first is None and m["role"] == "user":
                        first = text
        elif kind == "session_info":
            name = e["name"].strip() if isinstance(e.get("name"), str) else None
        elif kind == "title_change":
            name = e["title"] if isinstance(e.get("title"), str) else None
        elif kind == "compaction" and isinstance(e.get("shortSummary"), str):
            short = e["shortSummary"]
    slot = loaded.title_slot
    head_title = slot["title"] if slot is not None else loaded.header.get("title")
    title = next((t for t in (head_title, name, short) if isinstance(t, str) and t.strip()), None)
    return (loaded.header["id"], count, first or "(no messages)", " ".join(texts), title)


def random_line(r: random.Random) -> str:
    k = r.randrange(16)
    if k < 5:
        return serialize_entry(user(f"u{r.random():.3f} " + "é" * r.randrange(3)))
    if k < 7:
        return serialize_entry(assistant("a" * r.randrange(1, 50)))
    if k == 7:
        return serialize_entry(entry("session_info", name=r.choice(["n1", " n2 ", "", "  "])))
    if k == 8:
        return serialize_entry(entry("title_change", title=r.choice(["t1", "t2"])))
    if k == 9:
        return serialize_entry(
            entry(
                "compaction",
                summary="s",
                shortSummary=f"short{k}",
                firstKeptEntryId="x",
                tokensBefore=1,
            )
        )
    if k == 10:
        return serialize_entry(entry("custom", customType="c", data={"type": "message"}))
    if k == 11:
        return r.choice(["", "   ", "\t", "garbage{", "[1]", "null"])
    if k == 12:
        return serialize_entry(user("torn"))[: r.randrange(1, 30)]
    if k == 13:
        return '{"type": "message", "message": {"role": "user", "content": "spaced"}}\r'
    if k == 14:
        return '{"type":"label","id":"x","targetId":"y","type":"message","message":{}}'
    return serialize_entry(entry("label", targetId="y", label="l"))


@pytest.mark.parametrize("seed", range(10))
def test_listing_matches_a_full_load_while_a_file_grows(store: Store, seed: int) -> None:
    """Random valid and damaged lines, appended in random pieces (cut anywhere)."""
    r = random.Random(seed)
    d = project_dir(store)
    head = serialize_entry(header(f"grow{seed:012x}", title=r.choice([None, "H"])))
    if seed % 3 == 0:
        head = slot_line(r.choice(["Slot", ""])).rstrip("\n") + "\n" + head
    lines = [head] + [random_line(r) for _ in range(r.randrange(20, 60))]
    data = "\n".join(lines).encode() + b"\n" * r.randrange(2)
    path = store.write(d, "grow.jsonl", b"")
    pos = 0
    while pos < len(data):
        step = r.randrange(1, 300)
        store.append(path, data[pos : pos + step])
        pos += step
        if r.random() < 0.2:
            clear_listing_cache()  # next listing starts from the on-disk cache (file storage)
        infos = list_sessions(CWD, store_parts(store.storage))
        want = reference(store.storage, path)
        got = [
            (i.id, i.message_count, i.first_message, i.all_messages_text, i.title) for i in infos
        ]
        assert got == ([want] if want is not None else []), (seed, pos)


# ---------------------------------------------------------------------------- resume


@pytest.fixture
def projects(store: Store) -> dict[str, str]:
    local = project_dir(store)
    other = store.dir(encode_session_dir_name("/other/proj"))
    return {
        "exact": store.session(local, "abcdef01", user("exact")),
        "longer": store.session(local, "abcdef0123456789", user("longer")),
        "local-only": store.session(local, "1111aaaa22223333", user("l")),
        "global": store.session(other, "9999ffff00001111", user("g"), cwd="/other/proj"),
        "twin-a": store.session(other, "7777000000000001", user("t"), cwd="/other/proj"),
        "twin-b": store.session(other, "7777000000000002", user("t"), cwd="/other/proj"),
        "shadow": store.session(other, "1111aaaa99990000", user("s"), cwd="/other/proj"),
    }


def resolve(store: Store, arg: str, **kw: Any) -> tuple[str, str] | None:
    match = resolve_resumable_session(arg, CWD, storage=store.storage, **kw)
    return None if match is None else (match.session.path, match.scope)


def test_resolve_exact_beats_prefix(store: Store, projects: dict[str, str]) -> None:
    assert resolve(store, "abcdef01") == (projects["exact"], "local")
    assert resolve(store, "ABCDEF0123") == (projects["longer"], "local")
    with pytest.raises(AmbiguousSessionError) as err:
        resolve(store, "abcd")
    assert sorted(c.path for c in err.value.candidates) == sorted(
        [projects["exact"], projects["longer"]]
    )


def test_resolve_local_before_global(store: Store, projects: dict[str, str]) -> None:
    # "1111aaaa" matches one local and one global session: the local one wins
    assert resolve(store, "1111aaaa") == (projects["local-only"], "local")
    assert resolve(store, "1111AAAA9999") == (projects["shadow"], "global")
    assert resolve(store, "9999f") == (projects["global"], "global")
    with pytest.raises(AmbiguousSessionError):
        resolve(store, "7777")
    assert resolve(store, "7777000000000002") == (projects["twin-b"], "global")
    assert resolve(store, "nothing") is None


def test_resolve_by_file_name(store: Store, projects: dict[str, str]) -> None:
    name = os.path.basename(projects["global"])
    assert resolve(store, name[:-6]) == (projects["global"], "global")
    assert resolve(store, name[:-6].upper()) == (projects["global"], "global")
    assert resolve(store, name) == (projects["global"], "global")  # the bare file name
    with pytest.raises(AmbiguousSessionError):
        resolve(store, "2026-02-16T10")  # every test file starts that way


def test_resolve_with_session_dir_stays_local(store: Store, projects: dict[str, str]) -> None:
    d = os.path.dirname(projects["exact"])
    assert resolve(store, "9999", session_dir=d) is None
    assert resolve(store, "1111", session_dir=d) == (projects["local-only"], "local")


def test_resolve_direct_path(store: Store, projects: dict[str, str], tmp_path: Path) -> None:
    if not isinstance(store.storage, FileSessionStorage):
        assert resolve(store, projects["global"]) == (projects["global"], "global")
        return
    assert resolve(store, projects["global"]) == (projects["global"], "global")
    assert resolve(store, projects["exact"]) == (projects["exact"], "local")
    rel = os.path.relpath(projects["exact"], CWD)
    assert resolve(store, rel) == (projects["exact"], "local")
    outside = tmp_path / "outside.jsonl"
    outside.write_text(jsonl(header("out0000000000001")))
    assert resolve(store, str(outside)) == (str(outside), "global")
    (tmp_path / "junk.jsonl").write_text("junk\n")
    assert resolve(store, str(tmp_path / "junk.jsonl")) is None


@pytest.mark.parametrize(
    "arg",
    [
        "../x",
        "..",
        ".",
        "/etc/passwd",
        "../../../../etc/passwd",
        "a/b",
        "a\\b",
        "x\x00y",
        "line\nbreak",
        "\x1b[31m",
        "",
        "../sessions/--work-proj--",
        "/nonexistent/session.jsonl",
    ],
)
def test_resolve_rejects_traversal(store: Store, projects: dict[str, str], arg: str) -> None:
    store.storage.reset()
    assert resolve(store, arg) is None
    root = os.path.abspath(store.root / "sessions")
    assert all(r[1].startswith(root) for r in store.storage.read_log())


@pytest.mark.parametrize("how", ["listing", "foreign"])
def test_a_symlink_planted_as_the_listing_cache_is_never_followed(
    tmp_path: Path, agent_dir: Path, how: str
) -> None:
    # Review item 7 asks the same of every file the package creates: a link planted at
    # the cache's name pointed sqlite at another database, whose `files` table the
    # cache's schema change dropped.
    from sessiontree import SessionManager
    from sessiontree.listing import IMPORT_RECORDS, IdentityCache
    from tests.helpers import assistant, user

    with SessionManager.create("/proj") as sm:
        sm.append_message(user("q"))
        sm.append_message(assistant("a"))
    victim = tmp_path / "someone-elses.db"
    with sqlite3.connect(victim) as conn:
        conn.execute("CREATE TABLE files (name TEXT)")
        conn.execute("INSERT INTO files VALUES ('precious')")
    conn.close()
    before = victim.read_bytes()
    text = tmp_path / "notes.txt"
    text.write_text("keep me\n")
    cache = agent_dir / "cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    for name in os.listdir(cache):
        os.unlink(cache / name)
    db = agent_dir / CACHE_DB_NAME
    db.symlink_to(victim)
    Path(str(db) + "-wal").symlink_to(text)
    if how == "listing":
        assert len(SessionManager.list_all()) == 1
    else:
        IdentityCache(str(agent_dir), IMPORT_RECORDS).fetch(["x"])
    assert victim.read_bytes() == before and text.read_text() == "keep me\n"
    assert not any(p.is_symlink() for p in cache.iterdir())


def test_a_cache_database_path_takes_no_fifo_and_no_directory(tmp_path: Path) -> None:
    # What is planted where a cache database belongs: a FIFO is removed (sqlite would
    # block on it), a directory is refused (it may hold someone's files), a regular file
    # (the database) is left as it is.
    from sessiontree._util.fs import private_database

    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    private_database(str(fifo))
    assert fifo.is_file() and not fifo.is_symlink()
    folder = tmp_path / "dir.db"
    folder.mkdir()
    (folder / "keep").write_text("x")
    with pytest.raises(OSError):
        private_database(str(folder))
    assert (folder / "keep").read_text() == "x"
    kept = tmp_path / "kept.db"
    kept.write_bytes(b"data")
    private_database(str(kept))
    assert kept.read_bytes() == b"data"
