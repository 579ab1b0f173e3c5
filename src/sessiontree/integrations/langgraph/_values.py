"""`SaverValues`: checkpoint values stored and loaded.

A value is stored once per version, serialized by the saver's serde (small ones
inline as base64, others as blob refs), or as JSON when JSON holds it exactly; a
list that extends its parent's version is stored as the items it adds. Items of
recent list versions are cached per thread.
"""

from __future__ import annotations

import base64
import builtins
import math
from typing import Any, Final

import orjson
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from sessiontree.integrations.langgraph._thread_state import (
    CheckpointRecord,
    ThreadState,
    version_key,
)
from sessiontree.integrations.langgraph._threads import SaverThreads
from sessiontree.storage import parse_blob_ref

__all__ = ["INLINE_BYTES", "MISSING", "SaverValues"]

INLINE_BYTES: Final = 4096
"""A serialized value (or list item) larger than this goes to the blob store."""
MISSING: Final = object()
_ITEM_CACHE: Final = 256
"""List versions whose serialized items a thread keeps (for deltas and histories)."""


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether JSON holds `value` exactly (dicts with str keys, lists, str, int, finite
    float, bool, None): then it is written as JSON, readable and filterable."""
    if depth > 64:
        return False
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-(2**63) <= value < 2**63)
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(_plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False


class SaverValues(SaverThreads):
    """Storing and loading checkpoint values (see the module doc)."""

    def _store_bytes(self, thread: ThreadState, kind: str, data: bytes) -> dict[str, Any]:
        if len(data) > INLINE_BYTES:
            return {"t": kind, "ref": thread.manager.put_blob(data).ref}
        return {"t": kind, "b": base64.b64encode(data).decode("ascii")}

    def _bytes_of(self, stored: dict[str, Any]) -> tuple[str, bytes]:
        ref = stored.get("ref")
        if isinstance(ref, str):
            digest = parse_blob_ref(ref)
            blobs = self.store.blobs
            data = blobs.get(digest) if blobs is not None and digest is not None else None
            if data is None:
                raise LookupError(f"checkpoint value {ref} is missing from the blob store")
            return str(stored["t"]), data
        return str(stored["t"]), base64.b64decode(stored["b"])

    def _chain(self, thread: ThreadState, key: tuple[str, str, str]) -> list[dict[str, Any]]:
        """The stored forms a list version is made of, its first (whole) one first."""
        chain = []
        seen = set()
        current: tuple[str, str, str] | None = key
        while current is not None and current not in seen:
            seen.add(current)
            stored = thread.values.get(current)
            if stored is None:
                raise LookupError(f"checkpoint value {current} is missing")
            chain.append(stored)
            current = (
                (current[0], current[1], version_key(stored.get("base")))
                if stored.get("t") == "list+"
                else None
            )
        chain.reverse()
        return chain

    def _item_forms(self, thread: ThreadState, key: tuple[str, str, str]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for stored in self._chain(thread, key):
            items.extend(stored.get("items") or ())
        return items

    def _item_bytes(
        self, thread: ThreadState, key: tuple[str, str, str]
    ) -> list[tuple[str, bytes]]:
        """A list version's serialized items: from the nearest version in the cache on,
        each version on the way cached too (a history reads them all)."""
        cache = thread.items
        cached = cache.get(key)
        if cached is not None:
            return cached
        pending: list[tuple[tuple[str, str, str], dict[str, Any]]] = []
        current: tuple[str, str, str] | None = key
        base: list[tuple[str, bytes]] = []
        while current is not None:
            hit = cache.get(current)
            if hit is not None:
                base = hit
                break
            stored = thread.values.get(current)
            if stored is None or any(current == k for k, _ in pending):
                raise LookupError(f"checkpoint value {current} is missing")
            pending.append((current, stored))
            current = (
                (current[0], current[1], version_key(stored.get("base")))
                if stored.get("t") == "list+"
                else None
            )
        for pending_key, stored in reversed(pending):
            base = base + [self._bytes_of(item) for item in stored.get("items") or ()]
            cache[pending_key] = base
        while len(cache) > _ITEM_CACHE:
            del cache[next(iter(cache))]
        return base

    def _load_items(self, items: list[tuple[str, bytes]]) -> builtins.list[Any]:
        if type(self.serde) is JsonPlusSerializer and all(k == "msgpack" for k, _ in items):
            # A msgpack array is its header and its items' bytes: one call for the list.
            n = len(items)
            if n < 16:
                head = bytes((0x90 | n,))
            elif n < 1 << 16:
                head = b"\xdc" + n.to_bytes(2, "big")
            else:
                head = b"\xdd" + n.to_bytes(4, "big")
            value = self.serde.loads_typed(("msgpack", head + b"".join(d for _, d in items)))
            if type(value) is list and len(value) == n:
                return value
        return [self.serde.loads_typed(item) for item in items]

    def _load_value(self, thread: ThreadState, key: tuple[str, str, str]) -> Any:
        stored = thread.values.get(key)
        if stored is None or stored.get("empty"):
            return MISSING
        if stored.get("t") in ("list", "list+"):
            return self._load_items(self._item_bytes(thread, key))
        return self.serde.loads_typed(self._bytes_of(stored))

    def _dump_value(
        self, thread: ThreadState, ns: str, channel: str, version: Any, value: Any, base: Any
    ) -> tuple[dict[str, Any], int | None]:
        """The stored form of a new version, and (for a list that extends `base`'s) how
        many items it kept of its base."""
        if value is MISSING:
            return {"v": version, "empty": True}, None
        if type(value) is not list:
            kind, data = self.serde.dumps_typed(value)
            return {"v": version, **self._store_bytes(thread, kind, data)}, None
        key = (ns, channel, version_key(version))
        dumped = [self.serde.dumps_typed(item) for item in value]
        if base is not None:
            base_key = (ns, channel, version_key(base))
            stored = thread.values.get(base_key)
            if stored is not None and stored.get("t") in ("list", "list+"):
                before = self._item_bytes(thread, base_key)
                n = len(before)
                if 0 < n <= len(dumped) and dumped[:n] == before:
                    thread.items[key] = before + dumped[n:]
                    added = [self._store_bytes(thread, k, d) for k, d in dumped[n:]]
                    return {"v": version, "t": "list+", "base": base, "items": added}, n
        thread.items[key] = dumped
        items = [self._store_bytes(thread, k, d) for k, d in dumped]
        return {"v": version, "t": "list", "items": items}, None

    def _encode(self, thread: ThreadState, value: Any) -> dict[str, Any]:
        if _plain(value):  # a copy: LangGraph goes on changing its dicts in place
            try:
                return {"json": orjson.loads(orjson.dumps(value))}
            except orjson.JSONEncodeError:  # a lone surrogate: UTF-8 has none
                pass
        kind, data = self.serde.dumps_typed(value)
        return self._store_bytes(thread, kind, data)

    def _decode(self, stored: dict[str, Any]) -> Any:
        if "json" in stored:  # a copy: the caller may change it in place
            return orjson.loads(orjson.dumps(stored["json"]))
        return self.serde.loads_typed(self._bytes_of(stored))

    def _versions(self, record: CheckpointRecord) -> dict[str, Any]:
        if record.versions is None:
            checkpoint = self._decode(record.data["checkpoint"])
            record.versions = dict(checkpoint.get("channel_versions") or {})
        return record.versions

    def _flat(self, thread: ThreadState, key: tuple[str, str, str]) -> dict[str, Any]:
        """A version's stored form that needs no other version."""
        stored = thread.values[key]
        if stored.get("t") != "list+":
            return dict(stored)
        return {"v": stored["v"], "t": "list", "items": self._item_forms(thread, key)}

    def _load_form(self, form: dict[str, Any]) -> Any:
        """A value from a stored form that needs no other version (`_flat`'s)."""
        if form.get("t") == "list":
            return self._load_items([self._bytes_of(item) for item in form.get("items") or ()])
        return self.serde.loads_typed(self._bytes_of(form))
