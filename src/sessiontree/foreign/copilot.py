"""GitHub Copilot CLI sessions (`~/.copilot/session-state/<session id>/events.jsonl`) as v3 trees.

One event per line, `{type, data, id, timestamp, parentId}` (`parentId`: the event
before, in time order), `agentId` on a subagent's events. The schema ships with the
CLI and is mirrored by `github/copilot-sdk` (`nodejs/src/generated/session-events.ts`).
How events become entries:

* `user.message` -> a user message (`content`; image attachments, `blob`, as images).
  What Copilot added for the model (`transformedContent`: the date, reminders) and
  the other attachments -> a `custom` entry `copilot:user.message` after it. A user
  message Copilot sent itself (`source: "system"`) -> a `custom_message`
  `copilot:system` (`display: false`) with the text the model got, and so does a
  `system.notification` (`copilot:notification`).
* `assistant.message` -> one assistant message: `reasoningText` as thinking
  (`reasoningOpaque` as its signature), `content` as text, `toolRequests` as tool
  calls. Its usage is its `outputTokens`, the only count Copilot writes per response
  (input and cache counts exist only as session totals per model, in
  `session.shutdown`'s `modelMetrics`, which its custom entry keeps).
* `tool.execution_complete` -> the call's tool result right after its response
  (`result.content`, what the model got; a failed call is an error result); the
  rest of the event (`detailedContent`, telemetry, ...) in `details`. A result for a
  call no response made (a tool the user ran) -> a `custom` entry.
* `session.model_change` -> a model change entry (and a thinking level change when
  the reasoning effort changes). A successful `session.compaction_complete` -> a
  compaction entry (`summaryContent`) that keeps what happened after its
  `session.compaction_start` (Copilot compacts in the background). A
  `session.snapshot_rewind` moves the leaf back to before `upToEventId`: what followed
  stays, a branch. After `session.context_cleared` the next entries start a new
  root. `session.title_changed` names the session.
* A subagent's events (`agentId`) -> a separate session per agent
  (`ForeignSession.subsessions`), tied to the tool call that started it.
* Dropped, counted in `ForeignSession.skipped`: `assistant.turn_start`/`turn_end`,
  `hook.start` and a successful `hook.end` (hook bookkeeping), `tool.execution_start`
  (the call is in its response), streaming deltas, and any event marked `ephemeral`.
* Everything else (`session.start`, `session.resume`, `session.shutdown`,
  `system.message` (the system prompt), `session.info`, `permission.*`,
  `subagent.*`, a failed hook, a type not known here) -> a `custom` entry
  `copilot:<type>` holding its `data`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from sessiontree.foreign._builder import TreeBuilder
from sessiontree.foreign._chain import Chain
from sessiontree.foreign._content import block_as_text, int_field, str_field, usage
from sessiontree.foreign._model import ForeignSession, ForeignSubsession, NotAForeignSessionError
from sessiontree.foreign._records import Record, read_transcript, timestamp_ms
from sessiontree.foreign.listing import ForeignMeta, read_windows

__all__ = ["is_copilot_event", "read_copilot_session", "scan_copilot"]

PROVIDER = "github-copilot"
API = "openai-completions"
_DROPPED = frozenset(
    {
        "assistant.turn_start",
        "assistant.turn_end",
        "assistant.message_start",
        "assistant.message_delta",
        "assistant.streaming_delta",
        "assistant.reasoning_delta",
        "assistant.tool_call_delta",
        "hook.start",
        "hook.progress",
        "tool.execution_start",
        "tool.execution_partial_result",
        "tool.execution_progress",
    }
)
_EFFORT = {"none": "off", "minimal": "minimal", "low": "low", "medium": "medium"}
_EFFORT |= {"high": "high", "xhigh": "xhigh", "max": "xhigh"}
_QUIET_USER_KEYS = frozenset(
    {"content", "interactionId", "turnId", "delivery", "parentAgentTaskId"}
)


def is_copilot_event(value: dict[str, Any]) -> bool:
    """Whether a line is a Copilot CLI event (`{type: "a.b", data: {...}, id, ...}`)."""
    kind = value.get("type")
    return (
        isinstance(kind, str)
        and "." in kind
        and isinstance(value.get("data"), dict)
        and isinstance(value.get("id"), str)
        and "parentId" in value
    )


def _arguments(value: object) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    return {} if value is None else {"input": value}


def _not_empty(value: object) -> bool:
    return value not in (None, "", [], {})


@dataclass
class _Agent:
    """The conversation of the main agent or of one subagent."""

    builder: TreeBuilder
    model: str
    fallback_ms: int
    chain: Chain = field(init=False)
    effort: str | None = None
    name: str | None = None
    tool_call: str | None = None
    last_ms: int = 0
    before: dict[str, str | None] = field(default_factory=dict)
    """Event id -> the entry the conversation stood at before that event."""
    compacting_from: str | None = None
    skipped: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.chain = Chain(self.builder)

    def skip(self, kind: str) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + 1

    def ms(self, event: dict[str, Any]) -> int:
        found = timestamp_ms(event.get("timestamp"))
        if found is None:
            return self.last_ms or self.fallback_ms
        self.last_ms = found
        return found

    def feed(self, event: dict[str, Any], key: str) -> None:
        kind = str(event.get("type"))
        data = event.get("data")
        data = data if isinstance(data, dict) else {}
        event_id = event.get("id")
        if isinstance(event_id, str):
            self.before[event_id] = self.chain.current
        if event.get("ephemeral") is True or kind in _DROPPED:
            self.skip(kind)
            return
        ms = self.ms(event)
        chain = self.chain
        if kind == "user.message":
            self.user(data, key, ms)
        elif kind == "assistant.message":
            self.assistant(data, key, ms)
        elif kind == "tool.execution_complete":
            self.result(data, key, ms)
        elif kind == "session.model_change":
            self.model_change(data, key, ms)
        elif kind == "session.title_changed" and str_field(data, "title"):
            self.name = str_field(data, "title")
            self.skip(kind)
        elif kind == "session.compaction_start":
            self.compacting_from = chain.current
            chain.custom(f"copilot:{kind}", data, key, ms)
        elif (
            kind == "session.compaction_complete"
            and data.get("success") is not False
            and (str_field(data, "summaryContent"))
        ):
            start = self.compacting_from
            self.compacting_from = None
            details = {k: v for k, v in data.items() if k != "summaryContent"}
            chain.compaction(
                str(data["summaryContent"]),
                int_field(data, "preCompactionTokens"),
                key,
                ms,
                details,
                (lambda: start) if start is not None else None,
            )
        elif kind == "session.snapshot_rewind":
            chain.custom(f"copilot:{kind}", data, key, ms)
            target = str_field(data, "upToEventId")
            if target is not None and target in self.before:
                chain.at(self.before[target], key, ms)
        elif kind == "session.context_cleared":
            chain.at(None)
            chain.custom(f"copilot:{kind}", data, key, ms)
        elif kind == "system.notification" and isinstance(data.get("content"), str):
            chain.custom_message("copilot:notification", data["content"], key, ms)
        elif kind == "hook.end" and data.get("success") is not False:
            self.skip(kind)
        else:
            chain.custom(f"copilot:{kind}", data, key, ms)

    def user(self, data: dict[str, Any], key: str, ms: int) -> None:
        content = data.get("content")
        text = content if isinstance(content, str) else ""
        transformed = data.get("transformedContent")
        if data.get("source") == "system" or (not text and isinstance(transformed, str)):
            sent = transformed if isinstance(transformed, str) and transformed else text
            self.chain.custom_message("copilot:system", sent, key, ms)
            return
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        others: list[Any] = []
        for attachment in data.get("attachments") or ():
            mime = attachment.get("mimeType") if isinstance(attachment, dict) else None
            payload = attachment.get("data") if isinstance(attachment, dict) else None
            if (
                isinstance(attachment, dict)
                and attachment.get("type") == "blob"
                and isinstance(mime, str)
                and mime.startswith("image/")
                and isinstance(payload, str)
            ):
                blocks.append({"type": "image", "data": payload, "mimeType": mime})
            else:
                others.append(attachment)
        self.chain.message({"role": "user", "content": blocks, "timestamp": ms}, key, ms)
        rest = {k: v for k, v in data.items() if k != "content"}
        rest["attachments"] = others
        if any(_not_empty(v) for k, v in rest.items() if k not in _QUIET_USER_KEYS):
            self.chain.custom("copilot:user.message", rest, f"{key}:data", ms)

    def assistant(self, data: dict[str, Any], key: str, ms: int) -> None:
        blocks: list[dict[str, Any]] = []
        reasoning = data.get("reasoningText")
        opaque = str_field(data, "reasoningOpaque")
        if (isinstance(reasoning, str) and reasoning) or opaque:
            thinking: dict[str, Any] = {
                "type": "thinking",
                "thinking": reasoning if isinstance(reasoning, str) else "",
            }
            if opaque:
                thinking["thinkingSignature"] = opaque
            if not thinking["thinking"]:
                thinking["redacted"] = True
            blocks.append(thinking)
        content = data.get("content")
        if isinstance(content, str) and content:
            blocks.append({"type": "text", "text": content})
        elif content not in (None, ""):
            blocks.append(block_as_text("copilot content", content))
        calls = 0
        for request in data.get("toolRequests") or ():
            if not isinstance(request, dict):
                blocks.append(block_as_text("copilot toolRequest", request))
                continue
            call_id = str_field(request, "toolCallId") or f"{key}:call:{calls}"
            blocks.append(
                {
                    "type": "toolCall",
                    "id": call_id,
                    "name": str_field(request, "name") or "unknown",
                    "arguments": _arguments(request.get("arguments")),
                }
            )
            calls += 1
        self.model = str_field(data, "model") or self.model
        message: dict[str, Any] = {
            "role": "assistant",
            "content": blocks,
            "api": API,
            "provider": PROVIDER,
            "model": self.model,
            "usage": usage(0, int_field(data, "outputTokens"), 0, 0),
            "stopReason": "toolUse" if calls else "stop",
            "timestamp": ms,
        }
        if str_field(data, "messageId"):
            message["responseId"] = data["messageId"]
        self.chain.assistant(message, key, ms)

    def result(self, data: dict[str, Any], key: str, ms: int) -> None:
        call_id = str_field(data, "toolCallId") or ""
        if not self.chain.answers(call_id):
            self.chain.custom("copilot:tool.execution_complete", data, key, ms)
            return
        result = data.get("result")
        result = result if isinstance(result, dict) else {}
        content: list[dict[str, Any]] = []
        text = result.get("content")
        if isinstance(text, str) and text:
            content.append({"type": "text", "text": text})
        for item in result.get("contents") or ():
            if isinstance(item, dict) and item.get("type") == "image":
                data_b64, mime = item.get("data"), item.get("mimeType")
                if isinstance(data_b64, str) and isinstance(mime, str):
                    content.append({"type": "image", "data": data_b64, "mimeType": mime})
                    continue
            if not content or (isinstance(item, dict) and item.get("type") != "text"):
                content.append(block_as_text("copilot content", item))
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            content.append({"type": "text", "text": error["message"]})
        elif isinstance(error, str) and error:
            content.append({"type": "text", "text": error})
        details: dict[str, Any] = {
            k: v for k, v in data.items() if k not in ("toolCallId", "result", "success")
        }
        rest = {k: v for k, v in result.items() if k != "content"}
        if rest:
            details["result"] = rest
        self.chain.result(
            call_id,
            content,
            key,
            ms,
            is_error=data.get("success") is False or _not_empty(error),
            details=details or None,
        )

    def model_change(self, data: dict[str, Any], key: str, ms: int) -> None:
        model = str_field(data, "newModel")
        if model and model != self.model:
            self.model = model
            self.chain.model_change(f"{PROVIDER}/{model}", key, ms)
        effort = str_field(data, "reasoningEffort")
        level = _EFFORT.get(effort) if effort else None
        if level is not None and level != self.effort:
            self.effort = level
            self.chain.thinking_level(level, f"{key}:effort", ms)


def _first_model(records: list[Record]) -> str:
    """The model Copilot names first (older versions name it only in tool results
    or at shutdown): the session's model before any response says otherwise."""
    for record in records:
        data = record.value.get("data")
        if not isinstance(data, dict):
            continue
        for key in ("selectedModel", "newModel", "model", "currentModel"):
            found = str_field(data, key)
            if found:
                return found
    return "unknown"


def read_copilot_session(path: str, *, subagents: bool = True) -> ForeignSession:
    """Read a Copilot CLI `events.jsonl` into an in-memory v3 session (see the module doc).

    Lines that are not JSON objects are skipped and listed in `damaged`. Raises
    OSError when the file cannot be read, NotAForeignSessionError when it is not a
    Copilot CLI event log.
    """
    transcript = read_transcript(path)
    records = transcript.records
    events = [r for r in records if is_copilot_event(r.value)]
    if not events:
        raise NotAForeignSessionError(path, "Copilot CLI")
    fallback_ms = int(os.stat(path).st_mtime * 1000)
    start: dict[str, Any] = {}
    for record in events:
        if record.value.get("type") == "session.start":
            start = record.value["data"]
            break
    session_id = str_field(start, "sessionId") or os.path.basename(
        os.path.dirname(os.path.abspath(path))
    )
    context = start.get("context")
    cwd = (str_field(context, "cwd") or "") if isinstance(context, dict) else ""
    created = timestamp_ms(start.get("startTime"))
    if created is None:
        created = next(
            (ms for r in events if (ms := timestamp_ms(r.value.get("timestamp"))) is not None),
            fallback_ms,
        )
    model = _first_model(events)
    builder = TreeBuilder(cwd, f"copilot:{session_id}")
    main = _Agent(builder, model, created, last_ms=created)
    agents: dict[str, _Agent] = {}
    for record in records:
        value = record.value
        key = f"line:{record.line}"
        if not is_copilot_event(value):
            main.chain.custom("copilot:line", value, key, main.last_ms or created)
            continue
        agent_id = value.get("agentId")
        if not isinstance(agent_id, str) or not agent_id:
            main.feed(value, key)
            continue
        agent = agents.get(agent_id)
        if agent is None:
            seed = f"copilot:{session_id}:{agent_id}"
            agent = _Agent(TreeBuilder(cwd, seed), main.model, created, last_ms=main.last_ms)
            agents[agent_id] = agent
        data = value.get("data")
        if value.get("type") == "subagent.started" and isinstance(data, dict):
            agent.name = str_field(data, "agentDisplayName") or str_field(data, "agentName")
            agent.tool_call = str_field(data, "toolCallId") or agent_id
            agent.model = str_field(data, "model") or agent.model
        agent.feed(value, key)
    main.chain.close()
    session = ForeignSession(
        source="copilot",
        source_id=session_id,
        path=os.path.abspath(path),
        cwd=cwd,
        created_ms=created,
        manager=builder.finish(main.chain.current, main.name, "auto"),
        name=main.name,
        damaged=list(transcript.damaged),
        skipped=dict(main.skipped),
        size=transcript.size,
    )
    if subagents:
        for agent_id, agent in agents.items():
            agent.chain.close()
            manager = agent.builder.finish(agent.chain.current, agent.name, "auto")
            session.subsessions.append(
                ForeignSubsession(
                    agent_id, manager, agent.name, session.path, agent.tool_call or agent_id
                )
            )
    return session


# ---------------------------------------------------------------------------- listing


def scan_copilot(path: str, size: int) -> ForeignMeta:
    """Listing metadata of an `events.jsonl` from its first and last 64 KiB; its title,
    first prompt and count are the session's (`store.ForeignStore`)."""
    windows = read_windows(path, size)
    head = windows.head
    records = windows.all()
    start: dict[str, Any] = {}
    for value in head:
        if value.get("type") == "session.start" and isinstance(value.get("data"), dict):
            start = value["data"]
            break
    if not any(is_copilot_event(v) for v in head):
        raise NotAForeignSessionError(path, "Copilot CLI")
    last_ms: int | None = None
    for value in records:
        last_ms = timestamp_ms(value.get("timestamp")) or last_ms
    context = start.get("context")
    session_id = str_field(start, "sessionId") or os.path.basename(
        os.path.dirname(os.path.abspath(path))
    )
    return ForeignMeta(
        id=session_id,
        cwd=(str_field(context, "cwd") or "") if isinstance(context, dict) else "",
        title=None,
        title_source=None,
        created_ms=timestamp_ms(start.get("startTime")),
        first_message=None,
        message_count=0,
        exact_count=True,
        last_activity_ms=last_ms,
        parent=None,
        listed=True,
    )
