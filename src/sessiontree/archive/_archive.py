"""The archive: a copy of every session file of every agent store, kept whatever the
agents prune (Claude Code's `cleanupPeriodDays`, Codex's and others' cleanups).

Layout of an archive dir (default `<agent dir>/archive`):

* `ARCHIVE`: what the dir is (`{"format": "sessiontree-archive", "version": 1}`);
* `chunks/<2 hex>/<sha256>.zst`: the files' bytes, cut in chunks at line ends chosen by
  the lines themselves (a chunk ends after a line whose xxh64 is 0 mod 16, or at
  4 MiB): a fork or a resumed copy that repeats another file's lines repeats its chunks,
  which are stored once; each chunk is compressed with zstd on its own (a file is read
  from any chunk on: seekable);
* `files/<agent>/<sha256 of the source path>.json`: one manifest per archived file: the
  agent, its home and the file's path relative to it, size, mtime, inode, the chunk list
  (hash and length of each), the file's hash (sha256 over the chunk list, what `verify`
  checks every chunk against), its xxh3 (of its bytes) and lines, earlier versions (a
  file rewritten, not appended to: its old chunk list is kept; see `archived_versions`)
  and `deletedMs` once the source is gone (it stays).

A run (`archive_stores`) stats every file under each store's roots; a file whose size,
mtime and inode are the manifest's is not read, unless its mtime was that close to the
run that archived it that a write since may have kept them (`_racy`). A file that grew
is read again before its old end, every byte, and checked against its xxh3 (an agent
that rewrites in place, as oh-my-pi its title slot at offset 0, changes bytes anywhere);
only then is what follows cut and stored, else the file is a new version. Chunks are
written (temp file, fsync, rename) before the manifest that names them, which is
replaced atomically: a run stopped anywhere (a full disk, a kill) leaves every file
archived before it as it was. One run at a time: a second one exits at once
(`ArchiveBusyError`, naming the pid that holds the lock).

Nothing is followed out of a store: symlinks under its roots are skipped (counted),
and `restore` writes only under the target it names, never through a symlink, never
over an existing file.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import json
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import xxhash
import zstandard

from sessiontree._util.env import (
    NATIVE_AGENTS,
    agent_dir_env,
    claude_config_dirs,
    codex_home,
    copilot_home,
    gemini_home,
    native_agent_dir,
    opencode_home,
)
from sessiontree._util.fs import (
    NO_HARD_LINKS,
    O_CLOEXEC,
    O_NOFOLLOW,
    atomic_write,
    ensure_private_dir,
    fsync_directory,
    side_path,
    write_all,
)
from sessiontree.errors import SessionTreeError
from sessiontree.format import file_session_id

__all__ = [
    "ARCHIVE_VERSION",
    "ArchiveBusyError",
    "ArchiveError",
    "ArchiveReport",
    "ArchiveSource",
    "ArchiveStats",
    "ArchiveView",
    "ArchivedFile",
    "ArchivedVersion",
    "RestoreReport",
    "archive_stats",
    "archive_stores",
    "archive_view",
    "archived_files",
    "archived_versions",
    "is_archive",
    "restore_files",
    "restore_session",
    "verify_archive",
]

log = logging.getLogger("sessiontree")

ARCHIVE_VERSION = 1
_MARK = "ARCHIVE"
_BOUNDARY = 16
_MAX_CHUNK = 4 * 1024 * 1024
_LEVEL = 9


class ArchiveError(SessionTreeError):
    """The archive cannot do what was asked (the message says why)."""


class ArchiveBusyError(ArchiveError):
    """Another archive run holds the archive's lock."""


@dataclass(frozen=True, slots=True)
class ArchiveSource:
    """A store to archive: its agent, its home and the dirs under it that hold its
    sessions (with their images and subagent files), relative to the home."""

    agent: str
    home: str
    roots: tuple[str, ...]


@dataclass(slots=True)
class ArchiveReport:
    files_seen: int = 0
    files_new: int = 0
    files_grown: int = 0
    files_rewritten: int = 0
    files_deleted: int = 0
    bytes_read: int = 0
    bytes_stored: int = 0
    skipped: list[str] = field(default_factory=list)
    """Files passed over this run, each with why (a symlink, changed while read)."""
    seconds: float = 0.0
    bytes_checked: int = 0
    """Bytes read again to check that a file that grew, or may have changed unseen,
    still holds what was archived of it (every byte before its old end)."""
    clobbered: list[str] = field(default_factory=list)
    """Files this run found rewritten to a header or without most of their lines, each
    with the earlier version that is kept (see `archived_versions`)."""


@dataclass(slots=True)
class ArchiveStats:
    sessions: int
    files: int
    deleted: int
    original_bytes: int
    stored_bytes: int
    clobbered: list[str] = field(default_factory=list)
    """Files whose newest version is a clobber (see `ArchivedVersion.clobber`), each
    with the version that holds the most lines."""


@dataclass(frozen=True, slots=True)
class ArchivedFile:
    agent: str
    home: str
    rel: str
    size: int
    mtime_ns: int
    deleted_ms: int | None
    is_session: bool
    manifest: str
    """Where its manifest is (a path; in a database, the path of its row)."""
    key: str = ""
    """The manifest's path inside the archive (`files/<agent>/<sha256>.json`)."""
    version: int | None = None
    """Which version a restore writes (see `archived_versions`); None: the newest."""


@dataclass(frozen=True, slots=True)
class ArchivedVersion:
    """One version of an archived file: 1 is the oldest kept, the last the newest (the
    file as the archive last saw it)."""

    number: int
    size: int
    lines: int | None
    """Its lines (entries); None when its chunks cannot be read."""
    mtime_ns: int
    replaced_ms: int | None
    """When an archive run found it replaced by the next version; None: the newest."""
    clobber: bool
    """It holds one line or less, or fewer than half the lines, of a version before it
    (an agent truncated the file to a fresh header, or dropped most of it)."""


@dataclass(slots=True)
class RestoreReport:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    """With `keep_going`: files not restored, each with why (there with other bytes,
    a damaged chunk, a dir of its path taken)."""
    notes: list[str] = field(default_factory=list)
    """What the user should know: the newest version restored is a clobber, and which
    earlier version holds the transcript."""


# ---------------------------------------------------------------------------- chunks


# What a resumed copy of a line changes: Claude Code writes the new session's id into
# every line it replays. Chunk boundaries and the delta index (`_put_chunk`) look at
# lines without it, so a resumed copy is cut where its original was.
_SESSION_ID = re.compile(rb'"sessionId":"[^"\\]*"')


def _normal(data: bytes) -> bytes:
    return _SESSION_ID.sub(b'"sessionId":""', data)


def _is_boundary(line: bytes) -> bool:
    return xxhash.xxh64_intdigest(_normal(line)) % _BOUNDARY == 0


def _cut(data: bytes) -> Iterator[bytes]:
    """`data` cut after lines that end a chunk (see the module doc); the last chunk may
    end mid-line (the rest of a line being written)."""
    start = 0
    pos = 0
    size = len(data)
    while pos < size:
        end = data.find(b"\n", pos)
        end = size if end < 0 else end + 1
        if end - start >= _MAX_CHUNK and pos > start:
            yield data[start:pos]
            start = pos
        if _is_boundary(data[pos:end]) or end - start >= _MAX_CHUNK:
            yield data[start:end]
            start = end
        pos = end
    if start < size:
        yield data[start:]


def _chunk_rel(digest: str, delta: bool = False) -> str:
    return f"chunks/{digest[:2]}/{digest}.{'zsd' if delta else 'zst'}"


def _similar_rel(normal_digest: str) -> str:
    return f"similar/{normal_digest[:2]}/{normal_digest}"


def _put_chunk(place: _Place, data: bytes, report: ArchiveReport) -> list[Any]:
    """Store a chunk once: `chunks/ab/<sha256>.zst` (zstd); or, when a chunk that is the
    same but for its lines' session ids is stored already (a resumed copy's), as a
    delta against it, `<sha256>.zsd` (the base's sha256, a newline, then zstd with the
    base as its dictionary). `similar/<sha256 of the lines without ids>` names the base."""
    digest = hashlib.sha256(data).hexdigest()
    damaged = False
    if digest in place.sound:
        return [digest, len(data)]
    if place.exists(_chunk_rel(digest)) or place.exists(_chunk_rel(digest, True)):
        # Read back before it is named again: a chunk left empty or cut short (a power
        # loss before its fsync, a bad sector) would otherwise be named by every later
        # file holding these bytes, none of them restorable.
        try:
            _get_chunk(place, digest, len(data))
            place.sound.add(digest)
            return [digest, len(data)]
        except ArchiveError:
            damaged = True  # stored again, whole, over the damaged one
    normal = hashlib.sha256(_normal(data)).hexdigest()
    base_digest = place.read(_similar_rel(normal))
    base = None
    if base_digest is not None and not damaged:
        base_hex = base_digest.decode("ascii", "replace").strip()
        try:
            base = (
                base_hex,
                _get_chunk(place, base_hex, -1, base=True, limit=_base_limit(len(data))),
            )
        except ArchiveError:
            base = None  # a base that cannot be read: store this chunk whole
    if base is not None:
        dictionary = zstandard.ZstdCompressionDict(
            base[1], dict_type=zstandard.DICT_TYPE_RAWCONTENT
        )
        packed = base[0].encode() + b"\n"
        packed += zstandard.ZstdCompressor(level=_LEVEL, dict_data=dictionary).compress(data)
        place.write(_chunk_rel(digest, True), packed, durable=False)
    else:
        packed = zstandard.ZstdCompressor(level=_LEVEL).compress(data)
        place.write(_chunk_rel(digest), packed, durable=False)
        if base_digest is None:  # a hint: lost in a crash, the next copy is stored whole
            place.write(_similar_rel(normal), digest.encode(), durable=False)
    report.bytes_stored += len(packed)
    place.sound.add(digest)
    return [digest, len(data)]


def _decompress(
    packed: bytes, limit: int, dictionary: zstandard.ZstdCompressionDict | None = None
) -> bytes:
    """One zstd frame's bytes, never more than `limit` of them held (the size a frame's
    header claims is not trusted: a crafted one made the decompressor allocate it)."""
    decompressor = (
        zstandard.ZstdDecompressor()
        if dictionary is None
        else zstandard.ZstdDecompressor(dict_data=dictionary)
    )
    pieces = []
    got = 0
    with decompressor.stream_reader(io.BytesIO(packed)) as reader:
        while True:
            piece = reader.read(min(1 << 20, limit + 1 - got))
            if not piece:
                break
            got += len(piece)
            if got > limit:
                raise ArchiveError(f"it holds more than the {limit} bytes it may")
            pieces.append(piece)
    return b"".join(pieces)


def _get_chunk(
    place: _Place, digest: str, length: int, *, base: bool = False, limit: int | None = None
) -> bytes:
    """The chunk's bytes, checked against its name (`length` -1: not known, then at
    most `limit` bytes). `base`: it is a delta's base, which is never a delta itself
    (no chain, however the files read)."""
    try:
        packed = place.read(_chunk_rel(digest))
        delta = packed is None and not base
        if delta:
            packed = place.read(_chunk_rel(digest, True))
    except OSError as exc:
        raise ArchiveError(f"chunk {digest} cannot be read: {exc.strerror or exc}") from exc
    if packed is None:
        raise ArchiveError(f"chunk {digest} is missing")
    if length < 0:
        length_limit = limit if limit is not None else _MAX_CHUNK * 2
    else:
        length_limit = length
    try:
        if delta:
            base_hex, _, body = packed.partition(b"\n")
            # a base differs from its copy by the session ids in its lines only
            reference = _get_chunk(
                place,
                base_hex.decode("ascii", "replace"),
                -1,
                base=True,
                limit=_base_limit(length_limit),
            )
            dictionary = zstandard.ZstdCompressionDict(
                reference, dict_type=zstandard.DICT_TYPE_RAWCONTENT
            )
            data = _decompress(body, length_limit, dictionary)
        else:
            data = _decompress(packed, length_limit)
    except (zstandard.ZstdError, ArchiveError) as exc:
        raise ArchiveError(f"chunk {digest} is damaged: {exc}") from exc
    if (length >= 0 and len(data) != length) or hashlib.sha256(data).hexdigest() != digest:
        raise ArchiveError(f"chunk {digest} does not hold what its name says")
    return data


def _base_limit(length: int) -> int:
    """The most bytes the base of a delta of `length` bytes may hold."""
    return 2 * length + _MAX_CHUNK


def _file_hash(chunks: Iterable[list[Any]]) -> str:
    h = hashlib.sha256()
    for digest, length in chunks:
        h.update(f"{digest}:{length}\n".encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------- manifests


def _manifest_rel(agent: str, source: str) -> str:
    key = hashlib.sha256(source.encode("utf-8", "surrogateescape")).hexdigest()
    return f"files/{agent}/{key}.json"


def _load_manifest(place: _Place, rel: str) -> dict[str, Any] | None:
    try:
        raw = place.read(rel)
        if raw is None:
            return None
        value = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise ArchiveError(f"{place.path(rel)}: manifest cannot be read: {exc}") from exc
    if not isinstance(value, dict) or not _well_formed(value):
        raise ArchiveError(f"{place.path(rel)}: manifest is damaged (not the fields it holds)")
    return value


def _chunk_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(c, list)
        and len(c) == 2
        and isinstance(c[0], str)
        and re.fullmatch(r"[0-9a-f]{64}", c[0]) is not None
        and isinstance(c[1], int)
        and c[1] >= 0
        for c in value
    )


def _well_formed(m: dict[str, Any]) -> bool:
    """The fields the archive reads, of the types it reads them as (a damaged or
    crafted manifest is refused as a whole, never half read)."""
    earlier = m.get("earlier", [])
    return (
        isinstance(m.get("agent"), str)
        and isinstance(m.get("home"), str)
        and isinstance(m.get("rel"), str)
        and isinstance(m.get("size", 0), int)
        and isinstance(m.get("mtimeNs", 0), int)
        and isinstance(m.get("deletedMs"), int | None)
        and _chunk_list(m.get("chunks", []))
        and isinstance(earlier, list)
        and all(
            isinstance(e, dict) and _chunk_list(e.get("chunks", [])) and _version_fields(e)
            for e in earlier
        )
        and _version_fields({"lines": m.get("lines"), "hash": m.get("hash")})
    )


def _version_fields(version: dict[str, Any]) -> bool:
    """A version's figures: whole numbers (or absent) and a hash that is a string (an
    earlier version's are read as such by `--versions`, `--stats` and the view)."""
    return all(
        value is None or (isinstance(value, int) and not isinstance(value, bool))
        for value in (version.get(k) for k in ("size", "mtimeNs", "lines", "replacedMs"))
    ) and isinstance(version.get("hash"), str | None)


def _save_manifest(place: _Place, rel: str, manifest: dict[str, Any]) -> None:
    place.write(rel, json.dumps(manifest, sort_keys=True).encode())


def _manifests(
    place: _Place, problems: list[str] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every manifest; a damaged one is passed over (named in `problems`): it never
    keeps the others from being listed and restored."""
    for agent in place.dirs("files"):
        for name in place.names(f"files/{agent}", ".json"):
            rel = f"files/{agent}/{name}"
            try:
                manifest = _load_manifest(place, rel)
            except ArchiveError as exc:
                if problems is not None:
                    problems.append(str(exc))
                continue
            if manifest is not None:
                yield rel, manifest


def _load_or_set_aside(place: _Place, rel: str, report: ArchiveReport) -> dict[str, Any] | None:
    """The manifest at `rel`, for a run; a damaged one is copied to `damaged/` (kept,
    as everything is) and the file archived again as new, so that one damaged
    manifest never stops the run nor leaves its file unarchived."""
    try:
        return _load_manifest(place, rel)
    except ArchiveError as exc:
        raw = place.read(rel) or b""
        place.write(f"damaged/{int(time.time() * 1000)}-{rel.replace('/', '-')}", raw)
        report.skipped.append(f"{exc}; set aside in damaged/, its file archived again")
        return None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


# ---------------------------------------------------------------------------- the archive dir


def _inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(os.path.join(directory, ""))


_PG_ROOT = "/sessiontree-archive"
"""The root an archive in PostgreSQL keeps its files under (the keys are relative to it:
`ARCHIVE`, `chunks/...`, `files/...`)."""


class _Place:
    """Where an archive's files are: a dir (`_FilePlace`) or a PostgreSQL database
    (`_PgPlace`); `rel` paths are relative to it (`chunks/ab/<sha256>.zst`)."""

    label: str
    local: str | None = None
    """The dir, for an archive of files."""
    sound: set[str]
    """Chunks written or read back whole by this run (not read back again)."""

    def path(self, rel: str) -> str:
        raise NotImplementedError

    def exists(self, rel: str) -> bool:
        raise NotImplementedError

    def read(self, rel: str) -> bytes | None:
        """The file's bytes; None when it is not there."""
        raise NotImplementedError

    def write(self, rel: str, data: bytes, *, durable: bool = True) -> None:
        """Atomically (all or nothing), durably (`durable=False`: not yet, until
        `sync`); ArchiveError on a full disk."""
        raise NotImplementedError

    def sync(self) -> None:
        """Make every write made with `durable=False` durable (before a manifest names
        what they wrote)."""

    def names(self, rel_dir: str, suffix: str) -> list[str]:
        raise NotImplementedError

    def dirs(self, rel_dir: str) -> list[str]:
        raise NotImplementedError

    def lock(self) -> Callable[[], None]:
        """Take the archive's lock (ArchiveBusyError when another run has it); the
        function that releases it."""
        raise NotImplementedError

    def stored_bytes(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def is_archive(self) -> bool:
        return self.exists(_MARK)

    def _full(self, exc: OSError, rel: str) -> ArchiveError | None:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc):
            return ArchiveError(
                f"{self.path(rel)}: the archive's disk is full; stopped (everything "
                "archived before is kept as it was)"
            )
        return None


class _FilePlace(_Place):
    def __init__(self, directory: str) -> None:
        self.local = os.path.abspath(os.path.expanduser(directory))
        self.label = self.local
        self.sound = set()
        self._pending: list[str] = []

    def path(self, rel: str) -> str:
        assert self.local is not None
        return os.path.join(self.local, *rel.split("/"))

    def exists(self, rel: str) -> bool:
        return os.path.exists(self.path(rel))

    def read(self, rel: str) -> bytes | None:
        try:
            with open(self.path(rel), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write(self, rel: str, data: bytes, *, durable: bool = True) -> None:
        path = self.path(rel)
        try:
            ensure_private_dir(os.path.dirname(path))
            atomic_write(path, [data], durable=durable)
        except OSError as exc:
            full = self._full(exc, rel)
            if full is not None:
                raise full from exc
            raise
        if not durable:
            self._pending.append(path)

    def sync(self) -> None:
        """fsync each file written since, then each of their dirs once."""
        pending, self._pending = self._pending, []
        try:
            for path in pending:
                fd = os.open(path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            for directory in sorted({os.path.dirname(p) for p in pending}):
                fsync_directory(directory)
        except OSError as exc:
            full = self._full(exc, "chunks")
            if full is not None:
                raise full from exc
            raise

    def names(self, rel_dir: str, suffix: str) -> list[str]:
        return sorted(n for n in _listdir(self.path(rel_dir)) if n.endswith(suffix))

    def dirs(self, rel_dir: str) -> list[str]:
        base = self.path(rel_dir)
        return sorted(n for n in _listdir(base) if os.path.isdir(os.path.join(base, n)))

    def lock(self) -> Callable[[], None]:
        fd = _lock(self.label)
        return lambda: os.close(fd)

    def stored_bytes(self) -> int:
        assert self.local is not None
        stored = 0
        for directory, dirs, names in os.walk(self.local):
            if directory == self.local and "view" in dirs:
                dirs.remove("view")  # a readable copy, not the archive (see `archive_view`)
            for name in names:
                try:
                    stored += os.lstat(os.path.join(directory, name)).st_size
                except OSError:
                    pass
        return stored


class _PgPlace(_Place):
    """An archive in a PostgreSQL database, through its session storage (each file a
    row, written in one transaction; the lock an advisory lock)."""

    def __init__(self, url: str) -> None:
        from sessiontree.storage import open_storage, redact_url

        self.label = redact_url(url)
        self.sound = set()
        try:
            self._storage: Any = open_storage(url, agent_dir=_PG_ROOT)
        except SessionTreeError as exc:
            raise ArchiveError(f"{self.label}: {exc}") from exc

    def path(self, rel: str) -> str:
        return f"{_PG_ROOT}/{rel}"

    def exists(self, rel: str) -> bool:
        return bool(self._storage.exists(self.path(rel)))

    def read(self, rel: str) -> bytes | None:
        try:
            return b"".join(self._storage.iter_chunks(self.path(rel)))
        except FileNotFoundError:
            return None

    def write(self, rel: str, data: bytes, *, durable: bool = True) -> None:
        path = self.path(rel)  # every write commits: durable as it is made
        try:
            self._storage.ensure_dir(os.path.dirname(path))
            self._storage.write_atomic(path, [data])
        except OSError as exc:
            full = self._full(exc, rel)
            if full is not None:
                raise full from exc
            raise

    def names(self, rel_dir: str, suffix: str) -> list[str]:
        found = self._storage.list_files(self.path(rel_dir), "*" + suffix)
        return sorted(os.path.basename(p) for p in found)

    def dirs(self, rel_dir: str) -> list[str]:
        return sorted(os.path.basename(p) for p in self._storage.list_dirs(self.path(rel_dir)))

    def lock(self) -> Callable[[], None]:
        from sessiontree.errors import SessionLockError

        try:
            held = self._storage.acquire_lock(self.path(".lock"))
        except SessionLockError as exc:
            raise ArchiveBusyError(
                f"{self.label}: another archive run ({exc}) is writing it; this one exits "
                "(run it again when that one is done)"
            ) from None
        return held.release  # type: ignore[no-any-return]

    def stored_bytes(self) -> int:
        total = 0
        for top in ("chunks", "files", "similar"):
            for sub in self.dirs(top):
                for path in self._storage.list_files(self.path(f"{top}/{sub}"), "*"):
                    total += int(self._storage.stat(path).size)
        mark = self.path(_MARK)
        if self._storage.exists(mark):
            total += int(self._storage.stat(mark).size)
        return total

    def close(self) -> None:
        from sessiontree.storage import close_storage

        close_storage(self._storage)


def _is_url(archive: str) -> bool:
    return archive.startswith(("postgresql://", "postgres://"))


def _open(archive: str) -> _Place:
    return _PgPlace(archive) if _is_url(archive) else _FilePlace(archive)


def _prepare(place: _Place, sources: Iterable[ArchiveSource]) -> None:
    """Refuse an archive inside a store it archives (or a store inside it), and a
    non-empty dir that is no archive; mark a new one."""
    archive = place.local
    if archive is not None:
        for source in sources:
            for root in source.roots:
                full = os.path.join(source.home, root)
                if _inside(archive, full) or _inside(full, archive):
                    raise ArchiveError(
                        f"{archive}: the archive would be inside the {source.agent} store it "
                        f"archives ({full}), or hold it: choose another --to"
                    )
        mark = os.path.join(archive, _MARK)
        if os.path.islink(archive):
            raise ArchiveError(f"{archive}: is a symlink; give the real directory")
        # a first run beside this one may be writing its mark (a temporary file, then
        # renamed): that dir is an archive being made, not someone's dir
        marking = re.compile(rf"\.{re.escape(_MARK)}\.[0-9a-f]+\.tmp")
        held = [n for n in _listdir(archive) if marking.fullmatch(n) is None]
        if os.path.isdir(archive) and held and not os.path.isfile(mark):
            raise ArchiveError(f"{archive}: not an archive (no {_MARK} file) and not empty")
        ensure_private_dir(archive)
    if not place.is_archive():
        body = {"format": "sessiontree-archive", "version": ARCHIVE_VERSION}
        place.write(_MARK, json.dumps(body).encode())


def _lock(archive: str) -> int:
    path = os.path.join(archive, ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise ArchiveBusyError(
            f"{archive}: another archive run (pid {holder}) is writing it; this one exits "
            "(run it again when that one is done)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def is_archive(path: str) -> bool:
    """Whether `path` is an archive dir (its `ARCHIVE` file); a PostgreSQL URL is not
    asked here (it would connect)."""
    return not _is_url(path) and os.path.isfile(os.path.join(path, _MARK))


# ---------------------------------------------------------------------------- one run


def _walk(
    home: str, root: str, report: ArchiveReport, unreadable: set[str] | None = None
) -> Iterator[tuple[str, os.stat_result]]:
    """Regular files under `home/root` (relative paths), no symlink followed below
    the root. A dir that cannot be read is named in `report.skipped` and its path
    (relative, with a trailing slash) added to `unreadable`: its files are not gone."""
    top = os.path.join(home, root)
    stack = [top]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            if os.path.lexists(directory):
                report.skipped.append(f"{directory}: cannot be read ({exc.strerror or exc})")
                if unreadable is not None:
                    unreadable.add(os.path.join(os.path.relpath(directory, home), ""))
            continue
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.is_symlink():
                report.skipped.append(f"{entry.path}: a symlink (not followed)")
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False) and not entry.name.endswith(".tmp"):
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                yield os.path.relpath(entry.path, home), st


def _read_span(path: str, offset: int, size: int) -> tuple[bytes, os.stat_result] | None:
    """`size` bytes of `path` from `offset`, and its stat when opened; None when the
    file is gone, is no longer a regular file, or was replaced or cut meanwhile."""
    try:
        # O_NONBLOCK: a FIFO put where the file was (between the walk and this open)
        # would block the run forever; it is refused below as not a regular file.
        fd = os.open(path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return None
        data = os.pread(fd, size, offset) if size else b""
        while len(data) < size:
            more = os.pread(fd, size - len(data), offset + len(data))
            if not more:
                return None  # cut short while read
            data += more
    finally:
        os.close(fd)
    return data, before


def _prefix_check(
    path: str, old: dict[str, Any], upto: int, ino: int
) -> tuple[Any, int, int] | None:
    """Whether `path` still holds, in its first `old["size"]` bytes, what the archive
    kept of it: every byte read again (an agent that rewrites in place, as oh-my-pi its
    256-byte title slot at offset 0, changes bytes anywhere before the old end). Checked
    against the manifest's xxh3 of the whole file (`xxh`), or, for a manifest written
    before it had one, against each chunk's sha256. Then the xxh3 state after `upto`
    bytes (to go on hashing what follows), the lines in them, and the bytes read; None
    when anything differs, or the file is no longer the one stat'ed."""
    size = int(old.get("size", 0))
    expected = old.get("xxh")
    hasher = xxhash.xxh3_128()
    at_upto: Any = hasher.copy() if upto == 0 else None
    lines = 0
    try:
        fd = os.open(path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    pieces: list[tuple[int, int, str | None]] = []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_ino != ino or st.st_size < size:
            return None
        if isinstance(expected, str):
            offset = 0
            while offset < size:
                step = min(1 << 20, size - offset)
                if offset < upto < offset + step:
                    step = upto - offset  # a piece ends at `upto`, to copy the state there
                pieces.append((offset, step, None))
                offset += step
        else:
            offset = 0
            for digest, length in old.get("chunks", []):
                pieces.append((offset, int(length), str(digest)))
                offset += int(length)
            if offset != size:
                return None
        for offset, length, digest in pieces:
            data = os.pread(fd, length, offset)
            while len(data) < length:
                more = os.pread(fd, length - len(data), offset + len(data))
                if not more:
                    return None  # cut short while read
                data += more
            if digest is not None and hashlib.sha256(data).hexdigest() != digest:
                return None
            hasher.update(data)
            if offset + length <= upto:
                lines += data.count(b"\n")
            if offset + length == upto:
                at_upto = hasher.copy()
    finally:
        os.close(fd)
    if isinstance(expected, str) and hasher.hexdigest() != expected:
        return None
    if at_upto is None:
        return None
    return at_upto, lines, size


def _archive_file(
    archive: _Place,
    source: ArchiveSource,
    rel: str,
    st: os.stat_result | _Virtual,
    manifest_path: str,
    old: dict[str, Any] | None,
    report: ArchiveReport,
    seen_ns: int = 0,
) -> None:
    path = os.path.join(source.home, rel)
    size = st.st_size
    if isinstance(st, _Virtual):
        _save_virtual(archive, source, rel, st, manifest_path, old, report)
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
            checked = _prefix_check(path, old, start, st.st_ino)
            if checked is not None:
                hasher, lines, read = checked
                report.bytes_checked += read
                chunks, offset, kind = kept[:-1], start, "grown"
    if old is not None and kind == "new":
        kind = "rewritten"
        earlier.append(_version_of(old))
    span = _read_span(path, offset, size - offset)
    if span is None:
        report.skipped.append(f"{path}: changed while read (next run)")
        return
    data, _ = span
    after = _stat(path)
    if after is None or after.st_ino != st.st_ino or after.st_size < size:
        report.skipped.append(f"{path}: replaced or cut while read (next run)")
        return
    hasher.update(data)
    lines += data.count(b"\n")
    _store_manifest(
        archive,
        source,
        rel,
        st,
        manifest_path,
        old,
        report,
        chunks,
        data,
        earlier,
        kind,
        extra={"xxh": hasher.hexdigest(), "lines": lines, "seenNs": seen_ns},
    )


def _version_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """An earlier version: what `manifest` held, kept when its file is rewritten."""
    version = {
        "chunks": manifest.get("chunks", []),
        "size": manifest.get("size"),
        "mtimeNs": manifest.get("mtimeNs"),
        "hash": manifest.get("hash"),
        "replacedMs": int(time.time() * 1000),
    }
    if isinstance(manifest.get("lines"), int):
        version["lines"] = manifest["lines"]
    return version


def _store_manifest(
    archive: _Place,
    source: ArchiveSource,
    rel: str,
    st: os.stat_result | _Virtual,
    manifest_path: str,
    old: dict[str, Any] | None,
    report: ArchiveReport,
    chunks: list[list[Any]],
    data: bytes,
    earlier: list[dict[str, Any]],
    kind: str,
    extra: dict[str, Any] | None = None,
) -> None:
    size = st.st_size
    for piece in _cut(data):
        chunks.append(_put_chunk(archive, piece, report))
    if old is not None and _file_hash(chunks) == old.get("hash"):
        if kind == "rewritten":
            earlier.pop()  # the same bytes again (restored, copied back): no new version
        kind = "same"
    if kind == "same" and old is not None and old.get("size") == size:
        report.bytes_checked += len(data)  # a file checked again (see `_racy`): unchanged
    else:
        report.bytes_read += len(data)
    extra = extra if extra is not None else {"lines": data.count(b"\n")}
    if kind == "rewritten":
        fullest = _fullest(archive, earlier)
        if fullest is not None and _is_clobber(int(extra["lines"]), fullest[1]):
            report.clobbered.append(
                f"{os.path.join(source.home, rel)}: {_clobber_words(int(extra['lines']))} "
                f"(version {fullest[0]} held {fullest[1]} lines; it is kept: "
                f"restore --version {fullest[0]})"
            )
    now = int(time.time() * 1000)
    manifest = {
        "agent": source.agent,
        "home": source.home,
        "rel": rel,
        "size": size,
        "mtimeNs": st.st_mtime_ns,
        "ino": st.st_ino,
        "signal": st.signal if isinstance(st, _Virtual) else None,
        "chunks": chunks,
        "hash": _file_hash(chunks),
        "firstMs": old.get("firstMs", now) if old else now,
        "lastMs": now,
        "earlier": earlier,
        "deletedMs": None,
        **extra,
    }
    archive.sync()  # the chunks are on disk before the manifest that names them
    _save_manifest(archive, manifest_path, manifest)
    if kind == "new":
        report.files_new += 1
    elif kind == "grown":
        report.files_grown += 1
    elif kind == "rewritten":
        report.files_rewritten += 1


# ---------------------------------------------------------------------------- versions
#
# A file rewritten (not only appended to) keeps what it held as an earlier version:
# version 1 is the oldest, the newest is the file as it is now. A rewrite that leaves
# a file a header (pi 0.73 opening an oh-my-pi session truncates it to a fresh one) or
# without most of its lines is a clobber: named by the run and by `archive_stats`, and
# the view shows the fullest version instead.


def _lines_of(place: _Place, version: dict[str, Any]) -> int:
    """The lines (entries) a version holds: recorded since the archive counts them,
    else counted from its chunks."""
    lines = version.get("lines")
    if isinstance(lines, int):
        return lines
    count = 0
    for digest, length in version.get("chunks", []):
        count += _get_chunk(place, digest, int(length)).count(b"\n")
    version["lines"] = count
    return count


def _fullest(place: _Place, versions: list[dict[str, Any]]) -> tuple[int, int] | None:
    """(number, lines) of the version with the most lines among `versions` (numbered
    from 1, oldest first); the newest of those with as many. None: none at all or one
    that cannot be read."""
    best: tuple[int, int] | None = None
    for number, version in enumerate(versions, 1):
        try:
            lines = _lines_of(place, version)
        except ArchiveError:
            continue
        if best is None or lines >= best[1]:
            best = (number, lines)
    return best


def _is_clobber(lines: int, most: int) -> bool:
    """Whether a file of `lines` lines, where a version held `most`, was clobbered: cut
    to one line (a header, a title slot) or less, or left without most of its lines."""
    return (lines <= 1 < most) or (most >= 4 and lines * 2 < most)


def _clobber_words(lines: int) -> str:
    if lines <= 1:
        return "shrank to a header" if lines == 1 else "emptied"
    return f"lost most of its entries ({lines} lines left)"


def _all_versions(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every version a manifest keeps, oldest first, the newest (the manifest's own
    chunks) last."""
    newest = {
        "chunks": manifest.get("chunks", []),
        "size": manifest.get("size"),
        "mtimeNs": manifest.get("mtimeNs"),
        "hash": manifest.get("hash"),
    }
    if isinstance(manifest.get("lines"), int):
        newest["lines"] = manifest["lines"]
    return [*manifest.get("earlier", []), newest]


def _described(place: _Place, manifest: dict[str, Any]) -> list[ArchivedVersion]:
    found = []
    most = -1
    for number, version in enumerate(_all_versions(manifest), 1):
        try:
            lines: int | None = _lines_of(place, version)
        except ArchiveError:
            lines = None
        replaced = version.get("replacedMs")
        found.append(
            ArchivedVersion(
                number,
                int(version.get("size") or 0),
                lines,
                int(version.get("mtimeNs") or 0),
                replaced if isinstance(replaced, int) else None,
                lines is not None and _is_clobber(lines, most),
            )
        )
        most = max(most, -1 if lines is None else lines)
    return found


def _pick(manifest: dict[str, Any], number: int | None, where: str) -> dict[str, Any]:
    """Version `number` of a manifest (None: the newest)."""
    versions = _all_versions(manifest)
    if number is None:
        return versions[-1]
    if not 1 <= number <= len(versions):
        raise ArchiveError(
            f"{where}: has no version {number} (the archive keeps versions 1 to {len(versions)})"
        )
    return versions[number - 1]


def _clobbered_newest(place: _Place, manifest: dict[str, Any]) -> tuple[int, int, int] | None:
    """(its lines, the number and lines of the fullest earlier version) when the newest
    version of a manifest is a clobber of an earlier one; else None."""
    earlier = list(manifest.get("earlier", []))
    if not earlier:
        return None
    newest = _all_versions(manifest)[-1]
    fullest = _fullest(place, earlier)
    try:
        lines = _lines_of(place, newest)
    except ArchiveError:
        return None
    if fullest is None or not _is_clobber(lines, fullest[1]):
        return None
    return lines, fullest[0], fullest[1]


@dataclass(frozen=True, slots=True)
class _Virtual:
    """A session that is not a file of its own (an OpenCode database's): the document
    it is kept as, and what changes when it does."""

    data: bytes
    signal: list[int]
    st_mtime_ns: int
    st_ino: int = 0

    @property
    def st_size(self) -> int:
        return len(self.data)


def _save_virtual(
    archive: _Place,
    source: ArchiveSource,
    rel: str,
    st: _Virtual,
    manifest_path: str,
    old: dict[str, Any] | None,
    report: ArchiveReport,
) -> None:
    earlier: list[dict[str, Any]] = list(old.get("earlier", [])) if old else []
    kind = "new"
    if old is not None:
        kind = "rewritten"
        earlier.append(_version_of(old))
    _store_manifest(
        archive, source, rel, st, manifest_path, old, report, [], st.data, earlier, kind
    )


def _opencode_sessions(
    home: str, report: ArchiveReport, unreadable: set[str]
) -> Iterator[tuple[str, Callable[[], _Virtual | None], list[int]]]:
    """Each session of OpenCode's databases in `home`: its path in the archive
    (`export/<db>/<session id>.json`, as `opencode export` writes it and `opencode
    import` takes it), how to read it, and its change signal. A database that cannot
    be read now is passed over (named in `report.skipped`)."""
    from sessiontree.foreign.opencode_db import DatabaseError, list_db_sessions, load_db_session

    for name in sorted(_listdir(home)):
        if not (name.startswith("opencode") and name.endswith(".db")):
            continue
        database = os.path.join(home, name)
        if os.path.islink(database) or not os.path.isfile(database):
            continue
        try:
            rows = list_db_sessions(database)
        except (DatabaseError, OSError) as exc:
            report.skipped.append(f"{database}: {exc}")
            unreadable.add(f"export/{name}/")
            continue
        for row in rows:
            signal = [row.messages, row.updated_ms, row.parts, row.parts_updated]

            def read(
                row_id: str = row.id, updated: int = row.updated_ms, database: str = database
            ) -> _Virtual | None:
                try:
                    session = load_db_session(database, row_id, children=False)
                except (DatabaseError, OSError) as exc:
                    report.skipped.append(f"{database}/{row_id}: {exc}")
                    return None
                return _Virtual(
                    _export_document(session.info, session.messages), [], updated * 1_000_000
                )

            yield f"export/{name}/{row.id}.json", read, signal


def _export_document(
    info: dict[str, Any], messages: list[tuple[dict[str, Any], list[dict[str, Any]]]]
) -> bytes:
    """`opencode export`'s document, one message a line (so that a session's unchanged
    messages are chunks already stored)."""

    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    lines = [f'{{"info":{dump(info)},"messages":[']
    for number, (message, parts) in enumerate(messages):
        comma = "," if number < len(messages) - 1 else ""
        lines.append(dump({"info": message, "parts": parts}) + comma)
    lines.append("]}")
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path, follow_symlinks=False)
    except OSError:
        return None


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
    with _opened(archive) as place:
        _prepare(place, sources)
        release = place.lock()
        try:
            report = _run(place, sources, progress)
        finally:
            release()
    report.seconds = time.monotonic() - started
    return report


def _run(
    archive: _Place,
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
            for rel, st in _walk(source.home, root, report, unreadable):
                report.files_seen += 1
                full = os.path.join(source.home, rel)
                manifest_path = _manifest_rel(source.agent, full)
                seen.add(manifest_path)
                old = _load_or_set_aside(archive, manifest_path, report)
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
                    progress(full)
                _archive_file(archive, source, rel, st, manifest_path, old, report, seen_ns)
        if source.agent == "opencode":
            for rel, read, signal in _opencode_sessions(source.home, report, unreadable):
                report.files_seen += 1
                full = os.path.join(source.home, rel)
                manifest_path = _manifest_rel(source.agent, full)
                seen.add(manifest_path)
                old = _load_or_set_aside(archive, manifest_path, report)
                if old is not None and old.get("signal") == signal and old.get("deletedMs") is None:
                    continue
                virtual = read()
                if virtual is None:
                    continue
                virtual = _Virtual(virtual.data, signal, virtual.st_mtime_ns)
                if old is not None and old.get("hash") == _file_hash(
                    [[hashlib.sha256(p).hexdigest(), len(p)] for p in _cut(virtual.data)]
                ):
                    old["signal"], old["deletedMs"] = signal, None
                    _save_manifest(archive, manifest_path, old)
                    continue
                if progress is not None:
                    progress(full)
                _archive_file(archive, source, rel, virtual, manifest_path, old, report)
        report.files_deleted += _mark_deleted(archive, source, seen, unreadable)
    return report


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
    archive: _Place, source: ArchiveSource, seen: set[str], unreadable: set[str]
) -> int:
    """Mark each archived file of `source` no longer at its source (kept, never removed)."""
    marked = 0
    for name in archive.names(f"files/{source.agent}", ".json"):
        path = f"files/{source.agent}/{name}"
        if path in seen:
            continue
        try:
            manifest = _load_manifest(archive, path)
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
        _save_manifest(archive, path, manifest)
        marked += 1
    return marked


# ---------------------------------------------------------------------------- reading it


def _is_session(agent: str, rel: str) -> bool:
    parts = rel.split("/")
    name = parts[-1]
    if agent == "claude":
        return len(parts) == 3 and parts[0] == "projects" and name.endswith(".jsonl")
    if agent == "codex":
        return name.endswith(".jsonl")
    if agent == "gemini":
        return (
            len(parts) == 4
            and parts[2] == "chats"
            and name.startswith("session-")
            and name.endswith((".json", ".jsonl"))
        )
    if agent == "copilot":
        return len(parts) == 3 and name == "events.jsonl"
    if agent == "opencode":
        if len(parts) == 3 and parts[0] == "export":
            return name.endswith(".json")
        return len(parts) == 4 and parts[:2] == ["storage", "session"] and name.endswith(".json")
    return parts[0] == "sessions" and len(parts) == 3 and name.endswith(".jsonl")


@contextmanager
def _opened(archive: str) -> Iterator[_Place]:
    place = _open(archive)
    try:
        yield place
    finally:
        place.close()


def archived_files(archive: str) -> list[ArchivedFile]:
    """Every file the archive (a dir, or a PostgreSQL URL) keeps, gone at its source
    or not."""
    with _opened(archive) as place:
        return _files(place)


def _files(place: _Place, problems: list[str] | None = None) -> list[ArchivedFile]:
    if not place.is_archive():
        raise ArchiveError(f"{place.label}: not an archive (no {_MARK} file)")
    found = []
    for key, m in _manifests(place, problems):
        agent, rel = str(m.get("agent")), str(m.get("rel"))
        found.append(
            ArchivedFile(
                agent,
                str(m.get("home")),
                rel,
                int(m.get("size", 0)),
                int(m.get("mtimeNs", 0)),
                m.get("deletedMs"),
                _is_session(agent, rel),
                place.path(key),
                key,
            )
        )
    return found


def archive_stats(archive: str) -> ArchiveStats:
    with _opened(archive) as place:
        files = _files(place)
        stored = place.stored_bytes()
        clobbered = []
        for _, manifest in _manifests(place):
            found = _clobbered_newest(place, manifest)
            if found is not None:
                clobbered.append(
                    f"{manifest.get('agent')}:{manifest.get('home')}/{manifest.get('rel')}: "
                    f"newest version {_clobber_words(found[0])}; version {found[1]} holds "
                    f"{found[2]} lines"
                )
    return ArchiveStats(
        sessions=sum(1 for f in files if f.is_session),
        files=len(files),
        deleted=sum(1 for f in files if f.is_session and f.deleted_ms is not None),
        original_bytes=sum(f.size for f in files),
        stored_bytes=stored,
        clobbered=sorted(clobbered),
    )


def verify_archive(archive: str) -> list[str]:
    """Every problem found: each chunk of each file (and of its earlier versions) read
    and checked against its hash, and each file against its recorded hash. [] when sound."""
    problems: list[str] = []
    with _opened(archive) as place:
        for file in _files(place, problems):
            manifest = _load_manifest(place, file.key) or {}
            versions = [manifest, *manifest.get("earlier", [])]
            for version in versions:
                chunks = version.get("chunks", [])
                where = f"{file.home}/{file.rel}"
                if _file_hash(chunks) != version.get("hash"):
                    problems.append(f"{where}: its chunk list is not the one recorded")
                    continue
                if sum(int(c[1]) for c in chunks) != version.get("size"):
                    problems.append(f"{where}: its chunks do not add up to its size")
                for digest, length in chunks:
                    try:
                        _get_chunk(place, digest, int(length))
                    except ArchiveError as exc:
                        problems.append(f"{where}: {exc}")
    return problems


# ---------------------------------------------------------------------------- restore


def _safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return (
        bool(rel)
        and not os.path.isabs(rel)
        and "\0" not in rel
        and all(p not in ("", ".", "..") for p in parts)
    )


_SESSION_DIRS = {
    "claude": ("projects",),
    "codex": ("sessions", "archived_sessions"),
    "opencode": ("storage", "export"),
    "gemini": ("tmp",),
    "copilot": ("session-state",),
    **{agent: ("sessions", "blobs") for agent in ("xcsh", "omp", "pi")},
}
"""The dirs under each agent's home that an archive keeps (`find_stores`' roots)."""


def _agent_file(agent: str, rel: str) -> bool:
    """Whether `rel` is where `agent` keeps session files under its home: a restore
    (without `--to`) writes at the home a manifest names, and a crafted archive must not
    write `~/.config/autostart/x.desktop` or `~/.bashrc.d/x` through it."""
    parts = rel.split("/")
    if parts[0] not in _SESSION_DIRS.get(agent, ()) or len(parts) < 2:
        return False
    return agent != "gemini" or (len(parts) >= 4 and parts[2] == "chats")


_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_NAME = r"[^/.][^/]*"  # one path component, not hidden
_PI_FILES = (
    rf"sessions/--[^/]*--/\d{{4}}-\d{{2}}-\d{{2}}T\d{{2}}-\d{{2}}-\d{{2}}-\d{{3}}Z_{_NAME}\.jsonl"
    # a session's artifacts dir: its subagent sessions and the tool output kept beside it
    rf"|sessions/--[^/]*--/\d{{4}}-\d{{2}}-\d{{2}}T[^/]*Z_[^/]+/(?:{_NAME}/)*{_NAME}"
    r"|blobs/[0-9a-f]{64}(?:\.[A-Za-z0-9][A-Za-z0-9._-]*)?"
)
_SESSION_FILES = {
    "claude": re.compile(
        rf"projects/{_NAME}/(?:{_UUID}|agent-{_NAME})\.jsonl"
        rf"|projects/{_NAME}/{_UUID}/subagents/(?:{_NAME}/)*agent-{_NAME}\.(?:jsonl|meta\.json)"
    ),
    "codex": re.compile(
        rf"sessions/\d{{4}}/\d{{2}}/\d{{2}}/rollout-{_NAME}\.jsonl"
        rf"|archived_sessions/rollout-{_NAME}\.jsonl"
    ),
    "gemini": re.compile(
        rf"tmp/{_NAME}/chats/session-{_NAME}\.jsonl?|tmp/{_NAME}/chats/{_NAME}/{_NAME}\.jsonl"
    ),
    "opencode": re.compile(
        rf"storage/session/{_NAME}/ses_{_NAME}\.json"
        rf"|storage/message/ses_{_NAME}/msg_{_NAME}\.json"
        rf"|storage/part/msg_{_NAME}/prt_{_NAME}\.json"
        rf"|export/opencode(?:-[A-Za-z0-9._-]+)?\.db/ses_{_NAME}\.json"
    ),
    "copilot": re.compile(rf"session-state/{_NAME}/events\.jsonl|session-state/{_NAME}\.jsonl"),
    **{agent: re.compile(_PI_FILES) for agent in ("xcsh", "omp", "pi")},
}
"""Each agent's own session-file layout under its home: what a restore without `--to`
may write (a crafted manifest's `~/projects/<repo>/conftest.py` is none of them)."""


def _local_homes(agent: str) -> set[str]:
    """Where `agent` keeps its store on this machine (for this user): the only homes a
    restore without `--to` writes to, whatever a manifest says its home was."""
    homes: list[str] = []
    if agent in _PI_FORMAT:
        homes = [native_agent_dir(a) for a in NATIVE_AGENTS]
        homes.append(agent_dir_env() or "")
    elif agent == "claude":
        homes = claude_config_dirs()
    else:
        one = {
            "codex": codex_home,
            "opencode": opencode_home,
            "gemini": gemini_home,
            "copilot": copilot_home,
        }.get(agent)
        homes = [one()] if one is not None else []
    return {os.path.normpath(os.path.abspath(h)) for h in homes if h}


def _restore_refusal(file: ArchivedFile) -> str | None:
    """Why a restore without `--to` must not write `file` where its manifest says (None:
    it may): a manifest's home and path are not trusted."""
    pattern = _SESSION_FILES.get(file.agent)
    if pattern is None or pattern.fullmatch(file.rel) is None:
        return (
            f"{file.manifest}: names {file.agent}:{file.rel!r}, not a session file of that "
            "agent's layout; refused (restore it --to another dir to look at it)"
        )
    if file.home not in _local_homes(file.agent):
        return (
            f"{file.manifest}: names the home {file.home!r}, where {file.agent} keeps no "
            "store on this machine; refused (restore it --to another dir)"
        )
    return None


def _matches(session: str, file: ArchivedFile) -> bool:
    full = os.path.join(file.home, file.rel)
    if session in (file.rel, full):
        return True
    if len(session) < 8:
        return False
    name = file.rel.rsplit("/", 1)[-1]
    if session in name:
        return True
    # A Gemini CLI file is named by the first 8 characters of its session id.
    return file.agent == "gemini" and session[:8] in name and len(session) >= 32


def _companions(file: ArchivedFile, session: str, every: list[ArchivedFile]) -> list[ArchivedFile]:
    """The files kept with a session file: under a dir named as the file (Claude Code's
    `<id>/subagents/`), its session dir (Copilot CLI), a dir named by its id (Gemini
    CLI's subagents, `chats/<parent id>/`)."""
    stem = file.rel.rsplit(".", 1)[0] + "/"
    parent = file.rel.rsplit("/", 1)[0] + "/"
    # Gemini CLI: `chats/session-<time>-<first 8 of its id>.json[l]`, its subagents in
    # `chats/<its whole id>/`: found however the session was named (file name, path)
    short = file.rel.rsplit("-", 1)[-1].split(".", 1)[0] if file.agent == "gemini" else ""
    found = _opencode_storage(file, every)
    for other in every:
        if other is file or other.agent != file.agent or other.home != file.home:
            continue
        if other in found:
            continue
        if other.rel.startswith(stem):
            found.append(other)
        elif file.agent == "copilot" and other.rel.startswith(parent):
            found.append(other)
        elif (
            # a dir named by the id asked for; in a pi-format store only the file's own
            # dir (above) is its: a custom id may name any dir (`sessions`, `subagents`)
            file.agent not in _PI_FORMAT
            and len(session) >= 8
            and f"/{session}/" in f"/{other.rel}"
            and not other.is_session
        ):
            found.append(other)
        elif (
            len(short) == 8
            and other.rel.startswith(parent)
            and other.rel[len(parent) :].split("/", 1)[0].startswith(short)
            and "/" in other.rel[len(parent) :]
            and not other.is_session
        ):
            found.append(other)
    return found


def _opencode_storage(file: ArchivedFile, every: list[ArchivedFile]) -> list[ArchivedFile]:
    """An OpenCode session of the older JSON layout (`storage/session/<project>/<id>.json`)
    is its messages (`storage/message/<id>/<message id>.json`), their parts
    (`storage/part/<message id>/`) and whatever else `storage/` keeps under its id."""
    parts = file.rel.split("/")
    if file.agent != "opencode" or parts[:2] != ["storage", "session"]:
        return []
    session_id = parts[-1].rsplit(".", 1)[0]
    mine = [f for f in every if f is not file and f.agent == file.agent and f.home == file.home]
    found = []
    for other in mine:
        o = other.rel.split("/")
        if len(o) >= 3 and o[0] == "storage" and o[1] != "session":
            if o[2] == session_id or o[2].rsplit(".", 1)[0] == session_id:
                found.append(other)
    messages = {
        f.rel.split("/")[3].rsplit(".", 1)[0]
        for f in found
        if f.rel.startswith(f"storage/message/{session_id}/") and f.rel.count("/") == 3
    }
    for other in mine:
        o = other.rel.split("/")
        if len(o) >= 4 and o[:2] == ["storage", "part"] and o[2] in messages:
            found.append(other)
    return found


def _names_exactly(session: str, file: ArchivedFile, *, fold: bool = False) -> bool:
    """Whether `session` is this file's path, name, or id (`fold`: case aside): in a
    pi-format store the whole id its name holds (pi 1.6's custom ids: `<time>_<id>.jsonl`)."""
    name = file.rel.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0]
    file_id = file_session_id(stem) if file.agent in _PI_FORMAT else None
    names = [file.rel, os.path.join(file.home, file.rel), name, stem, file_id or stem]
    if fold:
        return session.lower() in (n.lower() for n in names)
    return session in names


def _starts(session: str, file: ArchivedFile) -> bool:
    """Whether `session` (8 characters or more) starts a pi-format file's name or id:
    not any part of it (`login-bug` is not the custom id `fix-login-bug`)."""
    stem = file.rel.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return len(session) >= 8 and any(
        s is not None and s.startswith(session) for s in (stem, file_session_id(stem))
    )


def _find_session(every: list[ArchivedFile], session: str) -> ArchivedFile:
    sessions = [f for f in every if f.is_session]
    found = [f for f in sessions if _names_exactly(session, f)]
    if not found:
        found = [f for f in sessions if _names_exactly(session, f, fold=True)]
    if not found:
        found = [
            f
            for f in sessions
            if (_starts(session, f) if f.agent in _PI_FORMAT else _matches(session, f))
        ]
    if not found:
        raise ArchiveError(f"no archived session matches {session!r}")
    if len(found) > 1:
        names = ", ".join(f"{f.agent}:{f.rel}" for f in found[:5])
        raise ArchiveError(f"{session!r} matches {len(found)} archived sessions: {names}")
    return found[0]


def archived_versions(archive: str, session: str) -> tuple[ArchivedFile, list[ArchivedVersion]]:
    """The archived session `session` (as `restore_session` finds it) and every version
    of it the archive keeps, oldest first."""
    file = _find_session(archived_files(archive), session)
    with _opened(archive) as place:
        manifest = _load_manifest(place, file.key) or {}
        return file, _described(place, manifest)


def _version_at(versions: list[ArchivedVersion], at_ms: int, where: str) -> int:
    """The version the file held at `at_ms` (epoch ms): the newest written by then."""
    held = [v.number for v in versions if v.mtime_ns // 1_000_000 <= at_ms]
    if not held:
        raise ArchiveError(f"{where}: the archive keeps no version written by then")
    return held[-1]


def restore_session(
    archive: str,
    session: str,
    *,
    to: str | None = None,
    deleted_only: bool = False,
    version: int | None = None,
    at_ms: int | None = None,
) -> RestoreReport:
    """Write the archived session `session` (its id, its file name, or its path) and its
    companion files back where its agent keeps them (or under `to`, as the agent's
    home), byte for byte with their mtimes. A file already there with the same bytes
    is left alone; one with other bytes is never replaced (ArchiveError: give `to`).
    `version` (a number of `archived_versions`) or `at_ms` (the version the file held
    then) restores an earlier version of the session file (its companions as they are
    newest)."""
    every = archived_files(archive)
    file = _find_session(every, session)
    where = f"{file.agent}:{file.home}/{file.rel}"
    notes = []
    with _opened(archive) as place:
        versions = _described(place, _load_manifest(place, file.key) or {})
    if at_ms is not None:
        version = _version_at(versions, at_ms, where)
    if version is not None and not 1 <= version <= len(versions):
        raise ArchiveError(
            f"{where}: has no version {version} (the archive keeps versions 1 to {len(versions)})"
        )
    if version is not None and version != len(versions):
        file = replace(file, version=version)
    elif versions[-1].clobber:
        fullest = max(versions, key=lambda v: (v.lines or 0, v.number))
        notes.append(
            f"{where}: the newest version ({versions[-1].lines} lines) is a clobber; version "
            f"{fullest.number} holds {fullest.lines} lines: restore --version "
            f"{fullest.number} (with --to, as the file is there)"
        )
    found = next(f for f in every if f.key == file.key)  # the one `_companions` passes over
    files = [file, *_companions(found, session, every)]
    if file.agent in _PI_FORMAT:
        files += _blobs_of(archive, files, every)
    report = restore_files(archive, files, to=to)
    report.notes.extend(notes)
    return report


_PI_FORMAT = ("xcsh", "omp", "pi")
_BLOB_REF = re.compile(rb"blob:sha256:([0-9a-f]{64})")


def _blobs_of(
    archive: str, files: list[ArchivedFile], every: list[ArchivedFile]
) -> list[ArchivedFile]:
    """The images a pi-format session refers to (`blob:sha256:<hex>`): they are kept in
    its agent dir's `blobs/` (`<hex>`, and a `<hex>.<ext>` beside), shared by sessions,
    not beside the session; a restore brings back the ones its files name."""
    refs: set[str] = set()
    with _opened(archive) as place:
        for file in files:
            manifest = _load_manifest(place, file.key) or {}
            chunks = _pick(manifest, file.version, file.manifest).get("chunks", [])
            data = b"".join(_get_chunk(place, d, n) for d, n in chunks)
            refs.update(m.decode() for m in _BLOB_REF.findall(data))
    home = files[0].home
    return [
        other
        for other in every
        if other.agent == files[0].agent
        and other.home == home
        and other.rel.startswith("blobs/")
        and other.rel[6:].split(".", 1)[0] in refs
        and other not in files
    ]


def restore_files(
    archive: str, files: list[ArchivedFile], *, to: str | None, keep_going: bool = False
) -> RestoreReport:
    """Write `files` (of `archived_files(archive)`) back (see `restore_session`).
    `keep_going`: a file that cannot be restored (there with other bytes: a session
    the agent wrote to since it was archived; a damaged chunk) is named in `conflicts`,
    and the others are still restored (`restore --all` after a cleanup: the sessions
    gone come back); a full disk still stops it."""
    with _opened(archive) as place:
        return _restore(place, files, to, keep_going=keep_going)


def _restore(
    archive: _Place, files: list[ArchivedFile], to: str | None, *, keep_going: bool = False
) -> RestoreReport:
    report = RestoreReport()
    if to is not None:
        to = os.path.abspath(os.path.expanduser(to))
        local = archive.local
        if local is not None and (_inside(to, local) or _inside(local, to)):
            raise ArchiveError(f"{to}: is the archive, or inside it, or holds it")
    plans = []
    for file in files:
        if not _safe_rel(file.rel):
            raise ArchiveError(f"{file.manifest}: names {file.rel!r}, not a path inside a store")
        home = to if to is not None else file.home
        if not os.path.isabs(home) or os.path.normpath(home) != home:
            raise ArchiveError(f"{file.manifest}: its home {home!r} is not an absolute path")
        if not _agent_file(file.agent, file.rel):
            raise ArchiveError(
                f"{file.manifest}: names {file.agent}:{file.rel!r}, not a file of that "
                "agent's session dirs; refused"
            )
        refusal = None if to is not None else _restore_refusal(file)
        if refusal is not None:
            if not keep_going:
                raise ArchiveError(refusal)
            report.conflicts.append(refusal)
            continue
        target = os.path.join(home, file.rel)
        if archive.local is not None and _inside(target, archive.local):
            raise ArchiveError(f"{target}: is inside the archive; a restore never writes there")
        plans.append((file, home, target))
    for file, home, target in plans:
        try:
            _restore_one(archive, file, home, target, report)
        except (ArchiveError, OSError) as exc:
            full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
            if not keep_going or full:
                raise
            why = str(exc) if isinstance(exc, ArchiveError) else f"{target}: {exc}"
            report.conflicts.append(why)
    return report


def _restore_one(
    archive: _Place, file: ArchivedFile, home: str, target: str, report: RestoreReport
) -> None:
    manifest = _pick(_load_manifest(archive, file.key) or {}, file.version, file.manifest)
    data = b"".join(_get_chunk(archive, d, int(n)) for d, n in manifest.get("chunks", []))
    if _file_hash(manifest.get("chunks", [])) != manifest.get("hash"):
        raise ArchiveError(f"{file.manifest}: does not match its recorded hash")
    mtime = int(manifest.get("mtimeNs") or 0)
    directory = _open_dirs_inside(home, os.path.dirname(target))
    try:
        written = _write_new_in(directory, target, data, mtime)
    finally:
        os.close(directory)
    (report.written if written else report.unchanged).append(target)


def _open_dirs_inside(home: str, directory: str) -> int:
    """A descriptor of `directory` under `home`, each component below `home` made where
    missing and opened without following a symlink: a restore never writes through
    one, not even one that replaces a dir between a look and the write (a `--to` dir
    that another user can write to)."""
    ensure_private_dir(home)
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC)
    rel = os.path.relpath(directory, home)
    current = home
    try:
        for part in [] if rel == "." else rel.split(os.sep):
            current = os.path.join(current, part)
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                inner = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, dir_fd=fd
                )
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ArchiveError(
                        f"{current}: is a symlink (or not a dir); a restore never writes "
                        "through one"
                    ) from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_new_in(directory: int, target: str, data: bytes, mtime: int) -> bool:
    """Write `data` as the new file `target` in the dir open as `directory` (True), or
    find it there with these bytes (False); anything else there is left alone
    (ArchiveError). Every name is taken relative to `directory`, never followed."""
    name = os.path.basename(target)
    try:
        st = os.lstat(name, dir_fd=directory)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise ArchiveError(f"{target}: is there and is not a regular file; left alone")
        fd = os.open(name, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | os.O_NONBLOCK, dir_fd=directory)
        with open(fd, "rb") as f:
            if stat.S_ISREG(os.fstat(f.fileno()).st_mode) and f.read() == data:
                return False
        raise ArchiveError(
            f"{target}: is there with other bytes; never replaced (restore it --to another dir)"
        )
    temp = os.path.basename(side_path(target, f".{secrets.token_hex(6)}.tmp", hidden=True))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC
    fd = os.open(temp, flags, 0o600, dir_fd=directory)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
        except FileExistsError:
            raise ArchiveError(
                f"{target}: appeared while it was restored; left alone (run again)"
            ) from None
        except OSError as exc:
            if exc.errno not in NO_HARD_LINKS:
                raise
            try:  # a filesystem without hard links: a rename to a name found free
                os.lstat(name, dir_fd=directory)
            except FileNotFoundError:
                os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
            else:
                raise ArchiveError(
                    f"{target}: appeared while it was restored; left alone (run again)"
                ) from None
    finally:
        try:
            os.unlink(temp, dir_fd=directory)
        except OSError:
            pass
    os.fsync(directory)
    if mtime:
        os.utime(name, ns=(mtime, mtime), dir_fd=directory, follow_symlinks=False)
    return True


def _make_dirs_inside(home: str, directory: str) -> None:
    """Create `directory` under `home`, refusing any existing component that is a
    symlink (a restore never writes through one, out of the store)."""
    ensure_private_dir(home)
    real_home = os.path.realpath(home)
    rel = os.path.relpath(directory, home)
    current = home
    for part in [] if rel == "." else rel.split(os.sep):
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise ArchiveError(f"{current}: is a symlink; a restore never writes through one")
        if not os.path.isdir(current):
            os.mkdir(current, 0o700)
    if not _inside(directory, real_home):
        raise ArchiveError(f"{directory}: is outside {home}")


# ---------------------------------------------------------------------------- a view


@dataclass(frozen=True, slots=True)
class ArchiveView:
    """One archived store as files that its reader reads: `home` holds what the
    store's home held (sessions gone at their source included)."""

    agent: str
    home: str
    source_home: str


def archive_view(archive: str) -> list[ArchiveView]:
    """The archive as stores that can be read (`list`, `search`, `usage`, `serve`):
    every archived file written under `<archive>/view/<agent>/<key of its home>/`, as it
    was at its source (sessions gone there included), each one rewritten only when its
    archived bytes changed. The view is the archive's own dir: safe to delete. OpenCode
    database sessions are not in it (they are documents: `restore` them)."""
    if _is_url(archive):
        raise ArchiveError(
            "an archive in PostgreSQL is read by restoring it: restore --all --to DIR"
        )
    with _opened(archive) as place:
        return _view(place)


def _view(place: _Place) -> list[ArchiveView]:
    archive = place.local
    assert archive is not None
    views: dict[tuple[str, str], ArchiveView] = {}
    # the files still at their source first: where one gone there had the same path as
    # a dir now (a file deleted, then a dir made under its name), the one there wins
    for file in sorted(_files(place), key=lambda f: (f.deleted_ms is not None, -f.mtime_ns)):
        if file.agent == "opencode" and file.rel.startswith("export/"):
            continue
        if not _safe_rel(file.rel):
            continue
        key = hashlib.sha256(file.home.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        home = os.path.join(archive, "view", file.agent, key)
        views.setdefault((file.agent, home), ArchiveView(file.agent, home, file.home))
        target = os.path.join(home, file.rel)
        manifest = _load_manifest(place, file.key) or {}
        shown = _all_versions(manifest)[-1]
        clobber = _clobbered_newest(place, manifest)
        if clobber is not None:  # the transcript, not the fresh header it was cut to
            shown = _pick(manifest, clobber[1], file.manifest)
        size, mtime = int(shown.get("size") or 0), int(shown.get("mtimeNs") or 0)
        st = _stat(target)
        if st is not None and st.st_size == size and st.st_mtime_ns == mtime:
            continue
        chunks = shown.get("chunks", [])
        data = b"".join(_get_chunk(place, d, int(n)) for d, n in chunks)
        try:
            _make_dirs_inside(home, os.path.dirname(target))
            atomic_write(target, [data], durable=False)
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            log.warning("%s: not in the archive's view: a file and a dir share its path", target)
            continue
        if mtime:
            os.utime(target, ns=(mtime, mtime), follow_symlinks=False)
    return sorted(views.values(), key=lambda v: (v.agent, v.home))
