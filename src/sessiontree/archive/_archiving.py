"""One archive run (`archive_stores`): every file under each store's roots stat'ed; a
file whose size, mtime and inode are the manifest's is not read, unless its mtime was
that close to the run that archived it that a write since may have kept them
(`racy`). A file that grew is read again before its old end, every byte, and checked
against its xxh3 (an agent that rewrites in place, as oh-my-pi its title slot at
offset 0, changes bytes anywhere); only then is what follows cut and stored, else the
file is a new version. Chunks are written (temp file, fsync, rename) before the
manifest that names them, which is replaced atomically: a run stopped anywhere (a full
disk, a kill) leaves every file archived before it as it was. One run at a time: a
second one exits at once (`ArchiveBusyError`, naming the pid that holds the lock)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import xxhash

from sessiontree.archive._chunks import cut, file_hash, put_chunk
from sessiontree.archive._manifests import (
    load_manifest,
    load_or_set_aside,
    manifest_rel,
    save_manifest,
)
from sessiontree.archive._model import ArchiveError, ArchiveReport, ArchiveSource
from sessiontree.archive._opencode import VirtualFile, opencode_sessions
from sessiontree.archive._sources import prefix_check, read_span, stat_or_none, walk_files
from sessiontree.archive._storage import ArchiveStorage, opened, prepare
from sessiontree.archive._versions import clobber_words, fullest_version, is_clobber, version_of


@dataclass(frozen=True, slots=True)
class _Found:
    """A file of a store that a run archives: where it is, its stat (or the document
    an OpenCode database session is kept as), and its manifest (`old`, None: never
    archived)."""

    source: ArchiveSource
    rel: str
    st: os.stat_result | VirtualFile
    manifest_path: str
    old: dict[str, Any] | None

    @property
    def path(self) -> str:
        return os.path.join(self.source.home, self.rel)


def _archive_file(
    archive: ArchiveStorage, found: _Found, report: ArchiveReport, seen_ns: int = 0
) -> None:
    path, st, old = found.path, found.st, found.old
    size = st.st_size
    if isinstance(st, VirtualFile):
        _save_virtual(archive, found, st, report)
        return
    chunks: list[list[Any]] = []
    offset = 0
    earlier: list[dict[str, Any]] = list(old.get("earlier", [])) if old else []
    kind = "new"
    hasher: Any = xxhash.xxh3_128()
    lines = 0
    if old is not None and old.get("ino") == st.st_ino and size >= int(old.get("size", 0)):
        kept = [list(c) for c in old.get("chunks", [])]
        if kept:
            start = int(old["size"]) - int(kept[-1][1])
            # Only what follows the old end is new, if nothing before it changed: the
            # whole old part is read again (its last chunk is cut again with what follows).
            checked = prefix_check(path, old, start, st.st_ino)
            if checked is not None:
                hasher, lines, read = checked
                report.bytes_checked += read
                chunks, offset, kind = kept[:-1], start, "grown"
    if old is not None and kind == "new":
        kind = "rewritten"
        earlier.append(version_of(old))
    span = read_span(path, offset, size - offset)
    if span is None:
        report.skipped.append(f"{path}: changed while read (next run)")
        return
    data, _ = span
    after = stat_or_none(path)
    if after is None or after.st_ino != st.st_ino or after.st_size < size:
        report.skipped.append(f"{path}: replaced or cut while read (next run)")
        return
    hasher.update(data)
    lines += data.count(b"\n")
    extra = {"xxh": hasher.hexdigest(), "lines": lines, "seenNs": seen_ns}
    _store_manifest(archive, found, report, chunks, data, earlier, kind, extra)


def _store_manifest(
    archive: ArchiveStorage,
    found: _Found,
    report: ArchiveReport,
    chunks: list[list[Any]],
    data: bytes,
    earlier: list[dict[str, Any]],
    kind: str,
    extra: dict[str, Any] | None = None,
) -> None:
    source, st, old = found.source, found.st, found.old
    size = st.st_size
    for piece in cut(data):
        chunks.append(put_chunk(archive, piece, report))
    if old is not None and file_hash(chunks) == old.get("hash"):
        if kind == "rewritten":
            earlier.pop()  # the same bytes again (restored, copied back): no new version
        kind = "same"
    if kind == "same" and old is not None and old.get("size") == size:
        report.bytes_checked += len(data)  # a file checked again (see `_racy`): unchanged
    else:
        report.bytes_read += len(data)
    extra = extra if extra is not None else {"lines": data.count(b"\n")}
    if kind == "rewritten":
        fullest = fullest_version(archive, earlier)
        if fullest is not None and is_clobber(int(extra["lines"]), fullest[1]):
            report.clobbered.append(
                f"{found.path}: {clobber_words(int(extra['lines']))} "
                f"(version {fullest[0]} held {fullest[1]} lines; it is kept: "
                f"restore --version {fullest[0]})"
            )
    now = int(time.time() * 1000)
    manifest = {
        "agent": source.agent,
        "home": source.home,
        "rel": found.rel,
        "size": size,
        "mtimeNs": st.st_mtime_ns,
        "ino": st.st_ino,
        "signal": st.signal if isinstance(st, VirtualFile) else None,
        "chunks": chunks,
        "hash": file_hash(chunks),
        "firstMs": old.get("firstMs", now) if old else now,
        "lastMs": now,
        "earlier": earlier,
        "deletedMs": None,
        **extra,
    }
    archive.sync()  # the chunks are on disk before the manifest that names them
    save_manifest(archive, found.manifest_path, manifest)
    if kind == "new":
        report.files_new += 1
    elif kind == "grown":
        report.files_grown += 1
    elif kind == "rewritten":
        report.files_rewritten += 1


def _save_virtual(
    archive: ArchiveStorage, found: _Found, st: VirtualFile, report: ArchiveReport
) -> None:
    old = found.old
    earlier: list[dict[str, Any]] = list(old.get("earlier", [])) if old else []
    kind = "new"
    if old is not None:
        kind = "rewritten"
        earlier.append(version_of(old))
    _store_manifest(archive, found, report, [], st.data, earlier, kind)


def archive_stores(
    archive: str,
    sources: Iterable[ArchiveSource],
    *,
    progress: Callable[[str], None] | None = None,
) -> ArchiveReport:
    """Archive every file under each source's roots into `archive` (a dir, or a
    PostgreSQL URL) (see the module doc)."""
    started = time.monotonic()
    sources = list(sources)
    with opened(archive) as place:
        prepare(place, sources)
        release = place.lock()
        try:
            report = _run(place, sources, progress)
        finally:
            release()
    report.seconds = time.monotonic() - started
    return report


def _run(
    archive: ArchiveStorage,
    sources: list[ArchiveSource],
    progress: Callable[[str], None] | None,
) -> ArchiveReport:
    report = ArchiveReport()
    seen_ns = time.time_ns()  # before any file is stat'ed (see `_racy`)
    for source in sources:
        seen: set[str] = set()
        unreadable: set[str] = set()  # an OpenCode database or a dir not read this run
        for root in source.roots:
            if not os.path.isdir(os.path.join(source.home, root)):
                continue
            for rel, st in walk_files(source.home, root, report, unreadable):
                found = _Found(source, rel, st, *_manifest_of(archive, source, rel, seen, report))
                old = found.old
                if (
                    old is not None
                    and old.get("size") == st.st_size
                    and old.get("mtimeNs") == st.st_mtime_ns
                    and old.get("ino") == st.st_ino
                    and old.get("deletedMs") is None
                    and not _racy(old)
                ):
                    continue
                if progress is not None:
                    progress(found.path)
                _archive_file(archive, found, report, seen_ns)
        if source.agent == "opencode":
            for rel, read, signal in opencode_sessions(source.home, report, unreadable):
                manifest_path, old = _manifest_of(archive, source, rel, seen, report)
                if old is not None and old.get("signal") == signal and old.get("deletedMs") is None:
                    continue
                virtual = read()
                if virtual is None:
                    continue
                virtual = VirtualFile(virtual.data, signal, virtual.st_mtime_ns)
                if old is not None and old.get("hash") == file_hash(
                    [[hashlib.sha256(p).hexdigest(), len(p)] for p in cut(virtual.data)]
                ):
                    old["signal"], old["deletedMs"] = signal, None
                    save_manifest(archive, manifest_path, old)
                    continue
                found = _Found(source, rel, virtual, manifest_path, old)
                if progress is not None:
                    progress(found.path)
                _archive_file(archive, found, report)
        report.files_deleted += _mark_deleted(archive, source, seen, unreadable)
    return report


def _manifest_of(
    archive: ArchiveStorage, source: ArchiveSource, rel: str, seen: set[str], report: ArchiveReport
) -> tuple[str, dict[str, Any] | None]:
    """Where the manifest of a file this run sees is (named in `seen`, the file counted),
    and what it holds (None: never archived, or set aside as damaged)."""
    report.files_seen += 1
    manifest_path = manifest_rel(source.agent, os.path.join(source.home, rel))
    seen.add(manifest_path)
    return manifest_path, load_or_set_aside(archive, manifest_path, report)


_RACY_NS = 2_000_000_000
"""How close to a run a file's mtime may be and still be changed unseen: a write in
the same tick of the file system's clock (coarse: up to 2 s on some) leaves the mtime
as it was."""


def _racy(manifest: dict[str, Any]) -> bool:
    """Whether a file whose size, mtime and inode are its manifest's may still have
    changed since (git's "racily clean"): its mtime was within `_RACY_NS` of the run
    that archived it, so a same-length write right after that run kept them all. Such
    a file is read again (whole) until a run sees it with an mtime older than that."""
    seen = manifest.get("seenNs")
    mtime = manifest.get("mtimeNs")
    return isinstance(seen, int) and isinstance(mtime, int) and mtime >= seen - _RACY_NS


def _mark_deleted(
    archive: ArchiveStorage, source: ArchiveSource, seen: set[str], unreadable: set[str]
) -> int:
    """Mark each archived file of `source` no longer at its source (kept, never removed)."""
    marked = 0
    for name in archive.names(f"files/{source.agent}", ".json"):
        path = f"files/{source.agent}/{name}"
        if path in seen:
            continue
        try:
            manifest = load_manifest(archive, path)
        except ArchiveError:
            continue  # damaged: set aside when its file is seen, named by verify
        if manifest is None or manifest.get("home") != source.home:
            continue
        if manifest.get("deletedMs") is not None:
            continue
        virtual = manifest.get("signal") is not None
        if any(str(manifest.get("rel")).startswith(u) for u in unreadable):
            continue  # its database or dir could not be read this run: not known to be gone
        at = os.path.join(source.home, str(manifest.get("rel")))
        if not virtual and os.path.lexists(at) and (os.path.islink(at) or not os.path.isdir(at)):
            continue  # there, but not walked (a symlink now, a root not read this run)
        manifest["deletedMs"] = int(time.time() * 1000)
        save_manifest(archive, path, manifest)
        marked += 1
    return marked
