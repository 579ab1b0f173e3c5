"""Exporting a session: Markdown of one path, a self-contained HTML page, JSONL of one path.

- `export_markdown(sm, leaf_id)`: the root -> leaf path as a readable document.
- `export_html(sm, leaf_id)`: one HTML file, no network assets (a Content
  Security Policy forbids any fetch), holding every entry of the tree; the
  chosen path is visible without JavaScript, and inline JS switches to any
  other branch (a leaf picker and a clickable tree).
- `export_jsonl(sm, leaf_id)`: the path as a new, valid session file (new id,
  `parentSession` naming the source, labels on the path re-created after it),
  with images inlined so the file stands alone.

Also the plain-text helpers the CLI and search use (`message_text`, `entry_text`,
`entry_preview`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

from .entries import CURRENT_SESSION_VERSION, Entry, generate_session_id, iso_now
from .errors import EntryNotFoundError
from .jsonl import allow_deep_nesting, serialize_entry_bytes
from .manager import SessionManager
from .tree import branch_with_labels, build_tree

__all__ = [
    "branch_entries",
    "entry_preview",
    "entry_role",
    "entry_text",
    "export_html",
    "export_jsonl",
    "export_markdown",
    "message_text",
]

_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_RASTER = {"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"}


# ---------------------------------------------------------------------- text


def _blocks_text(content: object, *, tools: bool = True, thinking: bool = False) -> str:
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
            parts.append(f"[{block.get('name')}] {_deep_dumps(args)}")
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
    return _blocks_text(message.get("content"), tools=tools, thinking=thinking)


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
        return _blocks_text(entry.get("content"))
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
        label = f"{entry.get('customType')}: {_blocks_text(entry.get('content'))}"
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


# ---------------------------------------------------------------------- paths


def _path(sm: SessionManager, leaf_id: str | None) -> list[Entry]:
    leaf = leaf_id if leaf_id is not None else sm.get_leaf_id()
    if leaf is None:
        return []
    if sm.get_entry(leaf) is None:
        raise EntryNotFoundError(leaf)
    return sm.get_branch(leaf)


def branch_entries(sm: SessionManager, leaf_id: str | None = None) -> list[Entry]:
    """The root -> leaf path without label entries, then the path's labels re-created.

    The same selection `create_branched_session` keeps, as new dicts.
    """
    return [dict(e) for e in branch_with_labels(_path(sm, leaf_id), sm.get_labels())]


def export_jsonl(sm: SessionManager, leaf_id: str | None = None) -> bytes:
    """The root -> leaf path as the bytes of a new session file (v3, new id)."""
    entries = branch_entries(sm, leaf_id)
    source = sm.get_header() or {}
    header: Entry = {
        "type": "session",
        "version": CURRENT_SESSION_VERSION,
        "id": generate_session_id(),
        "timestamp": iso_now(),
        "cwd": source.get("cwd", sm.get_cwd()),
    }
    name = sm.get_session_name()
    if name:
        header["title"] = name
        source_kind = source.get("titleSource")
        if isinstance(source_kind, str):
            header["titleSource"] = source_kind
    header["parentSession"] = sm.get_session_file() or sm.get_session_id()
    lines = [serialize_entry_bytes(header), *(serialize_entry_bytes(e) for e in entries)]
    return b"\n".join(lines) + b"\n"


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


def _deep_dumps(value: object) -> str:
    """`json.dumps` even of arguments nested as deep as JavaScript allows."""
    return allow_deep_nesting(lambda: json.dumps(value, ensure_ascii=False))


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
            text = _blocks_text(message.get("content"), tools=False)
            body = [_fence(text)] if text else []
        elif role == "bashExecution":
            title = "Shell"
            body = [_fence(message_text(message), "console")]
        elif role == "pythonExecution":
            title = "Python"
            body = [_fence(message_text(message), "python")]
        else:
            title = role[:1].upper() + role[1:]
            if role == "custom":
                title = f"Custom · {message.get('customType')}"
            body = _md_blocks(message.get("content"))
            if role in ("branchSummary", "compactionSummary"):
                body = [str(message.get("summary", ""))]
        return f"### {title}{meta}\n\n" + "\n\n".join(body)
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
    name = sm.get_session_name() or f"Session {sm.get_session_id()}"
    header = sm.get_header() or {}
    leaf = path[-1].get("id") if path else None
    lines = [
        f"# {name}",
        "",
        f"- Session: `{sm.get_session_id()}`",
        f"- Directory: `{header.get('cwd', '')}`",
        f"- Created: {_when(header)}",
        f"- Path: {len(path)} entries, root → `{leaf}`",
        "",
        "---",
    ]
    for entry in path:
        block = _md_entry(entry, labels)
        if block:
            lines.extend(["", block])
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------- html

_CSS = """
:root { color-scheme: light dark; --fg: #1d232a; --bg: #fafafa; --muted: #6b7280;
  --line: #d7dbe0; --user: #e8f0fe; --assistant: #ffffff; --tool: #f3f4f6; --accent: #2563eb; }
@media (prefers-color-scheme: dark) { :root { --fg: #e5e7eb; --bg: #111418; --muted: #9ca3af;
  --line: #2d333b; --user: #1c2a44; --assistant: #161b22; --tool: #1b1f24; --accent: #60a5fa; } }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg);
  display: grid; grid-template-columns: minmax(220px, 28%) 1fr; height: 100vh; }
header { grid-column: 1 / 3; padding: .6rem 1rem; border-bottom: 1px solid var(--line); }
header h1 { font-size: 1.15rem; margin: 0 0 .2rem; }
header .meta { color: var(--muted); font-size: .85rem; }
nav { overflow: auto; border-right: 1px solid var(--line); padding: .5rem; font-size: .83rem; }
nav ul { list-style: none; margin: 0; padding-left: .9rem; border-left: 1px dashed var(--line); }
nav > ul { padding-left: 0; border-left: 0; }
nav li.branch > ul { margin-top: .1rem; }
nav button { all: unset; cursor: pointer; display: block; padding: .05rem .3rem; border-radius: 4px;
  white-space: nowrap; overflow: hidden; text-overflow: ellipsis; max-width: 100%; }
nav button:hover { background: var(--tool); }
nav button.on-path { font-weight: 600; }
nav button.selected { outline: 2px solid var(--accent); }
nav .fork { color: var(--accent); font-size: .75rem; margin-left: .3rem; }
main { overflow: auto; padding: 1rem; display: flex; flex-direction: column; gap: .6rem; }
.controls { order: -1; display: flex; gap: .5rem; align-items: center; flex-wrap: wrap; }
.entry { border: 1px solid var(--line); border-radius: 8px; padding: .5rem .75rem;
  background: var(--assistant); }
.entry[hidden] { display: none; }
.entry.user { background: var(--user); }
.entry.toolResult, .entry.bashExecution { background: var(--tool); }
.entry.note { border-style: dashed; color: var(--muted); padding: .25rem .75rem; }
.entry h2 { font-size: .8rem; margin: 0 0 .3rem; color: var(--muted); font-weight: 600; }
.text { white-space: pre-wrap; word-wrap: break-word; }
pre { white-space: pre-wrap; word-wrap: break-word; margin: .3rem 0; font-size: .85rem; }
.label { background: var(--accent); color: #fff; border-radius: 4px; padding: 0 .3rem;
  font-size: .75rem; }
img { max-width: 100%; border-radius: 4px; }
"""

_JS = """
(function () {
  var data = JSON.parse(document.getElementById('session-data').textContent);
  var parents = data.parents, articles = {}, buttons = {};
  document.querySelectorAll('article.entry').forEach(function (a) { articles[a.dataset.n] = a; });
  document.querySelectorAll('nav button[data-n]').forEach(function (b) {
    buttons[b.dataset.n] = b;
  });
  var picker = document.getElementById('leaf-picker');
  function show(n) {
    var path = [], seen = {}, cur = n;
    while (cur !== null && cur !== undefined && !seen[cur]) {
      seen[cur] = 1; path.push(String(cur)); cur = parents[cur];
    }
    path.reverse();
    var order = {};
    path.forEach(function (m, i) { order[m] = i; });
    Object.keys(articles).forEach(function (m) {
      var a = articles[m], on = Object.prototype.hasOwnProperty.call(order, m);
      a.hidden = !on; a.style.order = on ? order[m] : '';
    });
    Object.keys(buttons).forEach(function (m) {
      buttons[m].classList.toggle('on-path', Object.prototype.hasOwnProperty.call(order, m));
      buttons[m].classList.toggle('selected', m === String(n));
    });
    if (picker) { picker.value = String(n); }
    document.getElementById('path-info').textContent = path.length + ' entries on this path';
  }
  Object.keys(buttons).forEach(function (m) {
    buttons[m].addEventListener('click', function () { show(m); });
  });
  if (picker) { picker.addEventListener('change', function () { show(picker.value); }); }
  if (data.leaf !== null) { show(String(data.leaf)); }
})();
"""

_CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _html_image(block: dict[str, Any]) -> str:
    mime = str(block.get("mimeType", ""))
    data = block.get("data")
    if mime.lower() in _RASTER and isinstance(data, str) and _BASE64.fullmatch(data):
        clean = "".join(data.split())
        return f'<img alt="image" src="data:{_e(mime)};base64,{clean}">'
    if isinstance(data, str) and data.startswith("blob:"):
        return f'<p class="text"><em>[image missing from the blob store: {_e(data)}]</em></p>'
    return f'<p class="text"><em>[image: {_e(mime or "unknown type")}]</em></p>'


def _html_blocks(content: object) -> str:
    if isinstance(content, str):
        return f'<div class="text">{_e(content)}</div>'
    if not isinstance(content, list):
        return ""
    out: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            out.append(f'<div class="text">{_e(block.get("text", ""))}</div>')
        elif kind == "thinking":
            out.append(
                "<details><summary>thinking</summary>"
                f'<div class="text">{_e(block.get("thinking", ""))}</div></details>'
            )
        elif kind == "toolCall":
            out.append(
                f"<details><summary>tool call: {_e(block.get('name'))}</summary>"
                f"<pre>{_e(_json(block.get('arguments')))}</pre></details>"
            )
        elif kind == "image":
            out.append(_html_image(block))
        else:
            out.append(f'<p class="text"><em>[{_e(kind)} block]</em></p>')
    return "".join(out)


def _html_entry(entry: Entry) -> tuple[str, str, str]:
    """(css class, heading, body html) of one entry."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        message = message if isinstance(message, dict) else {}
        role = str(message.get("role", "message"))
        if role == "assistant":
            body = _html_blocks(message.get("content"))
            if message.get("errorMessage"):
                body += f'<p class="text"><em>error: {_e(message["errorMessage"])}</em></p>'
            return role, f"assistant · {message.get('provider')}/{message.get('model')}", body
        if role == "toolResult":
            text = _blocks_text(message.get("content"), tools=False)
            images = "".join(
                _html_image(b)
                for b in message.get("content") or []
                if isinstance(b, dict) and b.get("type") == "image"
            )
            error = " (error)" if message.get("isError") else ""
            return (
                role,
                f"tool result · {message.get('toolName')}{error}",
                (f"<pre>{_e(text)}</pre>{images}"),
            )
        if role in ("bashExecution", "pythonExecution"):
            return role, role, f"<pre>{_e(message_text(message))}</pre>"
        if role in ("branchSummary", "compactionSummary"):
            return role, role, f'<div class="text">{_e(message.get("summary", ""))}</div>'
        return role, role, _html_blocks(message.get("content"))
    if kind == "compaction":
        return (
            "compaction",
            f"compaction · kept from {entry.get('firstKeptEntryId')}",
            f'<div class="text">{_e(entry.get("summary", ""))}</div>',
        )
    if kind == "branch_summary":
        return (
            "branch_summary",
            "branch summary",
            f'<div class="text">{_e(entry.get("summary", ""))}</div>',
        )
    if kind == "custom_message":
        return (
            "custom",
            f"extension · {entry.get('customType')}",
            _html_blocks(entry.get("content")),
        )
    if kind == "session_init":
        return (
            "session_init",
            "session init",
            f'<div class="text">{_e(entry.get("task", ""))}</div>',
        )
    return "note", "", f"<span>{_e(entry_preview(entry, 0))}</span>"


def _nav(roots: Sequence[Any], index: dict[int, int], labels: dict[str, str]) -> str:
    """Nested lists: a linear run stays in one list, each child of a branch point nests."""
    out: list[str] = ["<ul>"]
    # Stack items: a node to render, or a closing tag to emit.
    stack: list[Any] = []
    if len(roots) == 1:
        stack.append(roots[0])
    else:
        for root in reversed(roots):
            stack.extend(["</ul></li>", root, "__branch__"])
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append('<li class="branch"><ul>' if item == "__branch__" else item)
            continue
        node = item
        while True:
            entry = node.entry
            n = index[id(entry)]
            label = labels.get(str(entry.get("id")))
            badge = f' <span class="label">{_e(label)}</span>' if label else ""
            fork = (
                f'<span class="fork">⑂ {len(node.children)}</span>'
                if len(node.children) > 1
                else ""
            )
            out.append(
                f'<li><button type="button" data-n="{n}" title="{_e(entry.get("id"))}">'
                f"{_e(entry_preview(entry, 70))}{badge}{fork}</button></li>"
            )
            if len(node.children) == 1:
                node = node.children[0]
                continue
            for child in reversed(node.children):
                stack.extend(["</ul></li>", child, "__branch__"])
            break
    out.append("</ul>")
    return "".join(out)


def _leaf_option(sm: SessionManager, entry: Entry) -> str:
    last_prompt = ""
    seen: set[int] = set()
    item: Entry | None = entry
    while item is not None and id(item) not in seen:
        if entry_role(item) == "user":
            last_prompt = entry_preview(item, 60)
            break
        seen.add(id(item))
        parent = item.get("parentId")
        item = sm.get_entry(parent) if isinstance(parent, str) else None
    return f"{entry.get('id')} · {last_prompt or entry_preview(entry, 60)}"


def export_html(sm: SessionManager, leaf_id: str | None = None) -> str:
    """The whole tree as one self-contained HTML page, showing the root -> leaf path.

    Every entry is rendered once; inline JavaScript shows the path to whichever
    entry or leaf the reader picks. No external URL is referenced.
    """
    path = _path(sm, leaf_id)
    entries = sm.get_entries()
    labels = sm.get_labels()
    index = {id(e): n for n, e in enumerate(entries)}
    by_id: dict[str, int] = {}
    for n, entry in enumerate(entries):
        if isinstance(entry.get("id"), str):
            by_id[entry["id"]] = n
    parents: dict[str, int | None] = {}
    for n, entry in enumerate(entries):
        parent = entry.get("parentId")
        parents[str(n)] = by_id.get(parent) if isinstance(parent, str) else None
    on_path = {id(e) for e in path}
    leaf_n = index[id(path[-1])] if path else None

    articles: list[str] = []
    for n, entry in enumerate(entries):
        css, heading, body = _html_entry(entry)
        entry_id = str(entry.get("id", ""))
        label = labels.get(entry_id)
        badge = f' <span class="label">{_e(label)}</span>' if label else ""
        hidden = "" if id(entry) in on_path else " hidden"
        title = f"<h2>{_e(heading)} · {_e(entry_id)}{badge}</h2>" if heading else ""
        if not heading:
            body = f"{body} <small>{_e(entry_id)}</small>{badge}"
        articles.append(
            f'<article class="entry {_e(css)}" data-n="{n}" data-id="{_e(entry_id)}"{hidden}>'
            f"{title}{body}</article>"
        )

    tree = build_tree(entries, labels)
    tips = [e for e in entries if not sm.get_children(e.get("id"))]
    choices = list(tips)
    if path and not any(e is path[-1] for e in tips):
        choices.append(path[-1])
    options = "".join(
        f'<option value="{index[id(e)]}"{" selected" if index[id(e)] == leaf_n else ""}>'
        f"{_e(_leaf_option(sm, e))}</option>"
        for e in choices
    )
    data = {"leaf": leaf_n, "parents": parents}
    data_json = (
        json.dumps(data, separators=(",", ":"))
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )
    name = sm.get_session_name() or f"Session {sm.get_session_id()}"
    header = sm.get_header() or {}
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(name)}</title><style>{_CSS}</style></head><body>",
            f'<header><h1>{_e(name)}</h1><div class="meta">session {_e(sm.get_session_id())}'
            f" · {_e(header.get('cwd', ''))} · created {_e(_when(header))}"
            f" · {len(entries)} entries, {len(tips)} branch tip(s)</div></header>",
            f'<nav aria-label="session tree">{_nav(tree, index, labels)}</nav>',
            '<main><div class="controls"><label>Branch: <select id="leaf-picker">',
            options,
            '</select></label> <span id="path-info"></span></div>',
            "".join(articles),
            "</main>",
            f'<script type="application/json" id="session-data">{data_json}</script>',
            f"<script>{_JS}</script></body></html>\n",
        ]
    )
