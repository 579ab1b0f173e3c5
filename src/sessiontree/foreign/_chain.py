"""A linear transcript added to a `TreeBuilder` in order, tool results right after their call.

OpenCode, Gemini CLI and Copilot CLI record a conversation as a sequence (OpenCode's
steps, Gemini's messages, Copilot's events), not as a tree of lines. `Chain` adds
one entry after another under `current`, with two rules that keep the context a
provider accepts:

* **Results follow their call.** While an assistant message has tool calls not yet
  answered, any other entry the transcript records (a prompt typed meanwhile, a
  notice, a permission request) waits; it is added once the last result is in,
  so after `convert_to_llm` every assistant's calls are answered right after it.
* **Every call is answered.** A call the source has no result for (the turn was
  interrupted, the file ends mid-turn) gets an error result saying so when the
  next response starts or the transcript ends, as OpenCode itself does when it
  sends such a history to a model (`[Tool execution was interrupted]`). The
  result's `details` say it was made here (`{"synthetic": true}`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sessiontree.foreign._builder import TreeBuilder

__all__ = ["INTERRUPTED", "Chain"]

INTERRUPTED = "[Tool execution was interrupted: the session recorded no result for this call]"

Add = Callable[[str | None], str]
"""Adds one entry under the given parent and returns its id."""


class Chain:
    """See the module doc."""

    def __init__(self, builder: TreeBuilder) -> None:
        self.builder = builder
        self.current: str | None = None
        self._pending: dict[str, tuple[str, str, int]] = {}  # call id -> (name, key, ms)
        self._deferred: list[Add] = []
        self.tool_names: dict[str, str] = {}

    @property
    def waiting(self) -> bool:
        """Whether the open response has calls not answered yet."""
        return bool(self._pending)

    def pending_calls(self) -> list[str]:
        return list(self._pending)

    # ------------------------------------------------------------------ entries

    def add(self, add: Add) -> None:
        """A non-result entry: now, or once the open response's calls are answered."""
        if self._pending:
            self._deferred.append(add)
            return
        self.current = add(self.current)

    def custom(self, custom_type: str, data: Any, key: str, ms: int) -> None:
        """A `custom` entry (kept, not in the context)."""
        self.add(
            lambda parent: self.builder.custom(parent, custom_type, data, key, ms, inline=False)
        )

    def custom_message(
        self, custom_type: str, content: str | list[dict[str, Any]], key: str, ms: int
    ) -> None:
        """A message the model saw and the user did not (`display: false`)."""
        self.add(lambda parent: self.builder.custom_message(parent, custom_type, content, key, ms))

    def message(self, message: dict[str, Any], key: str, ms: int) -> None:
        """A user message (or any message that is not a response)."""
        self.add(lambda parent: self.builder.message(parent, message, key, ms))

    def model_change(self, model: str, key: str, ms: int) -> None:
        self.add(lambda parent: self.builder.model_change(parent, model, key, ms))

    def thinking_level(self, level: str, key: str, ms: int) -> None:
        self.add(lambda parent: self.builder.thinking_level(parent, level, key, ms))

    def compaction(
        self,
        summary: str,
        tokens_before: int,
        key: str,
        ms: int,
        details: Any = None,
        kept_after: Callable[[], str | None] | None = None,
    ) -> None:
        """A compaction entry. The context after it starts at its summary, then what
        follows; with `kept_after`, the summary is followed by the entries on its path
        after the one `kept_after()` names (a compaction made in the background keeps
        what happened meanwhile), from the first that is not a tool result."""

        def add(parent: str | None) -> str:
            start = kept_after() if kept_after is not None else None
            kept = self.first_after(start, parent) if start is not None else None
            entry = self.builder.compaction(parent, summary, tokens_before, key, ms, details)
            if kept is not None:
                self.builder.entry(entry)["firstKeptEntryId"] = kept
            return entry

        self.add(add)

    def first_after(self, start: str, end: str | None) -> str | None:
        """The first entry after `start` on the path to `end` that is not a tool result
        (None when `start` is not on that path, or nothing follows it)."""
        path: list[str] = []
        entry = end
        while entry is not None and entry != start and len(path) < 1_000_000:
            path.append(entry)
            parent = self.builder.entry(entry).get("parentId")
            entry = parent if isinstance(parent, str) else None
        if entry != start:
            return None
        for candidate in reversed(path):
            found = self.builder.entry(candidate)
            message = found.get("message")
            if not (isinstance(message, dict) and message.get("role") == "toolResult"):
                return candidate
        return None

    def at(self, entry: str | None, key: str = "at", ms: int = 0) -> None:
        """Continue under `entry` (what the open response left is closed first). When
        `entry` is a response, or one of its results, whose calls are not all answered
        on the path to it (a rewind into the middle of a turn), those calls are open
        again: what follows waits, and `close` answers them (keys from `key`)."""
        self.close()
        self.current = entry
        for call_id, name in self._unanswered(entry).items():
            self._pending[call_id] = (name, f"{key}:interrupted:{call_id}", ms)

    def _unanswered(self, entry: str | None) -> dict[str, str]:
        """The calls of the response `entry` is (or whose results it ends) that are not
        answered on the path to it: call id -> tool name."""
        answered: set[str] = set()
        node = self.builder.tail(entry)
        while node is not None:
            found = self.builder.entry(node)
            message = found.get("message") if found.get("type") == "message" else None
            if not isinstance(message, dict):
                return {}
            if message.get("role") == "toolResult":
                answered.add(str(message.get("toolCallId")))
                parent = found.get("parentId")
                node = parent if isinstance(parent, str) else None
                continue
            if message.get("role") != "assistant":
                return {}
            return {
                str(block.get("id")): str(block.get("name"))
                for block in message.get("content") or ()
                if isinstance(block, dict)
                and block.get("type") == "toolCall"
                and str(block.get("id")) not in answered
            }
        return {}

    def assistant(self, message: dict[str, Any], key: str, ms: int) -> str:
        """A response: answers what the one before left open, then opens its own calls.
        A model change entry comes first when the response's model is not the one in
        effect."""
        self.close()
        model = f"{message.get('provider')}/{message.get('model')}"
        if self.builder.model_at(self.builder.tail(self.current)) != model:
            self.current = self.builder.model_change(self.current, model, f"{key}:model", ms)
        self.current = self.builder.message(self.current, message, key, ms)
        for block in message.get("content") or ():
            if isinstance(block, dict) and block.get("type") == "toolCall":
                call_id = str(block.get("id"))
                name = str(block.get("name"))
                self.tool_names[call_id] = name
                self._pending[call_id] = (name, f"{key}:missing:{call_id}", ms)
        return self.current

    def answers(self, call_id: str) -> bool:
        """Whether `call_id` is a call of the open response still waiting for its result."""
        return call_id in self._pending

    def result(
        self,
        call_id: str,
        content: list[dict[str, Any]],
        key: str,
        ms: int,
        *,
        is_error: bool = False,
        details: Any = None,
        name: str | None = None,
    ) -> bool:
        """The result of a call of the open response, chained after it; False (nothing
        added) when `call_id` is no such call."""
        pending = self._pending.pop(call_id, None)
        if pending is None:
            return False
        result: dict[str, Any] = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": name or pending[0],
            "content": content,
        }
        if details is not None:
            result["details"] = details
        result["isError"] = is_error
        result["timestamp"] = ms
        self.current = self.builder.message(self.current, result, key, ms)
        if not self._pending:
            self._flush()
        return True

    def close(self, text: str = INTERRUPTED) -> None:
        """Answer the open response's remaining calls with an error result (see the
        module doc), then add what waited."""
        for call_id, (_, key, ms) in list(self._pending.items()):
            self.result(
                call_id,
                [{"type": "text", "text": text}],
                key,
                ms,
                is_error=True,
                details={"synthetic": True},
            )
        self._flush()

    def _flush(self) -> None:
        deferred, self._deferred = self._deferred, []
        for add in deferred:
            self.current = add(self.current)
