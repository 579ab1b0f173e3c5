"""Claude Code transcripts (`~/.claude/projects/<project>/<session uuid>.jsonl`) as v3 trees.

Each line is one record; `uuid`/`parentUuid` link them into a tree. How each
kind of line becomes entries:

* `user` / `assistant` lines become messages. Claude Code writes one assistant
  line per content block; the lines of one API response (same `message.id` and
  `requestId`) become **one** assistant message with every block, its `usage`
  taken once (from the response's last line, which carries the final output
  count). `tool_result` blocks become `toolResult` messages carrying their tool's
  name (and the line's `toolUseResult` as `details`), in the order written.
  The results of one response are chained after it, so parallel tool calls,
  whose results the source hangs under different lines of the response, make
  no branch; a `/rewind` (two prompts under one parent) stays a branch. Claude
  Code runs tools while the response streams, so a response's lines can hold
  call A, result A, call B, result B: the results still come right after the
  response, all of them before any other message (`TreeBuilder.tool_result`), as
  the model API requires.
* `isMeta` user lines (skill text, command expansions, hook feedback: sent to the
  model, hidden from the user) become `custom_message` entries
  (`claude-code:meta`, `display: false`), so the context keeps them; one a tool
  injects with its result (`sourceToolUseID`) is chained after the results of
  that result's response, as is text a result line carries besides its result.
* `system` lines with subtype `compact_boundary` become a compaction entry whose
  summary is the following `isCompactSummary` message; it hangs under the
  boundary's `logicalParentUuid`, so the history before it stays on the path.
  Other `system` lines and `attachment` lines are kept as `custom` entries
  (`claude-code:system`, `claude-code:attachment`: the line minus its envelope).
* `custom-title`, `ai-title` and `summary` lines name the session (a custom
  title as the user's name, the others as automatic ones); later ones win.
* Dropped, and counted in `ForeignSession.skipped`: `progress` lines (live output
  of running tools and hooks, repeated in the tool result), `file-history-snapshot`
  (Claude Code's own undo state, backups it keeps elsewhere) and `queue-operation`
  (prompts typed while the agent worked: those sent arrive as user lines).
* Any other line (`last-prompt`, `mode`, `pr-link`, a kind that does not exist
  yet, ...) is kept as a `custom` entry `claude-code:<type>`, never dropped.

Sidechains (`isSidechain` lines, written inline by Claude Code 1.x) and the v2
subagent files (`<session>/subagents/**/agent-*.jsonl`) become separate sessions
(`ForeignSession.subsessions`). A sidechain line that replays a response of the
main conversation (same `message.id`, another `requestId`) keeps its content but
counts no usage: the main conversation counted it.

What the transcript spent beyond the session's entries is `ForeignSession.extra_usage`,
which the usage report reads and nothing writes (ccusage counts the same): the replies
of the inline sidechains (each response once, a replay of the main conversation's not
at all), in the transcript even when no subsession is built, and each response's
tokens written to the 1-hour cache (`cache_creation.ephemeral_1h_input_tokens`, priced
above the 5-minute ones). Neither is an entry or a key of the session's usage objects:
the session is the one its views show and an import writes, as pi would read it.

The leaf is the one Claude Code resumes (and its SDK reads): the newest
main-chain user/assistant line that ends a chain, extended over the kept lines
after it on that chain.
"""

from __future__ import annotations

import os
import re
import uuid as uuid_module
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

import orjson

from sessiontree.foreign._builder import TreeBuilder
from sessiontree.foreign._content import block_as_text, int_field, str_field, text_of, usage
from sessiontree.foreign._files import HOST_FILES, Files
from sessiontree.foreign._model import ForeignSession, ForeignSubsession, NotAForeignSessionError
from sessiontree.foreign._records import Damaged, Record, Transcript, read_transcript, timestamp_ms
from sessiontree.format import ExtraUsage, UsageRecord, usage_record
from sessiontree.session import SessionManager

__all__ = [
    "claude_fork_parent",
    "claude_session_from",
    "claude_session_id",
    "claude_title",
    "read_claude_session",
]

PROVIDER = "anthropic"
API = "anthropic-messages"
SYNTHETIC_MODEL = "<synthetic>"

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)

# Keys every transcript line repeats; a custom entry keeps the rest of the line.
_ENVELOPE = frozenset(
    {
        "parentUuid",
        "logicalParentUuid",
        "isSidechain",
        "userType",
        "cwd",
        "sessionId",
        "session_id",
        "version",
        "gitBranch",
        "slug",
        "uuid",
        "timestamp",
        "entrypoint",
    }
)
_NAME_KINDS = frozenset({"custom-title", "ai-title", "summary"})
_DROPPED = frozenset({"progress", "file-history-snapshot", "queue-operation"})
_CHAIN_KINDS = frozenset({"user", "assistant", "progress", "system", "attachment"})

_STOP_REASONS = {
    "tool_use": "toolUse",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "refusal": "error",
}


def claude_session_id(path: str, records: list[Record] | None = None) -> str:
    """The session's id: the file name when it is a UUID (Claude Code names files so),
    else the first `sessionId` in the file (a UUID derived from it when it is not one),
    else a UUID derived from the path.

    The id seeds every imported entry id, so it depends on the file's content where it
    can: the same transcript read from another directory gives the same tree."""
    stem = os.path.basename(path)
    stem = stem[: -len(".jsonl")] if stem.endswith(".jsonl") else stem
    if _UUID.match(stem):
        return stem.lower()
    named: str | None = None
    for record in records or ():
        sid = record.value.get("sessionId")
        if isinstance(sid, str) and _UUID.match(sid):
            return sid.lower()
        if named is None and isinstance(sid, str) and sid:
            named = sid
    if named is not None:
        return str(uuid_module.uuid5(uuid_module.NAMESPACE_URL, f"claude-code-session:{named}"))
    return str(uuid_module.uuid5(uuid_module.NAMESPACE_URL, os.path.abspath(path)))


# ---------------------------------------------------------------------------- content


def _image(block: dict[str, Any]) -> dict[str, Any] | None:
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    data = source.get("data")
    mime = source.get("media_type")
    if source.get("type", "base64") == "base64" and isinstance(data, str) and isinstance(mime, str):
        return {"type": "image", "data": data, "mimeType": mime}
    return None


def _user_block(block: object) -> dict[str, Any]:
    if isinstance(block, dict):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            return {"type": "text", "text": block["text"]}
        if kind == "image":
            image = _image(block)
            if image is not None:
                return image
        return block_as_text(f"claude-code {kind}", block)
    if isinstance(block, str):
        return {"type": "text", "text": block}
    return block_as_text("claude-code", block)


def _result_content(value: object) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if isinstance(value, list):
        return [_user_block(block) for block in value]
    if value is None:
        return []
    return [block_as_text("claude-code tool_result", value)]


def _assistant_blocks(content: object, tool_names: dict[str, str]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        return []
    blocks: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            blocks.append(block_as_text("claude-code", block))
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            blocks.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thinking: dict[str, Any] = {"type": "thinking", "thinking": block["thinking"]}
            signature = block.get("signature")
            if isinstance(signature, str) and signature:
                thinking["thinkingSignature"] = signature
            blocks.append(thinking)
        elif kind == "redacted_thinking" and isinstance(block.get("data"), str):
            blocks.append(
                {
                    "type": "thinking",
                    "thinking": "",
                    "thinkingSignature": block["data"],
                    "redacted": True,
                }
            )
        elif kind == "tool_use" and isinstance(block.get("id"), str):
            name = block.get("name") if isinstance(block.get("name"), str) else "unknown"
            arguments = block.get("input")
            blocks.append(
                {
                    "type": "toolCall",
                    "id": block["id"],
                    "name": name,
                    "arguments": arguments if isinstance(arguments, dict) else {},
                }
            )
            tool_names[block["id"]] = str(name)
        else:
            blocks.append(block_as_text(f"claude-code {kind}", block))
    return blocks


def _usage(raw: object, record: dict[str, Any]) -> dict[str, Any]:
    result = usage(
        int_field(raw, "input_tokens"),
        int_field(raw, "output_tokens"),
        int_field(raw, "cache_read_input_tokens"),
        int_field(raw, "cache_creation_input_tokens"),
    )
    cost = record.get("costUSD")
    if isinstance(cost, int | float) and not isinstance(cost, bool) and cost == cost:
        # Claude Code 1.0 recorded what a reply cost: keep what the source recorded.
        result["cost"]["total"] = cost
    return result


def _hour_writes(raw: object) -> int:
    """A response's tokens written to the 1-hour cache (part of its cache writes)."""
    creation = raw.get("cache_creation") if isinstance(raw, dict) else None
    return int_field(creation, "ephemeral_1h_input_tokens")


def _envelope_free(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k not in _ENVELOPE}


# ---------------------------------------------------------------------------- conversion


@dataclass(slots=True)
class _Response:
    """One assistant message being assembled from the lines of one API response."""

    entry: str
    request_id: str | None
    message: dict[str, Any]
    stop: str | None = None
    replay: bool = False
    api_error: bool = False


@dataclass
class _Transcript:
    """Converts one conversation (the main one, or one sidechain) into a builder."""

    builder: TreeBuilder
    fallback_ms: int
    replayed_ids: frozenset[str] = frozenset()
    """`message.id`s of the main conversation (a sidechain replaying one counts no usage)."""
    kept: dict[str, str] = field(default_factory=dict)  # source uuid -> entry id
    through: dict[str, str | None] = field(default_factory=dict)  # dropped uuid -> its parent
    responses: dict[str, _Response] = field(default_factory=dict)
    tool_names: dict[str, str] = field(default_factory=dict)
    open_compactions: set[str] = field(default_factory=set)
    skipped: dict[str, int] = field(default_factory=dict)
    message_ids: set[str] = field(default_factory=set)
    hour_writes: dict[str, int] = field(default_factory=dict)
    """`message.id` -> the response's 1-hour cache writes (`ExtraUsage.hour_writes`)."""
    last_ms: int = 0

    def resolve(self, source_uuid: object) -> str | None:
        """The entry a source uuid stands for (a dropped line stands for its parent's)."""
        seen = 0
        while isinstance(source_uuid, str) and seen < 100_000:
            seen += 1
            found = self.kept.get(source_uuid)
            if found is not None:
                return found
            if source_uuid not in self.through:
                return None
            source_uuid = self.through[source_uuid]
        return None

    def ms(self, value: dict[str, Any]) -> int:
        found = timestamp_ms(value.get("timestamp"))
        if found is None:
            return self.last_ms or self.fallback_ms
        self.last_ms = found
        return found

    def feed(self, record: Record) -> None:
        value = record.value
        kind = value.get("type")
        uid = value.get("uuid")
        key = uid if isinstance(uid, str) else f"line:{record.line}"
        if kind in _NAME_KINDS:
            return
        if kind in _DROPPED:
            self.skipped[str(kind)] = self.skipped.get(str(kind), 0) + 1
            if isinstance(uid, str):
                parent = value.get("parentUuid")
                self.through[uid] = parent if isinstance(parent, str) else None
            return
        if kind == "assistant" and isinstance(value.get("message"), dict):
            self._assistant(value, key)
        elif kind == "user" and isinstance(value.get("message"), dict):
            self._user(value, key)
        elif kind == "system" and value.get("subtype") == "compact_boundary":
            self._compaction(value, key)
        else:
            self._custom(value, key, f"claude-code:{kind if isinstance(kind, str) else 'line'}")

    def _parent(self, value: dict[str, Any]) -> str | None:
        if "parentUuid" in value:
            return self.resolve(value.get("parentUuid"))
        return self.builder.last  # a line outside the tree: at the end of what came before

    def _keep(self, value: dict[str, Any], entry: str) -> None:
        uid = value.get("uuid")
        if isinstance(uid, str):
            self.kept[uid] = entry

    def _custom(self, value: dict[str, Any], key: str, custom_type: str) -> None:
        data = _envelope_free(value)
        entry = self.builder.custom(
            self._parent(value), custom_type, data, key, self.ms(value), inline=True
        )
        self._keep(value, entry)

    def _assistant(self, value: dict[str, Any], key: str) -> None:
        message = value["message"]
        message_id = str_field(message, "id")
        request_id = str_field(value, "requestId")
        blocks = _assistant_blocks(message.get("content"), self.tool_names)
        response = self.responses.get(message_id) if message_id else None
        if response is not None and (
            request_id is None or response.request_id is None or request_id == response.request_id
        ):
            # Another line of the same response: one message, usage counted once.
            response.message["content"].extend(blocks)
            self._note_calls(response.entry, blocks)
            if not response.replay and isinstance(message.get("usage"), dict):
                response.message["usage"] = _usage(message["usage"], value)
                self._note_hour_writes(message_id, message["usage"])
            response.stop = str_field(message, "stop_reason") or response.stop
            self._keep(value, response.entry)
            return
        ms = self.ms(value)
        model = str_field(message, "model") or "unknown"
        # A response seen before under another request id is a replay: counted once.
        replay = message_id is not None and (
            message_id in self.replayed_ids or message_id in self.message_ids
        )
        built: dict[str, Any] = {
            "role": "assistant",
            "content": blocks,
            "api": API,
            "provider": PROVIDER,
            "model": model,
            "usage": usage(0, 0, 0, 0) if replay else _usage(message.get("usage"), value),
            "stopReason": "stop",
            "timestamp": ms,
        }
        if message_id:
            built["responseId"] = message_id
        error = str_field(value, "error")
        if value.get("isApiErrorMessage") is True:
            built["errorMessage"] = error or text_of(blocks) or "API error"
        elif error:
            built["errorMessage"] = error
        status = value.get("apiErrorStatus")
        if isinstance(status, int) and not isinstance(status, bool):
            built["errorStatus"] = status
        parent = self._parent(value)
        if model != SYNTHETIC_MODEL:
            full = f"{PROVIDER}/{model}"
            if self.builder.model_at(self.builder.tail(parent)) != full:
                parent = self.builder.model_change(parent, full, f"{key}:model", ms)
        entry = self.builder.message(parent, built, key, ms, tracks_model=model != SYNTHETIC_MODEL)
        self._note_calls(entry, blocks)
        response = _Response(
            entry,
            request_id,
            built,
            str_field(message, "stop_reason"),
            replay,
            value.get("isApiErrorMessage") is True,
        )
        if message_id:
            self.responses[message_id] = response
            self.message_ids.add(message_id)
            if not replay:
                self._note_hour_writes(message_id, message.get("usage"))
        self._keep(value, entry)

    def _note_hour_writes(self, message_id: str | None, raw: object) -> None:
        hour = _hour_writes(raw)
        if message_id is None:
            return
        if hour > 0:
            self.hour_writes[message_id] = hour
        else:
            self.hour_writes.pop(message_id, None)  # the response's last line says none

    def _note_calls(self, entry: str, blocks: list[dict[str, Any]]) -> None:
        for block in blocks:
            if block.get("type") == "toolCall":
                self.builder.note_call(entry, block["id"])

    def _user(self, value: dict[str, Any], key: str) -> None:
        message = value["message"]
        content = message.get("content")
        ms = self.ms(value)
        parent = self._parent(value)
        if value.get("isCompactSummary") is True:
            text = text_of(content)
            if parent is not None and parent in self.open_compactions:
                self.builder.entry(parent)["summary"] = text
                self.open_compactions.discard(parent)
                self._keep(value, parent)
                return
            entry = self.builder.compaction(parent, text, 0, key, ms)
            self._keep(value, entry)
            return
        if value.get("isMeta") is True:
            meta_content: str | list[dict[str, Any]]
            if isinstance(content, list):
                meta_content = [_user_block(b) for b in content]
            else:
                meta_content = content if isinstance(content, str) else text_of(content)
            # Text a tool injects with its result (a skill's instructions) belongs in the
            # result's chain; other meta lines (a command's caveat) start what follows.
            entry = self.builder.custom_message(
                parent,
                "claude-code:meta",
                meta_content,
                key,
                ms,
                inline=isinstance(value.get("sourceToolUseID"), str),
            )
            self._keep(value, entry)
            return
        if isinstance(content, str) or not isinstance(content, list):
            text = content if isinstance(content, str) else text_of(content)
            if not text:
                self.through[key] = value.get("parentUuid") if "parentUuid" in value else None
                return
            entry = self.builder.message(
                parent, {"role": "user", "content": text, "timestamp": ms}, key, ms
            )
            self._keep(value, entry)
            return
        results = sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
        details = value.get("toolUseResult") if results == 1 else None
        pending: list[dict[str, Any]] = []
        previous = parent
        part = 0

        def flush() -> None:
            nonlocal previous, part
            if pending:
                # Text a result line carries (what the user typed while the tool ran)
                # belongs in the results' chain, as the line does.
                previous = self.builder.message(
                    previous,
                    {"role": "user", "content": list(pending), "timestamp": ms},
                    f"{key}:{part}",
                    ms,
                    inline=results > 0,
                )
                part += 1
                pending.clear()

        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                flush()
                call_id = block.get("tool_use_id")
                call_id = call_id if isinstance(call_id, str) else ""
                result: dict[str, Any] = {
                    "role": "toolResult",
                    "toolCallId": call_id,
                    "toolName": self.tool_names.get(call_id, "unknown"),
                    "content": _result_content(block.get("content")),
                }
                if details is not None:
                    result["details"] = details
                result["isError"] = block.get("is_error") is True
                result["timestamp"] = ms
                # Results are chained after their response (parallel calls make no branch),
                # before the skill text and the like chained there before them.
                _, previous = self.builder.tool_result(previous, result, f"{key}:{part}", ms)
                part += 1
            else:
                pending.append(_user_block(block))
        flush()
        if previous is not None and previous != parent:
            self._keep(value, previous)
        else:
            self.through[key] = value.get("parentUuid") if "parentUuid" in value else None

    def _compaction(self, value: dict[str, Any], key: str) -> None:
        parent_uuid = value.get("parentUuid")
        logical = value.get("logicalParentUuid")
        if not isinstance(parent_uuid, str) and isinstance(logical, str):
            parent = self.resolve(logical)
        else:
            parent = self._parent(value)
        metadata = value.get("compactMetadata")
        tokens = int_field(metadata, "preTokens")
        summary = value.get("content")
        entry = self.builder.compaction(
            parent,
            summary if isinstance(summary, str) else "",
            tokens,
            key,
            self.ms(value),
            details=metadata if isinstance(metadata, dict) else None,
        )
        self.open_compactions.add(entry)
        self._keep(value, entry)

    def finish_responses(self) -> None:
        """Every response's stop reason, from its last line that had one."""
        for response in self.responses.values():
            message = response.message
            if response.api_error:
                message["stopReason"] = "error"
            elif response.stop is not None:
                message["stopReason"] = _STOP_REASONS.get(response.stop, "stop")
            elif any(b.get("type") == "toolCall" for b in message["content"]):
                message["stopReason"] = "toolUse"
            else:
                message["stopReason"] = "stop"


# ---------------------------------------------------------------------------- leaf


def _resumed_end(records: list[Record], main_only: bool) -> str | None:
    """The uuid of the line the resumed chain ends with, as Claude Code's SDK picks it:
    among the lines that end a chain, the one whose nearest user/assistant ancestor is
    the newest (file order) main-chain message; ties go to the later line."""
    chain = [r for r in records if r.value.get("type") in _CHAIN_KINDS]
    by_uuid: dict[str, Record] = {}
    position: dict[str, int] = {}
    for index, record in enumerate(chain):
        uid = record.value.get("uuid")
        if isinstance(uid, str):
            by_uuid[uid] = record
            position[uid] = index
    parents = {r.value.get("parentUuid") for r in chain}
    best: tuple[int, int, str] | None = None
    fallback: tuple[int, int, str] | None = None
    for uid, record in by_uuid.items():
        if uid in parents:
            continue
        current: Record | None = record
        seen: set[str] = set()
        while current is not None:
            cid = current.value.get("uuid")
            if not isinstance(cid, str) or cid in seen:
                current = None
                break
            seen.add(cid)
            if current.value.get("type") in ("user", "assistant"):
                break
            parent = current.value.get("parentUuid")
            current = by_uuid.get(parent) if isinstance(parent, str) else None
        if current is None:
            continue
        leaf_uid = str(current.value["uuid"])
        rank = (position[leaf_uid], position[uid], uid)
        main = not (
            (main_only and current.value.get("isSidechain"))
            or current.value.get("teamName")
            or current.value.get("isMeta")
        )
        if main and (best is None or rank > best):
            best = rank
        if fallback is None or rank > fallback:
            fallback = rank
    pick = best if best is not None else fallback
    return pick[2] if pick is not None else None


# ---------------------------------------------------------------------------- sessions


def claude_title(values: Iterable[dict[str, Any]]) -> tuple[str | None, str]:
    """The session's name and its source, for the import and the listing alike: the
    latest `custom-title` ("user"), else the latest `ai-title`, else `summary` ("auto")."""
    custom = ai = summary = None
    for value in values:
        kind = value.get("type")
        if kind == "custom-title":
            custom = str_field(value, "customTitle") or custom
        elif kind == "ai-title":
            ai = str_field(value, "aiTitle") or ai
        elif kind == "summary":
            summary = str_field(value, "summary") or summary
    if custom:
        return custom, "user"
    return ai or summary, "auto"


def _first(records: list[Record], key: str) -> str | None:
    for record in records:
        found = str_field(record.value, key)
        if found:
            return found
    return None


def claude_fork_parent(values: Iterable[dict[str, Any]]) -> str | None:
    """The session this one was forked from (the first `forkedFrom.sessionId`)."""
    for value in values:
        forked = value.get("forkedFrom")
        if isinstance(forked, dict) and isinstance(forked.get("sessionId"), str):
            return str(forked["sessionId"])
    return None


def _convert(
    records: list[Record],
    builder: TreeBuilder,
    fallback_ms: int,
    main_only: bool,
    replayed: frozenset[str] = frozenset(),
) -> tuple[_Transcript, str | None]:
    conversion = _Transcript(builder, fallback_ms, replayed)
    for record in records:
        conversion.feed(record)
    conversion.finish_responses()
    end = _resumed_end(records, main_only)
    leaf = conversion.resolve(end) if end is not None else builder.last
    return conversion, leaf


def _sidechain_groups(records: list[Record]) -> dict[str, list[Record]]:
    """Sidechain lines by conversation: the agent id, else the uuid of the first line."""
    by_uuid = {r.value["uuid"]: r for r in records if isinstance(r.value.get("uuid"), str)}
    groups: dict[str, list[Record]] = {}
    root_of: dict[str, str] = {}
    for record in records:
        agent = str_field(record.value, "agentId")
        if agent:
            groups.setdefault(agent, []).append(record)
            continue
        uid = record.value.get("uuid")
        current: Record = record
        trail: list[str] = []
        root = f"line:{record.line}"
        while True:
            cid = current.value.get("uuid")
            if isinstance(cid, str):
                if cid in root_of:
                    root = root_of[cid]
                    break
                trail.append(cid)
                root = cid
            parent = current.value.get("parentUuid")
            nxt = by_uuid.get(parent) if isinstance(parent, str) else None
            if nxt is None or len(trail) > len(by_uuid):
                break
            current = nxt
        for cid in trail:
            root_of[cid] = root
        if isinstance(uid, str):
            root_of.setdefault(uid, root)
        groups.setdefault(root, []).append(record)
    return groups


def _task_calls(records: list[Record]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Subagent tool calls of the main conversation: prompt text -> (call id, input)."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for record in records:
        message = record.value.get("message")
        if record.value.get("type") != "assistant" or not isinstance(message, dict):
            continue
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            arguments = block.get("input")
            if isinstance(arguments, dict) and isinstance(arguments.get("prompt"), str):
                calls.setdefault(arguments["prompt"], (str(block.get("id")), arguments))
    return calls


def _subagent_files(path: str, files: Files) -> list[str]:
    """Claude Code v2 subagent transcripts of the session at `path`."""
    base = path[: -len(".jsonl")] if path.endswith(".jsonl") else path
    root = os.path.join(base, "subagents")
    found: list[str] = []
    for directory, dirs, names in files.walk(root):
        dirs.sort()
        for name in sorted(names):
            if name.startswith("agent-") and name.endswith(".jsonl"):
                found.append(os.path.join(directory, name))
    return found


def _read_meta(path: str, files: Files) -> dict[str, Any]:
    try:
        with files.open(path[: -len(".jsonl")] + ".meta.json") as f:
            value = orjson.loads(f.read())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _subsession(
    key: str,
    records: list[Record],
    source_path: str,
    cwd: str,
    seed: str,
    fallback_ms: int,
    replayed: frozenset[str],
    call: tuple[str, dict[str, Any]] | None,
    meta: dict[str, Any],
) -> ForeignSubsession:
    builder = TreeBuilder(cwd, seed)
    _, leaf = _convert(records, builder, fallback_ms, main_only=False, replayed=replayed)
    name = str_field(meta, "description") or str_field(meta, "agentType")
    if call is not None and not name:
        name = str_field(call[1], "description") or str_field(call[1], "subagent_type")
    call_id = str_field(meta, "toolUseId") or (call[0] if call is not None else None)
    manager = builder.finish(leaf, name)
    return ForeignSubsession(key, manager, name, source_path, call_id)


def _spent(manager: SessionManager, replayed: frozenset[str]) -> list[UsageRecord]:
    """What a sidechain's entries spent, as its own session counts it, less the
    main conversation's responses it replays (counted there)."""
    found = []
    for number, entry in enumerate(manager.get_entries(), start=1):
        record = usage_record(entry, number)
        if record is not None and record.response_id not in replayed:
            found.append(record)
    return found


def _sidechain_usage(
    side: list[Record],
    cwd: str,
    seed: str,
    fallback_ms: int,
    replayed: frozenset[str],
    hours: dict[str, int],
) -> ExtraUsage:
    """The session's `ExtraUsage`: its inline sidechains' replies, each as its
    subsession counts it (built again here: a read of a store builds none), and the
    1-hour cache writes of its responses and theirs."""
    replies: list[UsageRecord] = []
    hours = dict(hours)
    for key, group in _sidechain_groups(side).items():
        builder = TreeBuilder(cwd, f"{seed}:{key}")
        conversion, leaf = _convert(group, builder, fallback_ms, main_only=False, replayed=replayed)
        hours.update(conversion.hour_writes)
        replies += _spent(builder.finish(leaf), replayed)
    return ExtraUsage(tuple(replies), hours)


def _is_transcript(records: list[Record]) -> bool:
    """Whether the lines are a Claude Code transcript (not a v3 session, not empty)."""
    if records and records[0].value.get("type") in ("session", "title"):
        return False
    return any(
        isinstance(r.value.get("sessionId"), str)
        or (r.value.get("type") in _NAME_KINDS and isinstance(r.value.get("leafUuid"), str))
        for r in records
    )


def read_claude_session(
    path: str, *, subagents: bool = True, files: Files = HOST_FILES
) -> ForeignSession:
    """Read a Claude Code transcript into an in-memory v3 session (see the module doc);
    `files`: where it is (default: this host's files).

    Lines that are not JSON objects are skipped and listed in `damaged`. Raises
    OSError when the file cannot be read, NotAForeignSessionError when it is not a
    transcript.
    """
    return claude_session_from(read_transcript(path, files), subagents=subagents, files=files)


def claude_session_from(
    transcript: Transcript, *, subagents: bool = True, files: Files = HOST_FILES
) -> ForeignSession:
    """`read_claude_session` of a transcript already read (`read_transcript`)."""
    path = transcript.path
    records = transcript.records
    if not _is_transcript(records):
        raise NotAForeignSessionError(path, "Claude Code")
    fallback_ms = int(transcript.mtime * 1000)
    session_id = claude_session_id(path, records)
    cwd = _first(records, "cwd") or ""
    main = [r for r in records if r.value.get("isSidechain") is not True]
    side = [r for r in records if r.value.get("isSidechain") is True]
    if not any(r.value.get("type") in ("user", "assistant") for r in main) and side:
        main, side = records, []  # a subagent's own file: every line is a sidechain line
    parent = claude_fork_parent(r.value for r in records)
    builder = TreeBuilder(cwd, session_id, parent)
    conversion, leaf = _convert(main, builder, fallback_ms, main_only=True)
    name, source = claude_title(r.value for r in records)
    first_ms = next(
        (ms for r in records if (ms := timestamp_ms(r.value.get("timestamp"))) is not None),
        fallback_ms,
    )
    session = ForeignSession(
        source="claude",
        source_id=session_id,
        path=os.path.abspath(path),
        cwd=cwd,
        created_ms=first_ms,
        manager=builder.finish(leaf, name, source),
        name=name,
        name_source=source,
        parent_source_id=parent,
        damaged=list(transcript.damaged),
        skipped=dict(conversion.skipped),
        size=transcript.size,
    )
    replayed = frozenset(conversion.message_ids)
    # Asked by the usage report only (a listing reads every transcript, and never asks).
    session.extra_usage_of = cache(
        partial(
            _sidechain_usage, side, cwd, session_id, fallback_ms, replayed, conversion.hour_writes
        )
    )
    if not subagents:
        return session
    calls = _task_calls(main)
    for key, group in _sidechain_groups(side).items():
        first = group[0].value.get("message")
        prompt = text_of(first.get("content")) if isinstance(first, dict) else ""
        session.subsessions.append(
            _subsession(
                key,
                group,
                session.path,
                cwd,
                f"{session_id}:{key}",
                fallback_ms,
                replayed,
                calls.get(prompt),
                {},
            )
        )
    for file in _subagent_files(path, files):
        try:
            sub = read_transcript(file, files)
        except OSError as exc:
            session.damaged.append(Damaged(0, f"{file}: {exc.strerror or exc}"))
            continue
        agent = os.path.basename(file)[len("agent-") : -len(".jsonl")]
        meta = _read_meta(file, files)
        first_prompt = next(
            (
                text_of(r.value["message"].get("content"))
                for r in sub.records
                if r.value.get("type") == "user" and isinstance(r.value.get("message"), dict)
            ),
            "",
        )
        session.subsessions.append(
            _subsession(
                agent,
                sub.records,
                os.path.abspath(file),
                cwd,
                f"{session_id}:{agent}",
                fallback_ms,
                replayed,
                calls.get(first_prompt),
                meta,
            )
        )
    return session
