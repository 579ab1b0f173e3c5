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
    "context_edit_text",
    "deep_dumps",
    "entry_preview",
    "entry_role",
    "entry_text",
    "human_size",
    "message_facts",
    "message_text",
    "system_sections",
    "system_summary",
    "usage_entry_text",
    "usage_summary",
]


def human_size(size: int | float) -> str:
    """1536 -> '1.5 KB': a size as every view shows it."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1024 or unit == "TB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"  # pragma: no cover


def deep_dumps(value: object) -> str:
    """`json.dumps` even of arguments nested as deep as JavaScript allows."""
    text: str = allow_deep_nesting(lambda: _ENCODE(value))
    return text


# `json.dumps(value, ensure_ascii=False)` without building an encoder on each call (a
# tool call's arguments are encoded for every reply indexed).
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode


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


def _num(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        return value
    return None


def usage_summary(usage: object) -> str | None:
    """`in 5,000 · out 500 · cache read 2,500 · $0.0210` for a `usage` object (None when
    it is none): what pi counts of it, and of its new fields what says more
    (`reasoning` of the output, the 1-hour part of the cache writes, a provider's bill)."""
    if not isinstance(usage, dict):
        return None
    parts = []
    for key, name in (("input", "in"), ("output", "out"), ("cacheRead", "cache read")):
        value = _num(usage.get(key))
        if value is not None:
            parts.append(f"{name} {int(value):,}")
    reasoning = _num(usage.get("reasoning"))
    if reasoning:
        parts.append(f"reasoning {int(reasoning):,}")
    write = _num(usage.get("cacheWrite"))
    if write:
        parts.append(f"cache write {int(write):,}")
    hour = _num(usage.get("cacheWrite1h"))
    if hour:
        parts.append(f"1h cache write {int(hour):,}")
    cost = usage.get("cost")
    total = _num(cost.get("total")) if isinstance(cost, dict) else None
    if total is not None:
        billed = isinstance(cost, dict) and cost.get("totalFromProvider") is True
        parts.append(f"${total:.4f}" + (" billed" if billed else ""))
    return " · ".join(parts) or None


def _duration(ms: object) -> str | None:
    value = _num(ms)
    if value is None:
        return None
    return f"{int(value)} ms" if value < 1000 else f"{value / 1000:.1f} s"


def _names(items: object) -> list[str]:
    """The names in a list of tools or calls (`name`/`toolName` of objects, or strings)."""
    if not isinstance(items, list):
        return []
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            name = item.get("name", item.get("toolName"))
            if isinstance(name, str):
                out.append(name)
    return out


def message_facts(message: object, *, usage: bool = True) -> list[str]:
    """What an assistant reply or a tool result records besides its content (pi 1.6's
    fields): its usage (unless not `usage`), thinking level, stop reason when it is not
    the usual one, the end of a turn, how long it took, nested calls and tools added."""
    if not isinstance(message, dict):
        return []
    role = message.get("role")
    facts: list[str] = []
    if role not in ("assistant", "toolResult"):
        return facts
    spent = usage_summary(message.get("usage")) if usage else None
    if spent:
        facts.append(spent)
    if role == "assistant":
        level = message.get("thinkingLevel")
        provider = message.get("providerThinkingLevel")
        if isinstance(level, str) and level:
            shown = f"thinking {level}"
            if isinstance(provider, str) and provider and provider != level:
                shown += f" (provider: {provider})"
            facts.append(shown)
        stop = message.get("stopReason")
        if stop in ("pending", "deferred"):
            facts.append(str(stop))
        elif message.get("deferred") is True:
            facts.append("deferred")
        raw = message.get("rawStopReason")
        if isinstance(raw, str) and raw:
            facts.append(f"provider stop: {raw}")
        if message.get("endTurn") is True:
            facts.append("end of turn")
    else:
        nested = _names(message.get("nestedCalls"))
        if nested:
            facts.append("nested calls: " + ", ".join(nested))
        added = _names(message.get("addedToolNames"))
        if added:
            facts.append("tools added: " + ", ".join(added))
    took = _duration(message.get("durationMs"))
    if took:
        facts.append(took)
    return facts


def system_sections(message: dict[str, object]) -> list[tuple[str, str]]:
    """The named prompt sections of a pi 1.6 system message, in order."""
    sections = message.get("sections")
    if not isinstance(sections, dict):
        return []
    return [(str(k), v if isinstance(v, str) else deep_dumps(v)) for k, v in sections.items()]


def system_summary(message: dict[str, object]) -> str:
    """One line about a pi 1.6 system message: its text, else the sections it sets and
    the tools it adds and removes."""
    parts = []
    text = blocks_text(message.get("content"))
    if text.strip():
        parts.append(text)
    names = [name for name, _ in system_sections(message)]
    if names:
        parts.append("sections " + ", ".join(names))
    added = _names(message.get("toolsAdded"))
    if added:
        parts.append("tools added: " + ", ".join(added))
    removed = _names(message.get("toolsRemoved"))
    if removed:
        parts.append("tools removed: " + ", ".join(removed))
    return " · ".join(parts) or "(empty)"


def usage_entry_text(entry: Entry) -> str:
    """A `usage` entry in one line: kind, provider/model, tokens, cost, its note."""
    parts = [str(entry.get("kind") or "usage"), f"{entry.get('provider')}/{entry.get('model')}"]
    usage = entry.get("usage")
    if isinstance(usage, dict):
        # as pi sums them: input, output, cache read and cache write
        counts = [_num(usage.get(k)) for k in ("input", "output", "cacheRead", "cacheWrite")]
        parts.append(f"{int(sum(c for c in counts if c is not None)):,} tokens")
        cost = usage.get("cost")
        total = _num(cost.get("total")) if isinstance(cost, dict) else None
        if total is not None:
            parts.append(f"${total:.4f}")
    note = entry.get("note")
    if isinstance(note, str) and note:
        parts.append(note)
    return " · ".join(parts)


def context_edit_text(entry: Entry) -> str:
    """A `context_edit` entry in one line: which entry, dropped or its new content."""
    target = entry.get("targetId")
    replacement = entry.get("replacement")
    if replacement is None:
        return f"{target} dropped from the context"
    content = replacement.get("content") if isinstance(replacement, dict) else None
    return f"{target} replaced: {blocks_text(content)}"


def message_text(message: object, *, tools: bool = True, thinking: bool = False) -> str:
    """The readable text of an agent message (text blocks, tool calls, command output,
    a system message's sections)."""
    if not isinstance(message, dict):
        return ""
    role = message.get("role")
    if role == "system":
        texts = [blocks_text(message.get("content"))]
        texts += [text for _, text in system_sections(message)]
        return "\n".join(t for t in texts if t)
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
    "system",
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
    "context_edit",
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
    if kind == "context_edit":
        replacement = entry.get("replacement")
        content = replacement.get("content") if isinstance(replacement, dict) else None
        return blocks_text(content)
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
        message = entry.get("message")
        if isinstance(message, dict) and message.get("role") == "system":
            text = system_summary(message)
        else:
            text = message_text(message)
            stop = message.get("stopReason") if isinstance(message, dict) else None
            if stop in ("pending", "deferred"):
                text = f"[{stop}] {text}"
        label = f"{entry_role(entry)}: {text}"
    elif kind == "usage":
        label = f"usage: {usage_entry_text(entry)}"
    elif kind == "context_edit":
        label = f"context edit: {context_edit_text(entry)}"
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
