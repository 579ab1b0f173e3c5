"""Finding sessions: listings, the most recent session, resume-argument matching.

Listing a store of thousands of sessions must not read thousands of files, so
every scan result is cached by file identity (path, size, mtime_ns, inode, ctime_ns;
see `stat_identity`):

* in process, for every storage (a repeated listing only stats the files);
* on disk for `FileSessionStorage`, in ``<agent dir>/cache/sessions-meta.db``
  (SQLite, 0600, rebuilt transparently when missing or corrupt), so a fresh
  process lists an unchanged store without opening a single session file.

A file that only grew since it was scanned (same inode, larger, the bytes
around the old end and the header unchanged) is scanned from the last complete
line onward, with the scanner state saved at that point; anything else is
rescanned from the start. `SessionInfo.all_messages_text` is not cached (it can
be as big as the transcript): it is read on first access.

Typical use::

    for info in list_sessions("/work/repo"):
        print(info.modified, info.title or info.first_message)
    match = resolve_resumable_session("01a2", cwd="/work/repo")
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, overload

import orjson

from sessiontree._util.fs import private_database, utf8_encodable
from sessiontree.errors import AmbiguousSessionError
from sessiontree.format import (
    content_text,
    entry_name,
    head_kind,
    head_title,
    listing_title,
    loads_line,
    parse_iso_ms,
    serialize_entry_bytes,
    session_name,
)
from sessiontree.layout import (
    get_agent_dir,
    get_default_session_dir,
    home_relative_dir_name,
    is_safe_name,
)
from sessiontree.storage import (
    FileSessionStorage,
    HostFilesystem,
    SessionIndexStorage,
    SessionStorage,
    StorageStat,
    directory_tree,
    ensure_private_dir,
    read_chunks,
    read_range,
    read_range_chunks,
)

__all__ = [
    "CACHE_DB_NAME",
    "PREFIX_BYTES",
    "UNTRUSTED",
    "FileMark",
    "RecentSessionInfo",
    "ResolvedSessionMatch",
    "SessionInfo",
    "add_ctime_column",
    "clear_listing_cache",
    "find_most_recent_session",
    "get_recent_sessions",
    "list_all_sessions",
    "list_sessions",
    "mark_file",
    "only_appended",
    "resolve_resumable_session",
    "same_identity",
    "stat_identity",
]

PREFIX_BYTES = 4096
"""How much of each file the light lookups (recent sessions, most recent) read."""

CACHE_DB_NAME = os.path.join("cache", "sessions-meta.db")
"""The persistent listing cache, relative to the agent dir."""

NO_MESSAGES = "(no messages)"
NAME_WIDTH = 40

_SCHEMA_VERSION = 1
_SQLITE_ERROR = 1
_CHUNK = 1 << 20
# Before a scan resumes where the last one stopped (the file only grew), the start of
# the file and the bytes before the old end must be as they were. Each window is at
# least 16 KB: a rewrite that keeps the size of the start and the end but changes the
# first entries (a peer's `writeFileSync` after an edit) is seen, and a file of up to
# 32 KB is compared whole. A big file rewritten in its middle alone is not.
_HEAD_CHECK = 16 * 1024
_HEAD_MAX = 64 * 1024  # the header line (title slot included) may be longer
_TAIL_CHECK = 16 * 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_BOM = b"\xef\xbb\xbf"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# ---------------------------------------------------------------------------- records


class _TextLoader:
    """Reads a session's user/assistant text when `all_messages_text` is first used."""

    __slots__ = ("path", "size", "storage")

    def __init__(self, storage: SessionStorage, path: str, size: int) -> None:
        self.storage = storage
        self.path = path
        self.size = size

    def __call__(self) -> str:
        texts: list[str] = []
        try:
            _scan_file(self.storage, self.path, self.size, None, texts)
        except OSError:
            return ""
        return " ".join(texts)


class _LazyText:
    """The descriptor behind `SessionInfo.all_messages_text`.

    It holds a string, or a loader run (once) on first access. Assignment goes
    through `__set__`, so the frozen dataclass's `__init__` accepts either.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = "_" + name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _LazyText: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> str: ...
    def __get__(self, obj: object | None, objtype: type | None = None) -> str | _LazyText:
        if obj is None:
            return self
        value = obj.__dict__.get(self._attr, "")
        if isinstance(value, _TextLoader):
            value = value()
            obj.__dict__[self._attr] = value
        assert isinstance(value, str)
        return value

    def __set__(self, obj: object, value: str | _TextLoader | _LazyText) -> None:
        # The dataclass passes the descriptor itself as the default value.
        obj.__dict__[self._attr] = "" if value is self else value


@dataclass(frozen=True)
class SessionInfo:
    """Metadata of one session file, as listings return it.

    `all_messages_text` (every user/assistant text, joined by a space as both peers do) is read
    from the file on first access when the listing came from the cache; it takes
    no part in equality or repr.
    """

    path: str
    id: str
    cwd: str
    title: str | None
    parent_session_path: str | None
    created: datetime
    modified: datetime
    message_count: int
    first_message: str
    all_messages_text: _LazyText = field(default=_LazyText(), compare=False, repr=False)
    size: int = field(default=-1, compare=False, repr=False)
    """The file's size in bytes when it was listed (-1: not known to this listing)."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_all_messages_text"] = self.all_messages_text  # never pickle a loader
        return state


@dataclass(frozen=True, slots=True)
class RecentSessionInfo:
    """Light metadata for a session picker (from a 4 KB prefix of the file)."""

    path: str
    mtime: datetime
    full_name: str
    """Title, else first user prompt, else the session id (first line, no control chars)."""
    name: str
    """`full_name` cut to 40 characters, "…" being the 40th when cut."""
    time_ago: str
    """"just now", "5m ago", "3h ago", "2d ago", else the local date ("2026-02-16")."""


@dataclass(frozen=True, slots=True)
class ResolvedSessionMatch:
    """A resume argument's session and where it was found."""

    session: SessionInfo
    scope: Literal["local", "global"]


# ---------------------------------------------------------------------------- scanning

_START, _OK, _INVALID = 0, 1, 2


@dataclass(slots=True)
class _State:
    """What a scan knows after some prefix of a file (saved to resume on growth)."""

    phase: int = _START
    slot: bool = False
    slot_title: str | None = None
    id: str = ""
    cwd: str = ""
    created_ms: int | None = None
    header_title: str | None = None
    parent: str | None = None
    name: str | None = None  # latest session_info name / title_change title
    short_summary: str | None = None
    count: int = 0
    first: str | None = None

    def dump(self) -> bytes:
        # serialize_entry_bytes, not orjson.dumps: texts may hold lone surrogates.
        return serialize_entry_bytes(
            [
                self.phase,
                self.slot,
                self.slot_title,
                self.id,
                self.cwd,
                self.created_ms,
                self.header_title,
                self.parent,
                self.name,
                self.short_summary,
                self.count,
                self.first,
            ]
        )

    @classmethod
    def load(cls, blob: bytes) -> _State:
        values = loads_line(blob)
        if not isinstance(values, list) or len(values) != 12:
            raise ValueError("bad scanner state")
        return cls(*values)

    def title(self) -> str | None:
        """`SessionInfo.title` by the rule in `sessiontree.format._naming`."""
        title = head_title(self.slot, self.slot_title, self.header_title)
        return listing_title(session_name(title, self.name), self.short_summary)


_FAIL = object()


def _parse_slow(line: bytes) -> Any:
    try:
        return loads_line(line)
    except (ValueError, UnicodeError):
        return _FAIL


def _feed_head(st: _State, line: bytes, first_line: bool) -> None:
    """A line before the header: the title slot (line 1 only), the header, or junk."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        obj = _parse_slow(line)
    if not isinstance(obj, dict):
        return  # blank, malformed or non-object lines are skipped, as the loader does
    kind = head_kind(obj, first_line)
    if kind == "slot":
        st.slot = True
        title = obj.get("title")
        st.slot_title = title if isinstance(title, str) else None
        return
    if kind == "invalid":
        st.phase = _INVALID
        return
    st.phase = _OK
    st.id = obj["id"]
    cwd = obj.get("cwd")
    st.cwd = cwd if isinstance(cwd, str) else ""
    st.created_ms = parse_iso_ms(obj.get("timestamp"))
    title = obj.get("title")
    st.header_title = title if isinstance(title, str) else None
    parent = obj.get("parentSession")
    st.parent = parent if isinstance(parent, str) else None


def _apply(st: _State, obj: dict[str, Any], texts: list[str] | None) -> None:
    kind = obj.get("type")
    if kind == "message":
        st.count += 1
        if st.first is None or texts is not None:
            message = obj.get("message")
            if isinstance(message, dict):
                role = message.get("role")
                if role == "user" or role == "assistant":
                    text = content_text(message.get("content"))
                    if text:
                        if texts is not None:
                            texts.append(text)
                        if st.first is None and role == "user":
                            st.first = text
    elif kind == "session_info" or kind == "title_change":
        st.name = entry_name(obj)  # the latest name entry decides; a blank one clears
    elif kind == "compaction":
        short = obj.get("shortSummary")
        if isinstance(short, str):
            st.short_summary = short


# Entry kinds whose lines must be parsed; any other line that starts with
# `{"type":"<kind>"` (as JSON.stringify writes every entry) is skipped without
# parsing unless it contains one of the markers, which covers nested or duplicate
# "type" keys, whitespace variants and \u-escaped type names.
_WANTED = frozenset({b"message", b"session_info", b"title_change", b"compaction"})
_MARKERS = (b'"message"', b'"session_info"', b'"title_change"', b'"compaction"', b"\\u")
_TYPE_PREFIX = b'{"type":"'
_MESSAGE_PREFIX = b'{"type":"message",'


@dataclass(slots=True)
class _Scan:
    """The outcome of scanning a file up to a known size."""

    offset: int  # end of the last complete line (where a resumed scan starts)
    state: _State  # scanner state at `offset`
    final: _State  # state after an unterminated last line (may be `state` itself)
    head_len: int
    head: bytes
    tail: bytes


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _scan_chunks(
    chunks: Iterable[bytes],
    size: int,
    offset: int,
    state: _State | None,
    texts: list[str] | None,
) -> tuple[int, _State, _State, int, bytes, bytes]:
    """Scan `size - offset` bytes of chunks starting at file offset `offset`.

    Returns (committed offset, committed state, final state, head length, head
    bytes, last bytes); head fields are only meaningful when `offset == 0`.
    """
    st = state if state is not None else _State()
    remaining = size - offset
    base = offset  # file offset of `pending`'s first byte
    pending = b""
    head = b""
    tail = b""
    head_len = 0
    at_start = offset == 0
    first_line = at_start
    for chunk in chunks if st.phase != _INVALID else ():
        if remaining <= 0:
            break
        if len(chunk) > remaining:
            chunk = chunk[:remaining]
        remaining -= len(chunk)
        if at_start and len(head) < _HEAD_MAX:
            head += chunk[: _HEAD_MAX - len(head)]
        tail = (tail + chunk)[-_TAIL_CHECK:] if len(chunk) < _TAIL_CHECK else chunk[-_TAIL_CHECK:]
        data = pending + chunk if pending else chunk
        if first_line and base == 0 and data.startswith(_BOM):
            data = data[3:]
            base = 3
        lines = data.split(b"\n")
        pending = lines.pop()
        rest: list[bytes] = lines
        if st.phase == _START:
            pos = base
            i = 0
            for line in lines:
                i += 1
                if line and not line.isspace():
                    _feed_head(st, line, first_line)
                first_line = False
                pos += len(line) + 1
                if st.phase != _START:
                    head_len = min(max(pos, _HEAD_CHECK), _HEAD_MAX)
                    break
            rest = lines[i:]
        if st.phase == _INVALID:
            break
        if st.phase == _OK:
            _scan_body(st, rest, texts)
        base += len(data) - len(pending)
    if st.phase == _INVALID:
        return size, st, st, head_len, head, tail
    final = st
    if pending and not pending.isspace():
        final = dataclasses.replace(st)
        _feed_line(final, pending, first_line, texts)
    if st.phase == _START:
        # Nothing decided yet: a resumed scan must start over at line 1.
        if final.phase != _START:
            head_len = min(size, _HEAD_MAX)
        return 0, _State(), final, head_len, head, tail
    return base, st, final, head_len, head, tail


def _scan_body(st: _State, lines: list[bytes], texts: list[str] | None) -> None:
    """Feed complete entry lines (after the header) into `st`: the hot loop."""
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    message_prefix = _MESSAGE_PREFIX
    type_prefix = _TYPE_PREFIX
    wanted = _WANTED
    markers = _MARKERS
    need_text = texts is not None or st.first is None
    count = 0  # messages that only needed counting
    obj: Any
    for line in lines:
        if line.startswith(message_prefix):
            try:
                obj = loads(line)
            except decode_error:
                obj = _parse_slow(line)
            if not need_text and type(obj) is dict and obj.get("type") == "message":
                count += 1
                continue
        elif not line:
            continue
        elif (
            line.startswith(type_prefix)
            and line[9 : line.find(b'"', 9)] not in wanted
            and not any(m in line for m in markers)
        ):
            continue
        else:
            try:
                obj = loads(line)
            except decode_error:
                obj = _parse_slow(line)
        if isinstance(obj, dict):
            _apply(st, obj, texts)
            need_text = texts is not None or st.first is None
    st.count += count


def _feed_line(st: _State, line: bytes, first_line: bool, texts: list[str] | None) -> None:
    if st.phase == _START:
        _feed_head(st, line, first_line)
    elif st.phase == _OK:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            obj = _parse_slow(line)
        if isinstance(obj, dict):
            _apply(st, obj, texts)


def _scan_file(
    storage: SessionStorage,
    path: str,
    size: int,
    resume: _Record | None,
    texts: list[str] | None = None,
) -> _Scan:
    """Scan `path` up to `size` bytes, from scratch or from a cached record."""
    if resume is not None and resume.offset > 0:
        st = dataclasses.replace(resume.committed())
        offset = resume.offset
        chunks: Iterable[bytes] = (
            read_range_chunks(storage, path, offset, None, _CHUNK) if st.phase != _INVALID else ()
        )
    else:
        resume = None
        st = _State()
        offset = 0
        chunks = read_chunks(storage, path, _CHUNK)
    try:
        committed, state, final, head_len, head, tail = _scan_chunks(
            chunks, size, offset, st, texts
        )
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    want = min(_TAIL_CHECK, size)
    if len(tail) < want:
        tail = read_range(storage, path, size - want, want)
    if resume is not None:
        head_len, head_digest = resume.head_len, resume.head
    else:
        head_len = min(head_len, len(head))  # a file shorter than the window
        head_digest = _digest(head[:head_len])
    return _Scan(committed, state, final, head_len, head_digest, _digest(tail[-want:]))


# ---------------------------------------------------------------------------- file identity

UNTRUSTED: int = -1
"""The ctime a cache keeps for a file it read within the file's timestamp tick: equal
to no ctime, so the next look reads the file again."""
_TICK_NS = 20_000_000
"""Longest tick of the clock file timestamps come from (jiffies: 10 ms at HZ=100)."""
_COARSE_TICK_NS = 2_000_000_000
"""The tick of file systems that keep whole seconds (ext3, HFS+) or even ones (FAT)."""


def _now_ns() -> int:
    """The clock that file timestamps are taken from (tests move it)."""
    return time.time_ns()


_CTIME_MOVES = True
"""Whether a write moves the ctime past what a stat saw (tests play a kernel whose
ctime is no finer than its mtime, where only the racy-read rule catches a rewrite)."""


def _racy(mtime_ns: int, now_ns: int) -> bool:
    """Whether a file with this mtime, read at `now_ns`, may still change within the
    mtime's tick (then nothing a stat shows would tell)."""
    tick = _COARSE_TICK_NS if mtime_ns % 1_000_000_000 == 0 else _TICK_NS
    return -tick < now_ns - mtime_ns < tick


def stat_identity(st: os.stat_result, now_ns: int | None = None) -> tuple[int, int, int, int]:
    """What a cache compares to tell that a file is as it was read: (size, mtime_ns,
    ino, ctime_ns). `now_ns`: a time before the file is read (default: now).

    Size, mtime and inode alone miss a rewrite in place (a peer's `writeFileSync`)
    that keeps the size within one timestamp tick. Every write moves the ctime, and
    nothing can set it back (`utime` moves it too); but a kernel may stamp ctime as
    coarsely as mtime, so a file stat'ed within its mtime's tick may still change
    unseen: its ctime is `UNTRUSTED`, so the read made now is not trusted later
    (git's "racily clean" files). That costs one more read of a file written in the
    last few milliseconds (2 s on file systems with whole-second timestamps).
    """
    mtime_ns = st.st_mtime_ns
    if _racy(mtime_ns, _now_ns() if now_ns is None else now_ns):
        ctime_ns = UNTRUSTED
    else:
        ctime_ns = st.st_ctime_ns if _CTIME_MOVES else 0
    return st.st_size, mtime_ns, st.st_ino, ctime_ns


def add_ctime_column(conn: sqlite3.Connection, table: str) -> None:
    """Give a cache table from before `ctime_ns` was kept that column.

    Its rows get `UNTRUSTED` (each file is read once more), and so do the rows an
    older sessiontree still writes there: it names the columns it knows.
    """
    if any(row[1] == "ctime_ns" for row in conn.execute(f"PRAGMA table_info({table})")):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not any(row[1] == "ctime_ns" for row in conn.execute(f"PRAGMA table_info({table})")):
            conn.execute(
                f"ALTER TABLE {table} ADD COLUMN ctime_ns INTEGER NOT NULL DEFAULT {UNTRUSTED}"
            )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def same_identity(stored: tuple[int, ...], current: tuple[int, ...]) -> bool:
    """Whether a file whose `stat_identity` is `current` is unchanged since `stored`
    was taken (a read within a tick, `UNTRUSTED`, never is)."""
    return current[-1] != UNTRUSTED and stored == current


# ---------------------------------------------------------------------------- cache records


@dataclass(slots=True, eq=False)
class _Record:
    """A cached scan of one file at one identity (size, mtime_ns, ino, ctime_ns)."""

    size: int
    mtime_ns: int
    ino: int
    ctime_ns: int
    offset: int
    head_len: int
    head: bytes
    tail: bytes
    final: _State
    state_blob: bytes | None  # committed state when it differs from `final`
    state: _State | None = None
    info: SessionInfo | None = None
    built: bool = False

    def same_as(self, s: _Stat) -> bool:
        """Whether the file listed as `s` is as this record read it (`same_identity`,
        field by field: a listing asks this of every file)."""
        return (
            s[4] != UNTRUSTED
            and self.ctime_ns == s[4]
            and self.mtime_ns == s[2]
            and self.size == s[1]
            and self.ino == s[3]
        )

    def committed(self) -> _State:
        if self.state is None:
            self.state = self.final if self.state_blob is None else _State.load(self.state_blob)
        return self.state

    def session_info(self, path: str, storage: SessionStorage) -> SessionInfo | None:
        if not self.built:
            self.info = _make_info(path, self, storage)
            self.built = True
        return self.info


def _record(scan: _Scan, s: _Stat) -> _Record:
    same = scan.state is scan.final
    return _Record(
        size=s[1],
        mtime_ns=s[2],
        ino=s[3],
        ctime_ns=s[4],
        offset=scan.offset,
        head_len=scan.head_len,
        head=scan.head,
        tail=scan.tail,
        final=scan.final,
        state_blob=None if same else scan.state.dump(),
        state=scan.state,
    )


def _from_ms(ms: int | None, fallback: datetime) -> datetime:
    if ms is None:
        return fallback
    try:
        return _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return fallback


def _make_info(path: str, rec: _Record, storage: SessionStorage) -> SessionInfo | None:
    st = rec.final
    if st.phase != _OK:
        return None
    modified = _EPOCH + timedelta(microseconds=rec.mtime_ns // 1000)
    # What SessionInfo(...) does, minus ten object.__setattr__ calls: a fresh
    # process builds thousands of these from the cache.
    info: SessionInfo = object.__new__(SessionInfo)
    info.__dict__.update(
        path=path,
        id=st.id,
        cwd=st.cwd,
        title=st.title(),
        parent_session_path=st.parent,
        created=_from_ms(st.created_ms, modified),
        modified=modified,
        message_count=st.count,
        first_message=st.first or NO_MESSAGES,
        _all_messages_text=_TextLoader(storage, path, rec.size),
        size=rec.size,
    )
    return info


class FileMarkLike(Protocol):
    """What a reader of a growing file remembers about it (see `FileMark`)."""

    @property
    def size(self) -> int: ...
    @property
    def ino(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def head_len(self) -> int: ...
    @property
    def head(self) -> bytes: ...
    @property
    def tail(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class FileMark:
    """A file's identity when it was read, and where reading may resume.

    The listing cache keeps one per file and so does the content index
    (`sessiontree.search._content_index`): `only_appended` tells from it whether the file
    only grew since, so that only the bytes after `offset` need reading.
    """

    size: int
    mtime_ns: int
    ino: int
    offset: int
    """End of the last complete line read (where a resumed read starts)."""
    head_len: int
    """Bytes of the file start (title slot + header, at most 4 KB) whose digest is `head`."""
    head: bytes
    tail: bytes
    """Digest of the (at most 64) bytes before `size`."""


def mark_file(
    storage: SessionStorage,
    path: str,
    size: int,
    mtime_ns: int,
    ino: int,
    offset: int,
    head_len: int,
) -> FileMark:
    """A `FileMark` for `path` read up to `size` bytes (reads the head and the tail bytes)."""
    head_len = min(max(head_len, _HEAD_CHECK), _HEAD_MAX, size) if head_len else 0
    head = read_range(storage, path, 0, head_len) if head_len else b""
    want = min(_TAIL_CHECK, size)
    tail = read_range(storage, path, size - want, want) if want else b""
    return FileMark(size, mtime_ns, ino, offset, head_len, _digest(head), _digest(tail))


def only_appended(
    storage: SessionStorage, path: str, old: FileMarkLike, size: int, ino: int
) -> bool:
    """Whether the file only had bytes appended since `old` was taken: same inode,
    larger, and the head and the bytes before the old end unchanged."""
    if ino != old.ino or size <= old.size or old.offset <= 0:
        return False
    try:
        if old.head_len:
            if _digest(read_range(storage, path, 0, old.head_len)) != old.head:
                return False
        want = min(_TAIL_CHECK, old.size)
        end = read_range(storage, path, old.size - want, want)
    except OSError:
        return False
    return _digest(end) == old.tail


_grew = only_appended


def _rescan(storage: SessionStorage, s: _Stat, old: _Record | None) -> _Record | None:
    """A fresh record for the file listed as `s` (incremental when it only grew); None
    if it vanished."""
    path, size, _, ino, _ = s
    try:
        resume = old if old is not None and _grew(storage, path, old, size, ino) else None
        return _record(_scan_file(storage, path, size, resume), s)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
        return None
    except OSError:
        return None


# ---------------------------------------------------------------------------- enumeration

_Stat = tuple[str, int, int, int, int]  # path and `stat_identity`; no ctime (0) but on files


def _stat_dir(directory: str, storage: SessionStorage, now_ns: int) -> list[_Stat]:
    """`*.jsonl` files directly in `directory` with their identity (stat'ed at `now_ns`)."""
    out: list[_Stat] = []
    if isinstance(storage, SessionIndexStorage):  # [storage index] one query, no stat per file
        try:
            return [
                (m.path, m.size, m.mtime_ns, m.ino, 0) for m in storage.list_session_meta(directory)
            ]
        except OSError:
            return []
    if isinstance(storage, HostFilesystem):
        # One scandir instead of list_files + stat: the DirEntry carries the file type.
        # `stat_identity` inlined: a listing stats every file of the store.
        ctime_moves = _CTIME_MOVES
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    name = entry.name
                    if not name.endswith(".jsonl") or name.startswith("."):
                        continue
                    try:
                        if not entry.is_file():
                            continue
                        st = entry.stat()
                    except OSError:
                        continue
                    mtime_ns = st.st_mtime_ns
                    if -_COARSE_TICK_NS < now_ns - mtime_ns < _COARSE_TICK_NS and _racy(
                        mtime_ns, now_ns
                    ):
                        ctime_ns = UNTRUSTED
                    else:
                        ctime_ns = st.st_ctime_ns if ctime_moves else 0
                    out.append((entry.path, st.st_size, mtime_ns, st.st_ino, ctime_ns))
        except OSError:
            return []
        return out
    try:
        files = storage.list_files(directory, "*.jsonl")
    except OSError:
        return []
    for path in files:
        try:
            s = storage.stat(path)
        except OSError:
            continue
        out.append((path, s.size, s.mtime_ns or int(s.mtime_ms * 1e6), s.ino, 0))
    return out


def _project_dirs(root: str, storage: SessionStorage) -> list[str]:
    if isinstance(storage, HostFilesystem):
        try:
            with os.scandir(root) as entries:
                return sorted(e.path for e in entries if e.is_dir())
        except OSError:
            return []
    try:
        return directory_tree(storage, "listing every project").list_dirs(root)
    except OSError:
        return []


# ---------------------------------------------------------------------------- caches

_DirCache = dict[str, dict[str, _Record]]  # directory -> path -> record

_lock = threading.Lock()
_file_cache: _DirCache = {}
_other_caches: weakref.WeakKeyDictionary[object, _DirCache] = weakref.WeakKeyDictionary()


def _forked() -> None:
    # Another thread may have held the lock at the fork: it stays held in the child,
    # where that thread does not exist, and the child's first listing would wait forever.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)


def _memory_cache(storage: SessionStorage) -> _DirCache | None:
    if isinstance(storage, HostFilesystem):
        return _file_cache  # every instance sees the same filesystem
    try:
        cache = _other_caches.get(storage)
        if cache is None:
            cache = _other_caches[storage] = {}
    except TypeError:  # not weak-referenceable: no cache
        return None
    return cache


def clear_listing_cache() -> None:
    """Forget the in-process scan cache (the on-disk cache stays)."""
    with _lock:
        _file_cache.clear()
        _other_caches.clear()


_COLUMNS = "path, size, mtime_ns, ino, ctime_ns, scan_offset, head_len, head, tail, state, final"
_CREATE = """CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL DEFAULT -1,
    scan_offset INTEGER NOT NULL,
    head_len INTEGER NOT NULL,
    head BLOB NOT NULL,
    tail BLOB NOT NULL,
    state BLOB,
    final BLOB NOT NULL
) WITHOUT ROWID"""
assert _COLUMNS.count(",") == 10


class _MetaDB:
    """The on-disk scan cache. Every failure degrades to "no cache": a corrupt file
    is deleted and rebuilt once, a locked or unwritable one is skipped."""

    def __init__(self, agent_dir: str) -> None:
        self.agent_dir = agent_dir
        self.path = os.path.join(agent_dir, CACHE_DB_NAME)

    def _connect(self) -> sqlite3.Connection | None:
        if not os.path.isdir(self.agent_dir):
            return None  # never create an agent dir just to hold a cache
        directory = os.path.dirname(self.path)
        ensure_private_dir(directory)
        private_database(self.path)  # sqlite follows links: a planted one goes first
        conn = sqlite3.connect(self.path, timeout=2.0, isolation_level=None)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version != _SCHEMA_VERSION:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("BEGIN IMMEDIATE")
                if conn.execute("PRAGMA user_version").fetchone()[0] != _SCHEMA_VERSION:
                    conn.execute("DROP TABLE IF EXISTS files")
                    conn.execute(_CREATE)
                    conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
                conn.execute("COMMIT")
            add_ctime_column(conn, "files")
            conn.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            conn.close()
            raise
        return conn

    def _reset(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(self.path + suffix)
            except FileNotFoundError:
                pass

    def _run(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        for attempt in range(2):
            try:
                conn = self._connect()
                if conn is None:
                    return None
                with closing(conn):
                    return fn(conn)
            except sqlite3.OperationalError as exc:
                # Locked, read-only, unreachable, disk full: just go without. A plain
                # SQLITE_ERROR ("no such column") means a foreign schema: rebuild.
                if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) != _SQLITE_ERROR or attempt:
                    return None
                try:
                    self._reset()
                except OSError:
                    return None
            except (sqlite3.DatabaseError, ValueError, TypeError):
                # Not a database / malformed / garbage rows: start over once.
                if attempt:
                    return None
                try:
                    self._reset()
                except OSError:
                    return None
            except OSError:
                return None
        return None

    def fetch(self, directories: Iterable[str]) -> dict[str, _Record]:
        def run(conn: sqlite3.Connection) -> dict[str, _Record]:
            found: dict[str, _Record] = {}
            query = f"SELECT {_COLUMNS} FROM files WHERE path >= ? AND path < ?"
            for directory in directories:
                if not utf8_encodable(directory):
                    continue
                low = directory.rstrip(os.sep) + os.sep
                high = low[:-1] + chr(ord(os.sep) + 1)
                start = len(low)
                for row in conn.execute(query, (low, high)):
                    path = row[0]
                    if path.find(os.sep, start) >= 0:
                        continue  # in a subdirectory
                    found[path] = _Record(
                        size=row[1],
                        mtime_ns=row[2],
                        ino=row[3],
                        ctime_ns=row[4],
                        offset=row[5],
                        head_len=row[6],
                        head=row[7],
                        tail=row[8],
                        state_blob=row[9],
                        final=_State.load(row[10]),
                    )
            return found

        result: dict[str, _Record] | None = self._run(run)
        return result or {}

    def store(self, records: list[tuple[str, _Record]], stale: list[str]) -> None:
        rows = [
            (
                path,
                r.size,
                r.mtime_ns,
                r.ino,
                r.ctime_ns,
                r.offset,
                r.head_len,
                r.head,
                r.tail,
                r.state_blob,
                r.final.dump(),
            )
            for path, r in records
            if utf8_encodable(path)
        ]
        stale = [p for p in stale if utf8_encodable(p)]

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    f"INSERT OR REPLACE INTO files ({_COLUMNS}) VALUES ({'?,' * 10}?)", rows
                )
                conn.executemany("DELETE FROM files WHERE path = ?", [(p,) for p in stale])
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        if rows or stale:
            self._run(run)


# ---------------------------------------------------------------------------- listing core


_Job = tuple[_Stat, "_Record | None"]

PARALLEL_MIN_FILES = 64
"""Scan in worker processes from this many files to (re)scan on..."""
PARALLEL_MIN_BYTES = 16 << 20
"""...holding at least this many bytes (below that, starting workers costs more)."""
MAX_WORKERS = 4


def _scan_batch(jobs: list[_Job]) -> list[_Record | None]:
    storage = FileSessionStorage()
    return [_rescan(storage, s, old) for s, old in jobs]


def _workers_for(jobs: list[_Job], storage: SessionStorage) -> int:
    """How many processes to scan with (1: in this process).

    orjson holds the GIL, so threads gain nothing (measured: 2 threads took as
    long as 1); forked processes do (2 workers: 1.4x on 2 busy cores). Forking
    is only safe while this process runs no other thread, and only worth it for
    a large cold scan of real files.
    """
    if type(storage) is not FileSessionStorage or sys.platform != "linux":
        return 1
    if len(jobs) < PARALLEL_MIN_FILES or threading.active_count() != 1:
        return 1
    pending = sum(s[1] - (old.offset if old is not None else 0) for s, old in jobs)
    if pending < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1, len(jobs) // 16))


def _scan_parallel(jobs: list[_Job], workers: int) -> list[_Record | None]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Largest files first, dealt round-robin, so the batches weigh about the same.
    order = sorted(range(len(jobs)), key=lambda i: jobs[i][0][1], reverse=True)
    batches = [order[k :: workers * 4] for k in range(workers * 4)]
    results: list[_Record | None] = [None] * len(jobs)
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        for batch, records in zip(
            batches, pool.map(_scan_batch, [[jobs[i] for i in b] for b in batches]), strict=True
        ):
            for i, record in zip(batch, records, strict=True):
                results[i] = record
    return results


def _scan_jobs(jobs: list[_Job], storage: SessionStorage) -> list[_Record | None]:
    workers = _workers_for(jobs, storage)
    if workers > 1:
        try:
            return _scan_parallel(jobs, workers)
        except Exception:  # a broken pool, no fork, no /dev/shm: scan here instead
            pass
    return [_rescan(storage, s, old) for s, old in jobs]


def _collect(
    directories: list[str],
    storage: SessionStorage,
    agent_dir: str | None,
    cache: bool,
) -> list[SessionInfo]:
    """Every valid session in `directories`, newest modified first."""
    seen: set[str] = set()
    dirs = []
    for d in directories:
        d = os.path.abspath(d)
        if d not in seen:
            seen.add(d)
            dirs.append(d)
    if isinstance(storage, SessionIndexStorage):  # [storage index] no session file is read
        return _collect_indexed(dirs, storage)
    now_ns = _now_ns()  # before any file is read: see `stat_identity`
    listing = {d: _stat_dir(d, storage, now_ns) for d in dirs}
    memory = _memory_cache(storage) if cache else None
    records: dict[str, _Record | None] = {}
    misses: list[tuple[str, _Stat, _Record | None]] = []
    with _lock:
        for d, stats in listing.items():
            known = memory.get(d) if memory is not None else None
            for s in stats:
                rec = known.get(s[0]) if known is not None else None
                if rec is not None and rec.same_as(s):
                    records[s[0]] = rec
                else:
                    misses.append((d, s, rec))
    db = None
    if cache and misses and isinstance(storage, HostFilesystem):
        db = _MetaDB(agent_dir if agent_dir is not None else get_agent_dir())
    fresh: list[tuple[str, str, _Record]] = []  # (dir, path, record) loaded or scanned now
    stale_db: list[str] = []
    if db is not None:
        miss_dirs = sorted({d for d, _, _ in misses})
        stored = db.fetch(miss_dirs)
        listed = {s[0] for d in miss_dirs for s in listing[d]}
        stale_db = [p for p in stored if p not in listed]
        todo: list[tuple[str, _Stat, _Record | None]] = []
        for d, s, rec in misses:
            row = stored.get(s[0])
            if row is not None and row.same_as(s):
                records[s[0]] = row
                fresh.append((d, s[0], row))
            else:
                todo.append((d, s, rec if rec is not None else row))
        misses = todo
    scanned: list[tuple[str, _Record]] = []
    results = _scan_jobs([(s, rec) for _, s, rec in misses], storage)
    for (d, s, _), rec in zip(misses, results, strict=True):
        records[s[0]] = rec
        if rec is not None:
            fresh.append((d, s[0], rec))
            scanned.append((s[0], rec))
    if db is not None and (scanned or stale_db):
        db.store(scanned, stale_db)
    if memory is not None:
        _remember(memory, listing, fresh)
    return _newest_first(dirs, listing, records, storage)


def _remember(
    memory: dict[str, dict[str, _Record]],
    listing: dict[str, list[_Stat]],
    fresh: list[tuple[str, str, _Record]],
) -> None:
    """Keep this listing in the in-process cache (files gone from a dir are forgotten)."""
    with _lock:
        for d, stats in listing.items():
            known = memory.get(d)
            if known is None:
                known = memory[d] = {}
            elif known:
                present = {s[0] for s in stats}
                for p in [p for p in known if p not in present]:
                    del known[p]
        for d, p, rec in fresh:
            memory[d][p] = rec


def _newest_first(
    dirs: list[str],
    listing: dict[str, list[_Stat]],
    records: dict[str, _Record | None],
    storage: SessionStorage,
) -> list[SessionInfo]:
    ordered: list[tuple[int, datetime, str, SessionInfo]] = []
    for d in dirs:
        for s in listing[d]:
            found = records.get(s[0])
            if found is not None:
                info = found.session_info(s[0], storage)
                if info is not None:
                    ordered.append((found.mtime_ns, info.created, s[0], info))
    ordered.sort(key=lambda t: (t[0], t[1], t[2]), reverse=True)
    return [t[3] for t in ordered]


# [storage index] A backend that keeps each session's metadata up to date as it
# writes (SessionIndexStorage: PostgreSQL) answers listings from it, one query per
# directory; the fields follow `_State` (see SessionMeta).
def _collect_indexed(dirs: list[str], storage: SessionIndexStorage) -> list[SessionInfo]:
    ordered: list[tuple[int, datetime, str, SessionInfo]] = []
    for d in dirs:
        try:
            metas = storage.list_session_meta(d)
        except OSError:
            continue
        for m in metas:
            if not m.valid or m.id is None:
                continue
            info: SessionInfo = object.__new__(SessionInfo)  # as _make_info builds them
            info.__dict__.update(
                path=m.path,
                id=m.id,
                cwd=m.cwd or "",
                title=m.title,
                parent_session_path=m.parent_session,
                created=_from_ms(parse_iso_ms(m.created), m.mtime),
                modified=m.mtime,
                message_count=m.message_count,
                first_message=m.first_message or NO_MESSAGES,
                _all_messages_text=_TextLoader(storage, m.path, m.size),  # type: ignore[arg-type]
                size=m.size,
            )
            ordered.append((m.mtime_ns, info.created, m.path, info))
    ordered.sort(key=lambda t: (t[0], t[1], t[2]), reverse=True)
    return [t[3] for t in ordered]


def _sessions_root(agent_dir: str | None) -> str:
    return os.path.join(agent_dir if agent_dir is not None else get_agent_dir(), "sessions")


def _local_dirs(
    cwd: str, session_dir: str | None, storage: SessionStorage, agent_dir: str | None
) -> list[str]:
    if session_dir is not None:
        return [session_dir]
    dirs = [get_default_session_dir(cwd, agent_dir)]
    newer = home_relative_dir_name(cwd)
    if newer is not None and is_safe_name(newer):
        candidate = os.path.join(_sessions_root(agent_dir), newer)
        if candidate != dirs[0] and storage.exists(candidate):
            dirs.append(candidate)
    return dirs


def list_sessions(
    cwd: str,
    session_dir: str | None = None,
    storage: SessionStorage | None = None,
    agent_dir: str | None = None,
    *,
    cache: bool = True,
) -> list[SessionInfo]:
    """The sessions of `cwd`'s project, newest modified first.

    Reads `<agent dir>/sessions/--<cwd>--` and, when it exists, the directory
    newer TypeScript agents use for the same cwd; with `session_dir`, only that
    directory. Files without a valid header are skipped. `cache=False` scans
    every file and leaves every cache alone.
    """
    storage = storage if storage is not None else FileSessionStorage()
    return _collect(_local_dirs(cwd, session_dir, storage, agent_dir), storage, agent_dir, cache)


def list_all_sessions(
    storage: SessionStorage | None = None,
    agent_dir: str | None = None,
    *,
    cache: bool = True,
) -> list[SessionInfo]:
    """The sessions of every project directory under `<agent dir>/sessions`, newest first."""
    storage = storage if storage is not None else FileSessionStorage()
    dirs = _project_dirs(_sessions_root(agent_dir), storage)
    return _collect(dirs, storage, agent_dir, cache)


# ---------------------------------------------------------------------------- light lookups


def _by_mtime(session_dir: str, storage: SessionStorage) -> list[_Stat]:
    stats = _stat_dir(os.path.abspath(session_dir), storage, _now_ns())
    stats.sort(key=lambda s: (s[2], s[0]), reverse=True)
    return stats


def _prefix_state(storage: SessionStorage, path: str) -> tuple[_State, bytes] | None:
    try:
        data = storage.read_text_prefix(path, PREFIX_BYTES).encode("utf-8", "surrogatepass")
    except (OSError, UnicodeError):
        return None
    _, _, final, _, _, _ = _scan_chunks((data,), len(data), 0, None, None)
    return final, data


def find_most_recent_session(
    session_dir: str,
    storage: SessionStorage | None = None,
    *,
    skip: Callable[[str], bool] | None = None,
) -> str | None:
    """The newest (by mtime) session file in `session_dir` with a valid header, or None.

    `skip(path)` passes over candidates (continue_recent skips sessions that another
    live process is writing).
    """
    storage = storage if storage is not None else FileSessionStorage()
    for path, *_ in _by_mtime(session_dir, storage):
        if skip is not None and skip(path):
            continue
        found = _prefix_state(storage, path)
        if found is not None and found[0].phase == _OK:
            return path
    return None


def _clean_name(value: str | None) -> str:
    if not value:
        return ""
    first = value.replace("\r\n", "\n").split("\n", 1)[0]
    return _CONTROL.sub("", first).strip()


_ROLE_USER = re.compile(rb'"role"\s*:\s*"user"')
_TEXT_START = re.compile(rb'"(?:content|text)"\s*:\s*"')


def _fragment_user_text(data: bytes) -> str:
    """The start of a user prompt whose line the 4 KB prefix cut off."""
    role = _ROLE_USER.search(data)
    if role is None:
        return ""
    start = _TEXT_START.search(data, role.end())
    if start is None:
        return ""
    body = data[start.end() :]
    end = re.search(rb'(?<!\\)(?:\\\\)*"', body)
    if end is not None:
        body = body[: end.end() - 1]
    for cut in range(7):  # drop a partial escape sequence at the cut
        try:
            value = orjson.loads(b'"' + body[: len(body) - cut] + b'"')
        except orjson.JSONDecodeError:
            continue
        return value if isinstance(value, str) else ""
    return ""


def _time_ago(moment: datetime, now: float | None = None) -> str:
    seconds = (now if now is not None else time.time()) - moment.timestamp()
    minutes = int(seconds // 60)
    if minutes < 1:
        return "just now"
    if minutes < 60:
        return f"{minutes}m ago"
    hours = minutes // 60
    if hours < 24:
        return f"{hours}h ago"
    days = hours // 24
    if days < 7:
        return f"{days}d ago"
    return moment.astimezone().strftime("%Y-%m-%d")


def _short_name(full: str) -> str:
    return full if len(full) <= NAME_WIDTH else full[: NAME_WIDTH - 1] + "…"


def get_recent_sessions(
    session_dir: str, limit: int = 3, storage: SessionStorage | None = None
) -> list[RecentSessionInfo]:
    """The `limit` newest sessions in `session_dir`, named from a 4 KB prefix of each."""
    storage = storage if storage is not None else FileSessionStorage()
    recent: list[RecentSessionInfo] = []
    if limit <= 0:
        return recent
    now = time.time()
    for path, _, mtime_ns, *_ in _by_mtime(session_dir, storage):
        found = _prefix_state(storage, path)
        if found is None or found[0].phase != _OK:
            continue
        st, data = found
        full = (
            _clean_name(st.title())
            or _clean_name(st.first)
            or (
                _clean_name(_fragment_user_text(data[data.rfind(b"\n") + 1 :]))
                if st.first is None
                else ""
            )
            or _clean_name(st.id)
            or st.id
        )
        mtime = _EPOCH + timedelta(microseconds=mtime_ns // 1000)
        recent.append(
            RecentSessionInfo(path, mtime, full, _short_name(full), _time_ago(mtime, now))
        )
        if len(recent) >= limit:
            break
    return recent


# ---------------------------------------------------------------------------- resume


def _match_kind(info: SessionInfo, arg: str) -> int:
    """2 = exact, 1 = prefix, 0 = no match (case-insensitive)."""
    session_id = info.id.lower()
    stem = os.path.basename(info.path)
    stem = (stem[: -len(".jsonl")] if stem.endswith(".jsonl") else stem).lower()
    file_id = stem.rsplit("_", 1)[1] if "_" in stem else None
    if arg in (session_id, stem, file_id):
        return 2
    if session_id.startswith(arg) or stem.startswith(arg):
        return 1
    if file_id is not None and file_id.startswith(arg):
        return 1
    return 0


def _pick(sessions: list[SessionInfo], arg: str) -> SessionInfo | None:
    exact: list[SessionInfo] = []
    prefix: list[SessionInfo] = []
    for info in sessions:
        kind = _match_kind(info, arg)
        if kind == 2:
            exact.append(info)
        elif kind == 1:
            prefix.append(info)
    if exact:
        return exact[0]  # newest of the files holding that exact id
    if len({info.id for info in prefix}) > 1:
        raise AmbiguousSessionError(arg, prefix)
    return prefix[0] if prefix else None


def _direct_path(arg: str, cwd: str, storage: SessionStorage) -> tuple[str, StorageStat] | None:
    """`arg` as the path of an existing `.jsonl` file (relative to `cwd`), with its stat."""
    if not arg.endswith(".jsonl"):
        return None
    path = os.path.expanduser(arg)
    if not os.path.isabs(path):
        path = os.path.join(cwd, path)
    path = os.path.normpath(path)
    try:
        if not storage.exists(path):
            return None
        return path, storage.stat(path)
    except (OSError, ValueError):
        return None


def resolve_resumable_session(
    session_arg: str,
    cwd: str,
    session_dir: str | None = None,
    storage: SessionStorage | None = None,
    agent_dir: str | None = None,
) -> ResolvedSessionMatch | None:
    """Find the session a resume argument names.

    The argument is a path to an existing `.jsonl` session file, or a
    case-insensitive prefix of a session id, of a file name, or of the id part
    after the file name's last `_`. The cwd's sessions (or `session_dir`'s) are
    searched first, then every project (not when `session_dir` is given). An exact
    match beats prefixes; several sessions matching a prefix in the same scope
    raise `AmbiguousSessionError`. Anything else that is not a plain name (path
    separators, `..`, control characters) matches nothing.
    """
    storage = storage if storage is not None else FileSessionStorage()
    if not isinstance(session_arg, str) or not session_arg or "\x00" in session_arg:
        return None
    local_dirs = _local_dirs(cwd, session_dir, storage, agent_dir)
    found = _direct_path(session_arg, cwd, storage)
    if found is not None:
        direct, stat = found
        mtime_ns = stat.mtime_ns or int(stat.mtime_ms * 1e6)
        record = _rescan(storage, (direct, stat.size, mtime_ns, stat.ino, UNTRUSTED), None)
        info = record.session_info(direct, storage) if record is not None else None
        if info is None:
            return None
        local = {os.path.abspath(d) for d in local_dirs}
        scope: Literal["local", "global"] = (
            "local" if os.path.dirname(direct) in local else "global"
        )
        return ResolvedSessionMatch(info, scope)
    if not is_safe_name(session_arg):
        return None
    arg = session_arg.lower()
    if arg.endswith(".jsonl") and len(arg) > len(".jsonl"):
        arg = arg[: -len(".jsonl")]  # a file name given without its directory
    match = _pick(_collect(local_dirs, storage, agent_dir, True), arg)
    if match is not None:
        return ResolvedSessionMatch(match, "local")
    if session_dir is not None:
        return None
    match = _pick(list_all_sessions(storage, agent_dir), arg)
    return ResolvedSessionMatch(match, "global") if match is not None else None
