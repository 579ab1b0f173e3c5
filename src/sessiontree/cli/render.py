"""Rendering for people: entry previews, the session tree, relative times, and
`terminal_safe`, which every character printed for people passes through.

All text that comes from a session goes into `rich.text.Text` objects, never
into markup strings, so `[bold]` typed by a user is printed as typed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sessiontree.format import entry_preview

if TYPE_CHECKING:
    # Imported where used: `terminal_safe` and the times and figures here are for
    # commands that print no rich text too (`--json`, an export), which load no rich.
    from rich.text import Text
    from rich.tree import Tree

    from sessiontree.format import SessionTreeNode
    from sessiontree.session import SessionManager

__all__ = [
    "TreeOptions",
    "preview",
    "render_tree",
    "short_tokens",
    "terminal_safe",
    "terminal_safe_text",
    "time_ago",
]

# What a terminal would act on instead of showing: C0 controls but tab and newline
# (ESC starts CSI/OSC sequences: cursor moves, OSC 52 clipboard writes), DEL, the C1
# controls (U+009B is a one-character CSI on some terminals), the bidi embeddings,
# overrides and isolates that reorder what is shown ("Trojan Source"), and lone
# surrogates, which cannot be encoded for output at all (a non-UTF-8 file name
# decoded with surrogateescape, or a `\ud83d` escape in session JSON).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the undecodable byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """`text` with nothing a terminal would act on: every control character (tab and
    newline excepted), bidi override and lone surrogate shown as a visible escape
    (`\\x1b`, `\\x9b`, `\\u202e`; `\\xe9` for an undecodable file-name byte).

    CRLF becomes a newline first, so Windows line endings read as lines.
    """
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text.replace("\r\n", "\n"))


def terminal_safe_text(text: Text) -> Text:
    """A rich Text made terminal-safe, its styles kept (an escape takes its character's).

    Done before the text is laid out, so wrapping and cropping count the escapes.
    """
    from rich.text import Span, Text

    plain = text.plain
    if _UNSAFE.search(plain) is None:
        return text
    cuts = sorted({i for m in _UNSAFE.finditer(plain) for i in (m.start(), m.end())})
    out = text.blank_copy()
    for piece in text.divide(cuts):
        if _UNSAFE.fullmatch(piece.plain):
            shown = terminal_safe(piece.plain)
            spans = [Span(0, len(shown), span.style) for span in piece.spans]
            piece = Text(shown, style=piece.style, spans=spans)
        out.append_text(piece)
    return out


COLLAPSE_AFTER = 12
"""Linear runs longer than this are shortened unless `--full`."""
_KEEP_ENDS = 3


def money(value: float, estimated: bool = False) -> str:
    """Dollars as every command prints them: `$2,924.55`, `$0.0042` below a cent, and
    `~` before a sum that holds an estimate (a reply priced from the table)."""
    text = f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"
    return ("~" if estimated else "") + text


def short_tokens(n: int) -> str:
    """1234 -> '1,234'; 1234567 -> '1.23M' (tables stay narrow; --json has every digit)."""
    for size, unit in ((10**9, "B"), (10**6, "M")):
        if abs(n) >= size:
            return f"{n / size:,.2f}{unit}"
    return f"{n:,}"


def preview(entry: dict[str, Any], width: int = 60) -> str:
    """A one-line description of an entry for trees and tables."""
    return entry_preview(entry, width)


def time_ago(moment: datetime, now: datetime | None = None) -> str:
    """'just now', '5m ago', '3h ago', '2d ago', else the date."""
    now = now if now is not None else datetime.now(UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = (now - moment).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)}m ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h ago"
    if seconds < 7 * 86400:
        return f"{int(seconds // 86400)}d ago"
    return moment.astimezone().strftime("%Y-%m-%d")


@dataclass(frozen=True, slots=True)
class TreeOptions:
    """How much of the tree to show."""

    full: bool = False
    """Show every entry of long linear runs."""
    depth: int | None = None
    """Show branches nested at most this deep (None: all)."""
    width: int = 70
    """Preview width per entry."""


_ROLE_STYLE = {
    "user": "bold blue",
    "assistant": "green",
    "toolResult": "yellow",
    "compaction": "magenta",
    "branch_summary": "magenta",
}


def _line(
    node: SessionTreeNode,
    leaf: str | None,
    active: set[int],
    options: TreeOptions,
    head: bool = False,
) -> Text:
    from rich.text import Text

    entry = node.entry
    text = Text(no_wrap=True, overflow="ellipsis")
    if head:
        text.append("● " if id(entry) in active else "○ ", style="cyan")
    text.append(str(entry.get("id")), style="dim")
    text.append(" ")
    # Markers go before the preview, which is the part cut on a narrow terminal.
    if entry.get("id") == leaf:
        text.append("← leaf ", style="bold green")
    if node.label:
        text.append(f"#{node.label} ", style="bold cyan")
    if len(node.children) > 1:
        text.append(f"⑂{len(node.children)} ", style="cyan")
    kind = entry.get("type")
    role = kind
    if kind == "message":
        message = entry.get("message")
        role = message.get("role") if isinstance(message, dict) else kind
    body = preview(entry, options.width)
    style = _ROLE_STYLE.get(str(role), _ROLE_STYLE.get(str(kind), ""))
    if kind == "message" and ":" in body:
        name, rest = body.split(":", 1)
        text.append(name, style=style or None)
        text.append(":" + rest)
    else:
        text.append(body, style=style or "dim")
    return text


def _visible(run: list[SessionTreeNode], leaf: str | None, options: TreeOptions) -> list[bool]:
    if options.full or len(run) <= COLLAPSE_AFTER:
        return [True] * len(run)
    keep = [False] * len(run)
    for i, node in enumerate(run):
        entry = node.entry
        keep[i] = (
            i < _KEEP_ENDS
            or i >= len(run) - _KEEP_ENDS
            or node.label is not None
            or entry.get("id") == leaf
            or entry.get("type") in ("compaction", "branch_summary")
        )
    # A gap of one entry costs a line either way: show the entry.
    for i in range(1, len(run) - 1):
        if not keep[i] and keep[i - 1] and keep[i + 1]:
            keep[i] = True
    return keep


def render_tree(sm: SessionManager, title: str | Text, options: TreeOptions | None = None) -> Tree:
    """The entry tree as a rich Tree.

    A linear run of entries is listed at one level; at a branch point every
    child becomes its own subtree (`●` marks the branch holding the current
    leaf, `○` the others), continuing its run inside. Long runs are shortened
    to their ends, labelled entries, summaries and the leaf.
    """
    from rich.text import Text
    from rich.tree import Tree

    options = options if options is not None else TreeOptions()
    leaf = sm.get_leaf_id()
    active = {id(e) for e in sm.get_branch()}
    root = Tree(title)
    roots = sm.get_tree()
    # (container, node, is a branch head, branch depth)
    stack: list[tuple[Tree, SessionTreeNode, bool, int]] = []
    if len(roots) == 1:
        stack.append((root, roots[0], False, 0))
    else:
        stack.extend((root, node, True, 1) for node in reversed(roots))
    while stack:
        container, node, head, depth = stack.pop()
        run: list[SessionTreeNode] = []
        anchor = container
        if head:
            anchor = container = container.add(_line(node, leaf, active, options, head=True))
        else:
            run.append(node)
        current = node
        while len(current.children) == 1:
            current = current.children[0]
            run.append(current)
        gap = 0
        for node_in_run, show in zip(run, _visible(run, leaf, options), strict=True):
            if not show:
                gap += 1
                continue
            if gap:
                container.add(Text(f"… {gap} entries (--full shows them)", style="dim italic"))
                gap = 0
            anchor = container.add(_line(node_in_run, leaf, active, options))
        if len(current.children) > 1:
            if options.depth is not None and depth >= options.depth:
                anchor.add(
                    Text(
                        f"… {len(current.children)} branches below (raise --depth)",
                        style="dim italic",
                    )
                )
                continue
            for child in reversed(current.children):
                stack.append((anchor, child, True, depth + 1))
    return root
