"""Manifests: one JSON document per archived file (`files/<agent>/<sha256 of the
source path>.json`) naming its chunks and versions; read whole or refused whole."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from typing import Any

from sessiontree.archive._model import ArchiveError, ArchiveReport
from sessiontree.archive._storage import ArchiveStorage


def manifest_rel(agent: str, source: str) -> str:
    key = hashlib.sha256(source.encode("utf-8", "surrogateescape")).hexdigest()
    return f"files/{agent}/{key}.json"


def load_manifest(place: ArchiveStorage, rel: str) -> dict[str, Any] | None:
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


def save_manifest(place: ArchiveStorage, rel: str, manifest: dict[str, Any]) -> None:
    place.write(rel, json.dumps(manifest, sort_keys=True).encode())


def each_manifest(
    place: ArchiveStorage, problems: list[str] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every manifest; a damaged one is passed over (named in `problems`): it never
    keeps the others from being listed and restored."""
    for agent in place.dirs("files"):
        for name in place.names(f"files/{agent}", ".json"):
            rel = f"files/{agent}/{name}"
            try:
                manifest = load_manifest(place, rel)
            except ArchiveError as exc:
                if problems is not None:
                    problems.append(str(exc))
                continue
            if manifest is not None:
                yield rel, manifest


def load_or_set_aside(
    place: ArchiveStorage, rel: str, report: ArchiveReport
) -> dict[str, Any] | None:
    """The manifest at `rel`, for a run; a damaged one is copied to `damaged/` (kept,
    as everything is) and the file archived again as new, so that one damaged
    manifest never stops the run nor leaves its file unarchived."""
    try:
        return load_manifest(place, rel)
    except ArchiveError as exc:
        raw = place.read(rel) or b""
        place.write(f"damaged/{int(time.time() * 1000)}-{rel.replace('/', '-')}", raw)
        report.skipped.append(f"{exc}; set aside in damaged/, its file archived again")
        return None
