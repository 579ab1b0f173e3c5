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

**Tool results.** The model APIs take an assistant message's tool calls answered
right after it, before any other message. The sources do not always write them so:
Claude Code runs tools while a response streams (call A, result A, the text A's
skill injects, call B, result B), and Codex events and injected messages can fall
between a response's calls and their outputs. So `tool_result` puts a result for a
call of an assistant message on the path (`note_call`) at the end of that message's
results, before whatever else was chained after them: the entries after it move
under the result (their own order and branches unchanged). Where nothing but
results and entries outside the context sit between, that is just the chain's end
and nothing moves. `finish` then lists every parent before its children, as an
append-only file has them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from sessiontree.foreign._records import iso
from sessiontree.format import Entry
from sessiontree.session import SessionManager

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
        self._children: dict[str | None, list[str]] = {}
        # Tool results (see the module doc). An entry's turn is the assistant message
        # nearest above it; `_gap` marks an entry whose path from its turn holds a
        # context message other than that turn's results.
        self._turn: dict[str, str | None] = {}
        self._gap: set[str] = set()
        self._depth: dict[str, int] = {}  # turn -> how many turns are above it
        self._up: dict[str, str] = {}  # turn -> the turn above it (a root turn: itself)
        self._jump: dict[str, str] = {}  # turn -> a turn further up (`_new_turn`)
        self._calls: dict[str, list[str]] = {}  # call id -> the assistant messages making it
        self._answered: set[tuple[str, str]] = set()  # (assistant message, call id)
        self._results_end: dict[str, str] = {}  # assistant message -> its last result
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
        entry = self.entry(entry_id)
        entry["timestamp"] = iso(ms)
        self._keys[entry_id] = key
        if inline and anchor is not None:
            self._redirect[anchor] = entry_id
        self._model_at[entry_id] = model if model is not None else self.model_at(anchor)
        self._children.setdefault(anchor, []).append(entry_id)
        self._place_in_turn(entry_id, entry, anchor)
        self.last = entry_id
        return entry_id

    def _place_in_turn(self, entry_id: str, entry: Entry, anchor: str | None) -> None:
        turn = self._turn.get(anchor) if anchor is not None else None
        kind = entry["type"]
        if kind == "message":
            if entry["message"].get("role") == "assistant":
                self._new_turn(entry_id, turn)
                return
            # A user message; or a result `_add` placed here: it answers no call of its
            # turn in order (`tool_result` takes the mark back where it does).
            in_context = True
        elif kind == "compaction":
            self._turn[entry_id] = None  # the context starts over here
            return
        else:
            in_context = kind == "custom_message" or kind == "branch_summary"
        self._turn[entry_id] = turn
        if in_context or anchor in self._gap:
            self._gap.add(entry_id)

    def _new_turn(self, entry_id: str, above: str | None) -> None:
        """An assistant message starts a turn under turn `above`. Each turn keeps a jump
        to a turn further up (skew-binary jump pointers), so `_above` takes O(log n)."""
        self._turn[entry_id] = entry_id
        if above is None:
            self._up[entry_id] = self._jump[entry_id] = entry_id  # a root turn
            self._depth[entry_id] = 0
            return
        depth = self._depth
        jump = self._jump[above]
        if depth[above] - depth[jump] == depth[jump] - depth[self._jump[jump]]:
            jump = self._jump[jump]
        else:
            jump = above
        self._up[entry_id] = above
        self._jump[entry_id] = jump
        depth[entry_id] = depth[above] + 1

    def _above(self, turn: str, owner: str) -> bool:
        """Whether assistant message `owner` is `turn` or a turn above it."""
        depth = self._depth
        target = depth[owner]
        while depth[turn] > target:
            jump = self._jump[turn]
            turn = jump if depth[jump] >= target else self._up[turn]
        return turn == owner

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

    def note_call(self, assistant: str, call_id: str) -> None:
        """Assistant message `assistant` (an entry) makes tool call `call_id`."""
        owners = self._calls.setdefault(call_id, [])
        if assistant not in owners:
            owners.append(assistant)

    def tool_result(
        self, parent: str | None, message: dict[str, Any], key: str, ms: int
    ) -> tuple[str, str]:
        """A tool result, chained after `parent` (`inline`): at the end of the results
        of the assistant message above whose call it answers, before anything else
        chained after them (see the module doc); where it answers no such call, it
        goes where `parent` says. Returns the result's entry and the entry what comes
        after it in the source continues from: the result itself, or the end of
        `parent`'s chain when the result went in before it."""
        anchor = self.tail(parent)
        found = message.get("toolCallId")
        call_id = found if isinstance(found, str) else None
        turn = self._turn.get(anchor) if anchor is not None else None
        owner = None
        if call_id is not None and turn is not None:
            owner = next(
                (
                    o
                    for o in reversed(self._calls.get(call_id, ()))
                    if (o, call_id) not in self._answered and self._above(turn, o)
                ),
                None,
            )
        if owner is None or call_id is None:
            entry_id = self.message(parent, message, key, ms, inline=True)
            return entry_id, entry_id
        self._answered.add((owner, call_id))
        if owner == turn and anchor not in self._gap:
            # Only results and entries outside the context since `owner`: the chain's end.
            entry_id = self.message(parent, message, key, ms, inline=True)
            self._gap.discard(entry_id)
            self._results_end[owner] = entry_id
            return entry_id, entry_id
        assert anchor is not None  # `turn` is not None
        entry_id = self._insert(self._results_end.get(owner, owner), message, key, ms)
        self._results_end[owner] = entry_id
        self.last = anchor  # the end of what came before is where it was
        return entry_id, anchor

    def _insert(self, after: str, message: dict[str, Any], key: str, ms: int) -> str:
        """A message entry between `after` and its children: they, and `after`'s chain,
        continue under the new entry."""
        self.sm.branch(after)
        entry_id = self.sm.append_message(message)
        self.entry(entry_id)["timestamp"] = iso(ms)
        self._keys[entry_id] = key
        moved = self._children.pop(after, [])
        for child in moved:
            self.entry(child)["parentId"] = entry_id
        self._children[after] = [entry_id]
        self._children[entry_id] = moved
        following = self._redirect.get(after)
        self._redirect[after] = entry_id
        if following is not None:
            self._redirect[entry_id] = following
        self._model_at[entry_id] = self.model_at(after)
        self._turn[entry_id] = self._turn.get(after)
        return entry_id

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
            return self.sm.append_compaction(
                summary, None, None, tokens_before, details, None, preserve_data
            )

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
        self._parents_first()
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

    def _parents_first(self) -> None:
        """Every parent before its children, the rest in the order added: a result put
        before entries added earlier (`tool_result`) moves, with what hangs under it,
        ahead of them. The entries are edited in place (their dicts keep their places
        in the manager, their contents move)."""
        entries = self.sm.get_entries()
        position = {e["id"]: p for p, e in enumerate(entries)}
        if all(position.get(e.get("parentId"), -1) < p for p, e in enumerate(entries)):
            return
        waiting: dict[str, list[dict[str, Any]]] = {}
        order: list[dict[str, Any]] = []
        placed: set[str] = set()
        for entry in entries:
            parent = entry.get("parentId")
            if isinstance(parent, str) and parent in position and parent not in placed:
                waiting.setdefault(parent, []).append(entry)
                continue
            stack = [entry]
            while stack:
                current = stack.pop()
                order.append(current)
                placed.add(current["id"])
                stack.extend(reversed(waiting.pop(current["id"], [])))
        for rest in waiting.values():  # a cycle: impossible from `_add`, kept anyway
            order.extend(rest)
        contents = [dict(e) for e in order]
        for entry, content in zip(entries, contents, strict=True):
            entry.clear()
            entry.update(content)
