"""What a refresh of the content index starts from: each source's identity, and the
verdict that tells an unchanged store without comparing a file.

`identities` stats the sources, or takes the stats a listing made of them a moment
before (`listing.ListingRows.stats`: one stat per file for a search, not a listing's
and a refresh's). `verdict` digests those identities: a refresh that leaves the index
holding every source as it stat'ed it keeps that digest in the index's ``meta``
(`VERDICT_KEY`), and the next refresh whose sources digest the same does nothing, not
even a comparison with the ``files`` rows.

Why a verdict is never wrong (a false "unchanged" would be a search that misses hits):

* a digest holds every source's path, size, mtime, inode and ctime, in order, and the
  kind of every source that is not our JSONL file: the same digest is the same stats
  (BLAKE2b, 128 bits);
* no verdict is made of stats holding a racy identity (`UNTRUSTED`: a file stat'ed
  within its mtime's tick may change unseen), a source that could not be stat'ed, or a
  path SQLite cannot store;
* it is kept only by a refresh that found, or made, every source's row as stat'ed, in
  the write transaction that ends it, and only when no other connection wrote the
  index since the refresh read the rows (`PRAGMA data_version`);
* every write transaction of a refresh deletes it first, so a refresh killed halfway,
  or one of another process's, leaves none that its writes may have made untrue, and a
  rebuilt index (a new version, damage, dead text) starts with none.
"""

from __future__ import annotations

import os
import stat as stat_module
from collections.abc import Iterable, Sequence

import orjson
import xxhash

import sessiontree.listing._marks as _marks
from sessiontree.listing import stat_identity
from sessiontree.listing._marks import UNTRUSTED, Stat, read_start_ns
from sessiontree.search._index_rows import SessionSource

__all__ = ["VERDICT_KEY", "Source", "identities", "source_path", "source_paths", "verdict"]

VERDICT_KEY = "verdict"
"""The ``meta`` row that holds the last complete refresh's verdict."""

Source = str | SessionSource
"""A source of the index: our JSONL file by its path, or a `SessionSource`."""


def source_path(source: Source) -> str:
    return source if isinstance(source, str) else source.path


def source_paths(sources: Sequence[Source]) -> list[str]:
    """Each source's path (the sources themselves when they are all paths: a search's)."""
    if set(map(type, sources)) <= {str}:  # (a map in C: a search's 100,000 paths in ms)
        return sources  # type: ignore[return-value]
    return [source_path(s) for s in sources]


def identities(
    sources: Sequence[Source], listed: Iterable[Stat] | None = None
) -> tuple[list[Stat], list[str], set[str]]:
    """(each regular file's `Stat`, the paths that could not be stat'ed or are no regular
    file, every path) of
    `sources`: a loader's source by its own identity, a file by `stat_identity` (inlined:
    a search stats every file of the store), or as `listed` (stats a listing took of
    the files: `stat_identity`'s, with the racy rule applied as it stat'ed them)."""
    named = source_paths(sources)
    paths = set(named)
    if listed is None:
        return (*_stat(sources), paths)
    taken = {s[0]: s for s in listed if s[0] in paths}
    if named is not sources:
        for source in sources:
            if not isinstance(source, str) and source.load is not None:
                taken.pop(source.path, None)  # by its own identity
    stats = list(taken.values())
    if len(taken) == len(paths):
        return stats, [], paths
    rest, failed = _stat(s for s in sources if source_path(s) not in taken)
    return stats + rest, failed, paths


def _stat(sources: Iterable[Source]) -> tuple[list[Stat], list[str]]:
    stats: list[Stat] = []
    failed: list[str] = []
    add = stats.append
    stat = os.stat
    is_regular = stat_module.S_ISREG
    # Only an mtime within the coarsest tick before now (or after it) may be racy: the
    # others are not, whenever they are stat'ed from here on.
    recent = read_start_ns() - _marks._COARSE_TICK_NS
    ctime_moves = _marks._CTIME_MOVES
    for source in sources:
        path = source if isinstance(source, str) else source.path
        try:
            if not isinstance(source, str) and source.load is not None:
                if source.identity is not None:
                    add((path, *source.identity(path)))
                    continue
            st = stat(path)
        except OSError:
            failed.append(path)
            continue
        if not is_regular(st.st_mode):
            # A FIFO (device) put where an indexed session was: its rows are the old
            # file's, never answered from; forgotten, and the reader names it.
            failed.append(path)
            continue
        mtime_ns = st.st_mtime_ns
        if mtime_ns > recent:
            add((path, *stat_identity(st)))
        else:
            add((path, st.st_size, mtime_ns, st.st_ino, st.st_ctime_ns if ctime_moves else 0))
    return stats, failed


def verdict(stats: Sequence[Stat], sources: Sequence[Source]) -> str | None:
    """The digest of `stats` (of `sources`, which name the kind of those that are not
    our JSONL files); None when no verdict may be made of them (a racy identity, a path
    that is no UTF-8)."""
    if any(s[4] == UNTRUSTED for s in stats):
        return None
    try:
        data = orjson.dumps(stats)
        kinds = [
            (s.path, s.kind, s.load is not None)
            for s in sources
            if not isinstance(s, str) and (s.load is not None or s.kind != "jsonl")
        ]
        if kinds:
            data += orjson.dumps(kinds)
    except TypeError:  # a lone surrogate in a path, an integer beyond 64 bits
        return None
    # xxh3, as the listing's marks: a search loads no OpenSSL (hashlib) for it, and the
    # stats are the store's own, no adversary's choice to collide.
    return xxhash.xxh3_128_hexdigest(data)
