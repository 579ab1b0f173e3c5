"""The text view of an entry: what a message says as plain text, its role, a one-line
preview. Pure (no I/O): the CLI, search, the content index and the exports read
entries through it."""

from __future__ import annotations

import json

from sessiontree.format._entries import Entry
from sessiontree.format._jsonl import allow_deep_nesting

__all__ = [
    "SEARCH_ROLES",
    "blocks_text",
    "deep_dumps",
    "entry_preview",
    "entry_role",
    "entry_text",
    "message_text",
]


def deep_dumps(value: object) -> str:
    """`json.dumps` even of arguments nested as deep as JavaScript allows."""
    text: str = allow_deep_nesting(lambda: json.dumps(value, ensure_ascii=False))
    return text


def blocks_text(content: object, *, tools: bool = True, thinking: bool = False) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
            continue
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "thinking" and thinking:
            parts.append(str(block.get("thinking", "")))
        elif kind == "toolCall" and tools:
            args = block.get("arguments")
            parts.append(f"[{block.get('name')}] {deep_dumps(args)}")
        elif kind == "image":
            parts.append("[image]")
    return "\n".join(p for p in parts if p)


def message_text(message: object, *, tools: bool = True, thinking: bool = False) -> str:
    """The readable text of an agent message (text blocks, tool calls, command output)."""
    if not isinstance(message, dict):
        return ""
    role = message.get("role")
    if role == "bashExecution":
        return f"$ {message.get('command', '')}\n{message.get('output') or ''}".rstrip()
    if role == "pythonExecution":
        return f">>> {message.get('code', '')}\n{message.get('output') or ''}".rstrip()
    if role in ("branchSummary", "compactionSummary"):
        return str(message.get("summary", ""))
    return blocks_text(message.get("content"), tools=tools, thinking=thinking)


SEARCH_ROLES: tuple[str, ...] = (
    "user",
    "assistant",
    "toolResult",
    "bashExecution",
    "pythonExecution",
    "custom",
    "hookMessage",
    "branchSummary",
    "compactionSummary",
    "custom_message",
    "compaction",
    "branch_summary",
    "session_init",
    "label",
    "model_change",
    "title",
)
"""The roles a search can filter on: what `entry_role` says of an entry that holds text
(message roles, then entry types), and `title` for a session's title."""


def entry_role(entry: Entry) -> str:
    """`user`, `assistant`, ... for messages; the entry type otherwise."""
    if entry.get("type") == "message":
        message = entry.get("message")
        if isinstance(message, dict) and isinstance(message.get("role"), str):
            return str(message["role"])
        return "message"
    return str(entry.get("type"))


def entry_text(entry: Entry, *, thinking: bool = True) -> str:
    """The searchable text of an entry (empty for entries that hold none)."""
    kind = entry.get("type")
    if kind == "message":
        return message_text(entry.get("message"), thinking=thinking)
    if kind == "custom_message":
        return blocks_text(entry.get("content"))
    if kind in ("compaction", "branch_summary"):
        return str(entry.get("summary", ""))
    if kind == "session_init":
        return str(entry.get("task", ""))
    if kind == "label":
        return str(entry.get("label") or "")
    if kind == "model_change":
        return str(entry.get("model") or "")
    return ""


def _model_name(entry: Entry) -> str:
    model = entry.get("model")
    if isinstance(model, str) and model:
        return model
    return f"{entry.get('provider')}/{entry.get('modelId')}"


def entry_preview(entry: Entry, width: int = 60) -> str:
    """A one-line description of an entry for trees, tables and pickers."""
    kind = entry.get("type")
    if kind == "message":
        label = f"{entry_role(entry)}: {message_text(entry.get('message'))}"
    elif kind == "compaction":
        label = f"compaction: {entry.get('shortSummary') or entry.get('summary', '')}"
    elif kind == "branch_summary":
        label = f"branch summary: {entry.get('summary', '')}"
    elif kind == "model_change":
        role = entry.get("role")
        label = f"model: {_model_name(entry)}" + (f" ({role})" if role else "")
    elif kind == "thinking_level_change":
        label = f"thinking: {entry.get('thinkingLevel')}"
    elif kind == "label":
        label = f"label {entry.get('targetId')}: {entry.get('label') or '(cleared)'}"
    elif kind == "custom_message":
        label = f"{entry.get('customType')}: {blocks_text(entry.get('content'))}"
    elif kind == "custom":
        label = f"custom: {entry.get('customType')}"
    elif kind == "session_init":
        label = f"session init: {entry.get('task', '')}"
    elif kind == "mode_change":
        label = f"mode: {entry.get('mode')}"
    elif kind == "ttsr_injection":
        rules = entry.get("injectedRules")
        label = "rules: " + (", ".join(map(str, rules)) if isinstance(rules, list) else "")
    else:
        label = str(kind)
    label = " ".join(label.split())
    if width <= 0 or len(label) <= width:
        return label
    return label[: width - 1] + "…"
