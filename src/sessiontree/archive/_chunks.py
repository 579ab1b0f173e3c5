"""A file's bytes as chunks: cut at line ends chosen by the lines themselves (a chunk
ends after a line whose xxh64 is 0 mod 16, or at 4 MiB), so a fork or a resumed copy
that repeats another file's lines repeats its chunks, which are stored once; each
chunk compressed with zstd on its own (a file is read from any chunk on), a resumed
copy's as a delta against its original."""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable, Iterator
from typing import Any

import xxhash
import zstandard

from sessiontree.archive._model import ArchiveError, ArchiveReport
from sessiontree.archive._storage import ArchiveStorage

_BOUNDARY = 16
_MAX_CHUNK = 4 * 1024 * 1024
_LEVEL = 9


_SESSION_ID = re.compile(rb'"sessionId":"[^"\\]*"')


def _normal(data: bytes) -> bytes:
    return _SESSION_ID.sub(b'"sessionId":""', data)


def _is_boundary(line: bytes) -> bool:
    return xxhash.xxh64_intdigest(_normal(line)) % _BOUNDARY == 0


def cut(data: bytes) -> Iterator[bytes]:
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


def put_chunk(place: ArchiveStorage, data: bytes, report: ArchiveReport) -> list[Any]:
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
            get_chunk(place, digest, len(data))
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
                get_chunk(place, base_hex, -1, base=True, limit=_base_limit(len(data))),
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


def get_chunk(
    place: ArchiveStorage, digest: str, length: int, *, base: bool = False, limit: int | None = None
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
            reference = get_chunk(
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


def file_hash(chunks: Iterable[list[Any]]) -> str:
    h = hashlib.sha256()
    for digest, length in chunks:
        h.update(f"{digest}:{length}\n".encode())
    return h.hexdigest()
