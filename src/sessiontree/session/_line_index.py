"""Index-first reading: one pass over a session file that records, per line, where it
is and what the tree needs, without turning the big lines into Python objects.

A line that starts the way writers write entries
(`{"type":…,"id":…,"parentId":…,"timestamp":…`) is indexed from that prefix alone,
by one regular expression: its type, id and parent, and whether it is an assistant
message (`,"message":{"role":"assistant"` next). Everything else is parsed whole:
the head (title slot, header), lines of the kinds the index keeps in memory (labels,
names, settings, compactions, branch summaries: small, and needed for labels, the
name and the context), and any line not in that form (`custom` and `custom_message`
put their payload before the id). Kinds that can be big (messages, custom entries,
session inits, unknown kinds) are kept by position only: `IndexedLines.entries` holds
None there, and the session reads them back from the pinned file when asked.

A line taken by its prefix that does not end with `}` is parsed whole at once, and so
is the file's last line when no newline ends it (a write cut short ends anywhere, often
just after an inner `}`): a torn line is found here, as the full loader finds it. One
whose body is damaged further in is found when it is first read (`EntryIndex` then
drops it, as the full loader would have; it reads the last entry's line at once, so
the leaf is the one the full loader finds).

The pass also notes the hash of every blob ref in the file (`IndexedLines.refs`), in
lines parsed or not: one search of each chunk for the ref's prefix, where the chunk is
read (by the reader thread for a big file, beside the matching of the lines), and a look
at the 64 bytes after it where it is found (no line is parsed for it). A writable manager
pins them: the unread lines' images live only in the file, and a gc that runs while
the file is deleted must not take them (issue 21.2).
"""

from __future__ import annotations

import queue
import re
import sys
import threading
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from sessiontree._util.gcpause import gc_paused
from sessiontree.format import SETTING_KINDS, Entry, head_kind, loads_object
from sessiontree.storage import PinnedFile

__all__ = [
    "ASSISTANT",
    "EAGER_KINDS",
    "PREFIX_FORM",
    "IndexedLines",
    "ScannedFile",
    "match_prefix",
    "ref_marks",
    "refs_in",
    "scan_pinned",
]

EAGER_KINDS: Final = SETTING_KINDS | {"label", "session_info", "title_change", "branch_summary"}
"""Entry kinds parsed at index time and kept: few, small, and what labels, the
session's name and every context build need."""

ASSISTANT: Final = 1
"""Flag: the line is a message entry whose role is assistant."""
PREFIX_FORM: Final = 2
"""Flag: the line starts in the writers' form, so `match_prefix` can check it."""

_PREFIX = re.compile(
    rb'\{"type":"([A-Za-z0-9_-]{1,64})","id":"([\x20\x21\x23-\x5b\x5d-\x7e]{1,256})",'
    rb'"parentId":(?:"([\x20\x21\x23-\x5b\x5d-\x7e]{1,256})"|null),'
    rb'"timestamp":"[\x20\x21\x23-\x5b\x5d-\x7e]{0,64}"'
    rb'(,"message":\{"role":"assistant")?'
)
match_prefix: Final = _PREFIX.match
"""`match_prefix(buffer, start, end)`: groups type, id, parent id (None for null) and
the assistant marker, as ASCII bytes; None when the line is not in the writers' form."""

_ASSISTANT_PREFIX: Final = ASSISTANT | PREFIX_FORM
_BOM: Final = b"\xef\xbb\xbf"
_BLOB_MARK: Final = b"blob:sha256:"
_HASH: Final = re.compile(rb"[0-9a-f]{64}")
_CHUNK: Final = 1 << 20
"""Bytes read at once. The pool's chunks stay in the core's 4 MiB L2 cache between the
copy, the hash, the ref search and the matching: 4 MiB ones (fewer hand-overs of
the GIL) cost the reader thread a quarter more CPU on a 100 MB file, and 12 MB of
peak memory where these cost 3."""
_THREAD_BYTES: Final = 4 << 20
"""Files this big are read by a thread of their own (see `_Chunks`)."""
_POOL: Final = 3
"""Buffers the reader thread fills in turn (one being matched, one read, one ready)."""
_WHITESPACE: Final = b" \t\r\x0b\x0c"
"""What `bytes.isspace` calls white space (a line of it is blank to the full loader)."""
_EAGER: Final = "\x00eager"
"""Stands for every kind in `EAGER_KINDS` in the hot loop's kind table."""


@dataclass(slots=True)
class IndexedLines:
    """The entries of a file by position, parallel arrays in file order."""

    offsets: array[int] = field(default_factory=lambda: array("q"))
    lengths: array[int] = field(default_factory=lambda: array("q"))
    """Bytes of each line, without its newline."""
    ids: list[Any] = field(default_factory=list)
    parents: list[Any] = field(default_factory=list)
    kinds: list[Any] = field(default_factory=list)
    flags: bytearray = field(default_factory=bytearray)
    entries: list[Entry | None] = field(default_factory=list)
    """The parsed entry where the index keeps one, else None (read it when asked)."""
    blob_refs: list[int] = field(default_factory=list)
    """Positions of the kept entries whose line mentions a blob ref."""
    refs: set[str] | None = field(default_factory=set)
    """The hash of every blob ref in the file's lines (read or not): what the file names
    (None: not looked for, `scan_pinned(find_refs=False)`; `refs_in` finds them)."""
    marks: array[int] | None = None
    """Where each blob ref's prefix starts in the file, in order (None: not looked for):
    reading lines back then needs no second search of their bytes for refs."""


@dataclass(slots=True)
class ScannedFile:
    """What one pass over a session file found (the full loader's `LoadedSession`
    fields, with the entries by position)."""

    blank: bool = True
    header: Entry | None = None
    header_line: int | None = None
    title_slot: Entry | None = None
    title_slot_raw: bytes | None = None
    malformed_lines: list[int] = field(default_factory=list)
    ends_with_newline: bool = True
    size: int = 0
    lines: IndexedLines = field(default_factory=IndexedLines)
    stopped: bool = False
    """The pass stopped after the head: the file needs the full loader (a header that
    is not a session's, or a version that needs migrating)."""


class _Chunks:
    """The file's bytes in order, each chunk seen by `observe` (a running hash) first,
    and searched for blob refs (into `refs`, unless None).

    Iterating yields `(buffer, n)`: the chunk is `buffer[:n]`, valid until the next
    one is asked for (the buffers are reused, so nothing is allocated per chunk). A
    big file is read, hashed and searched by a thread of its own into a small pool of
    buffers while the pass matches the lines of the chunk before: `preadv`, xxhash and
    `memmem` let go of the GIL, so the copy out of the page cache, the hash and the
    search run beside the matching on a second core.
    """

    def __init__(
        self,
        pinned: PinnedFile,
        observe: Callable[[memoryview], object] | None,
        refs: set[str] | None = None,
        marks: array[int] | None = None,
    ) -> None:
        self._pinned = pinned
        self._observe = observe
        self.refs = refs
        self.marks = marks
        self._seam = b""  # the last bytes of the chunk before: a ref may span two
        self.read = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        threaded = pinned.size() >= _THREAD_BYTES
        self._free: queue.Queue[bytearray | None] = queue.Queue()
        self._full: queue.Queue[tuple[bytearray, int] | BaseException] = queue.Queue()
        for _ in range(_POOL if threaded else 1):
            self._free.put(bytearray(_CHUNK))
        if threaded:
            thread = threading.Thread(
                target=self._produce, name="sessiontree-index-reader", daemon=True
            )
            self._thread = thread
            thread.start()

    def _fill(self, buffer: bytearray, offset: int) -> int:
        view = memoryview(buffer)
        n = self._pinned.readinto(view, offset)
        if n and self._observe is not None:
            self._observe(view[:n])
        if n and self.refs is not None:
            self._find_refs(buffer, n, offset)
        return n

    def _find_refs(self, buffer: bytearray, n: int, offset: int) -> None:
        """Note the hash of every blob ref in `buffer[:n]` (the file's bytes from
        `offset`), and of one that begins in the chunks before (`_seam` holds their
        last bytes)."""
        keep = len(_BLOB_MARK) + 64
        origin = offset - len(self._seam)  # where the seam's bytes are in the file
        if n < keep:  # a tiny chunk: searched with the bytes before it, as one
            data = self._seam + bytes(memoryview(buffer)[:n])
            self._note(data, len(data), len(data), origin)
            self._seam = data[-(keep - 1) :]
            return
        # A ref that begins in the chunks before ends in this one's first bytes.
        seam = self._seam + bytes(memoryview(buffer)[: keep - 1])
        self._note(seam, len(seam), len(self._seam), origin)
        self._note(buffer, n, n, offset)
        self._seam = bytes(memoryview(buffer)[n - keep + 1 : n])

    def _note(self, data: bytes | bytearray, end: int, begins_before: int, origin: int) -> None:
        """Add the hash of each ref in `data[:end]` (the file's bytes from `origin`)
        whose prefix begins before `begins_before` and whose hash is whole there (one
        cut short is left for the next chunk, which sees it whole), and where each
        prefix is to `marks` (once: the seam is searched twice)."""
        refs = self.refs
        assert refs is not None
        marks = self.marks
        mark = len(_BLOB_MARK)
        for at in ref_marks(data, end):
            if at >= begins_before:
                return
            if marks is not None and (not marks or origin + at > marks[-1]):
                marks.append(origin + at)
            m = _HASH.match(data, at + mark, min(at + mark + 64, end))
            if m is not None:
                refs.add(m.group().decode("ascii"))

    def _produce(self) -> None:
        offset = 0
        try:
            while not self._stop.is_set():
                buffer = self._free.get()
                if buffer is None:
                    return
                n = self._fill(buffer, offset)
                self._full.put((buffer, n))
                if not n:
                    return
                offset += n
        except BaseException as exc:  # handed to the reading thread, raised there
            self._full.put(exc)

    def __iter__(self) -> Iterator[tuple[bytearray, int]]:
        if self._thread is None:
            buffer = self._free.get()
            assert buffer is not None
            while n := self._fill(buffer, self.read):
                self.read += n
                yield buffer, n
            return
        while True:
            item = self._full.get()
            if isinstance(item, BaseException):
                raise item
            buffer, n = item
            if not n:
                return
            self.read += n
            yield buffer, n
            self._free.put(buffer)  # the pass is done with it

    def close(self) -> None:
        """Stop the reader (a pass that stopped early) and wait for it."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        self._free.put(None)  # wakes a reader waiting for a buffer
        thread.join()
        self._thread = None


def scan_pinned(
    pinned: PinnedFile,
    wants_head: Callable[[Entry], bool],
    observe: Callable[[memoryview], object] | None = None,
    *,
    find_refs: bool = True,
) -> ScannedFile:
    """Index the file behind `pinned` in one pass (see the module doc).

    `wants_head(header)` says whether to go on past the header; the pass stops
    (`stopped`) when it says no, or when the first object is not a header.
    `observe` sees every byte read, in order (to hash the file in the same pass).
    `find_refs=False` leaves the blob refs out (`lines.refs` None): a reader that
    pins nothing saves the search, about a third of the pass.
    """
    with gc_paused():
        scan = _Scan(pinned, wants_head, observe)
        if find_refs:
            scan.lines.marks = array("q")
        else:
            scan.lines.refs = None
        return scan.run()


def refs_in(pinned: PinnedFile) -> set[str]:
    """The hash of every blob ref in the file behind `pinned` (what a pass with
    `find_refs=False` left out)."""
    refs: set[str] = set()
    chunks = _Chunks(pinned, None, refs)
    try:
        for _ in chunks:
            pass
    finally:
        chunks.close()
    return refs


class _Scan:
    __slots__ = ("kind_names", "lines", "observe", "pinned", "result", "wants_head")

    def __init__(
        self,
        pinned: PinnedFile,
        wants_head: Callable[[Entry], bool],
        observe: Callable[[memoryview], object] | None,
    ) -> None:
        self.pinned = pinned
        self.wants_head = wants_head
        self.observe = observe
        self.result = ScannedFile()
        self.lines = self.result.lines
        # Kind names by their bytes: one string object per kind, not per line; a kind
        # the index keeps in memory maps to `_EAGER`.
        self.kind_names: dict[bytes, str] = {k.encode(): _EAGER for k in EAGER_KINDS}

    def run(self) -> ScannedFile:
        chunks = _Chunks(self.pinned, self.observe, self.lines.refs, self.lines.marks)
        try:
            return self._run(chunks)
        finally:
            chunks.close()

    def _run(self, chunks: _Chunks) -> ScannedFile:
        result = self.result
        carry: list[bytes] = []  # the pieces of a line that spans chunks
        carry_base = 0  # its offset in the file
        base = 0  # offset of the chunk at hand
        number = 0  # physical line number of the last complete line
        header_seen = False
        head = b""  # the first bytes while too few to tell a BOM
        checked = False  # whether the start of the file was looked at for a BOM
        for data, n in chunks:
            view = memoryview(data)
            start = 0
            if not checked:
                prefix = head + bytes(view[: min(n, 3)])
                if len(prefix) < 3 and _BOM.startswith(prefix):
                    head = prefix  # too few bytes yet to tell a BOM
                    base += n
                    continue
                checked = True
                if prefix.startswith(_BOM):
                    start = 3 - len(head)  # where the BOM ends in this chunk
                elif head:  # no BOM: the bytes held back begin the first line
                    carry, carry_base = [head], 0
                head = b""
            find = data.find
            if carry:
                end = find(b"\n", start, n)
                if end < 0:
                    carry.append(bytes(view[start:n]))
                    base += n
                    continue
                carry.append(bytes(view[start:end]))
                line = b"".join(carry)
                carry = []
                number += 1
                if header_seen:
                    self._entry(line, memoryview(line), 0, len(line), carry_base, number)
                elif not self._head(memoryview(line), 0, len(line), number):
                    result.size = chunks.read
                    return result
                header_seen = result.header is not None
                start = end + 1
            end = find(b"\n", start, n)
            while end >= 0 and not header_seen:
                number += 1
                if not self._head(view, start, end, number):
                    result.size = chunks.read
                    return result
                header_seen = result.header is not None
                start = end + 1
                end = find(b"\n", start, n)
            if end >= 0:
                start, number = self._entries(data, view, start, end, n, base, number)
            if start < n:
                carry.append(bytes(view[start:n]))
                carry_base = base + start
            base += n
        result.size = chunks.read
        if head:  # a file of fewer than 3 bytes
            carry, carry_base = [head], 0
        if carry:
            line = b"".join(carry)
            carry = []  # the pieces go before the line is parsed (it may be big)
            number += 1
            result.ends_with_newline = False
            if header_seen:
                self._entry(line, memoryview(line), 0, len(line), carry_base, number, last=True)
            else:
                self._head(memoryview(line), 0, len(line), number)
        return result

    def _head(self, view: memoryview, start: int, end: int, number: int) -> bool:
        """A line before the header; False when the pass must stop there (not a
        session file, or `wants_head` said no: `stopped`)."""
        raw = view[start:end]
        if not raw or bytes(raw).isspace():
            return True
        result = self.result
        result.blank = False
        value = loads_object(raw)
        if value is None:
            result.malformed_lines.append(number)
            return True
        kind = head_kind(value, number == 1)
        if kind == "slot":
            result.title_slot = value
            result.title_slot_raw = bytes(raw) + b"\n"
            return True
        result.header_line = number
        if kind == "invalid":
            return False
        result.header = value
        if self.wants_head(value):
            return True
        result.stopped = True
        return False

    def _entries(
        self,
        buf: bytes | bytearray,
        view: memoryview,
        start: int,
        end: int,
        filled: int,
        base: int,
        number: int,
    ) -> tuple[int, int]:
        """Every complete entry line in `buf[start:filled]` (the first ends at `end`);
        returns where the rest begins and the last line number. The hot loop: a line
        in the writers' form of a kind kept by position costs one match, no parse."""
        lines = self.lines
        add_offset, add_length = lines.offsets.append, lines.lengths.append
        add_id, add_parent = lines.ids.append, lines.parents.append
        add_kind, add_flag = lines.kinds.append, lines.flags.append
        add_entry = lines.entries.append
        kinds = self.kind_names
        find = buf.find
        while end >= 0:
            number += 1
            m = match_prefix(buf, start, end)
            if m is not None and buf[end - 1] == 0x7D:  # "}": the line is not torn
                kind_bytes, entry_id, parent, assistant = m.groups()
                kind = kinds.get(kind_bytes)
                if kind is None:
                    kind = kinds[kind_bytes] = kind_bytes.decode("ascii")
                if kind is not _EAGER:
                    add_offset(base + start)
                    add_length(end - start)
                    add_id(entry_id.decode("ascii"))
                    add_parent(None if parent is None else parent.decode("ascii"))
                    add_kind(kind)
                    add_flag(_ASSISTANT_PREFIX if assistant else PREFIX_FORM)
                    add_entry(None)
                    start = end + 1
                    end = find(b"\n", start, filled)
                    continue
            self._entry(buf, view, start, end, base, number, m)
            start = end + 1
            end = find(b"\n", start, filled)
        return start, number

    def _entry(
        self,
        buf: bytes | bytearray,
        view: memoryview,
        start: int,
        end: int,
        base: int,
        number: int,
        m: re.Match[bytes] | None = None,
        *,
        last: bool = False,
    ) -> None:
        """One entry line the hot loop did not take: one with white space after its
        `}`, or parsed whole. The `last` line of the file, when no newline ends it,
        is parsed whole and kept: a write cut short ends anywhere, often just after
        an inner `}`, and the full loader leaves such a line out."""
        lines = self.lines
        if m is None:
            m = match_prefix(buf, start, end)
        if m is not None and not last and m.group(1).decode("ascii") not in EAGER_KINDS:
            if bytes(view[start:end]).rstrip().endswith(b"}"):
                parent = m.group(3)
                lines.offsets.append(base + start)
                lines.lengths.append(end - start)
                lines.ids.append(m.group(2).decode("ascii"))
                lines.parents.append(None if parent is None else parent.decode("ascii"))
                lines.kinds.append(sys.intern(m.group(1).decode("ascii")))
                lines.flags.append(PREFIX_FORM | (ASSISTANT if m.group(4) else 0))
                lines.entries.append(None)
                return
        if start == end or (buf[start] in _WHITESPACE and not buf[start:end].strip()):
            return
        # The last line is `buf` whole: parsed as it is, not copied out of a view.
        raw = buf if last else view[start:end]
        value = loads_object(raw)
        if value is None:
            self.result.malformed_lines.append(number)
            return
        kind = value.get("type")
        entry_id, parent = value.get("id"), value.get("parentId")
        lazy = (
            kind.__class__ is str
            and kind not in EAGER_KINDS
            and entry_id.__class__ is str
            and (parent is None or parent.__class__ is str)
        )
        assistant = 0
        if kind == "message":
            message = value.get("message")
            if isinstance(message, dict) and message.get("role") == "assistant":
                assistant = ASSISTANT
        lines.offsets.append(base + start)
        lines.lengths.append(end - start)
        lines.ids.append(entry_id)
        lines.parents.append(parent)
        lines.kinds.append(kind)
        flag = assistant | (PREFIX_FORM if m is not None else 0)
        keep = last or not lazy  # parsed already: not parsed again when asked for
        if keep:
            if buf.find(_BLOB_MARK, start, end) >= 0:
                lines.blob_refs.append(len(lines.entries))
        lines.flags.append(flag)
        lines.entries.append(value if keep else None)


def ref_marks(buf: bytes | bytearray, end: int) -> list[int]:
    """Where a blob ref's prefix starts in `buf[:end]`, in order."""
    found: list[int] = []
    finder = _mark_finder()
    if finder is not None and isinstance(buf, bytearray):
        at = finder(buf, 0, end)
        while at >= 0:
            found.append(at)
            at = finder(buf, at + len(_BLOB_MARK), end)
        return found
    at = buf.find(_BLOB_MARK, 0, end)
    while at >= 0:
        found.append(at)
        at = buf.find(_BLOB_MARK, at + len(_BLOB_MARK), end)
    return found


_finder: list[Callable[[bytearray, int, int], int] | None] = []


def _mark_finder() -> Callable[[bytearray, int, int], int] | None:
    """Where `_BLOB_MARK` first is in `buf[start:end]` (-1: nowhere), by the C library's
    `memmem` (a third of the time `bytes.find` takes on session bytes: the search is a
    pass over every byte of the file, as long as the pass itself); None where there is
    no `memmem` to call (`bytes.find` then)."""
    if not _finder:
        _finder.append(_load_memmem())
    return _finder[0]


def _load_memmem() -> Callable[[bytearray, int, int], int] | None:
    try:
        import ctypes

        memmem = ctypes.CDLL(None).memmem  # the process's own libraries: libc among them
    except (ImportError, OSError, AttributeError):
        return None
    memmem.restype = ctypes.c_void_p
    memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    address, char = ctypes.addressof, ctypes.c_char
    mark, size = _BLOB_MARK, len(_BLOB_MARK)

    def find(buf: bytearray, start: int, end: int) -> int:
        end = min(end, len(buf))
        if end - start < size:
            return -1
        base = address(char.from_buffer(buf))
        at = memmem(base + start, end - start, mark, size)
        return -1 if not at else at - base

    return find
