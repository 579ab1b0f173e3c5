"""The versions of an archived file, and clobbers among them.

A file rewritten (not only appended to) keeps what it held as an earlier version:
version 1 is the oldest, the newest is the file as it is now. A rewrite that leaves a
file a header (pi 0.73 opening an oh-my-pi session truncates it to a fresh one) or
without most of its lines is a clobber: named by the run and by `archive_stats`, and
the view shows the fullest version instead."""

from __future__ import annotations

import time
from typing import Any

from sessiontree.archive._chunks import get_chunk
from sessiontree.archive._model import ArchivedVersion, ArchiveError
from sessiontree.archive._storage import ArchiveStorage


def version_of(manifest: dict[str, Any]) -> dict[str, Any]:
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


def lines_of(place: ArchiveStorage, version: dict[str, Any]) -> int:
    """The lines (entries) a version holds: recorded since the archive counts them,
    else counted from its chunks."""
    lines = version.get("lines")
    if isinstance(lines, int):
        return lines
    count = 0
    for digest, length in version.get("chunks", []):
        count += get_chunk(place, digest, int(length)).count(b"\n")
    version["lines"] = count
    return count


def fullest_version(
    place: ArchiveStorage, versions: list[dict[str, Any]]
) -> tuple[int, int] | None:
    """(number, lines) of the version with the most lines among `versions` (numbered
    from 1, oldest first); the newest of those with as many. None: none at all or one
    that cannot be read."""
    best: tuple[int, int] | None = None
    for number, version in enumerate(versions, 1):
        try:
            lines = lines_of(place, version)
        except ArchiveError:
            continue
        if best is None or lines >= best[1]:
            best = (number, lines)
    return best


def is_clobber(lines: int, most: int) -> bool:
    """Whether a file of `lines` lines, where a version held `most`, was clobbered: cut
    to one line (a header, a title slot) or less, or left without most of its lines."""
    return (lines <= 1 < most) or (most >= 4 and lines * 2 < most)


def clobber_words(lines: int) -> str:
    if lines <= 1:
        return "shrank to a header" if lines == 1 else "emptied"
    return f"lost most of its entries ({lines} lines left)"


def all_versions(manifest: dict[str, Any]) -> list[dict[str, Any]]:
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


def described(place: ArchiveStorage, manifest: dict[str, Any]) -> list[ArchivedVersion]:
    found = []
    most = -1
    for number, version in enumerate(all_versions(manifest), 1):
        try:
            lines: int | None = lines_of(place, version)
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
                lines is not None and is_clobber(lines, most),
            )
        )
        most = max(most, -1 if lines is None else lines)
    return found


def pick_version(manifest: dict[str, Any], number: int | None, where: str) -> dict[str, Any]:
    """Version `number` of a manifest (None: the newest)."""
    versions = all_versions(manifest)
    if number is None:
        return versions[-1]
    if not 1 <= number <= len(versions):
        raise ArchiveError(
            f"{where}: has no version {number} (the archive keeps versions 1 to {len(versions)})"
        )
    return versions[number - 1]


def clobbered_newest(
    place: ArchiveStorage, manifest: dict[str, Any]
) -> tuple[int, int, int] | None:
    """(its lines, the number and lines of the fullest earlier version) when the newest
    version of a manifest is a clobber of an earlier one; else None."""
    earlier = list(manifest.get("earlier", []))
    if not earlier:
        return None
    newest = all_versions(manifest)[-1]
    fullest = fullest_version(place, earlier)
    try:
        lines = lines_of(place, newest)
    except ArchiveError:
        return None
    if fullest is None or not is_clobber(lines, fullest[1]):
        return None
    return lines, fullest[0], fullest[1]
