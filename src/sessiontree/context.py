"""Context reconstruction: the messages and settings the model sees at a leaf.

`build_session_context` follows the specification's algorithm (the one both
TypeScript peers share); `convert_to_llm` turns agent messages into the plain
user/assistant/toolResult messages a provider accepts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._unset import UNSET, Maybe, UnsetType
from .entries import parse_iso_ms
from .tree import path_to_root

__all__ = [
    "BRANCH_SUMMARY_PREFIX",
    "BRANCH_SUMMARY_SUFFIX",
    "COMPACTION_SUMMARY_PREFIX",
    "COMPACTION_SUMMARY_SUFFIX",
    "ContextBuilder",
    "SessionContext",
    "build_session_context",
    "convert_to_llm",
    "create_branch_summary_message",
    "create_compaction_summary_message",
    "create_custom_message",
]

COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
    "\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
)
BRANCH_SUMMARY_SUFFIX = "</summary>"


@dataclass(slots=True)
class SessionContext:
    """What the model sees at a leaf: messages plus settings derived from the path."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    thinking_level: str = "off"
    models: dict[str, str] = field(default_factory=dict)
    injected_ttsr_rules: list[str] = field(default_factory=list)
    mode: str = "none"
    mode_data: dict[str, Any] | None = None


def _epoch_ms(timestamp: object) -> int | None:
    # `new Date(ts).getTime()` is NaN for garbage, which JSON.stringify writes as null.
    return parse_iso_ms(timestamp)


def create_custom_message(
    custom_type: Maybe[str],
    content: Any,
    display: Any,
    details: Any,
    timestamp: str,
    attribution: Maybe[str] = UNSET,
) -> dict[str, Any]:
    """A `custom` agent message from a `custom_message` entry."""
    # Keys whose value is UNSET (a missing field) are left out, as JS drops undefined.
    message: dict[str, Any] = {"role": "custom"}
    for key, value in (
        ("customType", custom_type),
        ("content", content),
        ("display", display),
        ("details", details),
        ("attribution", attribution),
    ):
        if not isinstance(value, UnsetType):
            message[key] = value
    message["timestamp"] = _epoch_ms(timestamp)
    return message


def create_branch_summary_message(summary: str, from_id: str, timestamp: str) -> dict[str, Any]:
    """A `branchSummary` agent message."""
    return {
        "role": "branchSummary",
        "summary": summary,
        "fromId": from_id,
        "timestamp": _epoch_ms(timestamp),
    }


def create_compaction_summary_message(
    summary: str, tokens_before: int, timestamp: str, short_summary: Maybe[str] = UNSET
) -> dict[str, Any]:
    """A `compactionSummary` agent message (`shortSummary` only when given)."""
    message: dict[str, Any] = {"role": "compactionSummary", "summary": summary}
    if not isinstance(short_summary, UnsetType):
        message["shortSummary"] = short_summary
    message["tokensBefore"] = tokens_before
    message["timestamp"] = _epoch_ms(timestamp)
    return message


def _entry_message(entry: dict[str, Any]) -> dict[str, Any] | None:
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        return message if isinstance(message, dict) else None
    if kind == "custom_message":
        return create_custom_message(
            entry.get("customType", UNSET),
            entry.get("content", UNSET),
            entry.get("display", UNSET),
            entry.get("details", UNSET),
            entry.get("timestamp"),  # type: ignore[arg-type]
            entry.get("attribution", UNSET),
        )
    if kind == "branch_summary" and entry.get("summary"):
        return create_branch_summary_message(
            entry["summary"],
            entry.get("fromId"),  # type: ignore[arg-type]
            entry.get("timestamp"),  # type: ignore[arg-type]
        )
    return None


class ContextBuilder:
    """The context at the end of a path, extendable one entry at a time.

    `from_path` does the specification's two-phase build; `add` extends it for an
    entry appended at the leaf (a compaction rebuilds the message list). The
    session manager keeps one per leaf so rebuilding the context every turn is O(1)
    per new entry instead of O(path).
    """

    __slots__ = ("_compaction_index", "_ctx", "_path", "_rules_seen", "leaf_id")

    def __init__(self) -> None:
        self._path: list[dict[str, Any]] = []
        self._ctx = SessionContext()
        self._rules_seen: set[str] = set()
        self._compaction_index = -1
        self.leaf_id: str | None = None

    @classmethod
    def from_path(cls, path: list[dict[str, Any]]) -> ContextBuilder:
        """Build the context of a root->leaf path (the list is kept, not copied)."""
        builder = cls()
        builder._path = path
        for index, entry in enumerate(path):
            if entry.get("type") != "message":
                builder._apply_setting(entry, index)
            else:
                builder._apply_model(entry)
        builder._rebuild_messages()
        if path:
            leaf_id = path[-1].get("id")
            builder.leaf_id = leaf_id if isinstance(leaf_id, str) else None
        return builder

    def _apply_model(self, entry: dict[str, Any]) -> None:
        message = entry.get("message")
        # Every assistant message on the path sets the default model (spec).
        if message.__class__ is dict and message.get("role") == "assistant":
            provider, model = message.get("provider"), message.get("model")
            if isinstance(provider, str) and isinstance(model, str):
                self._ctx.models["default"] = f"{provider}/{model}"

    def _apply_setting(self, entry: dict[str, Any], index: int) -> None:
        ctx = self._ctx
        kind = entry.get("type")
        if kind == "thinking_level_change":
            level = entry.get("thinkingLevel")
            ctx.thinking_level = level if isinstance(level, str) else "off"
        elif kind == "model_change":
            model = entry.get("model")
            role = entry.get("role") or "default"
            if isinstance(model, str) and model:
                ctx.models[role if isinstance(role, str) else "default"] = model
            elif isinstance(entry.get("provider"), str) and isinstance(entry.get("modelId"), str):
                # pi writes {provider, modelId} and has no roles.
                ctx.models["default"] = f"{entry['provider']}/{entry['modelId']}"
        elif kind == "compaction":
            self._compaction_index = index
        elif kind == "ttsr_injection":
            rules = entry.get("injectedRules")
            if isinstance(rules, list):
                for rule in rules:
                    if isinstance(rule, str) and rule not in self._rules_seen:
                        self._rules_seen.add(rule)
                        ctx.injected_ttsr_rules.append(rule)
        elif kind == "mode_change":
            mode = entry.get("mode")
            ctx.mode = mode if isinstance(mode, str) else "none"
            data = entry.get("data")
            ctx.mode_data = data if isinstance(data, dict) else None

    def _rebuild_messages(self) -> None:
        path = self._path
        messages: list[dict[str, Any]] = []
        index = self._compaction_index
        if index >= 0:
            compaction = path[index]
            messages.append(
                create_compaction_summary_message(
                    compaction.get("summary"),  # type: ignore[arg-type]
                    compaction.get("tokensBefore"),  # type: ignore[arg-type]
                    compaction.get("timestamp"),  # type: ignore[arg-type]
                    compaction.get("shortSummary", UNSET),
                )
            )
            first_kept = compaction.get("firstKeptEntryId")
            start = index  # nothing is kept when firstKeptEntryId is not on the path
            for i in range(index):
                if path[i].get("id") == first_kept:
                    start = i
                    break
            selected = path[start:index] + path[index + 1 :]
        else:
            selected = path
        append = messages.append
        for entry in selected:
            if entry.get("type") == "message":
                message = entry.get("message")
                if message.__class__ is dict:
                    append(message)
                continue
            converted = _entry_message(entry)
            if converted is not None:
                append(converted)
        self._ctx.messages = messages

    def add(self, entry: dict[str, Any]) -> None:
        """Extend the context with an entry appended as the child of the leaf."""
        self._path.append(entry)
        if entry.get("type") == "message":
            self._apply_model(entry)
            message = entry.get("message")
            if message.__class__ is dict:
                self._ctx.messages.append(message)
        else:
            self._apply_setting(entry, len(self._path) - 1)
            if entry.get("type") == "compaction":
                self._rebuild_messages()
            else:
                converted = _entry_message(entry)
                if converted is not None:
                    self._ctx.messages.append(converted)
        leaf_id = entry.get("id")
        self.leaf_id = leaf_id if isinstance(leaf_id, str) else None

    def snapshot(self) -> SessionContext:
        """A copy the caller may change without touching the builder's state."""
        ctx = self._ctx
        return SessionContext(
            list(ctx.messages),
            ctx.thinking_level,
            dict(ctx.models),
            list(ctx.injected_ttsr_rules),
            ctx.mode,
            ctx.mode_data,
        )

    @property
    def path(self) -> list[dict[str, Any]]:
        return self._path


def build_session_context(
    entries: Sequence[dict[str, Any]],
    leaf_id: Maybe[str | None] = UNSET,
    by_id: Mapping[Any, dict[str, Any]] | None = None,
) -> SessionContext:
    """Rebuild the model context at `leaf_id` (default: the last entry).

    `leaf_id=None` gives an empty context; an unknown id falls back to the last
    entry. Linear in the path length; a parent cycle ends the walk.
    """
    if leaf_id is None:
        return SessionContext()
    if by_id is None:
        by_id = {e.get("id"): e for e in entries if isinstance(e.get("id"), str)}
    leaf = by_id.get(leaf_id) if isinstance(leaf_id, str) and leaf_id else None
    if leaf is None:
        for entry in reversed(entries):
            if entry.get("type") != "session":
                leaf = entry
                break
    if leaf is None:
        return SessionContext()
    return ContextBuilder.from_path(path_to_root(by_id, leaf))._ctx


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _bash_execution_text(m: Mapping[str, Any]) -> str:
    text = f"Ran `{m.get('command')}`\n"
    output = m.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = m.get("exitCode")
    if m.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif exit_code is not None and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    if m.get("truncated") and m.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {m.get('fullOutputPath')}]"
    return text


def _python_execution_text(m: Mapping[str, Any]) -> str:
    text = f"Ran Python:\n```python\n{m.get('code')}\n```\n"
    output = m.get("output")
    text += f"Output:\n```\n{output}\n```" if output else "(no output)"
    exit_code = m.get("exitCode")
    if m.get("cancelled"):
        text += "\n\n(execution cancelled)"
    elif exit_code is not None and exit_code != 0:
        text += f"\n\nExecution failed with code {exit_code}"
    return text


def convert_to_llm(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Convert agent messages to LLM messages (user/assistant/toolResult).

    bashExecution/pythonExecution become user text (unless `excludeFromContext`),
    custom/hookMessage become user messages (string content wrapped as a text
    block), branch and compaction summaries become user text from their
    templates; user/assistant/toolResult pass through; unknown roles are dropped.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        ts = m.get("timestamp")
        if role in ("user", "assistant", "toolResult"):
            out.append(m)
        elif role == "bashExecution":
            if not m.get("excludeFromContext"):
                out.append(
                    {
                        "role": "user",
                        "content": [_text_block(_bash_execution_text(m))],
                        "timestamp": ts,
                    }
                )
        elif role == "pythonExecution":
            if not m.get("excludeFromContext"):
                out.append(
                    {
                        "role": "user",
                        "content": [_text_block(_python_execution_text(m))],
                        "timestamp": ts,
                    }
                )
        elif role in ("custom", "hookMessage"):
            content = m.get("content")
            if isinstance(content, str):
                content = [_text_block(content)]
            out.append({"role": "user", "content": content, "timestamp": ts})
        elif role == "branchSummary":
            text = BRANCH_SUMMARY_PREFIX + str(m.get("summary")) + BRANCH_SUMMARY_SUFFIX
            out.append({"role": "user", "content": [_text_block(text)], "timestamp": ts})
        elif role == "compactionSummary":
            text = COMPACTION_SUMMARY_PREFIX + str(m.get("summary")) + COMPACTION_SUMMARY_SUFFIX
            out.append({"role": "user", "content": [_text_block(text)], "timestamp": ts})
    return out
