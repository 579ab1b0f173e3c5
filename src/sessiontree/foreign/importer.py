"""Importing a foreign session: a new v3 session in this agent's store, nothing else.

`import_session` appends the record oh-my-pi's importer writes, a `custom` entry
`foreign_session_import` with `source`, `sourceId`, `sourcePath` and `sourceCwd`
(plus `sourceBytes`: how much of the source it read), at the leaf, and persists a
copy with `SessionManager.persist_copy`: one new file, its images into the blob
store. Subagents and sidechains go into that file's artifacts directory, each a
session whose `parentSession` is the new file, as oh-my-pi keeps its subagents.

An import never changes an existing session. A source imported before is refused
(`AlreadyImportedError`, naming the session that holds it) unless `again=True`;
that includes a source that has grown since (it says so): a second import is a
second, complete session, and the first stays as it was. Earlier imports are
found from the `foreign_session_import` records in this store's sessions
(`listing.import_records`: read once per file identity, kept in the listing cache, the
one place the usage report reads them from too).

Asking for earlier imports and writing the copy are one step: `import_session` takes
the store's import lock (`_import_index`: the storage's writer lock of
`<sessions dir>/.import`), asks again under it, writes, and lets go. Two imports at once
(two `import --all` runs) then import a source once; the lock is held per session
imported, so two runs interleave rather than one waiting for the other's whole run. The
records asked again are this process's `ImportIndex`, which reads only what changed
since it last looked.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sessiontree.errors import SessionTreeError
from sessiontree.foreign._import_index import (
    EarlierImport,
    ImportLockError,
    earlier_imports,
    import_index,
    import_lock,
)
from sessiontree.foreign._model import ForeignSession
from sessiontree.layout import StoreParts, get_default_session_dir
from sessiontree.listing import import_records
from sessiontree.maintenance import artifacts_dir, session_files
from sessiontree.session import SessionManager
from sessiontree.storage import FileSessionStorage

__all__ = [
    "IMPORT_TYPE",
    "AlreadyImportedError",
    "EarlierImport",
    "ImportLockError",
    "ImportedSession",
    "find_imports",
    "import_session",
]

IMPORT_TYPE = "foreign_session_import"
SUBAGENT_TYPE = "foreign_subagent"
_MARKER = b'"' + IMPORT_TYPE.encode() + b'"'


class AlreadyImportedError(SessionTreeError):
    """The source was imported before (into `earlier.path`)."""

    def __init__(self, session: ForeignSession, earlier: EarlierImport) -> None:
        self.earlier = earlier
        self.grown = earlier.source_bytes is not None and session.size > earlier.source_bytes
        grown = (
            f"; the source has grown since ({earlier.source_bytes:,} -> {session.size:,} bytes)"
            if self.grown
            else ""
        )
        super().__init__(
            f"{session.path} was imported before, into {earlier.path}{grown}; "
            "--again imports it again as a new session (the earlier one stays as it is)"
        )


@dataclass(slots=True)
class ImportedSession:
    path: str
    session: ForeignSession
    subsessions: list[str] = field(default_factory=list)


def find_imports(
    parts: StoreParts, *, passed_over: list[tuple[str, str]] | None = None
) -> list[EarlierImport]:
    """Every import recorded in the store's sessions (artifacts dirs not included).

    A FIFO (socket, device) named like a session is not read: it is added to
    `passed_over` as (path, what it is) when given.
    """
    storage = parts.storage
    paths = session_files(parts, nested=False, passed_over=passed_over)
    found = import_records(paths, parts, cache=isinstance(storage, FileSessionStorage))
    return [e for path in paths for e in earlier_imports(path, (d for _, d in found.get(path, ())))]


def earlier_import(session: ForeignSession, earlier: list[EarlierImport]) -> EarlierImport | None:
    """The newest earlier import of the same source session, if any."""
    matches = [
        e
        for e in earlier
        if e.source == session.source
        and (e.source_id == session.source_id or e.source_path == session.path)
    ]
    return max(matches, key=lambda e: e.path) if matches else None


def _append_stable(sm: SessionManager, custom_type: str, data: Any, seed: str) -> None:
    """Append a custom entry at the leaf whose id derives from `seed` (like every other
    entry of an import), so importing the same source twice gives the same tree."""
    entry_id = sm.append_custom_entry(custom_type, data)
    taken = {e["id"] for e in sm.get_entries()}
    attempt = 0
    while True:
        stable = hashlib.blake2b(f"{seed}\0{attempt}".encode(), digest_size=4).hexdigest()
        if stable == entry_id or stable not in taken:
            break
        attempt += 1
    entry = sm.get_entry(entry_id)
    assert entry is not None
    entry["id"] = stable
    sm.rewrite_entries()
    sm.branch(stable)


def import_session(
    session: ForeignSession,
    parts: StoreParts,
    *,
    cwd: str | None = None,
    again: bool = False,
    earlier: list[EarlierImport] | None = None,
    on_write: Callable[[str], None] | None = None,
) -> ImportedSession:
    """Write `session` into the store of `parts` as a new session (see the module doc);
    its images into `parts.blobs` when given, else where every copy's go.

    `earlier`: the store's imports when the caller has them already (`find_imports`):
    a source among them is refused without taking the lock; any other is looked up
    again under it, as another import may have written it since.
    Raises AlreadyImportedError for a source imported before, unless `again`;
    ImportLockError when the store's import lock cannot be had (every import into the
    store would fail alike); SessionTreeError for a working directory that cannot be a
    path (a NUL in it).
    """
    if earlier is not None and not again:
        previous = earlier_import(session, earlier)
        if previous is not None:
            raise AlreadyImportedError(session, previous)
    with import_lock(parts):
        return _import_locked(session, parts, cwd, again, on_write)


def _import_locked(
    session: ForeignSession,
    parts: StoreParts,
    cwd: str | None,
    again: bool,
    on_write: Callable[[str], None] | None,
) -> ImportedSession:
    """`import_session` under the store's import lock: asks for earlier imports, writes."""
    agent, storage = parts.agent_dir, parts.storage
    index = import_index(parts)
    known = index.imports(parts)
    previous = earlier_import(session, known)
    if previous is not None and not again:
        raise AlreadyImportedError(session, previous)
    sm = session.manager
    if cwd is None and not session.cwd:
        cwd = os.getcwd()  # the source names none: file it under this directory's project
    if "\x00" in (cwd if cwd is not None else session.cwd):
        raise SessionTreeError(
            f"{session.path}: the directory it was recorded in ({session.cwd!r}) cannot be "
            "a path; give it another working directory to be filed under (--cwd)"
        )
    if cwd is not None:
        sm.move_to(cwd)
    record = {**session.import_record(), "sourceBytes": session.size}
    _append_stable(sm, IMPORT_TYPE, record, f"{session.source_id}\0import")
    parent = None
    if session.parent_source_id:
        forked = [
            e
            for e in known
            if e.source == session.source and e.source_id == session.parent_source_id
        ]
        parent = max(forked, key=lambda e: e.path).path if forked else session.parent_source_id
    directory = get_default_session_dir(sm.get_cwd(), agent)
    # Images go where every copy's go (`blob_carry`): this agent dir's blob store,
    # unless the caller chose one.
    copy = sm.persist_copy(
        directory,
        storage,
        breadcrumb=False,
        blob_store=parts.blobs,
        parent_session=parent,
        agent_dir=agent,
    )
    path = copy.get_session_file()
    copy.close()
    assert path is not None
    index.wrote(path, record, parts)
    if on_write is not None:
        on_write(path)
    imported = ImportedSession(path, session)
    if session.subsessions:
        where = artifacts_dir(path)
        assert where is not None
        for sub in session.subsessions:
            sub.manager.move_to(sm.get_cwd())
            data = {"source": session.source, "sourceId": sub.key, "sourcePath": sub.source_path}
            if sub.tool_call_id:
                data["toolCallId"] = sub.tool_call_id
            _append_stable(sub.manager, SUBAGENT_TYPE, data, f"{sub.key}\0import")
            written = sub.manager.persist_copy(
                where,
                storage,
                breadcrumb=False,
                blob_store=parts.blobs,
                parent_session=path,
                agent_dir=agent,
            )
            sub_path = written.get_session_file()
            written.close()
            if sub_path is not None:
                imported.subsessions.append(sub_path)
                if on_write is not None:
                    on_write(sub_path)
    return imported
