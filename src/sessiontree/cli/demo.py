"""`sessiontree demo`: a small, realistic branched session, built and shown."""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import zlib
from typing import Annotated, Any

import typer
from rich.text import Text

from sessiontree.cli.common import console, emit_json
from sessiontree.cli.render import TreeOptions, preview, render_tree
from sessiontree.session import SessionManager


def _png(width: int, height: int) -> bytes:
    """A real (striped) PNG, large enough to go to the blob store."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    rows = b"".join(
        b"\x00" + bytes((x * 7 + y * 3) % 256 for x in range(width * 3)) for y in range(height)
    )
    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x02\x00\x00\x00"
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 1))
        + chunk(b"IEND", b"")
    )


def _assistant(text: str, ts: int, tool_call: dict[str, Any] | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if tool_call:
        content.append(tool_call)
    return {
        "role": "assistant",
        "content": content,
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": {
            "input": 1200,
            "output": 180,
            "cacheRead": 800,
            "cacheWrite": 0,
            "cost": {
                "input": 0.0036,
                "output": 0.0027,
                "cacheRead": 0.00024,
                "cacheWrite": 0,
                "total": 0.00654,
            },
        },
        "stopReason": "toolUse" if tool_call else "stop",
        "timestamp": ts,
    }


def build_demo_session(agent_dir: str, cwd: str) -> SessionManager:
    """A persisted session with branches, labels, a compaction, a branch summary and an image."""
    sm = SessionManager.create(cwd, agent_dir=agent_dir)
    ts = 1_767_225_600_000
    sm.append_model_change("anthropic/claude-sonnet-4-5")
    sm.append_thinking_level_change("medium")
    first = sm.append_message(
        {"role": "user", "content": "Why does the build fail on CI only?", "timestamp": ts}
    )
    sm.append_message(
        _assistant(
            "Let me look at the CI log.",
            ts + 1000,
            {
                "type": "toolCall",
                "id": "call_1",
                "name": "bash",
                "arguments": {"command": "cat ci.log | tail -20"},
            },
        )
    )
    sm.append_message(
        {
            "role": "toolResult",
            "toolCallId": "call_1",
            "toolName": "bash",
            "content": [{"type": "text", "text": "error: python3.12 not found\nexit 127"}],
            "isError": False,
            "timestamp": ts + 2000,
        }
    )
    answer = sm.append_message(
        _assistant("CI images ship Python 3.11; pin the version in .ci/run.", ts + 3000)
    )
    sm.append_label_change(answer, "diagnosis")
    screenshot = base64.b64encode(_png(96, 64)).decode()  # big enough for the blob store
    sm.append_message(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here is the dashboard:"},
                {"type": "image", "data": screenshot, "mimeType": "image/png"},
            ],
            "timestamp": ts + 4000,
        }
    )
    sm.append_message(_assistant("The dashboard confirms it: every failure is on 3.12.", ts + 5000))
    sm.append_compaction(
        "User asked why CI fails; cause: CI lacks python3.12.",
        "CI python mismatch",
        answer,
        5400,
    )
    sm.append_message({"role": "user", "content": "Fix it then.", "timestamp": ts + 6000})
    sm.append_message(_assistant("Pinned python3.11 in .ci/run.", ts + 7000))
    # Go back and explore another idea from the first question.
    sm.branch_with_summary(first, "Tried reading the CI log; found a Python version mismatch.")
    sm.append_message(_assistant("Alternatively we could install 3.12 in the image.", ts + 8000))
    sm.append_label_change(first, "question")
    sm.set_session_name("CI fails on Python version", "user")
    sm.flush()
    return sm


def demo_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print the context as JSON.")] = False,
    keep: Annotated[
        bool, typer.Option(help="Keep the temporary agent dir and print its path.")
    ] = False,
) -> None:
    tmp = tempfile.mkdtemp(prefix="sessiontree-demo-")
    agent_dir = os.path.join(tmp, "agent")
    try:
        with build_demo_session(agent_dir, os.path.join(tmp, "project")) as sm:
            ctx = sm.build_session_context()
            if as_json:
                emit_json(
                    {
                        "sessionFile": sm.get_session_file(),
                        "leafId": sm.get_leaf_id(),
                        "context": {
                            "messages": ctx.messages,
                            "thinkingLevel": ctx.thinking_level,
                            "models": ctx.models,
                        },
                    }
                )
                return
            console.print(
                Text.assemble(
                    ("Session ", "bold"),
                    sm.get_session_name() or "",
                    f"  ({sm.get_session_file()})",
                ),
                soft_wrap=True,
            )
            title = Text(sm.get_session_id(), style="bold")
            console.print(render_tree(sm, title, TreeOptions()))
            console.print(
                Text.assemble(
                    ("\nContext at leaf ", "bold"),
                    (str(sm.get_leaf_id()), "bold"),
                    f" (thinking {ctx.thinking_level}, models {json.dumps(ctx.models)})",
                )
            )
            for message in ctx.messages:
                console.print(Text(f"  • {preview({'type': 'message', 'message': message}, 100)}"))
            stats = sm.get_usage_statistics()
            blob_dir = os.path.join(agent_dir, "blobs")
            blobs = (
                [n for n in os.listdir(blob_dir) if "." not in n] if os.path.isdir(blob_dir) else []
            )
            console.print(
                f"\nTokens in {stats.input} / out {stats.output}, cost ${stats.cost:.4f}; "
                f"{len(blobs)} image(s) in the blob store"
                + ("" if keep else " (temporary agent dir, removed now; --keep keeps it)"),
                markup=False,
                soft_wrap=True,
            )
    finally:
        if keep:
            console.print(f"Kept {tmp}", markup=False, soft_wrap=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
