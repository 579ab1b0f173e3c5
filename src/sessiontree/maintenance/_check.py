"""A consistency checker for session files, and a repair that writes a fixed copy.

`check_session` reads a file the way the loader does (leniently, line by line,
never writing) and reports what a reader would trip over::

    unparseable_line     a line that is not a JSON object (dropped by every reader)
    torn_final_line      the last line is cut off (a crash mid-append)
    empty_file           zero bytes or whitespace only
    invalid_header       the first object is not a session header (the file is unreadable)
    damaged_title_slot   line 1 is a title line but no valid slot (oh-my-pi's in-place
                         rewrite torn): every reader takes the file for no session
    missing_id           an entry without a string id (v2+ files)
    duplicate_id         a second entry with an id already used
    invalid_parent       a parentId that is neither null nor a string
    dangling_parent      a parentId naming no entry (the entry shows up as a root)
    cycle                entries whose parentIds loop (reachable from no root)
    compaction_off_path  a compaction whose firstKeptEntryId is not on its path (nor
                         its own id: pi 1.6's "retain none", which keeps nothing)
    label_unknown_target a label whose targetId names no entry
    missing_blob         a `blob:sha256:` ref whose blob is not in the blob store
    damaged_blob         a `blob:sha256:` ref whose stored blob does not hash to it
    conflict_file        a `<file>.conflict-*` sibling left by a write conflict

`repair_session` keeps every line it can and writes the result atomically to a
new file (or, asked to, over the original after keeping a `.bak`): unparseable
and torn lines are dropped, duplicate ids renamed, dangling parents and cycles
turned into roots, a damaged title slot dropped (the header's title stands).
Untouched lines are copied byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import xxhash

from sessiontree._util.fs import glob_escape, side_path, side_stem
from sessiontree.errors import InvalidSessionFileError, SessionTreeError, SessionWriteConflictError
from sessiontree.format import (
    Entry,
    generate_entry_id,
    head_kind,
    iter_jsonl_bytes,
    loads_object,
    migrate_session_entries,
    serialize_entry_bytes,
    session_version,
)
from sessiontree.layout import StoreParts, blob_carry, store_parts
from sessiontree.session import backup_path
from sessiontree.storage import (
    BlobStatus,
    BlobStoreLike,
    HostFilesystem,
    SessionStorage,
    VerifiableBlobStore,
    acquire_session_lock,
    default_storage,
    read_chunks,
    replace_checked,
    write_new,
    write_whole,
)

__all__ = [
    "BLOB_REF_PATTERN",
    "Finding",
    "RepairReport",
    "ScannedLine",
    "ScannedSession",
    "check_entries",
    "check_session",
    "conflict_siblings",
    "find_cycles",
    "repair_session",
    "scan_session",
]

BLOB_REF_PATTERN = re.compile(rb"blob:sha256:([0-9a-f]{64})")
"""A blob reference anywhere in raw session bytes (group 1: the hash)."""

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem (or, in a repair report, one change) in a session file."""

    kind: str
    line: int | None
    """1-based physical line number in the file, where known."""
    entry_id: str | None
    message: str
    path: str | None = None
    """The session file, where the finding is one of several files' (`Store.check`)."""


@dataclass(slots=True)
class ScannedLine:
    """One non-blank line that parsed as a JSON object."""

    number: int
    entry: Entry
    raw: bytes
    """The line's bytes without its newline."""


@dataclass(slots=True)
class ScannedSession:
    """A session file read line by line, keeping line numbers (nothing is written)."""

    path: str
    size: int = 0
    blank: bool = True
    title_slot: ScannedLine | None = None
    damaged_slot: ScannedLine | None = None
    """Line 1 when it is a title line (`"type":"title"`) but no valid slot."""
    header: ScannedLine | None = None
    invalid_header_line: int | None = None
    entries: list[ScannedLine] = field(default_factory=list)
    malformed: list[tuple[int, bytes]] = field(default_factory=list)
    """(line number, raw bytes) of lines that are not JSON objects."""
    blank_lines: list[int] = field(default_factory=list)
    ends_with_newline: bool = True
    last_line: int = 0
    has_bom: bool = False

    @property
    def version(self) -> int:
        """The header's format version (1 when absent)."""
        if self.header is None:
            return 0
        return session_version([self.header.entry])


def _chunks_counting(
    chunks: Iterator[bytes],
    scanned: ScannedSession,
    observe: Callable[[bytes], object] | None = None,
) -> Iterator[bytes]:
    first = True
    for chunk in chunks:
        scanned.size += len(chunk)
        if observe is not None:
            observe(chunk)
        if first and chunk:
            scanned.has_bom = chunk.startswith(_BOM)
            first = False
        yield chunk


def scan_session(
    path: str,
    storage: SessionStorage | None = None,
    observe: Callable[[bytes], object] | None = None,
) -> ScannedSession:
    """Read a session file line by line (FileNotFoundError propagates).

    Mirrors `loader.read_session` (a title slot on line 1, the first object
    decides whether this is a session file) but keeps every line's number and
    bytes, and reads on after a bad header only to count lines.
    """
    storage = default_storage(storage)
    scanned = ScannedSession(path)
    last_has_newline = True
    header_done = False
    chunks = _chunks_counting(iter(read_chunks(storage, path)), scanned, observe)
    for number, raw, has_newline in iter_jsonl_bytes(chunks):
        last_has_newline = has_newline
        scanned.last_line = number
        if not raw or raw.isspace():
            if has_newline or raw:
                scanned.blank_lines.append(number)
            continue
        scanned.blank = False
        value = loads_object(raw)
        if value is None:
            scanned.malformed.append((number, raw))
            continue
        line = ScannedLine(number, value, raw)
        if header_done:
            if scanned.header is not None:
                scanned.entries.append(line)
            continue
        kind = head_kind(value, number == 1)
        if kind == "slot":
            scanned.title_slot = line
            continue
        if kind == "invalid" and number == 1 and value.get("type") == "title":
            # A slot torn by its in-place rewrite: readers stop here, a repair goes on.
            scanned.damaged_slot = line
            continue
        header_done = True
        if kind == "header":
            scanned.header = line
        else:
            scanned.invalid_header_line = number
    scanned.ends_with_newline = last_has_newline
    return scanned


def conflict_siblings(path: str, storage: SessionStorage | None = None) -> list[str]:
    """Files named `<session file>.conflict-*` next to `path` (see `side_path`)."""
    storage = default_storage(storage)
    directory, name = os.path.split(path)
    return storage.list_files(directory or ".", glob_escape(side_stem(name)) + ".conflict-*")


def _short(raw: bytes, width: int = 60) -> str:
    text = raw.decode("utf-8", "replace")
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _torn_line(scanned: ScannedSession) -> int | None:
    """The last line's number when it is cut off: unterminated and unparseable."""
    if scanned.ends_with_newline or not scanned.malformed:
        return None
    number = scanned.malformed[-1][0]
    return number if number == scanned.last_line else None


def _line_findings(scanned: ScannedSession) -> list[Finding]:
    findings: list[Finding] = []
    torn = _torn_line(scanned)
    for number, raw in scanned.malformed:
        if number == torn:
            findings.append(
                Finding(
                    "torn_final_line",
                    number,
                    None,
                    f"the last line is cut off ({len(raw)} bytes, no newline): {_short(raw)}",
                )
            )
        else:
            findings.append(
                Finding("unparseable_line", number, None, f"not a JSON object: {_short(raw)}")
            )
    return findings


def check_entries(lines: list[ScannedLine], version: int = 3) -> list[Finding]:
    """Tree-level findings for parsed entries (ids, parents, cycles, compactions, labels).

    `lines` carry their line numbers; files older than v2 have no ids to check.
    """
    findings: list[Finding] = []
    if version < 2:
        return findings
    by_id: dict[str, ScannedLine] = {}
    for line in lines:
        entry_id = line.entry.get("id")
        if not isinstance(entry_id, str):
            findings.append(
                Finding(
                    "missing_id",
                    line.number,
                    None,
                    f"{line.entry.get('type')!s} entry has no string id",
                )
            )
            continue
        if entry_id in by_id:
            findings.append(
                Finding(
                    "duplicate_id",
                    line.number,
                    entry_id,
                    f"id {entry_id} already used on line {by_id[entry_id].number}",
                )
            )
        # Later duplicates win, as in every reader's id index.
        by_id[entry_id] = line
    for line in lines:
        entry = line.entry
        entry_id = entry.get("id")
        eid = entry_id if isinstance(entry_id, str) else None
        if "parentId" not in entry:
            findings.append(Finding("invalid_parent", line.number, eid, "entry has no parentId"))
        else:
            parent = entry["parentId"]
            if parent is not None and not isinstance(parent, str):
                findings.append(
                    Finding(
                        "invalid_parent", line.number, eid, f"parentId {parent!r} is not a string"
                    )
                )
            elif isinstance(parent, str) and parent not in by_id:
                findings.append(
                    Finding(
                        "dangling_parent",
                        line.number,
                        eid,
                        f"parentId {parent} names no entry (shown as a root)",
                    )
                )
        kind = entry.get("type")
        if kind == "label":
            target = entry.get("targetId")
            if not isinstance(target, str) or target not in by_id:
                findings.append(
                    Finding(
                        "label_unknown_target",
                        line.number,
                        eid,
                        f"label {entry.get('label')!r} targets unknown entry {target!r}",
                    )
                )
    findings.extend(_cycle_findings(lines, by_id))
    findings.extend(_compaction_findings(lines, by_id))
    findings.sort(key=lambda f: f.line or 0)
    return findings


def _parent_line(line: ScannedLine, by_id: dict[str, ScannedLine]) -> ScannedLine | None:
    parent = line.entry.get("parentId")
    return by_id.get(parent) if isinstance(parent, str) else None


def find_cycles(lines: list[ScannedLine], by_id: dict[str, ScannedLine]) -> list[list[ScannedLine]]:
    """Every parent cycle, each as its members (iterative; linear time)."""
    state: dict[int, int] = {}  # id(line) -> 1 on the current walk, 2 done
    cycles: list[list[ScannedLine]] = []
    for start in lines:
        if id(start) in state:
            continue
        walk: list[ScannedLine] = []
        current: ScannedLine | None = start
        while current is not None and id(current) not in state:
            state[id(current)] = 1
            walk.append(current)
            current = _parent_line(current, by_id)
        if current is not None and state[id(current)] == 1:
            index = next(i for i, item in enumerate(walk) if item is current)
            cycles.append(walk[index:])
        for item in walk:
            state[id(item)] = 2
    return cycles


def _cycle_findings(lines: list[ScannedLine], by_id: dict[str, ScannedLine]) -> list[Finding]:
    findings = []
    for cycle in find_cycles(lines, by_id):
        first = min(cycle, key=lambda item: item.number)
        ids = ", ".join(str(item.entry.get("id")) for item in cycle[:6])
        more = f" and {len(cycle) - 6} more" if len(cycle) > 6 else ""
        findings.append(
            Finding(
                "cycle",
                first.number,
                first.entry.get("id"),
                f"parentIds loop through {len(cycle)} entries ({ids}{more}); "
                "they are reachable from no root",
            )
        )
    return findings


def _compaction_findings(lines: list[ScannedLine], by_id: dict[str, ScannedLine]) -> list[Finding]:
    findings = []
    for line in lines:
        entry = line.entry
        if entry.get("type") != "compaction":
            continue
        first_kept = entry.get("firstKeptEntryId")
        if first_kept is not None and first_kept == entry.get("id"):
            continue  # "retain none" (pi 1.6): its own id keeps nothing, on purpose
        seen: set[int] = {id(line)}
        current = _parent_line(line, by_id)
        found = False
        while current is not None and id(current) not in seen:
            if current.entry.get("id") == first_kept:
                found = True
                break
            seen.add(id(current))
            current = _parent_line(current, by_id)
        if not found:
            findings.append(
                Finding(
                    "compaction_off_path",
                    line.number,
                    entry.get("id"),
                    f"firstKeptEntryId {first_kept!r} is not on the compaction's path "
                    "(the context keeps nothing before it)",
                )
            )
    return findings


def _blob_status(blobs: BlobStoreLike, digest: str) -> BlobStatus:
    if isinstance(blobs, VerifiableBlobStore):
        return blobs.verify(digest)
    if not blobs.has(digest):
        return "missing"
    data = blobs.get(digest)
    # Present but unreadable as its hash says: get refused it, or handed out other bytes.
    if data is None or hashlib.sha256(data).hexdigest() != digest:
        return "damaged"
    return "ok"


_BLOB_PROBLEMS = {
    "missing": ("missing_blob", "is not in the blob store"),
    "damaged": ("damaged_blob", "is damaged: its bytes do not match its hash"),
}


def _blob_findings(lines: list[ScannedLine], blobs: BlobStoreLike) -> list[Finding]:
    findings = []
    known: dict[str, BlobStatus] = {}
    for line in lines:
        if b"blob:sha256:" not in line.raw:
            continue
        for digest in dict.fromkeys(m.decode() for m in BLOB_REF_PATTERN.findall(line.raw)):
            status = known.get(digest)
            if status is None:
                status = known[digest] = _blob_status(blobs, digest)
            problem = _BLOB_PROBLEMS.get(status)
            if problem is not None:
                kind, what = problem
                findings.append(
                    Finding(kind, line.number, line.entry.get("id"), f"blob {digest[:12]}… {what}")
                )
    return findings


def _migrated_lines(scanned: ScannedSession) -> list[ScannedLine]:
    """The entries as a reader sees them: migrated in memory when the file is old."""
    if scanned.header is None or scanned.version >= 3:
        return scanned.entries
    entries = [dict(scanned.header.entry), *(dict(line.entry) for line in scanned.entries)]
    migrate_session_entries(entries)
    return [
        ScannedLine(line.number, entry, line.raw)
        for line, entry in zip(scanned.entries, entries[1:], strict=True)
    ]


def check_session(
    path: str,
    storage: SessionStorage | None = None,
    blobs: BlobStoreLike | None = None,
    *,
    conflicts: bool = True,
) -> list[Finding]:
    """Everything wrong with one session file, in line order; [] when it is sound.

    Never writes. `blobs` defaults to the blob store of the store holding `path` (see
    `blob_store_for` in `sessiontree.layout`). FileNotFoundError when the file is missing.
    """
    storage = default_storage(storage)
    scanned = scan_session(path, storage)
    findings = _findings(
        scanned, blobs if blobs is not None else store_parts(storage).blobs_for(path)
    )
    if conflicts:
        for sibling in conflict_siblings(path, storage):
            findings.append(
                Finding(
                    "conflict_file",
                    None,
                    None,
                    f"conflict copy {os.path.basename(sibling)} next to this session: "
                    "reconcile and remove it",
                )
            )
    return findings


def _findings(scanned: ScannedSession, blobs: BlobStoreLike) -> list[Finding]:
    findings = _line_findings(scanned)
    if scanned.blank:
        findings.append(Finding("empty_file", None, None, "the file holds no session header"))
        return findings
    if scanned.header is None:
        findings.append(
            Finding(
                "invalid_header",
                scanned.invalid_header_line,
                None,
                "the first JSON object is not a session header (type 'session' with a string id)",
            )
        )
        return findings
    if scanned.damaged_slot is not None:
        findings.append(
            Finding(
                "damaged_title_slot",
                1,
                None,
                "a title line that is no valid title slot (a rewrite torn?): every reader "
                "takes the file for no session; repair drops it: "
                + _short(scanned.damaged_slot.raw),
            )
        )
    lines = _migrated_lines(scanned)
    findings.extend(check_entries(lines, scanned.version))
    findings.extend(_blob_findings(scanned.entries, blobs))
    findings.sort(key=lambda f: f.line or 0)
    return findings


# ---------------------------------------------------------------------- repair


@dataclass(slots=True)
class RepairReport:
    """What `repair_session` changed, and what it could not fix."""

    path: str
    out_path: str | None
    """Where the repaired file was written; None when nothing needed changing."""
    changes: list[Finding] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    """Problems left as they are (harmless to readers, or not fixable from the file)."""
    backup_path: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.changes)


_REF_KEYS = ("parentId", "targetId", "firstKeptEntryId", "fromId")


def _repair_lines(scanned: ScannedSession, changes: list[Finding]) -> dict[int, Entry]:
    """Fix ids and parents; returns line number -> replaced entry for changed lines."""
    replaced: dict[int, Entry] = {}
    if scanned.version < 2:
        return replaced
    lines = scanned.entries
    used: set[str] = {line.entry["id"] for line in lines if isinstance(line.entry.get("id"), str)}
    seen: set[str] = set()
    renamed: dict[str, str] = {}  # old id -> the id a later reference means
    current: list[ScannedLine] = []
    for line in lines:
        entry = line.entry
        new_entry: Entry | None = None
        # References written after a duplicate meant the duplicate (the newest entry
        # of that id when they were appended).
        for key in _REF_KEYS:
            value = entry.get(key)
            if isinstance(value, str) and value in renamed:
                new_entry = new_entry if new_entry is not None else dict(entry)
                new_entry[key] = renamed[value]
        entry_id = entry.get("id")
        if isinstance(entry_id, str):
            if entry_id in seen:
                fresh = generate_entry_id(used)
                used.add(fresh)
                new_entry = new_entry if new_entry is not None else dict(entry)
                new_entry["id"] = fresh
                renamed[entry_id] = fresh
                changes.append(
                    Finding(
                        "renamed_duplicate_id",
                        line.number,
                        fresh,
                        f"duplicate id {entry_id} renamed to {fresh}; later references follow it",
                    )
                )
            seen.add(entry_id)
        if new_entry is not None:
            replaced[line.number] = new_entry
            line = ScannedLine(line.number, new_entry, line.raw)
        current.append(line)
    by_id = {line.entry["id"]: line for line in current if isinstance(line.entry.get("id"), str)}

    def set_root(line: ScannedLine, kind: str, message: str) -> None:
        entry = replaced.get(line.number)
        if entry is None:
            entry = replaced[line.number] = dict(line.entry)
        entry["parentId"] = None
        line.entry = entry
        changes.append(Finding(kind, line.number, entry.get("id"), message))

    for line in current:
        parent = line.entry.get("parentId")
        if isinstance(parent, str) and parent not in by_id:
            set_root(
                line, "cleared_dangling_parent", f"parentId {parent} named no entry; now a root"
            )
        elif parent is not None and not isinstance(parent, str):
            set_root(line, "cleared_invalid_parent", f"parentId {parent!r} was not a string")
    for cycle in find_cycles(current, by_id):
        first = min(cycle, key=lambda item: item.number)
        set_root(
            first,
            "broke_cycle",
            f"parentId {first.entry.get('parentId')} closed a loop of {len(cycle)} entries; "
            "this entry is now a root",
        )
    return replaced


_REPAIRED_NAMES = 1000


def _default_repair_paths(path: str) -> list[str]:
    """`<file>.repaired`, then `<file>.repaired-2`, `-3`...: a repair never replaces the
    copy an earlier one wrote (which its user may have edited since)."""
    return [side_path(path, ".repaired")] + [
        side_path(path, f".repaired-{n}") for n in range(2, _REPAIRED_NAMES)
    ]


def _same_file(storage: SessionStorage, a: str, b: str) -> bool:
    if os.path.normpath(a) == os.path.normpath(b):
        return True
    if isinstance(storage, HostFilesystem):
        try:
            return os.path.samefile(a, b)
        except OSError:
            return False
    return False


def _line_repairs(scanned: ScannedSession) -> list[Finding]:
    """What repairing the file's lines changes: BOM, unparseable, torn and blank lines,
    a missing final newline."""
    changes = []
    if scanned.has_bom:
        changes.append(Finding("removed_bom", 1, None, "removed a UTF-8 byte order mark"))
    if scanned.damaged_slot is not None:
        changes.append(
            Finding("dropped_title_slot", 1, None, "dropped a damaged title slot (line 1)")
        )
    torn = _torn_line(scanned)
    for number, raw in scanned.malformed:
        if number == torn:
            kind, what = "dropped_torn_line", "dropped the cut-off last line"
        else:
            kind, what = "dropped_line", "dropped unparseable line"
        changes.append(Finding(kind, number, None, f"{what}: {_short(raw)}"))
    for number in scanned.blank_lines:
        changes.append(Finding("dropped_blank_line", number, None, "dropped a blank line"))
    if not scanned.ends_with_newline and torn is None:
        changes.append(
            Finding(
                "terminated_last_line", scanned.last_line, None, "added the missing final newline"
            )
        )
    return changes


def repair_session(
    path: str,
    parts: StoreParts,
    out_path: str | None = None,
    *,
    in_place: bool = False,
    dry_run: bool = False,
) -> RepairReport:
    """Write a repaired copy of a session file atomically; report every change.

    The copy goes to `out_path` (default `<path>.repaired`, a name no session
    listing picks up, or `<path>.repaired-2`, `-3`... when that is taken); an
    existing file is never replaced (SessionTreeError for an `out_path` that
    exists, however late it appeared). `in_place=True` first saves the original as `<path>.bak`
    (or `.bak.N`) and then replaces `path`; if the file changed while being
    repaired, SessionWriteConflictError and nothing is replaced; SessionLockError
    when a live writer holds it. When there is
    nothing to change, nothing is written. A file without a valid header cannot
    be repaired: InvalidSessionFileError. The copy takes its images along as every copy
    does (`blob_carry`): into the blob store of the agent dir it is in, and written
    outside every agent dir, into itself (inline: no gc reads it there). The session's
    images are read from `parts.blobs_for(path)`.
    """
    storage = parts.storage
    blob_store = parts.blobs_for(path)
    if in_place and isinstance(storage, HostFilesystem) and os.path.islink(path):
        path = os.path.realpath(path)  # repair the file, not the link that names it
    targets = None if in_place else _repair_targets(path, out_path, storage)
    before = storage.stat(path)
    digest = xxhash.xxh3_128()
    scanned = scan_session(path, storage, observe=digest.update)
    if scanned.header is None:
        raise InvalidSessionFileError(
            path,
            f"{path}: cannot repair: no valid session header"
            + (f" (line {scanned.invalid_header_line})" if scanned.invalid_header_line else ""),
            line=scanned.invalid_header_line,
        )
    report = RepairReport(path, None)
    changes = report.changes
    changes.extend(_line_repairs(scanned))
    replaced = _repair_lines(scanned, changes)
    changes.sort(key=lambda f: f.line or 0)
    repaired = [
        ScannedLine(line.number, replaced.get(line.number, line.entry), line.raw)
        for line in scanned.entries
    ]
    fixed = ScannedSession(
        path, header=scanned.header, title_slot=scanned.title_slot, entries=repaired, blank=False
    )
    report.remaining = _findings(fixed, blob_store)
    if not changes or dry_run:
        return report
    chunks = _repaired_chunks(scanned, replaced)
    if targets is not None:
        # A repaired copy in another agent dir takes its images along, as every copy does,
        # and one outside every agent dir holds them itself (every name tried is in one
        # directory: one agent dir, or none).
        carry = blob_carry(
            blob_store,
            targets[0],
            storage,
            source_path=path,
            agent_dir=parts.agent_dir,
            standalone=True,
        )
        try:
            report.out_path = write_new(storage, targets, carry.chunks(chunks, targets[0]))
        except FileExistsError:
            where = targets[0] if out_path is not None else f"{targets[0]} and -2..-{len(targets)}"
            raise SessionTreeError(f"{where}: already exist(s); not overwritten") from None
        carry.report()
        return report
    report.backup_path = _replace_in_place(storage, path, before, digest.digest(), chunks)
    report.out_path = path
    return report


def _repair_targets(path: str, out_path: str | None, storage: SessionStorage) -> list[str]:
    """Where a repaired copy may go, first free name first; refuses the session itself
    and an `out_path` already there (checked again when it is written)."""
    if out_path is None:
        return _default_repair_paths(path)
    if _same_file(storage, out_path, path):
        raise SessionTreeError(
            f"{out_path}: is the session being repaired; use --in-place to replace it"
        )
    if storage.exists(out_path):
        raise SessionTreeError(f"{out_path}: already exists; not overwritten")
    return [out_path]


def _repaired_chunks(scanned: ScannedSession, replaced: dict[int, Entry]) -> Iterator[bytes]:
    """The repaired file: every line as it was (bytes kept) unless it was replaced."""
    if scanned.title_slot is not None:
        yield scanned.title_slot.raw + b"\n"
    assert scanned.header is not None
    header_raw = scanned.header.raw
    if header_raw.startswith(_BOM):
        header_raw = header_raw[len(_BOM) :]
    yield header_raw + b"\n"
    batch: list[bytes] = []
    for line in scanned.entries:
        entry = replaced.get(line.number)
        batch.append(line.raw if entry is None else serialize_entry_bytes(entry))
        batch.append(b"\n")
        if len(batch) >= 4096:
            yield b"".join(batch)
            batch = []
    if batch:
        yield b"".join(batch)


def _replace_in_place(
    storage: SessionStorage, path: str, before: Any, digest: bytes, chunks: Iterator[bytes]
) -> str:
    """Save the original as a backup, then write `chunks` over `path`; the backup's path.

    Under the session's lock (SessionLockError when a live agent is writing it); the
    backup must hold exactly the bytes that were repaired (`digest`), and the file must
    still be them: otherwise a live writer got in between and nothing is replaced.
    """
    lock = acquire_session_lock(storage, path)
    try:
        backup = backup_path(storage, path)
        copied = xxhash.xxh3_128()

        def original() -> Iterator[bytes]:
            for chunk in read_chunks(storage, path):
                copied.update(chunk)
                yield chunk

        write_whole(storage, backup, original())
        if copied.digest() != digest:
            raise SessionWriteConflictError(
                path, f"{path}: changed while being repaired (a live writer?); nothing was replaced"
            )
        _check_unchanged(path, before, storage)
        check = partial(_check_unchanged, path, before, storage)
        replace_checked(storage, path, chunks, check, before.size)
    finally:
        if lock is not None:
            lock.release()
    return backup


def _check_unchanged(path: str, before: Any, storage: SessionStorage) -> None:
    after = storage.stat(path)
    if (after.size, after.mtime_ns) != (before.size, before.mtime_ns):
        raise SessionWriteConflictError(
            path, f"{path}: changed while being repaired (a live writer?); nothing was replaced"
        )
