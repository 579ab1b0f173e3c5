"""The real Claude Code and Codex files (`tests/data/real/foreign`) and how the oracles'
views of them are reduced for comparison; shared by the tests and
`scripts/gen_foreign_oracles.py`, which writes `tests/data/foreign/oracles.json`.

`layout` lays the files out as the agents store them (a Claude Code config dir
with `projects/<project>/<session uuid>.jsonl`, a Codex home with
`sessions/YYYY/MM/DD/rollout-*.jsonl`), under stable names, so every reader (ours,
oh-my-pi's, the Claude Agent SDK's) sees the same session ids wherever the
checkout is.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from sessiontree.layout import store_parts
from tests.conftest import FIXTURES

HAND_ASSEMBLED = {
    "jazzyalex__agent-sessions__Resources__Fixtures__stage0__agents__claude__small.jsonl",
    "jazzyalex__agent-sessions__Resources__Fixtures__stage0__agents__codex__small.jsonl",
}
"""Schema-coverage files built by hand (SOURCES.md): only "must not crash" inputs."""

DATA = FIXTURES / "foreign"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)


def claude_layout_name(path: Path) -> str:
    """The session uuid a file is stored under: its name when that is a UUID, else the
    first UUID-shaped `sessionId` in it, else a UUID derived from its name."""
    if _UUID.match(path.stem):
        return path.stem
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            sid = value.get("sessionId") if isinstance(value, dict) else None
            if isinstance(sid, str) and _UUID.match(sid):
                return sid
    return str(uuid.uuid5(uuid.NAMESPACE_URL, path.name))


def layout(fixtures: Path, root: Path) -> tuple[Path, Path, dict[str, Path]]:
    """(Claude Code config dir, Codex home, fixture name -> its path in the layout)."""
    claude = root / "claude"
    codex = root / "codex"
    projects = claude / "projects" / "-fixtures"
    rollouts = codex / "sessions" / "2026" / "01" / "01"
    projects.mkdir(parents=True)
    rollouts.mkdir(parents=True)
    placed: dict[str, Path] = {}
    for path in sorted((fixtures / "claude").glob("*.jsonl")):
        target = projects / f"{claude_layout_name(path)}.jsonl"
        shutil.copyfile(path, target)
        placed[path.name] = target
    for path in sorted((fixtures / "codex").glob("*.jsonl")):
        target = rollouts / f"rollout-{path.name}"
        shutil.copyfile(path, target)
        placed[path.name] = target
    return claude, codex, placed


def settle(*roots: Path, seconds: float = 60.0) -> None:
    """Move the mtime of every file under `roots` `seconds` back, keeping their order.

    A cache does not trust what it read of a file written within its timestamp's tick
    (`discovery.stat_identity`): files placed a moment before a listing would be read
    again by the next one. Tests that check a listing comes from the cache settle them.
    """
    shift = int(seconds * 1e9)
    for root in roots:
        for path in Path(root).rglob("*"):
            if path.is_file() and not path.is_symlink():
                st = path.stat()
                os.utime(path, ns=(st.st_atime_ns - shift, st.st_mtime_ns - shift))


def digest(value: object) -> str:
    """A short, stable digest of a string or JSON value."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _user_texts(content: object) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return []


def streams(entries: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """What the messages of `entries` hold, per kind, in entry order: tool calls
    (id, name, arguments), tool results (id, name, error, content), assistant text,
    thinking (the blocks of one message joined as one text), user text and images.
    Compaction summaries count as user text (oh-my-pi keeps Claude Code's as a user
    message), and so do the context messages Codex injects (oh-my-pi keeps those as
    user messages; we keep them as `codex:context` custom messages)."""
    out: dict[str, list[Any]] = {
        k: [] for k in ("call", "result", "atext", "think", "utext", "uimage")
    }
    for entry in entries:
        kind = entry.get("type")
        if kind == "compaction" and entry.get("summary"):
            if entry.get("preserveData") is None:
                out["utext"].append(digest(entry["summary"]))
            continue
        if kind == "custom_message" and entry.get("customType") == "codex:context":
            out["utext"] += [digest("".join(_user_texts(entry.get("content"))))]
            continue
        if kind != "message":
            continue
        message = entry["message"]
        role = message.get("role")
        content = message.get("content")
        if role == "assistant":
            thinking = []
            for block in content:
                t = block.get("type")
                if t == "text":
                    out["atext"].append(digest(block["text"]))
                elif t == "thinking":
                    if block.get("thinking"):
                        thinking.append(block["thinking"])
                elif t == "toolCall":
                    out["call"].append([block["id"], block["name"], digest(block["arguments"])])
            if thinking:
                out["think"].append(digest("\n\n".join(thinking)))
        elif role == "toolResult":
            out["result"].append(
                [message["toolCallId"], message["toolName"], message["isError"], digest(content)]
            )
        elif role == "user":
            texts = _user_texts(content)
            out["utext"].append(digest("".join(texts)))
            if isinstance(content, list):
                out["uimage"] += [digest(b["data"]) for b in content if b.get("type") == "image"]
    return out


def response_usage(entries: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Token usage per assistant response id (the last message with that id wins)."""
    found: dict[str, list[int]] = {}
    for entry in entries:
        message = entry.get("message") if entry.get("type") == "message" else None
        if isinstance(message, dict) and message.get("role") == "assistant":
            response = message.get("responseId")
            usage = message.get("usage") or {}
            if isinstance(response, str):
                found[response] = [
                    usage.get(k, 0) for k in ("input", "output", "cacheRead", "cacheWrite")
                ]
    return found


def pi_view(message: dict[str, Any]) -> dict[str, Any]:
    """A context message as pi builds it: pi copies neither a custom message's
    `attribution` nor a compaction summary's `shortSummary` (scripts/peer_check.py)."""
    drop = {"custom": "attribution", "compactionSummary": "shortSummary"}.get(message.get("role"))
    if drop is None or drop not in message:
        return message
    return {k: v for k, v in message.items() if k != drop}


def import_all(fixtures: Path, agent: Path) -> dict[str, list[str]]:
    """Import every fixture into `agent` (a fresh agent dir): fixture name -> the files
    written (the session, then its subagents')."""
    from sessiontree.foreign import read_claude_session, read_codex_session
    from sessiontree.foreign.importer import import_session

    written: dict[str, list[str]] = {}
    for kind in ("claude", "codex"):
        for path in sorted((fixtures / kind).glob("*.jsonl")):
            reader = read_claude_session if kind == "claude" else read_codex_session
            done = import_session(reader(str(path)), store_parts(agent_dir=str(agent)), again=True)
            written[path.name] = [done.path, *done.subsessions]
    return written


# ---------------------------------------------------------------------------- generated files
#
# Shapes the 22 real files lack, built line by line in the shape of the real lines
# (envelope keys, order, ids) of the 2.1.152 Claude Code and 0.135.0 Codex files above:
#
# * Claude Code v2 subagent transcripts: `<session>/subagents/agent-<id>.jsonl` with an
#   `agent-<id>.meta.json` sidecar (`agentType`, `toolUseId`, `description`), as the
#   Claude Agent SDK reads them (`_internal/sessions.py`: `_collect_agent_files`,
#   `_read_agent_metadata_sidecar`); every line `isSidechain: true` with its `agentId`.
#   The subagent replays the parent's response (same `message.id`, another
#   `requestId`), the sidechain replay ccusage deduplicates
#   (https://github.com/ryoppippi/ccusage/pull/1155).
# * A forked Claude Code session: every line carries `forkedFrom: {sessionId,
#   messageUuid}` and the file ends with a `custom-title` "... (fork)", as the SDK's
#   `fork_session` writes it (`_internal/session_mutations.py`: `_build_fork_lines`).
# * Codex: a user `input_image` (a data URL, `ContentItem::InputImage` in
#   codex-rs/protocol), a fork (`session_meta.forked_from_id`) and a rollback
#   (`event_msg` `thread_rolled_back` with `num_turns`).

PNG = base64.b64encode(
    base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    * 24
).decode()
"""Base64 well over the 1024-character blob threshold (an import stores it as a blob)."""

CLAUDE_SESSION = "7d1c4f0e-0b7e-4c8e-9a51-3f0c2d9e8a11"
CLAUDE_FORK = "9b2e6a33-5d4f-4f0a-8c1e-77aa01b2c3d4"
CODEX_PARENT = "019e9625-802f-7e91-840a-cfe88d14117b"
CODEX_CHILD = "019e9626-11aa-7c00-9d31-0c0ffee0cafe"


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")
    return path


def _cc(
    uid: str, parent: str | None, kind: str, message: dict[str, Any], t: int, **extra: Any
) -> dict[str, Any]:
    line: dict[str, Any] = {"parentUuid": parent, "isSidechain": False, "type": kind}
    line.update({"message": message, "uuid": uid, "timestamp": f"2026-06-05T05:00:{t:02d}.000Z"})
    line.update(extra)
    line.update({"userType": "external", "entrypoint": "cli", "cwd": "/work/app"})
    line.update({"sessionId": CLAUDE_SESSION, "version": "2.1.152", "gitBranch": "main"})
    return line


def _usage(i: int, o: int, r: int = 0, w: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": i,
        "cache_creation_input_tokens": w,
        "cache_read_input_tokens": r,
        "output_tokens": o,
    }


def claude_subagent_session(projects: Path) -> Path:
    """A v2 session whose Task call ran a subagent that has its own transcript file."""
    project = projects / "-work-app"
    main = [
        _cc("u1", None, "user", {"role": "user", "content": "Find the bug in parse()"}, 1),
        _cc(
            "a1",
            "u1",
            "assistant",
            {
                "model": "claude-opus-4-7",
                "id": "msg_main_1",
                "type": "message",
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_task",
                        "name": "Task",
                        "input": {
                            "description": "Find the bug",
                            "prompt": "Look at parse() in app.py",
                            "subagent_type": "Explore",
                        },
                    }
                ],
                "stop_reason": "tool_use",
                "usage": _usage(10, 40, 100, 5),
            },
            2,
            requestId="req_main_1",
        ),
        _cc(
            "r1",
            "a1",
            "user",
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_task", "content": "off by one"}
                ],
            },
            9,
            toolUseResult={"agentId": "a5f0c2", "status": "completed"},
        ),
        _cc(
            "a2",
            "r1",
            "assistant",
            {
                "model": "claude-opus-4-7",
                "id": "msg_main_2",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": "The loop stops one short."}],
                "stop_reason": "end_turn",
                "usage": _usage(20, 8, 140, 0),
            },
            10,
            requestId="req_main_2",
        ),
    ]
    path = write_jsonl(project / f"{CLAUDE_SESSION}.jsonl", main)

    def side(
        uid: str, parent: str | None, kind: str, message: dict[str, Any], t: int, **extra: Any
    ) -> dict[str, Any]:
        line = _cc(uid, parent, kind, message, t, **extra)
        line["isSidechain"] = True
        line["agentId"] = "a5f0c2"
        return line

    sub = [
        side("s1", None, "user", {"role": "user", "content": "Look at parse() in app.py"}, 3),
        # The parent's response replayed into the subagent's transcript, under another request.
        side("s2", "s1", "assistant", dict(main[1]["message"]), 4, requestId="req_replayed"),
        side(
            "s3",
            "s2",
            "assistant",
            {
                "model": "claude-haiku-4-5",
                "id": "msg_sub_1",
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Check the range.", "signature": "c2ln"}
                ],
                "stop_reason": None,
                "usage": _usage(30, 1, 0, 0),
            },
            5,
            requestId="req_sub_1",
        ),
        side(
            "s4",
            "s3",
            "assistant",
            {
                "model": "claude-haiku-4-5",
                "id": "msg_sub_1",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": "off by one"}],
                "stop_reason": "end_turn",
                "usage": _usage(30, 12, 0, 0),
            },
            6,
            requestId="req_sub_1",
        ),
    ]
    agent = project / CLAUDE_SESSION / "subagents" / "agent-a5f0c2.jsonl"
    write_jsonl(agent, sub)
    meta = {"agentType": "Explore", "toolUseId": "toolu_task", "description": "Find the bug"}
    agent.with_name("agent-a5f0c2.meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return path


def claude_fork(projects: Path) -> Path:
    """A session forked from `claude_subagent_session`'s (the SDK's fork_session shape)."""
    lines = []
    for old, new, parent in (("u1", "f1", None), ("a1", "f2", "f1")):
        source = json.loads(
            (projects / "-work-app" / f"{CLAUDE_SESSION}.jsonl")
            .read_text()
            .splitlines()[0 if old == "u1" else 1]
        )
        source.update(
            {
                "uuid": new,
                "parentUuid": parent,
                "sessionId": CLAUDE_FORK,
                "forkedFrom": {"sessionId": CLAUDE_SESSION, "messageUuid": old},
            }
        )
        lines.append(source)
    lines.append(
        {"type": "custom-title", "sessionId": CLAUDE_FORK, "customTitle": "Find the bug (fork)"}
    )
    return write_jsonl(projects / "-work-app" / f"{CLAUDE_FORK}.jsonl", lines)


def _cx(t: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": f"2026-06-05T04:58:{t:02d}.000Z", "type": kind, "payload": payload}


def _meta(session: str, forked_from: str | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": session,
        "timestamp": "2026-06-05T04:58:00.000Z",
        "cwd": "/work/app",
        "originator": "codex_exec",
        "cli_version": "0.135.0",
        "source": "exec",
        "model_provider": "openai",
    }
    if forked_from:
        payload["forked_from_id"] = forked_from
    return _cx(0, "session_meta", payload)


def _turn(t: int, model: str = "gpt-5.5", effort: str = "medium") -> dict[str, Any]:
    return _cx(t, "turn_context", {"cwd": "/work/app", "model": model, "effort": effort})


def _prompt(t: int, text: str, image: bool = False) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "input_text", "text": text}]
    if image:
        content.append({"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"})
    return [
        _cx(t, "response_item", {"type": "message", "role": "user", "content": content}),
        _cx(t, "event_msg", {"type": "user_message", "message": text, "images": []}),
    ]


def _answer(
    t: int, text: str, tokens: tuple[int, int, int], total: tuple[int, int, int]
) -> list[dict[str, Any]]:
    def usage(u: tuple[int, int, int]) -> dict[str, int]:
        return {
            "input_tokens": u[0],
            "cached_input_tokens": u[1],
            "output_tokens": u[2],
            "reasoning_output_tokens": 0,
            "total_tokens": u[0] + u[2],
        }

    return [
        _cx(
            t,
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            },
        ),
        _cx(
            t,
            "event_msg",
            {
                "type": "token_count",
                "info": {"total_token_usage": usage(total), "last_token_usage": usage(tokens)},
            },
        ),
    ]


def codex_rollouts(home: Path) -> tuple[Path, Path]:
    """(parent, fork): the parent has a user image and a rollback; the fork names it."""
    day = home / "sessions" / "2026" / "06" / "05"
    parent = [
        _meta(CODEX_PARENT),
        _turn(1),
        *_prompt(2, "What is in this screenshot?", image=True),
        *_answer(3, "A login form.", (1000, 200, 30), (1000, 200, 30)),
        *_prompt(4, "Make it blue"),
        *_answer(5, "Done, it is blue.", (1200, 1000, 20), (2200, 1200, 50)),
        _cx(6, "event_msg", {"type": "thread_rolled_back", "num_turns": 1}),
        *_prompt(7, "Make it green instead"),
        *_answer(8, "Done, it is green.", (1300, 1000, 25), (3500, 2200, 75)),
        _cx(9, "event_msg", {"type": "thread_name_updated", "thread_name": "Screenshot colors"}),
    ]
    child = [
        _meta(CODEX_CHILD, forked_from=CODEX_PARENT),
        _turn(10, model="gpt-5.6", effort="high"),
        *_prompt(11, "Now make it red"),
        *_answer(12, "Red it is.", (900, 0, 10), (900, 0, 10)),
    ]
    a = write_jsonl(day / f"rollout-2026-06-05T04-58-00-{CODEX_PARENT}.jsonl", parent)
    b = write_jsonl(day / f"rollout-2026-06-05T04-58-10-{CODEX_CHILD}.jsonl", child)
    return a, b


# ---------------------------------------------------------------------------- OpenCode, Gemini
# CLI, Copilot CLI
#
# The real files of `opencode/`, `gemini/` and `copilot/` (SOURCES.md) laid out as each
# agent keeps them: OpenCode's data dir holds the real database; each `opencode export`
# document is also written out as the JSON files of OpenCode before 1.2
# (`storage/session/<project>/<id>.json`, `storage/message/<session>/<id>.json`,
# `storage/part/<message>/<id>.json`, the layout OpenCode's `json-migration.ts` reads:
# the message and part objects as the export holds them). Gemini CLI's files go into
# `tmp/<project>/chats/` with the project's `.project_root`; Copilot CLI's into
# `session-state/<session id>/events.jsonl`.

OPENCODE_DB = "suhd550-dev__stunning-memory__opencode.db"
GEMINI_ROOT = "/work/gemini-project"


def opencode_json_layout(export: Path, data: Path) -> Path:
    """`export` (an `opencode export` document) as OpenCode's JSON files under
    `data/storage`; the session file's path."""
    document = json.loads(export.read_text(encoding="utf-8"))
    info = document["info"]
    storage = data / "storage"
    session = storage / "session" / info["projectID"] / f"{info['id']}.json"
    session.parent.mkdir(parents=True, exist_ok=True)
    session.write_text(json.dumps(info, indent=2), encoding="utf-8")
    for message in document["messages"]:
        minfo = message["info"]
        target = storage / "message" / info["id"] / f"{minfo['id']}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(minfo, indent=2), encoding="utf-8")
        for part in message["parts"]:
            target = storage / "part" / minfo["id"] / f"{part['id']}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(part, indent=2), encoding="utf-8")
    return session


def layout_more(fixtures: Path, root: Path) -> dict[str, Any]:
    """OpenCode's data dir, Gemini CLI's and Copilot CLI's homes holding the real files:
    {"opencode": data dir, "gemini": GEMINI_CLI_HOME, "copilot": COPILOT_HOME,
    "placed": fixture name -> its path in the layout (an export: its session file)}."""
    data = root / "xdg" / "opencode"
    data.mkdir(parents=True)
    shutil.copyfile(fixtures / "opencode" / OPENCODE_DB, data / "opencode.db")
    placed: dict[str, Path] = {OPENCODE_DB: data / "opencode.db"}
    for path in sorted((fixtures / "opencode").glob("*.jsonl")):
        placed[path.name] = opencode_json_layout(path, data)
    gemini_home = root / "gemini-home"
    project = gemini_home / ".gemini" / "tmp" / "gemini-project"
    chats = project / "chats"
    chats.mkdir(parents=True)
    (project / ".project_root").write_text(GEMINI_ROOT, encoding="utf-8")
    for path in sorted((fixtures / "gemini").iterdir()):
        raw = path.read_bytes()
        start = raw.lstrip()[:1] == b"{" and raw.lstrip()[1:2] in (b"\n", b"\r")
        suffix = ".json" if start or path.suffix == ".json" else ".jsonl"
        stem = hashlib.sha256(path.name.encode()).hexdigest()[:8]
        target = chats / f"session-2026-01-01T00-00-{stem}{suffix}"
        shutil.copyfile(path, target)
        placed[path.name] = target
    copilot = root / "copilot-home"
    for path in sorted((fixtures / "copilot").glob("*.jsonl")):
        first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        target = copilot / "session-state" / first["data"]["sessionId"] / "events.jsonl"
        target.parent.mkdir(parents=True)
        shutil.copyfile(path, target)
        placed[path.name] = target
    return {
        "opencode": data,
        "gemini": gemini_home,
        "copilot": copilot,
        "xdg": root / "xdg",
        "placed": placed,
    }
