"""A path of a session as a Markdown document (`export_markdown`)."""

from __future__ import annotations

import json
import re

from sessiontree.export._jsonl import _path
from sessiontree.format import (
    Entry,
    allow_deep_nesting,
    blocks_text,
    context_edit_text,
    entry_preview,
    human_size,
    message_facts,
    message_text,
    system_sections,
    usage_entry_text,
)
from sessiontree.session import SessionManager, file_size, message_count, session_shown_title

_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_RASTER = {"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"}


# ---------------------------------------------------------------------- markdown


def _fence(text: str, lang: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


def _when(entry: Entry) -> str:
    ts = entry.get("timestamp")
    return ts.replace("T", " ").replace(".000Z", "Z") if isinstance(ts, str) else ""


def _json(value: object) -> str:
    return allow_deep_nesting(lambda: json.dumps(value, ensure_ascii=False, indent=2))


def _md_blocks(content: object) -> list[str]:
    if isinstance(content, str):
        return [content] if content else []
    if not isinstance(content, list):
        return []
    out: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            out.append(str(block.get("text", "")))
        elif kind == "thinking":
            thought = str(block.get("thinking", "")).strip()
            if thought:
                quoted = "\n".join("> " + line for line in thought.split("\n"))
                out.append("> *Thinking*\n>\n" + quoted)
        elif kind == "toolCall":
            out.append(
                f"**Tool call** `{block.get('name')}`\n\n"
                + _fence(_json(block.get("arguments")), "json")
            )
        elif kind == "image":
            out.append(f"*[image: {block.get('mimeType', 'unknown type')}]*")
        else:
            out.append(f"*[{kind} block]*")
    return out


def _md_entry(entry: Entry, labels: dict[str, str]) -> str | None:
    kind = entry.get("type")
    entry_id = str(entry.get("id", ""))
    tag = f" · `#{labels[entry_id]}`" if entry_id in labels else ""
    meta = f" · {_when(entry)} · `{entry_id}`{tag}"
    if kind == "message":
        message = entry.get("message")
        if not isinstance(message, dict):
            return None
        role = str(message.get("role", "message"))
        if role == "assistant":
            title = f"Assistant ({message.get('provider')}/{message.get('model')})"
            body = _md_blocks(message.get("content"))
            if message.get("errorMessage"):
                body.append(f"*Error: {message.get('errorMessage')}*")
        elif role == "toolResult":
            title = f"Tool result · `{message.get('toolName')}`"
            if message.get("isError"):
                title += " (error)"
            text = blocks_text(message.get("content"), tools=False)
            body = [_fence(text)] if text else []
        elif role == "bashExecution":
            title = "Shell"
            body = [_fence(message_text(message), "console")]
        elif role == "pythonExecution":
            title = "Python"
            body = [_fence(message_text(message), "python")]
        elif role == "system":
            title = "System"
            body = _md_blocks(message.get("content"))
            for name, text in system_sections(message):
                body.append(f"**Section `{name}`**\n\n{text}")
            for key, what in (("toolsAdded", "Tools added"), ("toolsRemoved", "Tools removed")):
                tools = message.get(key)
                if isinstance(tools, list) and tools:
                    body.append(f"**{what}**\n\n" + _fence(_json(tools), "json"))
        else:
            title = role[:1].upper() + role[1:]
            if role == "custom":
                title = f"Custom · {message.get('customType')}"
            body = _md_blocks(message.get("content"))
            if role in ("branchSummary", "compactionSummary"):
                body = [str(message.get("summary", ""))]
        facts = message_facts(message, usage=message.get("role") == "toolResult")
        if facts:
            body.append("*" + " · ".join(facts) + "*")
        return f"### {title}{meta}\n\n" + "\n\n".join(body)
    if kind == "usage":
        return f"*usage: {usage_entry_text(entry)}*{tag}"
    if kind == "context_edit":
        return f"*context edit: {context_edit_text(entry)}*{tag}"
    if kind == "compaction":
        return (
            f"### Compaction{meta}\n\n> "
            + str(entry.get("summary", "")).replace("\n", "\n> ")
            + f"\n\n*Kept from `{entry.get('firstKeptEntryId')}`; "
            f"{entry.get('tokensBefore')} tokens before.*"
        )
    if kind == "branch_summary":
        return f"### Branch summary{meta}\n\n> " + str(entry.get("summary", "")).replace(
            "\n", "\n> "
        )
    if kind == "custom_message":
        body = _md_blocks(entry.get("content"))
        return f"### Extension message · {entry.get('customType')}{meta}\n\n" + "\n\n".join(body)
    if kind == "session_init":
        return f"### Session init{meta}\n\n" + str(entry.get("task", ""))
    if kind in ("model_change", "thinking_level_change", "mode_change", "ttsr_injection"):
        return f"*{entry_preview(entry, 0)}*{tag}"
    if kind in ("label", "custom"):
        return None
    return f"*{kind} entry* `{entry_id}`"


def export_markdown(sm: SessionManager, leaf_id: str | None = None) -> str:
    """The root -> leaf path (default: the current leaf) as Markdown."""
    path = _path(sm, leaf_id)
    labels = sm.get_labels()
    name = session_shown_title(sm)
    header = sm.get_header() or {}
    leaf = path[-1].get("id") if path else None
    lines = [
        f"# {name}",
        "",
        f"- Session: `{sm.get_session_id()}`",
        f"- Directory: `{header.get('cwd', '')}`",
        f"- Created: {_when(header)}",
        f"- Messages: {message_count(sm):,} (every branch)"
        + ("" if (size := file_size(sm)) is None else f" · {human_size(size)}"),
        f"- Path: {len(path)} entries, root → `{leaf}`",
        "",
        "---",
    ]
    for entry in path:
        block = _md_entry(entry, labels)
        if block:
            lines.extend(["", block])
    return "\n".join(lines).rstrip() + "\n"
