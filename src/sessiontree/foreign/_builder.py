"""Building a v3 tree from another agent's records, through the public SessionManager API.

The readers walk a transcript in file order and add one entry at a time under a
parent they choose (`SessionManager.branch`, `reset_leaf`, then an `append_*`
method), then `finish` gives every entry an id derived from the source (the same
file always reads as the same ids, so `context --leaf ID` works across runs) and
the timestamps the source recorded, edited on the entry dicts before anything is
persisted, and re-indexed with `rewrite_entries()`.

**Chain inserts.** Some entries belong *between* an entry and whatever continues
after it: the tool results of one response, a second source line of the same
response, a metadata line. Adding one with `inline=True` makes it the new end of
its anchor's chain (`tail`), so what the source hangs under the anchor later goes
under it, and the tree has no branch the source did not have. Ordinary children
go under `tail(parent)` too, and two of them under the same tail are a real branch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from ..entries import Entry
from ..manager import SessionManager
from ._records import iso

__all__ = ["TreeBuilder"]


class TreeBuilder:
    """An in-memory session being filled from a foreign transcript (see the module doc)."""

    def __init__(self, cwd: str, seed: str, parent_session: str | None = None) -> None:
        self.sm = SessionManager.in_memory(cwd)
        if parent_session:
            self.sm.new_session(parent_session)
        self._seed = seed
        self._keys: dict[str, str] = {}
        self._redirect: dict[str, str] = {}
        self._model_at: dict[str, str | None] = {}
        self.last: str | None = None
        """The entry added last (file order)."""

    # ------------------------------------------------------------------ structure

    def tail(self, entry_id: str | None) -> str | None:
        """The end of `entry_id`'s chain (itself unless something was inserted after it)."""
        if entry_id is None:
            return None
        seen = 0
        while entry_id in self._redirect and seen < 1_000_000:
            entry_id = self._redirect[entry_id]
            seen += 1
        return entry_id

    def entry(self, entry_id: str) -> Entry:
        found = self.sm.get_entry(entry_id)
        assert found is not None
        return found

    def model_at(self, entry_id: str | None) -> str | None:
        """The model in effect at `entry_id` (its own, or its nearest ancestor's)."""
        return self._model_at.get(entry_id) if entry_id is not None else None

    def _add(
        self,
        parent: str | None,
        key: str,
        ms: int,
        append: Callable[[], str],
        *,
        inline: bool = False,
        model: str | None = None,
    ) -> str:
        anchor = self.tail(parent)
        if anchor is None:
            self.sm.reset_leaf()
        else:
            self.sm.branch(anchor)
        entry_id = append()
        self.entry(entry_id)["timestamp"] = iso(ms)
        self._keys[entry_id] = key
        if inline and anchor is not None:
            self._redirect[anchor] = entry_id
        self._model_at[entry_id] = model if model is not None else self.model_at(anchor)
        self.last = entry_id
        return entry_id

    # ------------------------------------------------------------------ entries

    def message(
        self,
        parent: str | None,
        message: dict[str, Any],
        key: str,
        ms: int,
        *,
        inline: bool = False,
        tracks_model: bool = True,
    ) -> str:
        """A message entry; an assistant message sets the model in effect (unless
        `tracks_model=False`: a synthetic reply names no real model)."""
        model = None
        if message.get("role") == "assistant" and tracks_model:
            model = f"{message.get('provider')}/{message.get('model')}"
        return self._add(
            parent, key, ms, lambda: self.sm.append_message(message), inline=inline, model=model
        )

    def model_change(self, parent: str | None, model: str, key: str, ms: int) -> str:
        return self._add(parent, key, ms, lambda: self.sm.append_model_change(model), model=model)

    def thinking_level(self, parent: str | None, level: str, key: str, ms: int) -> str:
        return self._add(parent, key, ms, lambda: self.sm.append_thinking_level_change(level))

    def custom(
        self, parent: str | None, custom_type: str, data: Any, key: str, ms: int, *, inline: bool
    ) -> str:
        return self._add(
            parent, key, ms, lambda: self.sm.append_custom_entry(custom_type, data), inline=inline
        )

    def custom_message(
        self,
        parent: str | None,
        custom_type: str,
        content: str | list[dict[str, Any]],
        key: str,
        ms: int,
        details: Any = None,
        *,
        inline: bool = False,
    ) -> str:
        """An injected message the model saw but the user did not (`display: false`)."""
        return self._add(
            parent,
            key,
            ms,
            lambda: self.sm.append_custom_message_entry(custom_type, content, False, details),
            inline=inline,
        )

    def compaction(
        self,
        parent: str | None,
        summary: str,
        tokens_before: int,
        key: str,
        ms: int,
        details: Any = None,
        preserve_data: Any = None,
    ) -> str:
        """A compaction that keeps nothing from before it: the source's context after a
        compaction is the summary and what follows (`firstKeptEntryId` is the entry itself)."""

        def append() -> str:
            entry_id = self.sm.append_compaction(
                summary, None, "", tokens_before, details, None, preserve_data
            )
            self.entry(entry_id)["firstKeptEntryId"] = entry_id
            return entry_id

        return self._add(parent, key, ms, append)

    # ------------------------------------------------------------------ finishing

    def _stable_ids(self) -> dict[str, str]:
        mapping: dict[str, str] = {}
        used: set[str] = set()
        for entry in self.sm.get_entries():
            old = entry["id"]
            key = self._keys.get(old, old)
            attempt = 0
            while True:
                material = f"{self._seed}\0{key}\0{attempt}".encode("utf-8", "surrogatepass")
                candidate = hashlib.blake2b(material, digest_size=4).hexdigest()
                if candidate not in used:
                    break
                attempt += 1
            used.add(candidate)
            mapping[old] = candidate
        return mapping

    def finish(
        self, leaf: str | None, name: str | None = None, name_source: str = "auto"
    ) -> SessionManager:
        """Stable ids, re-indexed, the leaf set, the name given; the session is done."""
        mapping = self._stable_ids()
        for entry in self.sm.get_entries():
            entry["id"] = mapping[entry["id"]]
            parent = entry.get("parentId")
            if isinstance(parent, str):
                entry["parentId"] = mapping.get(parent, parent)
            kept = entry.get("firstKeptEntryId")
            if entry.get("type") == "compaction" and isinstance(kept, str):
                entry["firstKeptEntryId"] = mapping.get(kept, kept)
        self.sm.rewrite_entries()
        leaf = self.tail(leaf)
        if leaf is not None and leaf in mapping:
            self.sm.branch(mapping[leaf])
        elif self.sm.get_entries():
            self.sm.branch(self.sm.get_entries()[-1]["id"])
        else:
            self.sm.reset_leaf()
        if name:
            self.sm.set_session_name(name, name_source)
        self._redirect = {mapping.get(k, k): mapping.get(v, v) for k, v in self._redirect.items()}
        self._model_at = {}
        return self.sm
