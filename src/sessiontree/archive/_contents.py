"""What an archive holds: its files (`archived_files`), its figures (`archive_stats`)
and every chunk checked (`verify_archive`)."""

from __future__ import annotations

from sessiontree.archive._chunks import file_hash, get_chunk
from sessiontree.archive._manifests import each_manifest, load_manifest
from sessiontree.archive._model import ArchivedFile, ArchiveError, ArchiveStats
from sessiontree.archive._sessions import is_session
from sessiontree.archive._storage import MARK, ArchiveStorage, opened
from sessiontree.archive._versions import clobber_words, clobbered_newest


def archived_files(archive: str) -> list[ArchivedFile]:
    """Every file the archive (a dir, or a PostgreSQL URL) keeps, gone at its source
    or not."""
    with opened(archive) as place:
        return files_of(place)


def files_of(place: ArchiveStorage, problems: list[str] | None = None) -> list[ArchivedFile]:
    if not place.is_archive():
        raise ArchiveError(f"{place.label}: not an archive (no {MARK} file)")
    found = []
    for key, m in each_manifest(place, problems):
        agent, rel = str(m.get("agent")), str(m.get("rel"))
        found.append(
            ArchivedFile(
                agent,
                str(m.get("home")),
                rel,
                int(m.get("size", 0)),
                int(m.get("mtimeNs", 0)),
                m.get("deletedMs"),
                is_session(agent, rel),
                place.path(key),
                key,
            )
        )
    return found


def archive_stats(archive: str) -> ArchiveStats:
    with opened(archive) as place:
        files = files_of(place)
        stored = place.stored_bytes()
        clobbered = []
        for _, manifest in each_manifest(place):
            found = clobbered_newest(place, manifest)
            if found is not None:
                clobbered.append(
                    f"{manifest.get('agent')}:{manifest.get('home')}/{manifest.get('rel')}: "
                    f"newest version {clobber_words(found[0])}; version {found[1]} holds "
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
    with opened(archive) as place:
        for file in files_of(place, problems):
            manifest = load_manifest(place, file.key) or {}
            versions = [manifest, *manifest.get("earlier", [])]
            for version in versions:
                chunks = version.get("chunks", [])
                where = f"{file.home}/{file.rel}"
                if file_hash(chunks) != version.get("hash"):
                    problems.append(f"{where}: its chunk list is not the one recorded")
                    continue
                if sum(int(c[1]) for c in chunks) != version.get("size"):
                    problems.append(f"{where}: its chunks do not add up to its size")
                for digest, length in chunks:
                    try:
                        get_chunk(place, digest, int(length))
                    except ArchiveError as exc:
                        problems.append(f"{where}: {exc}")
    return problems
