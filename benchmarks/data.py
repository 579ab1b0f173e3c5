"""Deterministic benchmark data: big branched sessions and stores of many sessions.

Everything is derived from a seed, so two runs (or two machines) time the same
bytes. Sessions are written as raw JSONL (the writer is not what is measured
here); images go to the blob store as real `blob:sha256:` references.
"""

from __future__ import annotations

import base64
import math
import os
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from sessiontree.format import format_iso, serialize_entry_bytes, session_file_name
from sessiontree.layout import encode_session_dir_name
from sessiontree.storage import BlobStore

WORDS = (
    "the session tree leaf branch entry parent compaction summary context message assistant "
    "user tool result file path read write edit bash grep find function class import export "
    "const return async await error warning test build check lint format refactor module "
    "package index json parse serialize migrate version header label model thinking details"
).split()
START_MS = 1_767_225_600_000  # 2026-01-01


def _text(rng: random.Random, chars: int) -> str:
    """Readable-looking text of about `chars` characters (fast: reuses a word pool)."""
    if chars <= 0:
        return ""
    pool = " ".join(rng.choice(WORDS) for _ in range(256)) + "\n"
    reps = chars // len(pool) + 1
    offset = rng.randrange(len(pool))
    return ((pool[offset:] + pool * reps)[:chars]).replace("  ", " ")


def _usage(rng: random.Random) -> dict[str, Any]:
    inp, out = rng.randrange(100, 20000), rng.randrange(10, 2000)
    return {
        "input": inp,
        "output": out,
        "cacheRead": rng.randrange(0, 50000),
        "cacheWrite": rng.randrange(0, 5000),
        "cost": {
            "input": inp * 3e-6,
            "output": out * 1.5e-5,
            "cacheRead": 0.0003,
            "cacheWrite": 0.00075,
            "total": round(inp * 3e-6 + out * 1.5e-5 + 0.00105, 6),
        },
    }


@dataclass(frozen=True, slots=True)
class SessionSpec:
    entries: int
    target_bytes: int
    branches: int = 4
    labels: int = 12
    images: int = 6
    seed: int = 1
    compactions: int = 1
    """Compactions on the active path: one at 80% of the turns, or this many evenly
    spaced, the last at 90% (branches then jump back only before the last one)."""


def write_big_session(path: Path, spec: SessionSpec, blob_dir: Path) -> dict[str, Any]:
    """A session of about `spec.target_bytes`, mostly large tool results.

    It has `branches` jumps back to an earlier user turn (one with a branch
    summary), `labels` label entries, one compaction at ~80% (or `compactions`
    evenly spaced up to 90%) keeping 60 entries of the active path before it, and
    `images` images stored as blobs. The last line is the leaf.
    """
    rng = random.Random(spec.seed)
    blobs = BlobStore(str(blob_dir))
    ts = START_MS
    lines: list[bytes] = []
    ids: list[str] = []
    parent: dict[str, str | None] = {}
    user_turns: list[str] = []
    counter = 0

    def new_id() -> str:
        nonlocal counter
        counter += 1
        return f"{counter:08x}"

    def emit(entry_type: str, parent_id: str | None, **fields: Any) -> str:
        nonlocal ts
        ts += rng.randrange(50, 4000)
        entry_id = new_id()
        entry = {
            "type": entry_type,
            "id": entry_id,
            "parentId": parent_id,
            "timestamp": format_iso(ts),
        }
        entry.update(fields)
        lines.append(serialize_entry_bytes(entry) + b"\n")
        ids.append(entry_id)
        parent[entry_id] = parent_id
        return entry_id

    header = {
        "type": "session",
        "version": 3,
        "id": f"bench-{spec.seed:04d}-{spec.entries}",
        "timestamp": format_iso(START_MS),
        "cwd": "/work/bench-project",
    }
    # Tool output sizes: log-normal, scaled so the file lands near the target.
    turns = max(1, (spec.entries - 2) // 3)
    raw = [rng.lognormvariate(0, 1.3) for _ in range(turns)]
    budget = max(spec.target_bytes - spec.entries * 600, turns * 50)
    scale = budget / sum(raw)
    sizes = [min(2_000_000, max(30, int(x * scale))) for x in raw]

    leaf = emit("model_change", None, model="anthropic/claude-sonnet-4-5")
    leaf = emit("thinking_level_change", leaf, thinkingLevel="medium")
    if spec.compactions > 1:
        compaction_turns = {
            int(turns * 0.9 * (k + 1) / spec.compactions) for k in range(spec.compactions)
        }
        branch_end = max(compaction_turns)
    else:
        compaction_turns = {int(turns * 0.8)}
        branch_end = turns
    branch_at = set(
        rng.sample(
            range(turns // 10, branch_end), min(spec.branches, max(0, branch_end - turns // 10))
        )
    )
    image_turns = set(rng.sample(range(turns), min(spec.images, turns)))
    labels_left = spec.labels
    for turn in range(turns):
        if len(ids) >= spec.entries:
            break
        if turn in branch_at and user_turns:
            target = rng.choice(user_turns[len(user_turns) // 2 :])
            back_to = parent[target]
            if len(branch_at) and turn == min(branch_at) and back_to is not None:
                leaf = emit("branch_summary", back_to, fromId=back_to, summary=_text(rng, 300))
            elif back_to is not None:
                leaf = back_to
        content: list[dict[str, Any]] | str = _text(rng, rng.randrange(20, 400))
        if turn in image_turns:
            png = rng.randbytes(rng.randrange(3000, 15000))
            ref = blobs.put(png).ref
            content = [
                {"type": "text", "text": "see the screenshot"},
                {"type": "image", "data": ref, "mimeType": "image/png"},
            ]
        leaf = emit("message", leaf, message={"role": "user", "content": content, "timestamp": ts})
        user_turns.append(leaf)
        call_id = f"toolu_{turn:06d}"
        leaf = emit(
            "message",
            leaf,
            message={
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": _text(rng, 200)},
                    {"type": "text", "text": _text(rng, rng.randrange(40, 600))},
                    {
                        "type": "toolCall",
                        "id": call_id,
                        "name": "bash",
                        "arguments": {"command": "grep -rn session src/"},
                    },
                ],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "usage": _usage(rng),
                "stopReason": "toolUse",
                "timestamp": ts,
            },
        )
        leaf = emit(
            "message",
            leaf,
            message={
                "role": "toolResult",
                "toolCallId": call_id,
                "toolName": "bash",
                "content": [{"type": "text", "text": _text(rng, sizes[turn])}],
                "isError": False,
                "timestamp": ts,
            },
        )
        if labels_left and rng.random() < spec.labels / turns * 2:
            labels_left -= 1
            target = rng.choice(user_turns)
            if rng.random() < 0.15:
                leaf = emit("label", leaf, targetId=target)
            else:
                leaf = emit("label", leaf, targetId=target, label=f"checkpoint-{labels_left}")
        if turn in compaction_turns:
            walk: list[str] = []
            node: str | None = leaf
            while node is not None:
                walk.append(node)
                node = parent[node]
            keep = walk[min(len(walk) - 1, 60)]
            leaf = emit(
                "compaction",
                leaf,
                summary=_text(rng, 2000),
                shortSummary="bench compaction",
                firstKeptEntryId=keep,
                tokensBefore=150000,
            )
    with open(path, "wb") as f:
        f.write(serialize_entry_bytes(header) + b"\n")
        f.writelines(lines)
    return {"path": str(path), "entries": len(ids), "bytes": path.stat().st_size, "leaf": leaf}


def write_store(
    root: Path, files: int, min_entries: int, max_entries: int, seed: int = 1, projects: int = 20
) -> int:
    """`files` sessions of `min_entries`..`max_entries` entries in `projects` project dirs."""
    rng = random.Random(seed)
    total = 0
    cwds = [f"/work/project-{i:02d}" for i in range(projects)]
    for n in range(files):
        cwd = cwds[n % len(cwds)]
        directory = root / encode_session_dir_name(cwd)
        directory.mkdir(parents=True, exist_ok=True)
        created = START_MS + n * 60_000
        session_id = f"{seed:04x}{n:012x}"
        name = session_file_name(format_iso(created), session_id)
        count = int(math.exp(rng.uniform(math.log(min_entries), math.log(max_entries))))
        lines = [
            serialize_entry_bytes(
                {
                    "type": "session",
                    "version": 3,
                    "id": session_id,
                    "timestamp": format_iso(created),
                    "cwd": cwd,
                }
            )
        ]
        parent_id = None
        for i in range(count):
            role = ("user", "assistant", "toolResult")[i % 3]
            message: dict[str, Any] = {"role": role, "timestamp": created + i}
            if role == "assistant":
                message.update(
                    content=[{"type": "text", "text": _text(rng, rng.randrange(50, 600))}],
                    provider="anthropic",
                    model="claude-sonnet-4-5",
                    usage=_usage(rng),
                )
            elif role == "user":
                message["content"] = _text(rng, rng.randrange(20, 300))
            else:
                message.update(
                    toolCallId="t",
                    toolName="read",
                    content=[{"type": "text", "text": _text(rng, rng.randrange(50, 1500))}],
                )
            entry_id = f"{i:08x}"
            lines.append(
                serialize_entry_bytes(
                    {
                        "type": "message",
                        "id": entry_id,
                        "parentId": parent_id,
                        "timestamp": format_iso(created + i * 1000),
                        "message": message,
                    }
                )
            )
            parent_id = entry_id
        path = directory / name
        path.write_bytes(b"\n".join(lines) + b"\n")
        os.utime(path, ns=((created + count * 1000) * 1_000_000,) * 2)
        total += 1
    return total


def image_b64(rng: random.Random, size: int) -> str:
    return base64.b64encode(rng.randbytes(size)).decode()


RARE_WORD = "zanzibar"
"""Planted in about 1% of a corpus's sessions (a search that finds few files)."""
SOME_WORD = "quokka"
"""Planted in about 20% of a corpus's sessions."""
REAL_SESSIONS = Path(__file__).resolve().parent.parent / "tests" / "data" / "real"


def write_corpus(agent_dir: Path, sessions: int, seed: int = 1, real_copies: int = 3) -> int:
    """A store of `sessions` pi-format sessions in `agent_dir`/sessions; returns its bytes.

    Sizes are log-normal, ~9 KB on average (a median session of a dozen entries, a
    tail of sessions with hundreds, the shape of a year of use: 10,000 sessions are
    90 MB), spread over one project per 200 sessions. One session is held at a time
    (100,000 sessions, 870 MB, are written at a peak RSS of 79 MB). A fifth of the
    sessions branch (a jump back to an earlier user turn, some with a branch summary),
    some carry labels, a title (session_info) or a compaction; every assistant turn has
    usage. `real_copies` copies of the real pi session in tests/data/real are mixed in
    at fixed places.
    Modification times follow creation, so the newest sessions are the last written.
    """
    rng = random.Random(seed)
    pool = " ".join(rng.choice(WORDS) for _ in range(16_384))
    root = agent_dir / "sessions"
    projects = max(1, sessions // 200)
    cwds = [f"/work/corpus/project-{i:03d}" for i in range(projects)]
    for cwd in cwds:
        (root / encode_session_dir_name(cwd)).mkdir(parents=True, exist_ok=True)
    real = sorted(REAL_SESSIONS.glob("*.jsonl"))
    real_at = (
        {sessions * (k + 1) // (real_copies + 1): real[k % len(real)] for k in range(real_copies)}
        if real
        else {}
    )
    total = 0
    for n in range(sessions):
        cwd = cwds[rng.randrange(projects)]
        created = START_MS + n * 45_000
        session_id = f"{seed:04x}c{n:011x}"
        path = (
            root / encode_session_dir_name(cwd) / session_file_name(format_iso(created), session_id)
        )
        if n in real_at:
            data = real_at[n].read_bytes()
        else:
            data = _corpus_session(rng, pool, session_id, cwd, created)
        path.write_bytes(data)
        mtime_ns = (created + 30_000) * 1_000_000
        os.utime(path, ns=(mtime_ns, mtime_ns))
        total += len(data)
    return total


def _corpus_session(
    rng: random.Random, pool: str, session_id: str, cwd: str, created: int
) -> bytes:
    """One session of the corpus (see write_corpus); its text is cut from `pool`."""

    def text(chars: int) -> str:
        start = rng.randrange(len(pool) - chars) if chars < len(pool) else 0
        return pool[start : start + chars]

    turns = max(1, min(400, int(rng.lognormvariate(1.3, 0.9))))
    rare = rng.random() < 0.01
    some = rng.random() < 0.2
    ts = created
    lines = [
        serialize_entry_bytes(
            {
                "type": "session",
                "version": 3,
                "id": session_id,
                "timestamp": format_iso(created),
                "cwd": cwd,
            }
        )
    ]
    counter = 0
    parent: dict[str, str | None] = {}
    user_turns: list[str] = []

    def emit(entry_type: str, parent_id: str | None, **fields: Any) -> str:
        nonlocal counter, ts
        counter += 1
        ts += rng.randrange(200, 20_000)
        entry_id = f"{counter:08x}"
        entry = {
            "type": entry_type,
            "id": entry_id,
            "parentId": parent_id,
            "timestamp": format_iso(ts),
        }
        entry.update(fields)
        lines.append(serialize_entry_bytes(entry))
        parent[entry_id] = parent_id
        return entry_id

    leaf = emit("model_change", None, provider="anthropic", modelId="claude-sonnet-4-5")
    branch_turn = rng.randrange(turns) if turns > 3 and rng.random() < 0.2 else -1
    for turn in range(turns):
        if turn == branch_turn and user_turns:
            back_to = parent[rng.choice(user_turns)]
            if back_to is not None:
                if rng.random() < 0.5:
                    leaf = emit("branch_summary", back_to, fromId=back_to, summary=text(300))
                else:
                    leaf = back_to
        prompt = text(rng.randrange(20, 300))
        if turn == 0 and rare:
            prompt = f"{prompt} {RARE_WORD}"
        if turn == turns // 2 and some:
            prompt = f"{SOME_WORD} {prompt}"
        leaf = emit("message", leaf, message={"role": "user", "content": prompt, "timestamp": ts})
        user_turns.append(leaf)
        leaf = emit(
            "message",
            leaf,
            message={
                "role": "assistant",
                "content": [
                    {"type": "text", "text": text(rng.randrange(40, 500))},
                    {"type": "toolCall", "id": f"t{turn}", "name": "read", "arguments": {}},
                ],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "usage": _usage(rng),
                "stopReason": "toolUse",
                "timestamp": ts,
            },
        )
        size = min(20_000, int(rng.lognormvariate(5.2, 1.2)))
        leaf = emit(
            "message",
            leaf,
            message={
                "role": "toolResult",
                "toolCallId": f"t{turn}",
                "toolName": "read",
                "content": [{"type": "text", "text": text(size)}],
                "isError": False,
                "timestamp": ts,
            },
        )
        if rng.random() < 0.02:
            leaf = emit("label", leaf, targetId=rng.choice(user_turns), label=f"mark-{turn}")
    if turns > 30 and rng.random() < 0.3:
        leaf = emit(
            "compaction",
            leaf,
            summary=text(1500),
            firstKeptEntryId=user_turns[-3],
            tokensBefore=120_000,
        )
    if rng.random() < 0.3:
        emit("session_info", leaf, name=text(40).strip())
    return b"\n".join(lines) + b"\n"


CLAUDE_REAL_SESSIONS = REAL_SESSIONS / "foreign" / "claude"
CLAUDE_MODEL = "claude-sonnet-4-5-20250929"
"""The model id Claude Code records for the corpus's `claude-sonnet-4-5` replies."""


def write_claude_corpus(config_dir: Path, agent_dir: Path, real_copies: int = 3) -> int:
    """The pi corpus of `agent_dir` (see write_corpus) as Claude Code transcripts in
    `config_dir`/projects/<cwd with / and . as ->/<session uuid>.jsonl; returns their bytes.

    The same sessions, replies, tokens and timestamps, written as Claude Code 2.x
    writes them, so that a usage report over either store counts the same work:
    the user prompts and tool results as `user` lines, each reply as one
    `assistant` line per content block, all with the reply's `message.id`,
    `requestId`, model and `message.usage`; as in a streamed response, the
    earlier lines of a reply carry a partial `output_tokens` and its last line the
    final count. Branches keep their shape (`parentUuid`); titles become
    `custom-title` lines; labels, compactions and branch summaries, which carry no
    usage, are left out. The real pi session mixed into the pi corpus is replaced
    by `real_copies` real Claude Code transcripts (tests/data/real/foreign/claude).
    """
    projects = config_dir / "projects"
    sources = sorted((agent_dir / "sessions").rglob("*.jsonl"))
    real = sorted(CLAUDE_REAL_SESSIONS.glob("*.jsonl"))
    real_pi_ids = {_header_id(path) for path in REAL_SESSIONS.glob("*.jsonl")}
    total = 0
    copied = 0
    for number, source in enumerate(sources):
        with open(source, "rb") as f:
            header = orjson.loads(f.readline())
            if header.get("id") in real_pi_ids:
                data = real[copied % len(real)].read_bytes() if copied < real_copies else b""
                copied += 1
                cwd = "/work/corpus/real"
            else:
                data = _claude_session(header, f, number)
                cwd = header["cwd"]
        if not data:
            continue
        directory = projects / cwd.replace("/", "-").replace(".", "-")
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{uuid.UUID(int=(number + 1) << 64)}.jsonl"
        path.write_bytes(data)
        mtime_ns = source.stat().st_mtime_ns
        os.utime(path, ns=(mtime_ns, mtime_ns))
        total += len(data)
    return total


def _header_id(path: Path) -> object:
    with open(path, "rb") as f:
        return orjson.loads(f.readline()).get("id")


def _claude_session(header: dict[str, Any], lines: Any, number: int) -> bytes:
    """One generated pi session (its header read, its entry lines in `lines`) as a
    Claude Code transcript (see write_claude_corpus)."""
    rng = random.Random(number)
    session_id = str(uuid.UUID(int=(number + 1) << 64))
    counter = 0
    out: list[bytes] = []
    # pi entry id -> the uuid of the Claude line that ends it (None: no message yet).
    ends: dict[str | None, str | None] = {None: None}
    tool_use_id = ""

    def line(kind: str, parent: str | None, timestamp: str, **fields: Any) -> str:
        nonlocal counter
        counter += 1
        line_uuid = str(uuid.UUID(int=((number + 1) << 64) | counter))
        record = {
            "parentUuid": parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": header["cwd"],
            "sessionId": session_id,
            "version": "2.1.29",
            "gitBranch": "main",
            "type": kind,
            **fields,
            "uuid": line_uuid,
            "timestamp": timestamp,
        }
        out.append(orjson.dumps(record))
        return line_uuid

    for raw in lines:
        entry = orjson.loads(raw)
        parent = ends[entry.get("parentId")]
        kind, message, when = entry["type"], entry.get("message"), entry["timestamp"]
        if kind == "session_info":
            name = {"type": "custom-title", "sessionId": session_id, "customTitle": entry["name"]}
            out.append(orjson.dumps(name))
        if kind != "message":
            ends[entry["id"]] = parent
            continue
        role = message["role"]
        if role == "user":
            content = {"role": "user", "content": message["content"]}
            parent = line("user", parent, when, message=content)
        elif role == "toolResult":
            result = {
                "type": "tool_result",
                "tool_use_id": tool_use_id,
                "content": message["content"][0]["text"],
            }
            parent = line("user", parent, when, message={"role": "user", "content": [result]})
        else:
            usage = message["usage"]
            message_id = f"msg_{number:012x}{counter:012x}"
            request_id = f"req_{number:012x}{counter:012x}"
            blocks = message["content"]
            for index, block in enumerate(blocks):
                final = index == len(blocks) - 1
                output = usage["output"] if final else min(usage["output"], rng.randrange(1, 9))
                if block["type"] == "text":
                    claude_block = {"type": "text", "text": block["text"]}
                else:
                    tool_use_id = f"toolu_{number:012x}{counter:012x}"
                    claude_block = {
                        "type": "tool_use",
                        "id": tool_use_id,
                        "name": "Read",
                        "input": block.get("arguments", {}),
                    }
                reply = {
                    "model": CLAUDE_MODEL,
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "content": [claude_block],
                    "stop_reason": "tool_use" if final else None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": usage["input"],
                        "cache_creation_input_tokens": usage["cacheWrite"],
                        "cache_read_input_tokens": usage["cacheRead"],
                        "cache_creation": {
                            "ephemeral_5m_input_tokens": usage["cacheWrite"],
                            "ephemeral_1h_input_tokens": 0,
                        },
                        "output_tokens": output,
                        "service_tier": "standard",
                    },
                }
                parent = line("assistant", parent, when, message=reply, requestId=request_id)
        ends[entry["id"]] = parent
    return b"\n".join(out) + b"\n"
