"""What a session has in the agent dir besides itself: its blob store, terminal
breadcrumbs, and the registry of session dirs outside the store; and whose store it is.

- Whose: pi's store (an agent dir named `.pi/agent`: `~/.pi/agent`, what `--agent pi`
  names) gets entries written as pi writes them, images inline (pi reads no blob
  refs); every other store as oh-my-pi writes them (`writes_pi_form`).

- `blob_store_for`: the one rule for where a session's images live;
  `blob_carry`: where a copy's images go, and `BlobCarry`, how they get there. Every
  copy of a session (fork, fork_from, extract, persist_copy, a branched session,
  move_to, an import, `export -o`, `repair -o`, the store transfers) takes its
  images along through it, so that a copy's refs resolve in its own agent dir. A
  copy no manager writes (`export -o`, `repair -o`) written outside every agent dir
  stands alone: no gc reads it, so its images go into it, inline, as the data they
  were before a writer externalized them.
- `terminal-sessions/<terminal id>`: two lines, the cwd and the session file, so
  the next `continue_recent` in this terminal resumes it. Names are bytes on
  disk (`os.fsencode`), so a project dir whose name is not UTF-8 works too.
- `external-session-dirs`: one absolute directory per line, each holding sessions
  whose images live in the agent's `blobs/` (so `gc` must read them before it
  deletes anything); a path holding a newline is written in hex after a NUL.
  Several processes append to it at once: every update is one `O_APPEND` write of
  one whole line, so no update is lost, and readers drop duplicates and an
  unterminated last line (a write in progress).

Both are best effort for the caller (a failure is logged, never raised) and are
written without following symlinks.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from typing import Final

from sessiontree._util.env import native_agent_dir
from sessiontree._util.fs import atomic_write, ensure_private_dir, open_regular, write_all
from sessiontree.errors import InvalidBlobRefError
from sessiontree.format import allow_deep_nesting, loads_object, serialize_entry_bytes
from sessiontree.layout._paths import EXTERNAL_SESSION_DIRS, get_terminal_id
from sessiontree.layout._refs import resolve_blob_refs
from sessiontree.storage import (
    BlobBackedStorage,
    BlobStore,
    BlobStoreLike,
    HostFilesystem,
    VerifiableBlobStore,
    same_blob_store,
)

__all__ = [
    "BlobCarry",
    "agent_dir_of",
    "blob_carry",
    "blob_store_for",
    "breadcrumb_path",
    "is_pi_agent_dir",
    "read_breadcrumb",
    "read_registry",
    "register_session_dir",
    "registered_session_dirs",
    "write_breadcrumb",
    "writes_pi_form",
]

log = logging.getLogger("sessiontree")


def breadcrumb_path(agent_dir: str) -> str | None:
    """This terminal's breadcrumb file in `agent_dir`, None without a terminal."""
    terminal = get_terminal_id()
    if terminal is None:
        return None
    return os.path.join(agent_dir, "terminal-sessions", terminal)


def write_breadcrumb(cwd: str, session_file: str, agent_dir: str) -> None:
    """Remember this terminal's session (best effort: never fails the caller)."""
    path = breadcrumb_path(agent_dir)
    if path is None:
        return
    try:
        data = os.fsencode(cwd) + b"\n" + os.fsencode(os.path.abspath(session_file)) + b"\n"
        ensure_private_dir(os.path.dirname(path))
        atomic_write(path, [data])
    except (OSError, ValueError) as exc:
        log.debug("could not write terminal breadcrumb %s: %s", path, exc)


def read_breadcrumb(cwd: str, agent_dir: str) -> str | None:
    """This terminal's last session file, if its cwd matches and it lies in the store."""
    agent = agent_dir
    path = breadcrumb_path(agent)
    if path is None:
        return None
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 16384)
    except OSError:
        return None
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    if len(lines) < 2 or lines[0] != os.fsencode(cwd):
        return None
    target = os.fsdecode(lines[1])
    if not target.endswith(".jsonl") or "\x00" in target or not os.path.isabs(target):
        return None
    # A breadcrumb is a file anyone could have edited: follow it only into our store.
    sessions_root = os.path.realpath(os.path.join(agent, "sessions"))
    real = os.path.realpath(target)
    if os.path.commonpath([real, sessions_root]) != sessions_root:
        log.warning(
            "ignoring terminal breadcrumb %s: %s is outside %s", path, target, sessions_root
        )
        return None
    return target if os.path.isfile(target) else None


def _read_registry(registry: str) -> bytes:
    try:
        fd = open_regular(registry, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


_ENCODED: Final = b"\0"
"""Starts a registry line holding a path with a newline, in hex (no path holds a NUL,
and a reader that does not know the form skips the line)."""


def _registry_line(directory: str) -> bytes:
    raw = os.fsencode(directory)
    return (_ENCODED + raw.hex().encode("ascii") if b"\n" in raw else raw) + b"\n"


def _parse_registry(data: bytes) -> tuple[list[str], bytes, list[bytes]]:
    """(absolute dirs, first recorded first, without duplicates; the unterminated rest;
    the damaged lines)."""
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the data ends with a newline
    seen: dict[str, None] = {}
    damaged: list[bytes] = []
    for raw in lines:
        line = raw
        if line.startswith(_ENCODED):
            try:
                line = bytes.fromhex(line[len(_ENCODED) :].decode("ascii"))
            except ValueError:
                damaged.append(raw)
                continue
        if b"\0" in line:
            damaged.append(raw)
            continue
        directory = os.fsdecode(line)
        if directory and os.path.isabs(directory):
            seen.setdefault(directory, None)
    return list(seen), torn, damaged


def read_registry(agent_dir: str) -> tuple[list[str], bytes, list[bytes]]:
    """The recorded outside session dirs, an unterminated last line (b"" if none), and
    the damaged lines (a NUL inside a path, a hex form that does not decode).

    An unterminated last line is a path still being written or cut by a crash, and a
    damaged one is what a crash leaves of a line (a filesystem that had grown the file
    but not written its data reads back NULs): neither is a dir of the list, and a
    reader that must not miss a dir (gc) should treat them as unreadable. OSError
    when the registry exists but cannot be read.
    """
    registry = os.path.join(agent_dir, EXTERNAL_SESSION_DIRS)
    return _parse_registry(_read_registry(registry))


def registered_session_dirs(agent_dir: str) -> list[str]:
    """The recorded outside session dirs, first-recorded first, without duplicates.

    An unterminated last line is skipped: it may be a path still being written,
    and a cut path could name another directory. Relative paths are ignored.
    OSError when the registry exists but cannot be read.
    """
    return read_registry(agent_dir)[0]


def register_session_dir(session_file: str, agent_dir: str) -> None:
    """Record the dir of a session outside `<agent>/sessions` that uses the agent's blobs.

    Best effort; a dir already recorded is not written again.
    """
    agent = agent_dir
    directory = os.path.realpath(os.path.dirname(os.path.abspath(session_file)))
    sessions = os.path.realpath(os.path.join(agent, "sessions"))
    if os.path.commonpath([directory, sessions]) == sessions:
        return
    registry = os.path.join(agent, EXTERNAL_SESSION_DIRS)
    try:
        current = _read_registry(registry)
        if directory not in _parse_registry(current)[0]:
            ensure_private_dir(agent)
            # A crash may have left half a line: start ours on a line of its own.
            line = _registry_line(directory)
            if current and not current.endswith(b"\n"):
                line = b"\n" + line
            fd = open_regular(registry, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                # One write of whole lines: concurrent appenders never interleave.
                write_all(fd, line)
            finally:
                os.close(fd)
    except (OSError, ValueError) as exc:
        log.warning("could not record session dir %s in %s: %s", directory, registry, exc)


def agent_dir_of(session_path: str, agent_dir: str) -> str | None:
    """The agent dir holding `session_path` (a session file or dir) under its
    `sessions/`, if there is one.

    The nearest ancestor named `sessions` counts when its parent is the agent dir in
    effect (`agent_dir`) or holds a `blobs/` dir: a
    project's own `sessions/` folder is not an agent dir.
    """
    current = os.path.abspath(session_path)
    configured = os.path.abspath(agent_dir)
    while True:
        parent = os.path.dirname(current)
        if os.path.basename(current) == "sessions":
            if parent == configured or os.path.isdir(os.path.join(parent, "blobs")):
                return parent
        if parent == current:
            return None
        current = parent


def blob_store_for(session_path: str | None, storage: object, agent_dir: str) -> BlobStoreLike:
    """The one rule for where a session's images live.

    The storage's own blob store when it has one (PostgreSQL's table); else the
    `blobs/` of the agent dir that holds the session under `sessions/`; else the
    agent dir in effect, `agent_dir`: the store's, or the one a caller works on (an
    import, a store transfer).
    """
    if isinstance(storage, BlobBackedStorage):
        own = storage.blob_store()
        if own is not None:
            return own
    in_effect = agent_dir
    agent = agent_dir_of(session_path, in_effect) if session_path else None
    return BlobStore(os.path.join(agent or in_effect, "blobs"))


_REF_MARK: Final = b"blob:sha256:"
_BLOB_REF: Final = re.compile(rb"blob:sha256:([0-9a-f]{64})")
"""A blob ref anywhere in a session's bytes, as `verify` and `gc` find them."""
_REF_OVERLAP: Final = len("blob:sha256:") + 64 - 1
"""Bytes of one chunk kept for the next, so that a ref cut in two is still found."""


def _where(blobs: BlobStoreLike) -> str:
    where = getattr(blobs, "dir", None)
    return where if isinstance(where, str) else type(blobs).__name__


class BlobCarry:
    """How one copy takes its images along: from the store the source's images are
    in (`source`) into the store the copy's refs must resolve in (`target`).

    Every byte written to the copy passes `take` (or `chunks`): each blob it refers
    to that `target` lacks, or holds damaged, is copied from `source`, as stored
    (checked against its hash). One that neither holds intact is missing: the copy
    keeps its ref (the image can still be restored under its name) and `report` says
    so, naming the copy. When both are one store (`carries` is False) nothing is read
    or copied.

    A copy that stands alone (`inlines`: written outside every agent dir, see
    `blob_carry`) has no store of its own (`target` is `source`): `chunks` rewrites
    each line that holds a ref with its images as data, read from `source`
    (`resolve_blob_refs` with frames; the other lines go out byte for byte). A ref
    whose blob `source` does not hold intact, or cannot read, stays as it is and is
    reported as missing; a ref that names no image (in a text, say) stays too.
    """

    __slots__ = (
        "_seen",
        "carried",
        "carries",
        "copy_path",
        "inlined",
        "inlines",
        "missing",
        "source",
        "target",
    )

    def __init__(
        self,
        source: BlobStoreLike,
        target: BlobStoreLike,
        copy_path: str,
        *,
        inline: bool = False,
    ) -> None:
        self.source = source
        self.target = source if inline else target
        self.copy_path = copy_path
        self.inlines = inline
        self.carries = not inline and not same_blob_store(source, target)
        self.carried = 0
        """Blobs copied into `target`."""
        self.inlined = 0
        """Lines of a copy that stands alone written with their images as data."""
        self.missing: dict[tuple[str, str], None] = {}
        """(path of the copy, hash) of each blob a copy refers to that neither store holds
        (that `source` does not hold intact, for a copy that stands alone)."""
        self._seen: dict[str, bool] = {}  # hash -> in `target` now

    def take(self, data: bytes, path: str | None = None) -> None:
        """Make the blobs `data` (bytes of the copy at `path`, default the copy's)
        refers to resolve in `target`."""
        if not self.carries or b"blob:sha256:" not in data:
            return
        for match in _BLOB_REF.finditer(data):
            digest = match.group(1).decode("ascii")
            there = self._seen.get(digest)
            if there is None:
                there = self._seen[digest] = self._carry(digest)
            if not there:
                self.missing.setdefault((path or self.copy_path, digest), None)

    def _carry(self, digest: str) -> bool:
        target = self.target
        if isinstance(target, VerifiableBlobStore):
            # A damaged blob there (cut short by a crashed writer) is replaced by the
            # source's good bytes: once the source goes, they are the only ones left.
            if target.verify(digest) == "ok":
                return True
        elif target.has(digest):
            return True
        try:
            data = self.source.get(digest)
        except (OSError, InvalidBlobRefError) as exc:
            log.warning("could not read blob %s from %s: %s", digest, _where(self.source), exc)
            return False
        import hashlib  # here: only a copy of images checks them, and hashlib loads OpenSSL

        if data is None or hashlib.sha256(data).hexdigest() != digest:
            return False  # missing, or damaged (a store that checks its hashes said so)
        self.target.put(data)
        self.carried += 1
        return True

    def chunks(self, chunks: Iterable[bytes], path: str | None = None) -> Iterator[bytes]:
        """`chunks` (a whole file of the copy, at `path`) passed on through `take`. The
        blobs carried are synced once the last chunk is taken, before a writer can
        make the file durable: a durable ref never names a blob a crash could lose.
        A copy that stands alone gets its lines with refs rewritten, images inline."""
        if self.inlines:
            yield from self._inlined(chunks, path or self.copy_path)
            return
        if not self.carries:
            yield from chunks
            return
        tail = b""
        for chunk in chunks:
            if chunk:
                self.take(tail + chunk, path)
                tail = (tail + chunk)[-_REF_OVERLAP:]
            yield chunk
        if self.carried:
            self.target.sync()

    def _inlined(self, chunks: Iterable[bytes], path: str) -> Iterator[bytes]:
        """`chunks` cut at line ends, each run of whole lines through `_inline`."""
        pending: list[bytes] = []  # the start of a line that goes on in the next chunk
        for chunk in chunks:
            cut = chunk.rfind(b"\n") + 1
            if not cut:
                if chunk:
                    pending.append(chunk)
                continue
            lines = b"".join([*pending, chunk[:cut]]) if pending else chunk[:cut]
            pending = [chunk[cut:]] if cut < len(chunk) else []
            yield self._inline(lines, path)
        if pending:
            yield self._inline(b"".join(pending), path)

    def _inline(self, data: bytes, path: str) -> bytes:
        """Whole lines (the last one may lack its newline), those with a ref rewritten."""
        if _REF_MARK not in data:
            return data
        lines = data.split(b"\n")
        for i, line in enumerate(lines):
            if _REF_MARK in line:
                lines[i] = self._inline_line(line, path)
        return b"\n".join(lines)

    def _inline_line(self, line: bytes, path: str) -> bytes:
        entry = loads_object(line)
        if entry is None:
            # No reader takes the line (a copy keeps what it was given): its refs stay.
            for match in _BLOB_REF.finditer(line):
                self._check_kept(match.group(1).decode("ascii"), path)
            return line
        unresolved: set[str] = set()
        resolved = allow_deep_nesting(
            lambda: resolve_blob_refs(entry, self.source, frames=True, unresolved=unresolved)
        )
        for digest in unresolved:
            self.missing.setdefault((path, digest), None)
        if resolved is entry:
            return line
        self.inlined += 1
        return allow_deep_nesting(lambda: serialize_entry_bytes(resolved))

    def _check_kept(self, digest: str, path: str) -> None:
        """A ref the copy keeps (in a line no reader takes): missing unless intact."""
        intact = self._seen.get(digest)
        if intact is None:
            source = self.source
            if isinstance(source, VerifiableBlobStore):
                intact = source.verify(digest) == "ok"
            else:
                try:
                    data = source.get(digest)
                except (OSError, InvalidBlobRefError):
                    data = None
                import hashlib  # as in `_carry`

                intact = data is not None and hashlib.sha256(data).hexdigest() == digest
            self._seen[digest] = intact
        if not intact:
            self.missing.setdefault((path, digest), None)

    def report(self) -> list[tuple[str, str]]:
        """Log the blobs found missing (one warning per copy); (path, hash) of each."""
        by_path: dict[str, list[str]] = {}
        for path, digest in self.missing:
            by_path.setdefault(path, []).append(digest)
        for path, digests in by_path.items():
            shown = ", ".join(d[:12] + "…" for d in digests[:3])
            more = f" and {len(digests) - 3} more" if len(digests) > 3 else ""
            if self.inlines:
                log.warning(
                    "%s: %d image(s) it refers to are not in %s (blob %s%s): the copy, which "
                    "holds its other images itself, keeps their refs, which do not resolve "
                    "until the images are stored again",
                    path,
                    len(digests),
                    _where(self.source),
                    shown,
                    more,
                )
                continue
            log.warning(
                "%s: %d image(s) it refers to are in neither %s nor %s (blob %s%s): the copy "
                "keeps their refs, which do not resolve until the images are stored again",
                path,
                len(digests),
                _where(self.source),
                _where(self.target),
                shown,
                more,
            )
        return list(self.missing)


def blob_carry(
    source: BlobStoreLike,
    copy_path: str,
    storage: object = None,
    *,
    source_path: str | None = None,
    source_storage: object = None,
    agent_dir: str,
    blob_store: BlobStoreLike | None = None,
    standalone: bool = False,
) -> BlobCarry:
    """Where the images of a copy written at `copy_path` (on `storage`) go, and how
    they get there: the one rule every copy follows.

    The store `blob_store` names when the caller chose one for the copy; else, when
    the source (at `source_path` on `source_storage`, default `storage`) keeps its
    images in a store its caller chose rather than the one `blob_store_for` gives its
    path, that store (a chosen store stays the session's, and its copies'); else,
    for a `standalone` copy (one no manager writes and no agent dir records: an
    export, a repaired copy) written as a file outside every agent dir, the copy
    itself (`BlobCarry.inlines`: no gc reads it, so a blob store could lose its
    images); else the store `blob_store_for` gives the copy's path, so the copy's refs
    resolve in its own agent dir. `source` is the store the source's images are in now.
    """
    if blob_store is None:
        if source_path is not None:
            own = blob_store_for(
                source_path, storage if source_storage is None else source_storage, agent_dir
            )
            if not same_blob_store(source, own):
                blob_store = source
        if blob_store is None:
            if standalone and _outside_every_agent_dir(copy_path, storage, agent_dir):
                return BlobCarry(source, source, copy_path, inline=True)
            blob_store = blob_store_for(copy_path, storage, agent_dir)
    return BlobCarry(source, blob_store, copy_path)


def _outside_every_agent_dir(path: str, storage: object, agent_dir: str) -> bool:
    """Whether `path` is a file of the host outside every agent dir's `sessions/` (where
    no gc looks: `external-session-dirs` records only managers' session dirs)."""
    if storage is not None and not isinstance(storage, HostFilesystem):
        return False
    if isinstance(storage, BlobBackedStorage) and storage.blob_store() is not None:
        return False
    return agent_dir_of(path, agent_dir) is None


def is_pi_agent_dir(path: str) -> bool:
    """Whether `path` is pi's agent dir: one named `.pi/agent` (`~/.pi/agent`, the
    store `--agent pi` names, for any home)."""
    parent, name = os.path.split(os.path.normpath(os.path.abspath(path)))
    return name == "agent" and os.path.basename(parent) == ".pi"


def writes_pi_form(session_path: str | None, storage: object, agent_dir: str) -> bool:
    """The one rule for how a session's entries are written: True in pi's store.

    pi (0.73) reads no blob refs and applies none of oh-my-pi's persistence
    transforms, so in its store entries are written as pi writes them: the entry's
    JSON, images inline. A session is in pi's store when it lies under the `sessions/`
    of pi's agent dir (pi makes no `blobs/` there, so `agent_dir_of` would not see
    it), or, named by its real path, under a dir that pi's `sessions/` (or a project
    dir in it) links to, else when the agent dir `blob_store_for` picks is pi's (the
    one holding the session, else the one in effect). A database store is nobody's
    agent dir (False).
    """
    if storage is not None and not isinstance(storage, HostFilesystem):
        return False
    if session_path:
        current = os.path.abspath(session_path)
        while True:
            parent = os.path.dirname(current)
            if os.path.basename(current) == "sessions" and is_pi_agent_dir(parent):
                return True
            if parent == current:
                break
            current = parent
    in_effect = agent_dir
    agent = agent_dir_of(session_path, in_effect) if session_path else None
    if session_path and agent is None:
        pi = {native_agent_dir("pi"), *([in_effect] if is_pi_agent_dir(in_effect) else [])}
        if _linked_into(session_path, pi):
            return True
    return is_pi_agent_dir(agent or in_effect)


def _linked_into(session_path: str, agent_dirs: Iterable[str]) -> bool:
    """Whether `session_path` lies where one of `agent_dirs` reaches through a symlink
    (its `sessions/`, or a project dir under it, linked to another disk): a pi session
    there named by its real path is still pi's, and pi reads no blob refs."""
    real = os.path.realpath(session_path)
    for agent in agent_dirs:
        sessions = os.path.join(agent, "sessions")
        try:
            with os.scandir(sessions) as entries:
                linked = [sessions, *(e.path for e in entries if e.is_symlink())]
        except OSError:
            continue  # no pi store here
        for place in linked:
            target = os.path.realpath(place)
            if real == target or real.startswith(os.path.join(target, "")):
                return True
    return False
