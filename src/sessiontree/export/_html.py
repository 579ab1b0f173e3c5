"""One self-contained HTML page of a whole session (`export_html`), drawn by the Jinja2
templates in `templates/`, which `sessiontree serve` draws with too; the pieces the web
app shares (view objects, the environment, assets).

One HTML file, no network assets (a Content Security Policy forbids any fetch),
holding every entry of the tree; the chosen path is visible without JavaScript, and
inline JS switches to any other branch (a leaf picker and a clickable tree)."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

import jinja2
from markupsafe import Markup

from sessiontree.export._jsonl import _path
from sessiontree.export._markdown import _json, _when
from sessiontree.export._render import highlight_css, render_markdown
from sessiontree.export._tools import tool_call_summary, tool_output_text
from sessiontree.format import (
    Entry,
    SessionTreeNode,
    blocks_text,
    build_tree,
    context_edit_text,
    entry_preview,
    human_size,
    message_facts,
    message_text,
    system_sections,
    usage_entry_text,
    usage_record,
    usage_summary,
)
from sessiontree.reports import price_record, price_table
from sessiontree.session import SessionManager, file_size, message_count, session_shown_title

_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_RASTER = {"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"}


# ---------------------------------------------------------------------- html
#
# One renderer for HTML: the Jinja2 templates in `sessiontree/templates`, autoescaped,
# used by `export_html` here and by `sessiontree serve` (`sessiontree.web`). Python
# builds plain view objects (`HtmlEntry`, `HtmlBlock`, `NavItem`); the templates only
# lay them out, so every string from a session reaches the page escaped.

EXPORT_CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)
"""The exported page's policy: nothing is fetched, from anywhere."""

ImageSource = Callable[[Entry, int, dict[str, Any]], str | None]
"""(entry, image number within the entry, image block) -> the URL of the image, or None."""


@dataclass(slots=True)
class HtmlBlock:
    """One piece of an entry's body, as the `block` macro draws it."""

    kind: str
    """text | thinking | tool_call | pre | image | em | note"""
    text: str = ""
    name: str = ""
    """The tool's name (tool_call)."""
    summary: str = ""
    """What a tool call ran, in one line (its command, file, pattern or query)."""
    src: str | None = None
    """The image's URL (image); None: `text` says why there is none."""
    omitted: int = 0
    """Characters cut from the end of `text` (the page can fetch the whole)."""
    index: int = 0
    """Position among the entry's blocks."""


@dataclass(slots=True)
class HtmlEntry:
    """One entry as an `<article>`: the `entry` macro's input."""

    n: int
    id: str
    parent_id: str | None
    css: str
    heading: str
    label: str | None
    blocks: list[HtmlBlock]
    usage: str | None = None
    hidden: bool = False
    time: str = ""
    """When it was written, `YYYY-MM-DD HH:MM:SS` (UTC); "" when it does not say."""
    timestamp: str = ""
    """Its timestamp as written (ISO 8601), for the page's `<time datetime>`."""
    agent_only: bool = False
    """An entry only the agent reads (a `custom` entry: extension state, Claude Code's
    `system` lines), folded away until the reader asks for them."""


N = TypeVar("N")
"""A node of a tree drawn by `nav_tokens`."""


@dataclass(slots=True)
class NavItem:
    """One token of the tree navigation, a flat list however deep the tree is:
    `open`/`close` start and end a branch's nested list; `entry` is a button;
    `gap` stands for a run of entries left out."""

    kind: str
    n: int | None = None
    id: str = ""
    text: str = ""
    label: str | None = None
    forks: int = 0
    count: int = 0
    on_path: bool = False
    agent_only: bool = False
    """An entry only the agent reads (see `HtmlEntry.agent_only`): folded with it."""
    head: bool = False
    """The first entry of a branch (a child of a branch point): drawn with `●` when on
    the shown path, `○` when not, as `sessiontree tree` draws them."""


def _asset(name: str) -> Markup:
    return Markup(_asset_text(name))


@functools.cache
def _asset_text(name: str) -> str:
    """A stylesheet or script shipped with the templates (our own text, never a session's);
    `highlight.css`, the colours of highlighted code, is made by Pygments."""
    if name == "highlight.css":
        return highlight_css()
    return (resources.files("sessiontree.export") / "templates" / "assets" / name).read_text(
        "utf-8"
    )


def asset_text(name: str) -> str:
    """The text of a file in `sessiontree/templates/assets` (CSS and JavaScript)."""
    return _asset_text(name)


@functools.cache
def html_environment() -> jinja2.Environment:
    """The Jinja2 environment of the shared templates: autoescaped, strict about names."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("sessiontree.export", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["asset"] = _asset
    env.filters["thousands"] = lambda n: f"{n:,}"
    env.filters["sentence"] = lambda text: str(text)[:1].upper() + str(text)[1:]
    env.filters["home"] = _home_relative
    env.filters["markdown"] = render_markdown
    return env


def _home_relative(path: object) -> str:
    """`~/...` for a path under the home directory, else the path."""
    text = str(path)
    home = os.path.expanduser("~")
    if home not in ("", "/") and (text == home or text.startswith(home + os.sep)):
        return "~" + text[len(home) :]
    return text


def json_island(value: object) -> Markup:
    """JSON for a `<script type="application/json">` element: `<`, `>` and `&` escaped,
    so no string in it can close the element or open a comment."""
    text = json.dumps(value, separators=(",", ":"))  # ASCII: U+2028 and the like escaped
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def _data_url(block: dict[str, Any]) -> str | None:
    mime = str(block.get("mimeType", ""))
    data = block.get("data")
    if mime.lower() in _RASTER and isinstance(data, str) and _BASE64.fullmatch(data):
        return f"data:{mime};base64,{''.join(data.split())}"
    return None


def is_raster_image(block: dict[str, Any]) -> bool:
    """Whether an image block holds base64 of a type browsers show without running it."""
    mime = block.get("mimeType")
    data = block.get("data")
    return (
        isinstance(mime, str)
        and mime.lower() in _RASTER
        and isinstance(data, str)
        and not data.startswith("blob:")
        and _BASE64.fullmatch(data) is not None
    )


def entry_images(entry: Entry) -> list[dict[str, Any]]:
    """The image blocks of an entry, in the order its page shows them."""
    return [b for b in _content_blocks(entry) if isinstance(b, dict) and b.get("type") == "image"]


def _content_blocks(entry: Entry) -> list[Any]:
    kind = entry.get("type")
    content: object = None
    if kind == "message":
        message = entry.get("message")
        if isinstance(message, dict) and message.get("role") not in (
            "bashExecution",
            "pythonExecution",
            "branchSummary",
            "compactionSummary",
        ):
            content = message.get("content")
    elif kind == "custom_message":
        content = entry.get("content")
    return content if isinstance(content, list) else []


class _Blocks:
    """Collects an entry's blocks, cutting long text at `limit` characters."""

    def __init__(self, entry: Entry, image_src: ImageSource, limit: int | None) -> None:
        self.entry = entry
        self.image_src = image_src
        self.limit = limit
        self.blocks: list[HtmlBlock] = []
        self.images = 0

    def add(self, kind: str, text: str = "", name: str = "") -> None:
        omitted = 0
        if self.limit is not None and len(text) > self.limit and kind != "em":
            omitted = len(text) - self.limit
            text = text[: self.limit]
        self.blocks.append(HtmlBlock(kind, text, name, omitted=omitted, index=len(self.blocks)))

    def image(self, block: dict[str, Any]) -> None:
        number = self.images
        self.images += 1
        src = self.image_src(self.entry, number, block)
        if src is not None:
            self.blocks.append(HtmlBlock("image", src=src, index=len(self.blocks)))
            return
        data = block.get("data")
        if isinstance(data, str) and data.startswith("blob:"):
            self.add("em", f"[image missing from the blob store: {data}]")
        else:
            self.add("em", f"[image: {block.get('mimeType') or 'unknown type'}]")

    def content(self, content: object) -> None:
        if isinstance(content, str):
            self.add("text", content)
            return
        if not isinstance(content, list):
            return
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                self.add("text", str(block.get("text", "")))
            elif kind == "thinking":
                self.add("thinking", str(block.get("thinking", "")))
            elif kind == "toolCall":
                arguments = block.get("arguments")
                self.add("tool_call", _json(arguments), str(block.get("name")))
                self.blocks[-1].summary = tool_call_summary(arguments)
            elif kind == "image":
                self.image(block)
            else:
                self.add("em", f"[{kind} block]")


def _usage_line(entry: Entry, message: dict[str, Any]) -> str | None:
    """Usage, thinking level, stop reason, timing... of a reply or tool result. A reply
    whose file records no cost (another agent's: Claude Code, Codex and the others write
    tokens, not dollars) shows the cost the price table gives its tokens, marked `~` as
    `usage` marks an estimate, never a recorded-looking "$0.0000"."""
    facts = message_facts(message)
    record = usage_record(entry, 0)
    # The price table (loaded once per process, ~0.6 s) only for a reply without a cost.
    unpriced = record is not None and not record.cost and record.tokens > 0
    if facts and record is not None and unpriced and message.get("role") == "assistant":
        cost, estimated, _ = price_record(record, price_table())
        if estimated:
            spent = [p for p in facts[0].split(" · ") if not p.startswith("$")]
            facts[0] = " · ".join([*spent, f"~${cost:.4f}"])
    return " · ".join(facts) or None


def _tool_names(tools: list[Any]) -> str:
    names = [t.get("name") if isinstance(t, dict) else t for t in tools]
    return ", ".join(str(n) for n in names)


def _export_image(entry: Entry, number: int, block: dict[str, Any]) -> str | None:
    return _data_url(block)


def html_entry(
    entry: Entry,
    n: int,
    labels: dict[str, str],
    *,
    image_src: ImageSource = _export_image,
    limit: int | None = None,
) -> HtmlEntry:
    """The view of one entry: css class, heading, blocks (text cut at `limit` characters)."""
    kind = entry.get("type")
    out = _Blocks(entry, image_src, limit)
    css, heading, usage = "note", "", None
    if kind == "message":
        message = entry.get("message")
        message = message if isinstance(message, dict) else {}
        css = role = str(message.get("role", "message"))
        heading = role
        if role == "assistant":
            heading = f"assistant · {message.get('provider')}/{message.get('model')}"
            out.content(message.get("content"))
            if message.get("errorMessage"):
                out.add("em", f"error: {message['errorMessage']}")
            usage = _usage_line(entry, message)
        elif role == "toolResult":
            error = " (error)" if message.get("isError") else ""
            heading = f"tool result · {message.get('toolName')}{error}"
            out.add("pre", tool_output_text(blocks_text(message.get("content"), tools=False)))
            for block in entry_images(entry):
                out.image(block)
            usage = _usage_line(entry, message)
        elif role == "system":
            if message.get("content"):  # pi 1.6 writes "" when the sections say it all
                out.content(message.get("content"))
            for name, text in system_sections(message):
                out.add("section", text, name)
            for key, what in (("toolsAdded", "tools added"), ("toolsRemoved", "tools removed")):
                tools = message.get(key)
                if isinstance(tools, list) and tools:
                    out.add("tool_list", _json(tools), f"{what}: {_tool_names(tools)}")
        elif role in ("bashExecution", "pythonExecution"):
            out.add("pre", message_text(message))
        elif role in ("branchSummary", "compactionSummary"):
            out.add("text", str(message.get("summary", "")))
        else:
            out.content(message.get("content"))
    elif kind == "compaction":
        css, heading = "compaction", f"compaction · kept from {entry.get('firstKeptEntryId')}"
        out.add("text", str(entry.get("summary", "")))
    elif kind == "branch_summary":
        css, heading = "branch_summary", "branch summary"
        out.add("text", str(entry.get("summary", "")))
    elif kind == "custom_message":
        css, heading = "custom", f"extension · {entry.get('customType')}"
        out.content(entry.get("content"))
    elif kind == "usage":
        css, heading = "usage", f"usage · {entry.get('kind')}"
        out.add("note", usage_entry_text(entry))
        usage = usage_summary(entry.get("usage"))
    elif kind == "context_edit":
        css, heading = "context_edit", "context edit"
        out.add("note", context_edit_text(entry))
    elif kind == "session_init":
        css, heading = "session_init", "session init"
        out.add("text", str(entry.get("task", "")))
    else:
        out.add("note", entry_preview(entry, 0))
    entry_id = str(entry.get("id", ""))
    parent = entry.get("parentId")
    stamp = entry.get("timestamp")
    return HtmlEntry(
        n,
        entry_id,
        parent if isinstance(parent, str) else None,
        css,
        heading,
        labels.get(entry_id),
        out.blocks,
        usage,
        time=_when(entry)[:19],
        timestamp=stamp if isinstance(stamp, str) else "",
        agent_only=kind == "custom",
    )


def nav_items(
    roots: Sequence[SessionTreeNode],
    number: Callable[[Entry], int | None],
    on_path: set[str],
    *,
    keep: Callable[[SessionTreeNode, SessionTreeNode | None], bool] | None = None,
) -> list[NavItem]:
    """`nav_tokens` of a `get_tree` tree: each entry numbered by `number`, marked when
    its id is in `on_path`."""

    def item(node: SessionTreeNode, head: bool) -> NavItem:
        entry = node.entry
        entry_id = str(entry.get("id", ""))
        return NavItem(
            "entry",
            number(entry),
            entry_id,
            entry_preview(entry, 70),
            node.label,
            len(node.children) if len(node.children) > 1 else 0,
            on_path=entry_id in on_path,
            agent_only=entry.get("type") == "custom",
            head=head,
        )

    return nav_tokens(roots, lambda node: node.children, item, keep=keep)


def nav_tokens(
    roots: Sequence[N],
    children: Callable[[N], Sequence[N]],
    item: Callable[[N, bool], NavItem],
    *,
    keep: Callable[[N, N | None], bool] | None = None,
    gap: Callable[[N], int] | None = None,
) -> list[NavItem]:
    """A tree as flat tokens: a linear run stays in one list, each child of a branch
    point opens a nested one; `item(node, head)` makes an entry's token (`head`: the
    first of a branch). With `keep`, nodes it rejects inside a run are left out (a
    `gap` token counts them); `keep(node, parent)` sees each node once. A tree already
    without them gives `gap(node)`: how many were left out right before `node`."""
    out: list[NavItem] = []
    stack: list[tuple[str, N | None]] = []
    if len(roots) == 1:
        stack.append(("node", roots[0]))
    else:
        for root in reversed(roots):
            stack.extend([("close", None), ("node", root), ("open", None)])
    while stack:
        kind, item_node = stack.pop()
        if item_node is None:
            out.append(NavItem(kind))
            continue
        node: N = item_node
        parent: N | None = None
        skipped = 0
        head = bool(out) and out[-1].kind == "open"
        while True:
            kids = children(node)
            if keep is None or keep(node, parent):
                if gap is not None:
                    skipped += gap(node)
                if skipped:
                    out.append(NavItem("gap", count=skipped))
                    skipped = 0
                out.append(item(node, head))
                head = False
            else:
                skipped += 1
            if len(kids) == 1:
                parent, node = node, kids[0]
                continue
            if skipped:
                out.append(NavItem("gap", count=skipped))
            for child in reversed(kids):
                stack.extend([("close", None), ("node", child), ("open", None)])
            break
    return out


def leaf_choice_text(sm: SessionManager, entry: Entry) -> str:
    """`<the tip's own text> · <its time> · <id>` for a leaf picker: each branch known
    by where it ends and when."""
    when = _when(entry)[:16]  # YYYY-MM-DD HH:MM (UTC)
    parts = [entry_preview(entry, 60), when, str(entry.get("id"))]
    return " · ".join(p for p in parts if p)


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

    views = []
    for n, entry in enumerate(entries):
        view = html_entry(entry, n, labels)
        view.hidden = id(entry) not in on_path
        views.append(view)
    tree = build_tree(entries, labels)
    tips = [e for e in entries if not sm.get_children(e.get("id"))]
    choices = list(tips)
    if path and not any(e is path[-1] for e in tips):
        choices.append(path[-1])
    options = [
        {"value": index[id(e)], "selected": index[id(e)] == leaf_n, "text": leaf_choice_text(sm, e)}
        for e in choices
    ]
    name = session_shown_title(sm)
    header = sm.get_header() or {}
    return (
        html_environment()
        .get_template("export.html")
        .render(
            csp=EXPORT_CSP,
            name=name,
            session_id=sm.get_session_id(),
            cwd=header.get("cwd", ""),
            created=_when(header),
            message_count=f"{message_count(sm):,}",
            entry_count=len(entries),
            size=None if (size := file_size(sm)) is None else human_size(size),
            tip_count=len(tips),
            nav=nav_items(tree, lambda e: index[id(e)], set()),
            options=options,
            entries=views,
            data=json_island({"leaf": leaf_n, "parents": parents}),
        )
    )
