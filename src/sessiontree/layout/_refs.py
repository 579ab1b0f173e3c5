"""Blob refs inside entries: the images they name turned back into data, and the refs
an entry holds.

`resolve_blob_refs` is omp's loader: image payloads become the canonical base64 of
their blob, as they were before a writer externalized them (`is_image_payload` says
where those are: omp's persistence rules), except snapcompact frames, which omp keeps
as refs in memory. With `frames=True` frames are resolved too: what a copy that must
stand alone holds (`BlobCarry` writes a copy outside every agent dir so: no gc reads
it, so its images cannot stay in an agent dir's blob store).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Final

from sessiontree.errors import InvalidBlobRefError
from sessiontree.format import allow_deep_nesting
from sessiontree.storage import BLOB_REF_PREFIX, BlobStoreLike, VerifiableBlobStore, parse_blob_ref

__all__ = ["IMAGE_KEYS", "held_blob_refs", "is_image_payload", "resolve_blob_refs"]

_log = logging.getLogger("sessiontree")

JSONDict = dict[str, Any]

IMAGE_KEYS: Final[frozenset[str]] = frozenset({"content", "images", "frames"})
"""The keys under which an object may be an image payload (`is_image_payload`)."""


def is_image_payload(o: JSONDict, key: str | None) -> bool:
    """omp's isExternalizableImagePosition: `o`, found under `key`, is an image payload
    (string `data`: an image block under `content`, an image object under
    `images`/`frames`)."""
    if key not in IMAGE_KEYS or not isinstance(o.get("data"), str):
        return False
    if o.get("type") == "image":
        return True
    if key == "content":
        return False
    mime = o.get("mimeType")
    return isinstance(mime, str) and mime.lower().startswith("image/")


def _contains_ref(v: Any) -> bool:
    # omp's containsBlobRef: blob-free entries skip the resolving walk entirely.
    if type(v) is dict:
        v = v.values()
    elif type(v) is not list:
        return type(v) is str and v.startswith(BLOB_REF_PREFIX)
    for x in v:
        tx = type(x)
        if tx is str:
            if x.startswith(BLOB_REF_PREFIX):
                return True
        elif (tx is dict or tx is list) and _contains_ref(x):
            return True
    return False


def held_blob_refs(entry: JSONDict) -> set[str]:
    """The hashes of the blob refs an entry holds as refs (after `resolve_blob_refs`:
    snapcompact frames, a blob that was missing or damaged), anywhere in it."""
    found: set[str] = set()
    if _contains_ref(entry):
        allow_deep_nesting(partial(_collect_refs, entry, found))
    return found


def _collect_refs(v: Any, found: set[str]) -> None:
    if type(v) is dict:
        v = v.values()
    elif type(v) is not list:
        return
    for x in v:
        tx = type(x)
        if tx is str:
            if x.startswith(BLOB_REF_PREFIX):
                digest = parse_blob_ref(x)
                if digest is not None:
                    found.add(digest)
        elif tx is dict or tx is list:
            _collect_refs(x, found)


class _Resolver:
    """One resolving walk: the store, whether frames are resolved, and where the refs
    that could not be are noted (else each is logged)."""

    __slots__ = ("blobs", "frames", "unresolved")

    def __init__(self, blobs: BlobStoreLike, frames: bool, unresolved: set[str] | None) -> None:
        self.blobs = blobs
        self.frames = frames
        self.unresolved = unresolved

    def _kept(self, digest: str, why: str, *args: object) -> None:
        if self.unresolved is not None:
            self.unresolved.add(digest)  # the caller reports it
        else:
            _log.warning(why, digest, *args)

    def ref(self, ref: str, as_text: bool) -> str:
        digest = parse_blob_ref(ref)
        if digest is None:
            _log.warning("Rejected malformed blob reference %r", ref[:100])
            return ref
        blobs = self.blobs
        try:
            data = blobs.get(digest)
        except (OSError, InvalidBlobRefError) as exc:
            self._kept(digest, "Could not read blob %s: %s", exc)
            return ref
        if data is None:
            # Missing, or damaged (the store warned): the entry keeps its ref, so a rewrite
            # writes the ref back and the blob can still be restored under its name.
            self._kept(digest, "Blob %s is missing or damaged; the image stays a reference")
            return ref
        # Here: only a session with images resolves refs, and hashlib loads OpenSSL.
        import base64
        import hashlib

        if (
            not isinstance(blobs, VerifiableBlobStore)
            and hashlib.sha256(data).hexdigest() != digest
        ):
            # A store that does not check its hashes handed out damaged bytes: turned into
            # base64 here, they would be stored again under a new hash on the next rewrite.
            self._kept(digest, "Blob %s is damaged; the image stays a reference")
            return ref
        return (
            data.decode("utf-8", "replace") if as_text else base64.b64encode(data).decode("ascii")
        )

    def walk(self, v: Any, key: str | None) -> Any:
        if isinstance(v, list):
            copied: list[Any] | None = None
            for i, item in enumerate(v):
                new = self.walk(item, key)
                if copied is None and new is not item:
                    copied = v[:i]
                if copied is not None:
                    copied.append(new)
            return v if copied is None else copied
        if not isinstance(v, dict):
            return v
        if (key != "frames" or self.frames) and is_image_payload(v, key):
            data = v["data"]
            if data.startswith(BLOB_REF_PREFIX):
                resolved = self.ref(data, False)
                return v if resolved is data else {**v, "data": resolved}
        updates: dict[str, str] = {}
        result = v.get("result")
        if (
            v.get("type") == "image_generation_call"
            and isinstance(result, str)
            and result.startswith(BLOB_REF_PREFIX)
        ):
            updates["result"] = self.ref(result, False)
        url = v.get("image_url")
        if isinstance(url, str) and url.startswith(BLOB_REF_PREFIX):
            updates["image_url"] = self.ref(url, True)
        out: JSONDict | None = None
        for k, item in v.items():
            new = updates[k] if k in updates else self.walk(item, k)
            if out is None:
                if new is item:
                    continue
                out = {}
                for k2, v2 in v.items():
                    if k2 == k:
                        break
                    out[k2] = v2
            out[k] = new
        return v if out is None else out


def resolve_blob_refs(
    entry: JSONDict,
    blobs: BlobStoreLike,
    *,
    frames: bool = False,
    unresolved: set[str] | None = None,
) -> JSONDict:
    """The entry with blob refs turned back into data, as omp's loader does.

    Image payloads in `content`/`images` positions get the canonical base64 of
    their blob (snapcompact `frames` stay refs, unless `frames`), `image_generation_call.result`
    too, and `image_url` refs their UTF-8 data URL. A missing or damaged blob
    (bytes that do not hash to the ref), or one that cannot be read, is left in place
    with a warning on the `sessiontree` logger (or, given `unresolved`, its hash noted
    there instead), so writing the entry back keeps the ref; a malformed ref is left
    with a warning. This never raises. Copy-on-write: `entry` is not mutated and is
    returned when it holds no ref.
    """
    if entry.get("type") == "session" or not _contains_ref(entry):
        return entry
    resolved: JSONDict = _Resolver(blobs, frames, unresolved).walk(entry, None)
    return resolved
