"""The archive read as stores (`archive_view`): every archived file written under
`<archive>/view/`, as it was at its source."""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass

from sessiontree._util.fs import ensure_private_dir
from sessiontree.archive._chunks import get_chunk
from sessiontree.archive._contents import files_of
from sessiontree.archive._manifests import load_manifest
from sessiontree.archive._model import ArchiveError
from sessiontree.archive._opencode import export_as_storage
from sessiontree.archive._restore_targets import safe_rel
from sessiontree.archive._sources import stat_or_none
from sessiontree.archive._storage import ArchiveStorage, inside, is_url, opened
from sessiontree.archive._versions import all_versions, clobbered_newest, pick_version

log = logging.getLogger("sessiontree")


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
    if not inside(directory, real_home):
        raise ArchiveError(f"{directory}: is outside {home}")


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
    archived bytes changed; an OpenCode database's session as OpenCode's JSON files.
    The view is the archive's own dir: safe to delete."""
    if is_url(archive):
        raise ArchiveError(
            "an archive in PostgreSQL is read by restoring it: restore --all --to DIR"
        )
    with opened(archive) as place:
        return _view(place)


def _view(place: ArchiveStorage) -> list[ArchiveView]:
    archive = place.local
    assert archive is not None
    views: dict[tuple[str, str], ArchiveView] = {}
    # the files still at their source first: where one gone there had the same path as
    # a dir now (a file deleted, then a dir made under its name), the one there wins
    for file in sorted(files_of(place), key=lambda f: (f.deleted_ms is not None, -f.mtime_ns)):
        if not safe_rel(file.rel):
            continue
        key = hashlib.sha256(file.home.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        home = os.path.join(archive, "view", file.agent, key)
        views.setdefault((file.agent, home), ArchiveView(file.agent, home, file.home))
        export = file.agent == "opencode" and file.rel.startswith("export/")
        manifest = load_manifest(place, file.key) or {}
        shown = all_versions(manifest)[-1]
        clobber = clobbered_newest(place, manifest)
        if clobber is not None:  # the transcript, not the fresh header it was cut to
            shown = pick_version(manifest, clobber[1], file.manifest)
        size, mtime = int(shown.get("size") or 0), int(shown.get("mtimeNs") or 0)
        # an OpenCode database's session, kept as its export document, is shown as the
        # JSON files OpenCode's store is read from
        marks = os.path.join(archive, "view", "opencode-exports", key)
        st = stat_or_none(os.path.join(marks if export else home, file.rel))
        if st is not None and st.st_mtime_ns == mtime and (export or st.st_size == size):
            continue
        data = b"".join(get_chunk(place, d, int(n)) for d, n in shown.get("chunks", []))
        files = export_as_storage(data) if export else [(file.rel, data)]
        if files is None:
            log.warning("%s: not in the archive's view: not an OpenCode export", file.manifest)
            continue
        written = all(
            _write_view_file(place, home, f"view/{file.agent}/{key}", rel, content, mtime)
            for rel, content in files
        )
        if export and written:  # an empty mark, outside the store read: its mtime says
            # which version of the document the JSON files show
            _write_view_file(place, marks, f"view/opencode-exports/{key}", file.rel, b"", mtime)
    return sorted(views.values(), key=lambda v: (v.agent, v.home))


def _write_view_file(
    place: ArchiveStorage, home: str, prefix: str, rel: str, data: bytes, mtime: int
) -> bool:
    """Write one file of the view (False: a file and a dir share its path, named)."""
    target = os.path.join(home, rel)
    try:
        _make_dirs_inside(home, os.path.dirname(target))
        # a copy, never synced: one lost in a crash differs from the archived size or
        # mtime, and is written again by the next view
        place.write(f"{prefix}/{rel}", data, durable=False)
    except (FileExistsError, NotADirectoryError, IsADirectoryError):
        log.warning("%s: not in the archive's view: a file and a dir share its path", target)
        return False
    if mtime:
        os.utime(target, ns=(mtime, mtime), follow_symlinks=False)
    return True
