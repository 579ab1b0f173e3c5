"""OpenCode sessions as v3 trees: from its SQLite database, its older JSON files, or an export.

OpenCode keeps a session as its info, its messages (`user` / `assistant`, each a JSON
object) and each message's parts (`packages/opencode/src/session/message-v2.ts`), in
one of three places, all read here into the same tree:

* since 1.2, the SQLite database `$XDG_DATA_HOME/opencode/opencode.db` (tables
  `session`, `message`, `part`; `opencode_db` reads it without ever locking it);
* before, JSON files under `storage/`: `session/<project>/<session>.json`,
  `message/<session>/<message>.json`, `part/<message>/<part>.json`;
* `opencode export <session>`: one document `{info, messages: [{info, parts}]}`.

How messages and parts become entries:

* A user message -> a user message with its typed `text` parts and its image `file`
  parts (data URLs). Text OpenCode added for the model (`synthetic` parts: the
  content of an @-mentioned file, ...) -> a `custom_message` `opencode:synthetic`
  (`display: false`) after it. Other parts (a text/plain or directory `file`, whose
  content comes as synthetic text; `agent`, `subtask`, `compaction`; `ignored`
  text) and the message's own extras (`summary` diffs, a `system` prompt, `tools`)
  -> `custom` entries `opencode:<part type>` / `opencode:user`.
* An assistant message is one or more steps (`step-start` ... `step-finish`; newer
  OpenCode writes one step per message). Each step -> one assistant message: its
  `reasoning` parts as thinking (an Anthropic signature kept), its `text` parts, its
  `tool` parts as tool calls, each tool's result right after it (`completed`: the
  output and image attachments, title and metadata in `details`; `error`: an error
  result; `pending`/`running`, the turn was interrupted: an error result
  `[Tool execution was interrupted]`, as OpenCode sends such a call to a model). A
  step's usage is its `step-finish` tokens and cost (`output` adds the `reasoning`
  tokens, which OpenCode counts apart; OpenCode's `input` excludes the cache), each
  counted once; a message without step-finish parts uses the message's own. A
  message `error` -> `errorMessage`. `patch`, `snapshot`, `retry` and unknown parts
  -> `custom` entries after the step.
* Compaction: the user message OpenCode adds to ask for it (a `compaction` part) is a
  `custom` entry; the `summary: true` assistant message that answers it is kept, its
  usage counted, then a compaction entry with its text, keeping the messages from
  the part's `tail_start_id` when it names one.
* The model in effect (`providerID/modelID`) gives model change entries, the
  message's `variant` thinking level changes. A `revert` (undo) puts the leaf before
  the reverted message; the reverted messages stay, a branch.
* Child sessions (subagents, `parentID`) -> `ForeignSession.subsessions`, tied to the
  `task` tool call whose metadata names them; a child read alone names its parent.
  A default title (`New session - <time>`) is no title.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sessiontree._util.fs import open_read
from sessiontree.foreign._builder import TreeBuilder
from sessiontree.foreign._chain import Chain
from sessiontree.foreign._content import int_field, str_field, usage
from sessiontree.foreign._document import read_document
from sessiontree.foreign._model import ForeignSession, ForeignSubsession, NotAForeignSessionError
from sessiontree.foreign._records import Damaged, timestamp_ms
from sessiontree.format import loads_line

__all__ = [
    "CHILD_DEPTH",
    "INTERRUPTED",
    "OpenCodeSession",
    "convert_opencode",
    "is_default_title",
    "load_opencode_export",
    "load_opencode_json",
    "read_opencode_export",
    "read_opencode_json",
    "storage_dir_of",
]

INTERRUPTED = "[Tool execution was interrupted]"
_DEFAULT_TITLE = re.compile(
    r"^(?:Untitled|(?:New session|Child session) - \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)$"
)
_APIS = {
    "anthropic": "anthropic-messages",
    "openai": "openai-responses",
    "google": "google-generative-ai",
    "google-vertex": "google-vertex",
    "amazon-bedrock": "bedrock-converse-stream",
}
_STOP = {"tool-calls": "toolUse", "stop": "stop", "length": "length", "error": "error"}
_EFFORT = {"none": "off", "minimal": "minimal", "low": "low", "medium": "medium"}
_EFFORT |= {"high": "high", "xhigh": "xhigh", "max": "xhigh"}
_USER_KEYS = frozenset({"id", "sessionID", "role", "time", "agent", "model"})
CHILD_DEPTH = 4
"""How many levels of child sessions are read with a session (a listing shows a
session deeper than that below a listed one on its own)."""


def is_default_title(title: str) -> bool:
    """Whether a session title is the placeholder OpenCode gives before it names one."""
    return _DEFAULT_TITLE.match(title) is not None


@dataclass(slots=True)
class OpenCodeSession:
    """A session as OpenCode stores it: its info and its messages with their parts."""

    info: dict[str, Any]
    messages: list[tuple[dict[str, Any], list[dict[str, Any]]]]
    path: str
    size: int = 0
    damaged: list[Damaged] = field(default_factory=list)
    children: list[OpenCodeSession] = field(default_factory=list)


def _ms(value: object, fallback: int) -> int:
    found = timestamp_ms(value)
    return found if found is not None else fallback


def _time(record: dict[str, Any], key: str) -> object:
    time = record.get("time")
    return time.get(key) if isinstance(time, dict) else None


def _without(part: dict[str, Any], *keys: str) -> dict[str, Any]:
    drop = {"id", "sessionID", "messageID", *keys}
    return {k: v for k, v in part.items() if k not in drop}


def _image(file: dict[str, Any]) -> dict[str, Any] | None:
    mime, url = file.get("mime"), file.get("url")
    if not (isinstance(mime, str) and mime.startswith("image/") and isinstance(url, str)):
        return None
    match = re.match(r"^data:[^;,]*;base64,(.*)$", url, re.S)
    return {"type": "image", "data": match.group(1), "mimeType": mime} if match else None


def _usage(tokens: object, cost: object) -> dict[str, Any]:
    cache = tokens.get("cache") if isinstance(tokens, dict) else None
    result = usage(
        int_field(tokens, "input"),
        int_field(tokens, "output") + int_field(tokens, "reasoning"),
        int_field(cache, "read"),
        int_field(cache, "write"),
        int_field(tokens, "total") or None,
    )
    if isinstance(cost, int | float) and not isinstance(cost, bool) and cost == cost:
        result["cost"]["total"] = cost  # what OpenCode recorded, as Claude Code 1.0 did
    return result


def _steps(parts: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The parts of an assistant message, one list per step (split at `step-start`)."""
    steps: list[list[dict[str, Any]]] = []
    for part in parts:
        if part.get("type") == "step-start" or not steps:
            steps.append([])
        if part.get("type") != "step-start":
            steps[-1].append(part)
    return steps or [[]]


@dataclass
class _Conversion:
    builder: TreeBuilder
    fallback_ms: int
    chain: Chain = field(init=False)
    effort: str | None = None
    before_message: dict[str, str | None] = field(default_factory=dict)
    before_part: dict[str, str | None] = field(default_factory=dict)
    first_of_message: dict[str, str | None] = field(default_factory=dict)
    compaction: dict[str, Any] | None = None  # the pending request's part
    tasks: dict[str, str] = field(default_factory=dict)  # child session id -> call id
    last_ms: int = 0

    def __post_init__(self) -> None:
        self.chain = Chain(self.builder)

    def ms(self, value: object) -> int:
        found = _ms(value, self.last_ms or self.fallback_ms)
        self.last_ms = found
        return found

    def message(self, info: dict[str, Any], parts: list[dict[str, Any]], number: int) -> None:
        self.chain.close(INTERRUPTED)
        mid = str_field(info, "id") or f"message:{number}"
        self.before_message[mid] = self.chain.current
        role = info.get("role")
        if role == "user":
            self.user(info, parts, mid)
        elif role == "assistant":
            self.assistant(info, parts, mid)
        else:
            ms = self.ms(_time(info, "created"))
            self.chain.custom("opencode:message", {"info": info, "parts": parts}, mid, ms)
        self.chain.close(INTERRUPTED)

    def user(self, info: dict[str, Any], parts: list[dict[str, Any]], mid: str) -> None:
        ms = self.ms(_time(info, "created"))
        blocks: list[dict[str, Any]] = []
        synthetic: list[dict[str, Any]] = []
        extras: list[dict[str, Any]] = []
        for part in parts:
            self.before_part[str(part.get("id"))] = self.chain.current
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str) and not part.get("ignored"):
                target = synthetic if part.get("synthetic") is True else blocks
                target.append({"type": "text", "text": part["text"]})
            elif kind == "file" and _image(part) is not None:
                image = _image(part)
                assert image is not None
                blocks.append(image)
            else:
                if kind == "compaction":
                    self.compaction = part
                extras.append(part)
        chain = self.chain
        if blocks:
            chain.message({"role": "user", "content": blocks, "timestamp": ms}, mid, ms)
        if synthetic:
            chain.custom_message("opencode:synthetic", synthetic, f"{mid}:synthetic", ms)
        for number, part in enumerate(extras):
            kind = part.get("type")
            name = "text-ignored" if kind == "text" else kind if isinstance(kind, str) else "part"
            chain.custom(f"opencode:{name}", _without(part), f"{mid}:part:{number}", ms)
        rest = {k: v for k, v in info.items() if k not in _USER_KEYS}
        if rest:
            chain.custom("opencode:user", rest, f"{mid}:info", ms)

    def assistant(self, info: dict[str, Any], parts: list[dict[str, Any]], mid: str) -> None:
        provider = str_field(info, "providerID") or "opencode"
        model = str_field(info, "modelID") or "unknown"
        steps = _steps(parts)
        finishes = sum(1 for p in parts if p.get("type") == "step-finish")
        created = self.ms(_time(info, "created"))
        variant = str_field(info, "variant")
        level = _EFFORT.get(variant) if variant else None
        if level is not None and level != self.effort:
            self.effort = level
            self.chain.thinking_level(level, f"{mid}:effort", created)
        for number, step in enumerate(steps):
            last = number == len(steps) - 1
            key = mid if number == 0 else f"{mid}:{number}"
            for part in step:
                self.before_part[str(part.get("id"))] = self.chain.current
            self.step(info, step, key, provider, model, created, finishes, last)
        if info.get("summary") is True:
            text = "\n\n".join(
                p["text"]
                for p in parts
                if p.get("type") == "text" and isinstance(p.get("text"), str)
            )
            self.compact(info, text, mid, created)

    def step(
        self,
        info: dict[str, Any],
        parts: list[dict[str, Any]],
        key: str,
        provider: str,
        model: str,
        created: int,
        finishes: int,
        last: bool,
    ) -> None:
        blocks: list[dict[str, Any]] = []
        tools: list[dict[str, Any]] = []
        extras: list[dict[str, Any]] = []
        finish: dict[str, Any] | None = None
        start_ms: int | None = None
        for part in parts:
            kind = part.get("type")
            start_ms = start_ms or timestamp_ms(_time(part, "start"))
            if kind == "text" and isinstance(part.get("text"), str):
                blocks.append({"type": "text", "text": part["text"]})
            elif kind == "reasoning" and isinstance(part.get("text"), str):
                thinking: dict[str, Any] = {"type": "thinking", "thinking": part["text"]}
                metadata = part.get("metadata")
                anthropic = metadata.get("anthropic") if isinstance(metadata, dict) else None
                signature = (
                    str_field(anthropic, "signature") if isinstance(anthropic, dict) else None
                )
                if signature:
                    thinking["thinkingSignature"] = signature
                blocks.append(thinking)
            elif kind == "tool" and isinstance(part.get("state"), dict):
                call_id = str_field(part, "callID") or f"{key}:tool:{len(tools)}"
                state = part["state"]
                arguments = state.get("input")
                blocks.append(
                    {
                        "type": "toolCall",
                        "id": call_id,
                        "name": str_field(part, "tool") or "unknown",
                        "arguments": arguments if isinstance(arguments, dict) else {},
                    }
                )
                tools.append(part)
                metadata = state.get("metadata")
                child = str_field(metadata, "sessionId") if isinstance(metadata, dict) else None
                if child:
                    self.tasks.setdefault(child, call_id)
            elif kind == "step-finish":
                finish = part
            else:
                extras.append(part)
        if finish is not None:
            counted = _usage(finish.get("tokens"), finish.get("cost"))
            reason = str_field(finish, "reason")
        elif finishes == 0 and last:
            counted = _usage(info.get("tokens"), info.get("cost"))  # no steps recorded apart
            reason = str_field(info, "finish")
        else:
            counted = usage(0, 0, 0, 0)
            reason = None
        ms = start_ms or created
        stop = _STOP.get(reason or "", "stop")
        if tools:
            stop = "toolUse"
        message: dict[str, Any] = {
            "role": "assistant",
            "content": blocks,
            "api": _APIS.get(provider, "openai-completions"),
            "provider": provider,
            "model": model,
            "usage": counted,
            "stopReason": stop,
            "timestamp": ms,
            "responseId": key,
        }
        error = info.get("error")
        if last and isinstance(error, dict) and not tools:
            message["stopReason"] = (
                "aborted" if error.get("name") == "MessageAbortedError" else "error"
            )
            message["errorMessage"] = _error_text(error)
        self.chain.assistant(message, key, ms)
        for number, part in enumerate(tools):
            self.tool_result(part, f"{key}:result:{number}", ms)
        for number, part in enumerate(extras):
            kind = part.get("type")
            name = kind if isinstance(kind, str) else "part"
            part_ms = self.ms(_time(part, "created") or _time(part, "start") or ms)
            self.chain.custom(f"opencode:{name}", _without(part), f"{key}:part:{number}", part_ms)

    def tool_result(self, part: dict[str, Any], key: str, ms: int) -> None:
        state = part["state"]
        status = state.get("status")
        call_id = str_field(part, "callID") or ""
        end = self.ms(_time(state, "end") or ms)
        details = {
            k: v for k, v in state.items() if k not in ("status", "input", "output", "error")
        }
        if isinstance(part.get("metadata"), dict):
            details["partMetadata"] = part["metadata"]
        content: list[dict[str, Any]] = []
        if status == "completed":
            output = state.get("output")
            content.append({"type": "text", "text": output if isinstance(output, str) else ""})
            kept: list[Any] = []
            for attachment in state.get("attachments") or ():
                image = _image(attachment) if isinstance(attachment, dict) else None
                if image is not None:
                    content.append(image)
                else:
                    kept.append(attachment)
            details.pop("attachments", None)
            if kept:
                details["attachments"] = kept
            self.chain.result(call_id, content, key, end, details=details or None)
        elif status == "error":
            metadata = state.get("metadata")
            output = metadata.get("output") if isinstance(metadata, dict) else None
            if (
                isinstance(metadata, dict)
                and metadata.get("interrupted") is True
                and isinstance(output, str)
            ):
                # OpenCode sends what an interrupted tool printed as its output.
                content = [{"type": "text", "text": output}]
                self.chain.result(call_id, content, key, end, details=details or None)
                return
            error = state.get("error")
            content = [{"type": "text", "text": error if isinstance(error, str) else str(error)}]
            self.chain.result(call_id, content, key, end, is_error=True, details=details or None)
        # pending / running: `close` answers it as interrupted.

    def compact(self, info: dict[str, Any], text: str, mid: str, ms: int) -> None:
        request = self.compaction
        self.compaction = None
        tokens = info.get("tokens")
        before = int_field(tokens, "input") + int_field(
            tokens.get("cache") if isinstance(tokens, dict) else None, "read"
        )
        tail = str_field(request, "tail_start_id") if isinstance(request, dict) else None
        details = {"request": _without(request)} if isinstance(request, dict) else None
        kept_after = None
        if tail is not None and tail in self.before_message:
            start = self.before_message[tail]
            kept_after = (lambda: start) if start is not None else None
        self.chain.compaction(text, before, f"{mid}:compaction", ms, details, kept_after)


def _error_text(error: dict[str, Any]) -> str:
    data = error.get("data")
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, str) and message:
        return message
    return str(error.get("name") or "error")


def _title(info: dict[str, Any]) -> str | None:
    title = str_field(info, "title")
    return None if title is None or is_default_title(title) else title


def convert_opencode(
    session: OpenCodeSession, *, subagents: bool = True, depth: int = 0
) -> ForeignSession:
    """`session` as an in-memory v3 session (see the module doc)."""
    info = session.info
    session_id = str_field(info, "id") or os.path.basename(session.path)
    created = _ms(_time(info, "created"), 0)
    if not created:
        created = next(
            (_ms(_time(m, "created"), 0) for m, _ in session.messages if _time(m, "created")), 0
        )
    cwd = str_field(info, "directory") or ""
    builder = TreeBuilder(cwd, f"opencode:{session_id}")
    conversion = _Conversion(builder, created)
    for number, (message, parts) in enumerate(session.messages):
        conversion.message(message, parts, number)
    conversion.chain.close(INTERRUPTED)
    leaf = conversion.chain.current
    revert = info.get("revert")
    if isinstance(revert, dict):
        part_id, message_id = str_field(revert, "partID"), str_field(revert, "messageID")
        if part_id and part_id in conversion.before_part:
            leaf = conversion.before_part[part_id]
        elif message_id and message_id in conversion.before_message:
            leaf = conversion.before_message[message_id]
    name = _title(info)
    manager = builder.finish(leaf, name, "auto")
    if leaf is None and isinstance(revert, dict):
        manager.reset_leaf()
    skipped = {
        "step-start": sum(
            1 for _, parts in session.messages for p in parts if p.get("type") == "step-start"
        )
    }
    result = ForeignSession(
        source="opencode",
        source_id=session_id,
        path=session.path,
        cwd=cwd,
        created_ms=created,
        manager=manager,
        name=name,
        parent_source_id=str_field(info, "parentID"),
        damaged=list(session.damaged),
        skipped={k: v for k, v in skipped.items() if v},
        size=session.size,
    )
    if subagents and depth < CHILD_DEPTH:
        for child in session.children:
            converted = convert_opencode(child, subagents=True, depth=depth + 1)
            result.subsessions.append(
                ForeignSubsession(
                    converted.source_id,
                    converted.manager,
                    converted.name,
                    converted.path,
                    conversion.tasks.get(converted.source_id),
                )
            )
            result.subsessions += converted.subsessions
            result.damaged += [Damaged(d.line, f"{child.path}: {d.reason}") for d in child.damaged]
    return result


# ---------------------------------------------------------------------------- export


def is_export(value: dict[str, Any]) -> bool:
    """Whether a JSON document is `opencode export` output."""
    info = value.get("info")
    return (
        isinstance(info, dict)
        and isinstance(info.get("id"), str)
        and isinstance(value.get("messages"), list)
    )


def load_opencode_export(path: str) -> OpenCodeSession:
    """The session in an `opencode export` document (see `read_opencode_export`)."""
    document = read_document(path)
    value = document.value
    if value is None or not is_export(value):
        raise NotAForeignSessionError(path, "OpenCode export")
    messages: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    damaged = list(document.damaged)
    for number, item in enumerate(value["messages"]):
        info = item.get("info") if isinstance(item, dict) else None
        parts = item.get("parts") if isinstance(item, dict) else None
        if not isinstance(info, dict):
            damaged.append(Damaged(0, f"message {number}: no info"))
            continue
        good = [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []
        messages.append((info, good))
    return OpenCodeSession(value["info"], messages, os.path.abspath(path), document.size, damaged)


def read_opencode_export(path: str) -> ForeignSession:
    """The output of `opencode export` (one JSON document), read as it is. A document cut
    short keeps the messages before the damage (reported in `damaged`). Raises OSError
    when it cannot be read, NotAForeignSessionError when it is no such export."""
    return convert_opencode(load_opencode_export(path))


# ---------------------------------------------------------------------------- JSON files


def storage_dir_of(info_path: str) -> str | None:
    """The `storage` dir of a `storage/session/<project>/<session>.json` path."""
    project = os.path.dirname(os.path.abspath(info_path))
    sessions = os.path.dirname(project)
    if os.path.basename(sessions) != "session":
        return None
    return os.path.dirname(sessions)


def _read_json(path: str, damaged: list[Damaged], sizes: list[int]) -> dict[str, Any] | None:
    try:
        with open_read(path) as f:
            data = f.read()
    except OSError as exc:
        damaged.append(Damaged(0, f"{path}: {exc.strerror or exc}"))
        return None
    sizes.append(len(data))
    try:
        value = loads_line(data)  # as JSON.parse: lone surrogate escapes too
    except (ValueError, UnicodeError):
        damaged.append(Damaged(0, f"{path}: not valid JSON"))
        return None
    if not isinstance(value, dict):
        damaged.append(Damaged(0, f"{path}: not a JSON object"))
        return None
    return value


def _json_files(directory: str) -> list[str]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [
        os.path.join(directory, n) for n in sorted(names) if n.endswith(".json") and n[0] != "."
    ]


def load_opencode_json(info_path: str, *, children: bool = True) -> OpenCodeSession:
    """A session of the JSON-file layout, its messages and parts in id order (OpenCode's
    ids grow with time), its children down to `CHILD_DEPTH`, each session once however
    the `parentID` links loop. Damaged files are skipped and reported."""
    return _load_json(info_path, 0 if children else CHILD_DEPTH, set())


def _load_json(info_path: str, depth: int, seen: set[str]) -> OpenCodeSession:
    damaged: list[Damaged] = []
    sizes: list[int] = []
    info = _read_json(info_path, damaged, sizes)
    storage = storage_dir_of(info_path)
    if info is None or storage is None or not str(info.get("id", "")).startswith("ses"):
        raise NotAForeignSessionError(info_path, "OpenCode")
    session_id = os.path.basename(info_path)[: -len(".json")]
    seen.add(session_id)
    messages: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for file in _json_files(os.path.join(storage, "message", session_id)):
        message = _read_json(file, damaged, sizes)
        if message is None:
            continue
        message_id = os.path.basename(file)[: -len(".json")]
        parts = [
            part
            for part_file in _json_files(os.path.join(storage, "part", message_id))
            if (part := _read_json(part_file, damaged, sizes)) is not None
        ]
        messages.append((message, parts))
    session = OpenCodeSession(info, messages, os.path.abspath(info_path), sum(sizes), damaged)
    if depth < CHILD_DEPTH:
        paths = [
            p
            for p in _child_files(storage, session_id)
            if os.path.basename(p)[: -len(".json")] not in seen
        ]
        seen.update(os.path.basename(p)[: -len(".json")] for p in paths)
        for path in paths:
            try:
                session.children.append(_load_json(path, depth + 1, seen))
            except (OSError, NotAForeignSessionError):
                continue
    return session


def _child_files(storage: str, parent_id: str) -> Iterable[str]:
    """Session files whose info names `parent_id` as their parent."""
    root = os.path.join(storage, "session")
    try:
        projects = sorted(os.listdir(root))
    except OSError:
        return
    for project in projects:
        for path in _json_files(os.path.join(root, project)):
            try:
                with open_read(path) as f:
                    data = f.read()
                value = loads_line(data)
            except (OSError, ValueError, UnicodeError):
                continue
            if isinstance(value, dict) and value.get("parentID") == parent_id:
                yield path


def read_opencode_json(info_path: str, *, subagents: bool = True) -> ForeignSession:
    """A session of OpenCode's JSON-file layout (before 1.2), given by its info file."""
    return convert_opencode(load_opencode_json(info_path, children=subagents), subagents=subagents)
