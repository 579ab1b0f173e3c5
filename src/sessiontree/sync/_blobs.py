"""Blobs travel with the lines that name them: a pushed line's blobs are put in the
hub's `blobs/` first (each once: content-addressed), a pulled line's are fetched into
the local blob store, checked against their hash, before the line is written (so no
agent reads a reference it cannot resolve)."""

from __future__ import annotations

from sessiontree.layout import StoreParts
from sessiontree.storage import find_blob_refs
from sessiontree.sync._hub import Hub
from sessiontree.sync._model import SyncReport
from sessiontree.sync._state import SyncState

__all__ = ["fetch_blobs", "send_blobs"]


def send_blobs(
    hub: Hub, state: SyncState, parts: StoreParts, path: str, data: bytes, report: SyncReport
) -> None:
    """Put every blob `data` (lines of the session at `path`) names in the hub, unless it
    is there already."""
    for digest in sorted(find_blob_refs(data)):
        if state.hub_has_blob(digest):
            continue
        if not hub.has_blob(digest):
            blob = parts.blobs_for(path).get(digest)
            if blob is None:
                report.note(f"blob {digest}", f"named by {path} but not in its blob store")
                continue
            hub.put_blob(digest, blob)
            report.sent_blobs += 1
        state.add_hub_blob(digest)


def fetch_blobs(hub: Hub, parts: StoreParts, path: str, data: bytes, report: SyncReport) -> None:
    """Bring every blob `data` (lines for the session at `path`) names into the local
    blob store, from the hub, if it is not there. A blob missing from the hub, or whose
    bytes do not hash to its name, is refused and named (the lines still come: an
    entry is never held back for an image)."""
    refs = find_blob_refs(data)
    if not refs:
        return
    store = parts.blobs_for(path)
    for digest in sorted(refs):
        if store.has(digest):
            continue
        blob = hub.get_blob(digest)
        if blob is None:
            report.note(f"hub blob {digest}", "missing, or its bytes do not hash to its name")
            continue
        store.put(blob)
        report.received_blobs += 1
    store.sync()
