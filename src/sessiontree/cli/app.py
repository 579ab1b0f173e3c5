"""Command definitions. Each command parses arguments, calls the library, renders."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.tree import Tree

from ..errors import SessionTreeError
from ..jsonl import serialize_entry
from ..manager import SessionManager
from ..tree import SessionTreeNode
from .demo import build_demo_session

app = typer.Typer(
    name="sessiontree",
    help="Inspect, search, export, repair and migrate coding-agent session stores.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()


@app.callback()
def _root() -> None:
    """Inspect, search, export, repair and migrate coding-agent session stores."""


err_console = Console(stderr=True)


def preview(entry: dict[str, Any], width: int = 60) -> str:
    """A one-line description of an entry for trees and tables."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message") or {}
        role = message.get("role", "?")
        content = message.get("content")
        text = ""
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            parts = []
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text":
                    parts.append(str(block.get("text", "")))
                elif block.get("type") == "toolCall":
                    parts.append(f"[{block.get('name')}]")
                elif block.get("type") == "image":
                    parts.append("[image]")
            text = " ".join(parts)
        label = f"{role}: {text}"
    elif kind == "compaction":
        label = f"compaction: {entry.get('shortSummary') or entry.get('summary', '')}"
    elif kind == "branch_summary":
        label = f"branch summary: {entry.get('summary', '')}"
    elif kind == "model_change":
        model = entry.get("model") or f"{entry.get('provider')}/{entry.get('modelId')}"
        label = f"model: {model}"
    elif kind == "thinking_level_change":
        label = f"thinking: {entry.get('thinkingLevel')}"
    elif kind == "label":
        label = f"label {entry.get('targetId')}: {entry.get('label', '(cleared)')}"
    elif kind == "custom_message":
        content = entry.get("content")
        label = f"custom {entry.get('customType')}: {content if isinstance(content, str) else ''}"
    else:
        label = str(kind)
    label = " ".join(label.split())
    return label if len(label) <= width else label[: width - 1] + "…"


def render_tree(sm: SessionManager, title: str) -> Tree:
    """The entry tree as a rich Tree; linear runs stay flat, the leaf is marked."""
    leaf = sm.get_leaf_id()
    root = Tree(title)
    stack: list[tuple[Tree, SessionTreeNode]] = [(root, n) for n in reversed(sm.get_tree())]
    while stack:
        parent, node = stack.pop()
        entry = node.entry
        text = f"[dim]{entry.get('id')}[/] {preview(entry)}"
        if node.label:
            text += f" [bold cyan]#{node.label}[/]"
        if entry.get("id") == leaf:
            text += " [bold green]← leaf[/]"
        if len(node.children) == 1 and parent is not root:
            # A linear run: keep it at one level instead of nesting ever deeper.
            branch = parent.add(text)
            stack.append((parent, node.children[0]))
            del branch
            continue
        branch = parent.add(text)
        for child in reversed(node.children):
            stack.append((branch, child))
    return root


@app.command()
def demo(
    as_json: Annotated[bool, typer.Option("--json", help="Print the context as JSON.")] = False,
    keep: Annotated[
        bool, typer.Option(help="Keep the temporary agent dir and print its path.")
    ] = False,
) -> None:
    """Build a branched demo session in a temporary agent dir and show it."""
    tmp = tempfile.mkdtemp(prefix="sessiontree-demo-")
    agent_dir = os.path.join(tmp, "agent")
    with build_demo_session(agent_dir, os.path.join(tmp, "project")) as sm:
        ctx = sm.build_session_context()
        if as_json:
            payload = {
                "schemaVersion": 1,
                "sessionFile": sm.get_session_file(),
                "leafId": sm.get_leaf_id(),
                "context": {
                    "messages": ctx.messages,
                    "thinkingLevel": ctx.thinking_level,
                    "models": ctx.models,
                },
            }
            sys.stdout.write(serialize_entry(payload) + "\n")
        else:
            console.print(f"[bold]Session[/] {sm.get_session_name()}  ({sm.get_session_file()})")
            console.print(render_tree(sm, f"[bold]{sm.get_session_id()}[/]"))
            console.print(
                f"\n[bold]Context at leaf {sm.get_leaf_id()}[/] "
                f"(thinking {ctx.thinking_level}, models {json.dumps(ctx.models)})"
            )
            for message in ctx.messages:
                entry = {"type": "message", "message": message}
                console.print(f"  • {preview(entry, 100)}")
            stats = sm.get_usage_statistics()
            console.print(
                f"\nTokens in {stats.input} / out {stats.output}, cost ${stats.cost:.4f}; "
                f"blobs in {os.path.join(agent_dir, 'blobs')}"
            )
    if keep:
        console.print(f"Kept {tmp}")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    """Console-script entry point: user errors become one line on stderr."""
    try:
        app()
    except SessionTreeError as exc:
        err_console.print(f"sessiontree: error: {exc}")
        raise SystemExit(1) from None
