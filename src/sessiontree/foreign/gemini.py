"""Gemini CLI sessions (`~/.gemini/tmp/<project>/chats/`) as v3 trees.

Gemini CLI has written two formats (`packages/core/src/services/chatRecordingService.ts`):

* the older one document, `session-<time>-<id8>.json`: `{sessionId, projectHash,
  startTime, lastUpdated, messages: [...], summary?, directories?, kind?}`;
* the current JSONL, `session-<time>-<id8>.jsonl`: a metadata line, then one record
  per line: a message (it has an `id`; a message recorded again under the same id
  replaces the earlier version where it stands, as Gemini CLI appends a message
  again when its tool calls or its token count arrive), `{"$set": {...}}`
  (metadata; with `messages`, the whole history written again) and
  `{"$rewindTo": "<message id>"}` (the history from that message on is removed).

A subagent writes `chats/<parent session id>/<its id>.jsonl` (`kind: "subagent"`).

How records become entries:

* The messages form a tree as the history evolved: each hangs under the message
  before it when it was recorded. A rewind leaves the removed messages where they
  were, a branch, and what follows hangs under the message before the rewound one;
  a `$set` history follows the existing messages while they match (the same id
  under the same parent) and branches where it differs. The leaf is the last
  message of the final history.
* `user` -> a user message (text, inline images). `gemini` -> one assistant message:
  its `thoughts` as thinking blocks (`**subject**` then the description), its text,
  its `toolCalls` as tool calls. Its `tokens` are its usage, counted once (the
  final version's): `input` includes the cached tokens, so `input` is the rest and
  `cacheRead` the cached part; `output` adds the thinking tokens, which Gemini
  counts apart. Each tool call's `result` (the `functionResponse` the model got)
  becomes a tool result right after it, the call's status, display and description
  in `details`; an `error` or `cancelled` call is an error result. A user record of
  `functionResponse` parts (a history written by `$set`) answers the calls before it.
* `info`, `error` and `warning` messages (shown to the user, not sent to the model)
  -> `custom` entries `gemini:<type>`, as is any message type not known here.
* `$set.summary` names the session. Other `$set` keys (directories, the memory
  scratchpad) and each `$rewindTo` are kept as `custom` entries (`gemini:$set`,
  `gemini:rewind`); a `$set` of `lastUpdated` alone is dropped (counted in
  `ForeignSession.skipped`), and so is the metadata line (the header holds it),
  unless it has more than the header can say (`directories`, ...: then a
  `gemini:session` custom entry keeps it).
* A user message's `displayContent` (what the user saw, when not what was sent)
  -> a `custom` entry `gemini:displayContent` after it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from sessiontree._util.fs import open_read
from sessiontree.foreign._builder import TreeBuilder
from sessiontree.foreign._chain import Chain
from sessiontree.foreign._content import block_as_text, int_field, str_field, usage
from sessiontree.foreign._document import read_document
from sessiontree.foreign._model import ForeignSession, ForeignSubsession, NotAForeignSessionError
from sessiontree.foreign._records import Damaged, Record, read_transcript, timestamp_ms
from sessiontree.foreign.listing import ForeignMeta, read_windows
from sessiontree.format import serialize_entry
from sessiontree.layout import is_safe_name

__all__ = [
    "gemini_project_root",
    "is_gemini_document",
    "read_gemini_session",
    "scan_gemini",
]

API = "google-generative-ai"
PROVIDER = "google"
_HEADER_KEYS = frozenset(
    {"sessionId", "projectHash", "startTime", "lastUpdated", "kind", "summary", "messages"}
)
_DOCUMENT_HEAD = re.compile(rb'^\s*\{\s*"(sessionId|projectHash)"')


def is_gemini_document(head: bytes) -> bool:
    """Whether a file's first bytes are a one-document (pretty-printed) session."""
    first = head.split(b"\n", 1)[0].strip()
    return first == b"{" and _DOCUMENT_HEAD.match(head) is not None


# ---------------------------------------------------------------------------- history


@dataclass(eq=False, slots=True)
class _Node:
    key: str
    record: dict[str, Any]
    parent: _Node | None
    line: int
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`functionResponse` parts a later user record gave for this message's calls."""


def _message_id(record: dict[str, Any]) -> str | None:
    value = record.get("id")
    return value if isinstance(value, str) else None


def _parts(content: object) -> list[Any]:
    if isinstance(content, list):
        return content
    if content is None or content == "":
        return []
    return [content]


def _function_responses(record: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The `functionResponse` parts of a user record made only of them, else None."""
    if record.get("type") != "user":
        return None
    parts = _parts(record.get("content"))
    responses = [p.get("functionResponse") for p in parts if isinstance(p, dict)]
    if not parts or len(responses) != len(parts) or not all(isinstance(r, dict) for r in responses):
        return None
    return [r for r in responses if isinstance(r, dict)]


class _History:
    """The message tree as Gemini CLI's history evolved (see the module doc)."""

    def __init__(self) -> None:
        self.nodes: list[_Node] = []
        self.path: list[_Node] = []
        self.position: dict[str, int] = {}
        self._children: dict[tuple[str | None, str], _Node] = {}

    def _reindex(self) -> None:
        self.position = {}
        for index, node in enumerate(self.path):
            mid = _message_id(node.record)
            if mid is not None:
                self.position[mid] = index

    def _append(self, record: dict[str, Any], key: str, line: int, mid: str | None) -> None:
        parent = self.path[-1] if self.path else None
        slot = (parent.key if parent else None, mid) if mid is not None else None
        node = self._children.get(slot) if slot is not None else None
        if node is not None:
            node.record = record
            node.line = line
        else:
            node = _Node(key, record, parent, line)
            self.nodes.append(node)
            if slot is not None:
                self._children[slot] = node
        if mid is not None:
            self.position[mid] = len(self.path)
        self.path.append(node)

    def message(self, record: dict[str, Any], line: int, key: str | None = None) -> None:
        mid = _message_id(record)
        assert mid is not None
        responses = _function_responses(record)
        if responses is not None and self.path and self.path[-1].record.get("type") == "gemini":
            # Results of the calls of the message before: they belong to it.
            for response in responses:
                call = response.get("id")
                self.path[-1].responses[str(call)] = response
            self.position[mid] = len(self.path)
            return
        index = self.position.get(mid)
        if index is not None and index < len(self.path):
            self.path[index].record = record  # a message recorded again: updated in place
            return
        self._append(record, key or f"{mid}@{line}", line, mid)

    def marker(self, record: dict[str, Any], line: int) -> None:
        """A record kept as a custom entry where the history stands now."""
        self._append(record, f"line:{line}", line, None)

    def rewind(self, target: str, line: int) -> None:
        self.marker({"type": "$rewindTo", "$rewindTo": target}, line)
        index = self.position.get(target)
        # Gemini CLI clears the whole history when the target is not in it.
        del self.path[index if index is not None else 0 :]
        self._reindex()

    def rewrite(self, messages: list[Any], line: int) -> None:
        self.path = []
        self.position = {}
        for number, record in enumerate(messages):
            if isinstance(record, dict) and _message_id(record) is not None:
                self.message(record, line, f"{_message_id(record)}@{line}:{number}")


# ---------------------------------------------------------------------------- content


def _user_blocks(content: object) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in _parts(content):
        if isinstance(part, str):
            blocks.append({"type": "text", "text": part})
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
        elif isinstance(part, dict) and isinstance(part.get("inlineData"), dict):
            blocks.append(_inline(part["inlineData"]))
        else:
            blocks.append(block_as_text("gemini part", part))
    return blocks


def _inline(data: dict[str, Any]) -> dict[str, Any]:
    mime = data.get("mimeType")
    payload = data.get("data")
    if isinstance(mime, str) and mime.startswith("image/") and isinstance(payload, str):
        return {"type": "image", "data": payload, "mimeType": mime}
    return block_as_text("gemini inlineData", data)


def _response_content(response: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """A `functionResponse` as result content, and whether it reports an error."""
    body = response.get("response")
    content: list[dict[str, Any]] = []
    error = False
    if isinstance(body, dict):
        output, failure = body.get("output"), body.get("error")
        if isinstance(failure, str | dict | list) and failure:
            error = True
        if isinstance(output, str) and set(body) <= {"output"}:
            content.append({"type": "text", "text": output})
        elif isinstance(failure, str) and set(body) <= {"error"}:
            content.append({"type": "text", "text": failure})
        else:
            content.append({"type": "text", "text": serialize_entry(body)})
    elif body is not None:
        content.append({"type": "text", "text": serialize_entry(body)})
    for part in _parts(response.get("parts")):
        if isinstance(part, dict) and isinstance(part.get("inlineData"), dict):
            content.append(_inline(part["inlineData"]))
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            content.append({"type": "text", "text": part["text"]})
        else:
            content.append(block_as_text("gemini part", part))
    return content, error


def _result_content(result: object) -> tuple[list[dict[str, Any]], bool]:
    content: list[dict[str, Any]] = []
    error = False
    for part in _parts(result):
        if isinstance(part, str):
            content.append({"type": "text", "text": part})
        elif isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            found, failed = _response_content(part["functionResponse"])
            content += found
            error = error or failed
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            content.append({"type": "text", "text": part["text"]})
        elif isinstance(part, dict) and isinstance(part.get("inlineData"), dict):
            content.append(_inline(part["inlineData"]))
        else:
            content.append(block_as_text("gemini part", part))
    return content, error


def _thinking(thought: object) -> dict[str, Any] | None:
    if not isinstance(thought, dict):
        return None
    subject = str_field(thought, "subject")
    description = thought.get("description")
    text = description if isinstance(description, str) else ""
    if subject:
        text = f"**{subject}**\n\n{text}" if text else f"**{subject}**"
    return {"type": "thinking", "thinking": text} if text else None


def _usage(tokens: object) -> dict[str, Any]:
    cached = int_field(tokens, "cached")
    prompt = int_field(tokens, "input")
    output = int_field(tokens, "output") + int_field(tokens, "thoughts")
    fresh = max(prompt - cached, 0) + int_field(tokens, "tool")
    total = int_field(tokens, "total") or None
    return usage(fresh, output, cached, 0, total)


# ---------------------------------------------------------------------------- conversion


@dataclass
class _Emitter:
    builder: TreeBuilder
    fallback_ms: int
    chain: Chain = field(init=False)
    last_ms: int = 0

    def __post_init__(self) -> None:
        self.chain = Chain(self.builder)

    def ms(self, value: object) -> int:
        found = timestamp_ms(value)
        if found is None:
            return self.last_ms or self.fallback_ms
        self.last_ms = found
        return found

    def node(self, node: _Node, parent: str | None) -> str | None:
        """Add `node`'s entries under `parent`; the last one's id."""
        chain = self.chain
        chain.current = parent
        record = node.record
        kind = record.get("type")
        ms = self.ms(record.get("timestamp"))
        key = node.key
        if kind == "user":
            chain.message(
                {"role": "user", "content": _user_blocks(record.get("content")), "timestamp": ms},
                key,
                ms,
            )
            shown = record.get("displayContent")
            if shown is not None and shown != record.get("content"):
                chain.custom("gemini:displayContent", {"displayContent": shown}, f"{key}:d", ms)
        elif kind == "gemini":
            self.response(node, ms)
        elif kind == "$rewindTo":
            chain.custom("gemini:rewind", {"$rewindTo": record.get("$rewindTo")}, key, ms)
        elif kind == "$set":
            chain.custom("gemini:$set", record.get("$set"), key, ms)
        elif kind == "$session":
            chain.custom("gemini:session", record.get("session"), key, ms)
        else:
            name = kind if isinstance(kind, str) else "message"
            chain.custom(f"gemini:{name}", record, key, ms)
        chain.close()
        return chain.current

    def response(self, node: _Node, ms: int) -> None:
        record = node.record
        blocks: list[dict[str, Any]] = []
        for thought in record.get("thoughts") or ():
            block = _thinking(thought)
            if block is not None:
                blocks.append(block)
        calls: dict[str, dict[str, Any]] = {}
        for part in _parts(record.get("content")):
            if isinstance(part, str):
                if part:
                    blocks.append({"type": "text", "text": part})
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                kind = "thinking" if part.get("thought") is True else "text"
                blocks.append({"type": kind, kind: part["text"]})
            elif isinstance(part, dict) and isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                call_id = str_field(call, "id") or f"{node.key}:call:{len(calls)}"
                args = call.get("args")
                blocks.append(
                    {
                        "type": "toolCall",
                        "id": call_id,
                        "name": str_field(call, "name") or "unknown",
                        "arguments": args if isinstance(args, dict) else {},
                    }
                )
                calls[call_id] = {}
            else:
                blocks.append(block_as_text("gemini part", part))
        for call in record.get("toolCalls") or ():
            if not isinstance(call, dict):
                continue
            call_id = str_field(call, "id") or f"{node.key}:call:{len(calls)}"
            args = call.get("args")
            if call_id not in calls:
                blocks.append(
                    {
                        "type": "toolCall",
                        "id": call_id,
                        "name": str_field(call, "name") or "unknown",
                        "arguments": args if isinstance(args, dict) else {},
                    }
                )
            calls[call_id] = call
        model = str_field(record, "model") or "unknown"
        message: dict[str, Any] = {
            "role": "assistant",
            "content": blocks,
            "api": API,
            "provider": PROVIDER,
            "model": model,
            "usage": _usage(record.get("tokens")),
            "stopReason": "toolUse" if calls else "stop",
            "timestamp": ms,
        }
        if _message_id(record):
            message["responseId"] = _message_id(record)
        self.chain.assistant(message, node.key, ms)
        for number, (call_id, call) in enumerate(calls.items()):
            result_key = f"{node.key}:result:{number}"
            status = call.get("status")
            details = {k: v for k, v in call.items() if k not in ("id", "name", "args", "result")}
            if call.get("result") is not None:
                content, failed = _result_content(call["result"])
            elif call_id in node.responses:
                content, failed = _response_content(node.responses[call_id])
            elif isinstance(status, str) and status != "success":
                shown = call.get("resultDisplay")
                text = shown if isinstance(shown, str) and shown else f"Tool call {status}."
                content, failed = [{"type": "text", "text": text}], True
            else:
                continue  # no result recorded: `close` answers it
            self.chain.result(
                call_id,
                content,
                result_key,
                self.ms(call.get("timestamp")) if call.get("timestamp") else ms,
                is_error=failed or (isinstance(status, str) and status not in ("success", "")),
                details=details or None,
            )


# ---------------------------------------------------------------------------- reading


@dataclass(slots=True)
class _Parsed:
    meta: dict[str, Any]
    history: _History
    damaged: list[Damaged]
    skipped: dict[str, int]
    size: int
    name: str | None = None


def _parse(path: str) -> _Parsed:
    """The file's records replayed into a history (see the module doc)."""
    with open_read(path) as f:
        head = f.read(4096)
    history = _History()
    meta: dict[str, Any] = {}
    skipped: dict[str, int] = {}
    name: str | None = None
    if is_gemini_document(head):
        document = read_document(path)
        if document.value is None or not isinstance(document.value.get("sessionId"), str):
            raise NotAForeignSessionError(path, "Gemini CLI")
        records = [Record(1, document.value)]
        damaged, size = list(document.damaged), document.size
    else:
        transcript = read_transcript(path)
        records, damaged, size = transcript.records, list(transcript.damaged), transcript.size
        first = records[0].value if records else {}
        metadata = isinstance(first.get("sessionId"), str) and isinstance(
            first.get("projectHash"), str
        )
        # A file whose metadata line is damaged still holds its messages.
        if not metadata and not (
            damaged
            and any(
                _message_id(r.value) and r.value.get("type") in ("user", "gemini")
                for r in records[:20]
            )
        ):
            raise NotAForeignSessionError(path, "Gemini CLI")
    for record in records:
        value = record.value
        if isinstance(value.get("$rewindTo"), str):
            history.rewind(value["$rewindTo"], record.line)
        elif isinstance(value.get("$set"), dict):
            update = value["$set"]
            if isinstance(update.get("messages"), list):
                history.rewrite(update["messages"], record.line)
            name = str_field(update, "summary") or name
            rest = {k: v for k, v in update.items() if k not in ("lastUpdated", "messages")}
            meta.update({k: v for k, v in update.items() if k != "messages"})
            if rest and set(rest) != {"summary"}:
                history.marker({"type": "$set", "$set": rest}, record.line)
            else:
                skipped["$set"] = skipped.get("$set", 0) + 1
        elif _message_id(value) is not None:
            history.message(value, record.line)
        elif isinstance(value.get("sessionId"), str) and isinstance(value.get("projectHash"), str):
            meta.update({k: v for k, v in value.items() if k != "messages"})
            name = str_field(value, "summary") or name
            extra = {k: v for k, v in value.items() if k not in _HEADER_KEYS}
            if extra:
                history.marker({"type": "$session", "session": extra}, record.line)
            else:
                skipped["metadata"] = skipped.get("metadata", 0) + 1
            for number, message in enumerate(value.get("messages") or ()):
                if isinstance(message, dict) and _message_id(message) is not None:
                    history.message(message, record.line, f"{_message_id(message)}@m{number}")
        else:
            history.marker({"type": "$unknown", **value}, record.line)
    return _Parsed(meta, history, damaged, skipped, size, name)


@functools.lru_cache(maxsize=256)
def gemini_project_root(project_dir: str) -> str:
    """The project a `~/.gemini/tmp/<id>` dir belongs to: its `.project_root` file, else
    the path `projects.json` maps to the dir's short id (or whose SHA-256 is the dir's
    name, as older versions named it); "" when neither says."""
    try:
        with open_read(os.path.join(project_dir, ".project_root")) as f:
            root = f.read().decode("utf-8").strip()
        if root:
            return root
    except (OSError, UnicodeDecodeError):
        pass
    name = os.path.basename(os.path.normpath(project_dir))
    home = os.path.dirname(os.path.dirname(os.path.normpath(project_dir)))
    try:
        with open_read(os.path.join(home, "projects.json")) as f:
            registry = orjson.loads(f.read())
    except (OSError, ValueError):
        return ""
    projects = registry.get("projects") if isinstance(registry, dict) else None
    if not isinstance(projects, dict):
        return ""
    for root, short in projects.items():
        if not isinstance(root, str):
            continue
        if short == name or hashlib.sha256(root.encode("utf-8")).hexdigest() == name:
            return root
    return ""


def _cwd(path: str, meta: dict[str, Any]) -> str:
    """The session's project: from the chats dir's project dir, else its first directory."""
    chats = os.path.dirname(os.path.abspath(path))
    if os.path.basename(chats) != "chats":
        chats = os.path.dirname(chats)  # a subagent's file: chats/<parent id>/<id>.jsonl
    if os.path.basename(chats) == "chats":
        root = gemini_project_root(os.path.dirname(chats))
        if root:
            return root
    directories = meta.get("directories")
    if isinstance(directories, list) and directories and isinstance(directories[0], str):
        return directories[0]
    return ""


def _subagent_files(path: str, session_id: str) -> list[str]:
    """The files in `chats/<session id>/`; none for an id that is no file name (a path,
    `..`, a NUL: the file's own `sessionId` must not name another directory)."""
    if not is_safe_name(session_id):
        return []
    directory = os.path.join(os.path.dirname(os.path.abspath(path)), session_id)
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [
        os.path.join(directory, n) for n in names if n.endswith((".jsonl", ".json")) and n[0] != "."
    ]


def _convert(parsed: _Parsed, builder: TreeBuilder, fallback_ms: int) -> str | None:
    """Every node into `builder`; the entry of the history's last message (the leaf)."""
    emitter = _Emitter(builder, fallback_ms)
    last: dict[str, str | None] = {}
    for node in parsed.history.nodes:
        parent = last[node.parent.key] if node.parent is not None else None
        last[node.key] = emitter.node(node, parent)
    path = parsed.history.path
    return last[path[-1].key] if path else None


def read_gemini_session(path: str, *, subagents: bool = True) -> ForeignSession:
    """Read a Gemini CLI session file (either format) into an in-memory v3 session.

    What is damaged (a line that is not JSON, a document cut short) is skipped and
    listed in `damaged`. Raises OSError when the file cannot be read,
    NotAForeignSessionError when it is not a Gemini CLI session.
    """
    parsed = _parse(path)
    meta = parsed.meta
    fallback_ms = int(os.stat(path).st_mtime * 1000)
    session_id = str_field(meta, "sessionId") or os.path.basename(path).rsplit(".", 1)[0]
    created = timestamp_ms(meta.get("startTime"))
    if created is None:
        created = fallback_ms
    cwd = _cwd(path, meta)
    builder = TreeBuilder(cwd, f"gemini:{session_id}")
    leaf = _convert(parsed, builder, created)
    name = parsed.name
    manager = builder.finish(leaf, name, "auto")
    if leaf is None:
        manager.reset_leaf()  # the history was rewound to nothing
    session = ForeignSession(
        source="gemini",
        source_id=session_id,
        path=os.path.abspath(path),
        cwd=cwd,
        created_ms=created,
        manager=manager,
        name=name,
        damaged=parsed.damaged,
        skipped=parsed.skipped,
        size=parsed.size,
    )
    if not subagents:
        return session
    calls = _subagent_calls(parsed)
    for file in _subagent_files(path, session_id):
        try:
            sub = read_gemini_session(file, subagents=False)
        except NotAForeignSessionError:
            continue
        except OSError as exc:
            session.damaged.append(Damaged(0, f"{file}: {exc.strerror or exc}"))
            continue
        session.damaged += [Damaged(d.line, f"{file}: {d.reason}") for d in sub.damaged]
        call = calls.get(sub.source_id)
        session.subsessions.append(
            ForeignSubsession(sub.source_id, sub.manager, sub.name, sub.path, call)
        )
    return session


def _subagent_calls(parsed: _Parsed) -> dict[str, str]:
    """Subagent session id -> the tool call that ran it (`toolCalls[].agentId`)."""
    found: dict[str, str] = {}
    for node in parsed.history.nodes:
        for call in node.record.get("toolCalls") or ():
            if isinstance(call, dict) and isinstance(call.get("agentId"), str):
                found.setdefault(call["agentId"], str(call.get("id")))
    return found


# ---------------------------------------------------------------------------- listing


def scan_gemini(path: str, size: int) -> ForeignMeta:
    """Listing metadata of a Gemini CLI session: a JSONL file from its first and last
    64 KiB, a one-document file whole (it no longer changes: Gemini CLI writes JSONL now).
    Its title, first prompt and count are the session's (`store.ForeignStore`)."""
    with open_read(path) as f:
        head = f.read(4096)
    if is_gemini_document(head):
        document = read_document(path)
        value = document.value or {}
        records = [value, *(m for m in value.get("messages") or () if isinstance(m, dict))]
    else:
        records = read_windows(path, size).all()
    meta: dict[str, Any] = {}
    messages = False
    last_ms: int | None = None
    for record in records:
        if isinstance(record.get("sessionId"), str) and isinstance(record.get("projectHash"), str):
            meta = meta or record
        elif isinstance(record.get("$set"), dict):
            last_ms = timestamp_ms(record["$set"].get("lastUpdated")) or last_ms
        elif _message_id(record) is not None:
            messages = True
            last_ms = timestamp_ms(record.get("timestamp")) or last_ms
    if not meta and not messages:
        raise NotAForeignSessionError(path, "Gemini CLI")
    # A file whose metadata line is damaged goes by its name, as its reader names it.
    session_id = str_field(meta, "sessionId") or os.path.basename(path).rsplit(".", 1)[0]
    subagent = meta.get("kind") == "subagent" or os.path.basename(
        os.path.dirname(os.path.abspath(path))
    ) not in ("chats",)
    return ForeignMeta(
        id=session_id,
        cwd=_cwd(path, meta),
        title=None,
        title_source=None,
        created_ms=timestamp_ms(meta.get("startTime")),
        first_message=None,
        message_count=0,
        exact_count=True,
        last_activity_ms=last_ms or timestamp_ms(meta.get("lastUpdated")),
        parent=None,
        listed=not subagent,
    )
