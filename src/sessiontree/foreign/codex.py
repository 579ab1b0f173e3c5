"""Codex rollouts (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`) as v3 trees.

A rollout is a flat log: `session_meta`, then `response_item`s (what went to and
came from the model), `event_msg`s (what the UI showed), `turn_context` (the
settings of each turn) and `compacted`. The 2025 format before the
`{timestamp, type, payload}` wrapper has a bare header line and bare items.
How each becomes entries:

* The output items of one model response (`reasoning`, assistant `message`,
  `function_call`, `custom_tool_call`, `local_shell_call`, `web_search_call`, ...)
  become **one** assistant message: `thinking` (the reasoning summary, the item
  itself as `thinkingSignature`, as pi's OpenAI Responses provider keeps it),
  `text` and `toolCall` blocks. Its usage is its `event_msg.token_count`'s
  `info.last_token_usage` (`total_token_usage` is cumulative): the count after the
  items (which ends the response), or before them in rollouts that write it first
  (Codex 0.5x); a count that repeats the total before it is no new response's.
  `input_tokens` includes `cached_input_tokens`, so `input` is the difference and
  `cacheRead` the cached part. No cost: Codex records none. A UI event between the
  items (a sub-agent's activity, ...) does not end the response.
* `function_call_output` and the like become `toolResult` messages, right after
  the response whose call they answer, before a message Codex injected or an event
  it wrote between the outputs (`TreeBuilder.tool_result`): the model API takes a
  response's calls answered at once.
* User `message` items are prompts when the user typed them (the rollout also has
  an `event_msg.user_message` with the same text; files without such events: when
  they do not start with one of Codex's injected tags). Injected environment and
  instruction messages, and `developer` messages, become `custom_message` entries
  (`codex:context`, `codex:developer`, `display: false`): the model saw them, the
  user did not.
* `turn_context` gives `model_change` entries where the model changes, and
  `thinking_level_change` entries where the reasoning effort does.
* `compacted` becomes a compaction entry (the summary, and the replacement history
  Codex resumes from in `preserveData.openaiRemoteCompaction`, as oh-my-pi keeps it).
* `thread_rolled_back` moves the leaf back before the last N prompts: the
  rolled-back turns stay, as a branch. `thread_name_updated` names the session,
  and `session_meta.forked_from_id` is the parent session.
* Dropped, and counted in `ForeignSession.skipped`: events that repeat response
  items (`user_message`, `agent_message`, `agent_reasoning` with the same text,
  `exec_command_end`, `patch_apply_end`, `mcp_tool_call_end` and `web_search_end`
  of calls the rollout has as items, ...), turn bookkeeping (`task_started`,
  `task_complete`, `token_count`, `context_compacted`), a `session_meta` repeated
  on resume, and the legacy format's `{"record_type":"state"}` lines.
* Anything else (review mode, sub-agent activity, `world_state`, an unknown line
  type) is kept as a `custom` entry `codex:<type>`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sessiontree.foreign._builder import TreeBuilder
from sessiontree.foreign._content import block_as_text, int_field, str_field, usage
from sessiontree.foreign._model import ForeignSession, NotAForeignSessionError
from sessiontree.foreign._records import Record, Transcript, read_transcript, timestamp_ms
from sessiontree.format import loads_line, serialize_entry

__all__ = [
    "codex_session_from",
    "environment_cwd",
    "is_injected_text",
    "is_legacy_rollout",
    "read_codex_session",
    "rollout_id",
]

API = "openai-responses"
_ROLLOUT_ID = re.compile(
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$", re.I
)
# Text Codex itself puts into user messages (instructions, environment, notices).
_INJECTED = (
    "<user_instructions>",
    "<environment_context>",
    "# AGENTS.md instructions",
    "<INSTRUCTIONS>",
    "<permissions instructions>",
    "<turn_aborted>",
    "<user_action>",
    "<recommended_plugins>",
    "<user_shell_command>",
    "<skill>",
)
_ASSISTANT_ITEMS = frozenset(
    {
        "reasoning",
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "web_search_call",
        "tool_search_call",
        "image_generation_call",
    }
)
_OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output", "tool_search_output"})
# Events that only repeat what response items hold, or turn bookkeeping.
_REPEATS = frozenset(
    {
        "token_count",
        "task_started",
        "task_complete",
        "turn_started",
        "turn_complete",
        "context_compacted",
        "exec_command_begin",
        "exec_command_end",
        "exec_command_output_delta",
        "patch_apply_begin",
        "patch_apply_end",
        "mcp_tool_call_begin",
        "web_search_begin",
        "image_generation_begin",
        "image_generation_end",
        "view_image_tool_call",
        "turn_diff",
        "agent_reasoning_section_break",
        "item_started",
        "item_completed",
        "thread_name_updated",
    }
)
_EFFORT = {"none": "off", "minimal": "minimal", "low": "low", "medium": "medium"}
_EFFORT |= {"high": "high", "xhigh": "xhigh"}


def is_legacy_rollout(first: Mapping[str, Any]) -> bool:
    """Whether a rollout's first line is the legacy header (`{"id", "timestamp",
    ...}` with no `type` or `payload`) rather than a `session_meta` line."""
    return "payload" not in first and "id" in first and "type" not in first


def rollout_id(path: str) -> str | None:
    """The thread id in a rollout file name (`rollout-<time>-<uuid>.jsonl`)."""
    match = _ROLLOUT_ID.search(os.path.basename(path))
    return match.group(1).lower() if match else None


def is_injected_text(text: str) -> bool:
    """Whether a user message's text is one Codex injects rather than the user types."""
    return text.lstrip().startswith(_INJECTED)


def _item_text(content: object) -> str:
    if not isinstance(content, list):
        return content if isinstance(content, str) else ""
    return "".join(
        str(block.get("text"))
        for block in content
        if isinstance(block, dict) and isinstance(block.get("text"), str)
    )


def _image(url: object) -> dict[str, Any] | None:
    if not isinstance(url, str):
        return None
    match = re.match(r"^data:([^;,]+);base64,(.*)$", url, re.S)
    if match is None:
        return None
    return {"type": "image", "data": match.group(2), "mimeType": match.group(1)}


def _blocks(content: object, *, assistant: bool = False) -> list[dict[str, Any]]:
    """Response content (`input_text`, `output_text`, `input_image`, ...) as v3 blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        return [] if content is None else [block_as_text("codex", content)]
    blocks: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            blocks.append(block_as_text("codex", block))
            continue
        kind = block.get("type")
        text = block.get("text")
        if kind in ("input_text", "output_text", "text") and isinstance(text, str):
            blocks.append({"type": "text", "text": text})
        elif kind == "refusal" and isinstance(block.get("refusal"), str):
            blocks.append({"type": "text", "text": block["refusal"]})
        elif kind == "input_image" and not assistant and _image(block.get("image_url")):
            image = _image(block.get("image_url"))
            assert image is not None
            blocks.append(image)
        else:
            blocks.append(block_as_text(f"codex {kind}", block))
    return blocks


def _arguments(value: object) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = loads_line(value)
        except (ValueError, UnicodeError):
            parsed = None
        if isinstance(parsed, dict):
            return parsed
        return {"input": value}
    return {} if value is None else {"input": value}


_CONTENT_BLOCKS = frozenset({"input_text", "output_text", "text", "input_image", "refusal"})


def _output_content(value: object) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if isinstance(value, list) and all(
        isinstance(b, dict) and b.get("type") in _CONTENT_BLOCKS for b in value
    ):
        return _blocks(value)
    if isinstance(value, dict):
        # {content, success} and other structured payloads: the content when it has one.
        inner = value.get("content")
        if isinstance(inner, str | list):
            return _output_content(inner)
    if value is None:
        return []
    return [{"type": "text", "text": serialize_entry(value)}]


def _reasoning(payload: dict[str, Any]) -> dict[str, Any]:
    texts = [
        str(part.get("text"))
        for part in payload.get("summary") or ()
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    ]
    if not texts:
        texts = [
            str(part.get("text"))
            for part in payload.get("content") or ()
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
    return {
        "type": "thinking",
        "thinking": "\n\n".join(texts),
        "thinkingSignature": serialize_entry(payload),
    }


@dataclass
class _Rollout:
    """Converts one rollout's records into a builder, in file order."""

    builder: TreeBuilder
    provider: str
    fallback_ms: int
    prompts: set[str] | None
    """Texts the user typed (`event_msg.user_message`), None when the file has none."""
    canonical_calls: set[str]
    canonical_texts: set[str]
    has_items: bool
    model: str = "unknown"
    effort: str | None = None
    name: str | None = None
    session_id: str | None = None
    current: str | None = None
    assistant: dict[str, Any] | None = None  # the response being assembled (open)
    assistant_entry: str | None = None  # its entry
    unpriced: list[dict[str, Any]] = field(default_factory=list)  # responses awaiting usage
    tool_names: dict[str, str] = field(default_factory=dict)
    prompt_stack: list[str | None] = field(default_factory=list)  # the entry before each prompt
    pending_search: dict[str, dict[str, Any]] = field(default_factory=dict)
    after_response: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    last_ms: int = 0
    last_total: dict[str, Any] | None = None
    context_tokens: int = 0
    counts_lead: bool = False
    """The rollout writes a response's token count before its items (Codex 0.5x)."""
    next_usage: dict[str, Any] | None = None

    # ------------------------------------------------------------------ helpers

    def skip(self, kind: str) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + 1

    def ms(self, value: dict[str, Any]) -> int:
        found = timestamp_ms(value.get("timestamp"))
        if found is None:
            return self.last_ms or self.fallback_ms
        self.last_ms = max(found, 0)
        return self.last_ms

    def close(self) -> None:
        """The response being assembled is complete; results of its server-side calls follow."""
        self.assistant = None
        pending, self.after_response = self.after_response, []
        for result, key in pending:
            self.add_result(result, key, result["timestamp"])

    def add_message(self, message: dict[str, Any], key: str, ms: int) -> str:
        self.current = self.builder.message(self.current, message, key, ms)
        return self.current

    def add_result(self, result: dict[str, Any], key: str, ms: int) -> str:
        """A tool result, right after the results of the response whose call it answers
        (before an event or an injected message written between them)."""
        entry, self.current = self.builder.tool_result(self.current, result, key, ms)
        return entry

    def custom(self, custom_type: str, data: Any, key: str, ms: int) -> None:
        self.current = self.builder.custom(self.current, custom_type, data, key, ms, inline=False)

    def response(self, key: str, ms: int) -> dict[str, Any]:
        """The assistant message being assembled, started if there is none."""
        if self.assistant is not None:
            return self.assistant
        counted, self.next_usage = self.next_usage, None
        message: dict[str, Any] = {
            "role": "assistant",
            "content": [],
            "api": API,
            "provider": self.provider,
            "model": self.model,
            "usage": counted if counted is not None else usage(0, 0, 0, 0),
            "stopReason": "stop",
            "timestamp": ms,
        }
        self.assistant_entry = self.add_message(message, key, ms)
        self.assistant = message
        if counted is None:
            self.unpriced.append(message)
        return message

    def add_block(self, block: dict[str, Any], key: str, ms: int) -> None:
        message = self.response(key, ms)
        message["content"].append(block)
        if block.get("type") == "toolCall":
            message["stopReason"] = "toolUse"
            self.tool_names[str(block.get("id"))] = str(block.get("name"))
            assert self.assistant_entry is not None
            self.builder.note_call(self.assistant_entry, str(block.get("id")))

    def result(
        self, call_id: str, name: str | None, content: list[dict[str, Any]], key: str, ms: int
    ) -> dict[str, Any]:
        self.close()
        result = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": name or self.tool_names.get(call_id, "unknown"),
            "content": content,
            "isError": False,
            "timestamp": ms,
        }
        self.add_result(result, key, ms)
        return result

    # ------------------------------------------------------------------ records

    def feed(self, record: Record, legacy: bool) -> None:
        value = record.value
        key = f"line:{record.line}"
        if legacy:
            if value.get("record_type") == "state":
                self.skip("state")
                return
            self.item(value, key, self.last_ms or self.fallback_ms)
            return
        kind = value.get("type")
        payload = value.get("payload")
        ms = self.ms(value)
        if not isinstance(payload, dict):
            self.custom(f"codex:{kind}", value, key, ms)
            return
        if kind == "response_item":
            self.item(payload, key, ms)
        elif kind == "event_msg":
            self.event(payload, key, ms)
        elif kind == "turn_context":
            self.turn_context(payload, key, ms)
        elif kind == "compacted":
            self.compacted(payload, key, ms)
        elif kind == "session_meta":
            if self.session_id is None or payload.get("id") in (None, self.session_id):
                self.skip("session_meta")
                self.session_id = self.session_id or str_field(payload, "id")
            else:
                self.custom("codex:session_meta", payload, key, ms)
        else:
            # Bookkeeping the model did not see: a response it falls within goes on.
            self.custom(f"codex:{kind}", payload, key, ms)

    def item(self, payload: dict[str, Any], key: str, ms: int) -> None:
        kind = payload.get("type")
        if kind == "message":
            role = payload.get("role")
            if role == "assistant":
                for block in _blocks(payload.get("content"), assistant=True):
                    self.add_block(block, key, ms)
                return
            self.close()
            content = _blocks(payload.get("content"))
            text = _item_text(payload.get("content"))
            if role == "user" and self.is_prompt(text):
                self.prompt(content, key, ms)
                return
            custom_type = "codex:context" if role == "user" else f"codex:{role}"
            self.current = self.builder.custom_message(self.current, custom_type, content, key, ms)
        elif kind == "reasoning":
            self.add_block(_reasoning(payload), key, ms)
        elif kind in ("function_call", "custom_tool_call"):
            call_id = str_field(payload, "call_id") or str_field(payload, "id") or key
            raw = payload.get("arguments" if kind == "function_call" else "input")
            arguments = _arguments(raw)
            name = str_field(payload, "name") or "unknown"
            self.add_block(
                {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}, key, ms
            )
        elif kind == "local_shell_call":
            call_id = str_field(payload, "call_id") or str_field(payload, "id") or key
            action = payload.get("action")
            self.add_block(
                {
                    "type": "toolCall",
                    "id": call_id,
                    "name": "local_shell",
                    "arguments": action if isinstance(action, dict) else {},
                },
                key,
                ms,
            )
        elif kind == "web_search_call":
            self.web_search(payload, key, ms)
        elif kind == "tool_search_call":
            call_id = str_field(payload, "call_id") or str_field(payload, "id") or key
            self.add_block(
                {
                    "type": "toolCall",
                    "id": call_id,
                    "name": "tool_search",
                    "arguments": _arguments(payload.get("arguments")),
                },
                key,
                ms,
            )
        elif kind == "image_generation_call":
            call_id = str_field(payload, "id") or key
            prompt = payload.get("revised_prompt")
            self.add_block(
                {
                    "type": "toolCall",
                    "id": call_id,
                    "name": "image_generation",
                    "arguments": {"revised_prompt": prompt} if isinstance(prompt, str) else {},
                },
                key,
                ms,
            )
            data = payload.get("result")
            generated: list[dict[str, Any]] = []
            if isinstance(data, str) and re.fullmatch(r"[A-Za-z0-9+/=\s]{16,}", data):
                generated.append({"type": "image", "data": data, "mimeType": "image/png"})
            elif data is not None:
                generated.append({"type": "text", "text": str(data)})
            self.after_response.append((self.tool_result(call_id, generated, ms), f"{key}:result"))
        elif kind in _OUTPUT_ITEMS:
            call_id = str_field(payload, "call_id") or key
            output = payload.get("tools" if kind == "tool_search_output" else "output")
            self.result(call_id, None, _output_content(output), key, ms)
        elif kind == "agent_message":
            self.close()
            self.current = self.builder.custom_message(
                self.current,
                "codex:agent_message",
                _blocks(payload.get("content")),
                key,
                ms,
                details={k: v for k, v in payload.items() if k not in ("type", "content")},
            )
        else:
            self.close()
            self.custom(f"codex:{kind}", payload, key, ms)

    def prompt(self, content: str | list[dict[str, Any]], key: str, ms: int) -> None:
        """A prompt the user typed; remembered, so a rollback can go back before it."""
        self.prompt_stack.append(self.current)
        self.add_message({"role": "user", "content": content, "timestamp": ms}, key, ms)

    def is_prompt(self, text: str) -> bool:
        if self.prompts is not None:
            return text in self.prompts or text.strip() in self.prompts
        return not is_injected_text(text)

    def tool_result(self, call_id: str, content: list[dict[str, Any]], ms: int) -> dict[str, Any]:
        return {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": self.tool_names.get(call_id, "unknown"),
            "content": content,
            "isError": False,
            "timestamp": ms,
        }

    def web_search(self, payload: dict[str, Any], key: str, ms: int) -> None:
        action = payload.get("action")
        call_id = str_field(payload, "id") or str_field(payload, "call_id")
        ended = None
        if call_id is None:
            # Older rollouts give the item no id: it is the search whose end event
            # (which has one) came just before, with the same action.
            for candidate, event in list(self.pending_search.items()):
                if event.get("action") == action or event.get("query") == _query(action):
                    call_id, ended = candidate, self.pending_search.pop(candidate)
                    break
        else:
            ended = self.pending_search.pop(call_id, None)
        call_id = call_id or key
        self.add_block(
            {
                "type": "toolCall",
                "id": call_id,
                "name": "web_search",
                "arguments": action if isinstance(action, dict) else {},
            },
            key,
            ms,
        )
        # A rollout records what was searched, not what was found.
        found = ended.get("results", ended.get("query")) if ended is not None else _query(action)
        content = _output_content(found) if found is not None else []
        result = self.tool_result(call_id, content, ms)
        self.after_response.append((result, f"{key}:result"))

    def event(self, payload: dict[str, Any], key: str, ms: int) -> None:
        kind = str(payload.get("type"))
        if kind == "token_count":
            self.token_count(payload)
            self.skip(kind)
        elif kind == "thread_name_updated":
            self.name = str_field(payload, "thread_name") or self.name
            self.skip(kind)
        elif kind == "thread_rolled_back":
            self.close()
            self.custom("codex:thread_rolled_back", payload, key, ms)
            self.rollback(int_field(payload, "num_turns"))
        elif kind == "web_search_end":
            call_id = str_field(payload, "call_id")
            if call_id and call_id not in self.canonical_calls:
                self.pending_search[call_id] = payload
            self.skip(kind)
        elif kind in ("user_message", "agent_message", "agent_reasoning"):
            text = str_field(payload, "message") or str_field(payload, "text") or ""
            if not text or self.repeats(text):
                self.skip(kind)
            elif not self.has_items:
                self.from_event(kind, payload, text, key, ms)
            else:
                self.custom(f"codex:{kind}", payload, key, ms)
        elif kind in ("mcp_tool_call_end", "dynamic_tool_call_response"):
            call_id = str_field(payload, "call_id") or str_field(payload, "callId")
            if call_id and call_id in self.canonical_calls:
                self.skip(kind)
            else:
                self.mcp_call(kind, payload, call_id or key, key, ms)
        elif kind == "dynamic_tool_call_request":
            call_id = str_field(payload, "callId") or str_field(payload, "call_id")
            if call_id and call_id in self.canonical_calls:
                self.skip(kind)
            else:
                name = str_field(payload, "tool") or "unknown"
                self.add_block(
                    {
                        "type": "toolCall",
                        "id": call_id or key,
                        "name": name,
                        "arguments": _arguments(payload.get("arguments")),
                    },
                    key,
                    ms,
                )
        elif kind in _REPEATS:
            self.skip(kind)
        else:
            # A UI event (a sub-agent's activity, review mode, ...): no end of a response.
            self.custom(f"codex:{kind}", payload, key, ms)

    def repeats(self, text: str) -> bool:
        """Whether an event's text is a response item's (the UI may show it without
        what Codex appends for the model, such as memory citations)."""
        if text in self.canonical_texts:
            return True
        head = text.rstrip()
        return bool(head) and any(t.startswith(head) for t in self.canonical_texts)

    def from_event(self, kind: str, payload: dict[str, Any], text: str, key: str, ms: int) -> None:
        """An old rollout whose only record of a message is the UI event."""
        if kind == "user_message":
            self.close()
            self.prompt(text, key, ms)
        elif kind == "agent_message":
            self.add_block({"type": "text", "text": text}, key, ms)
        else:
            self.add_block({"type": "thinking", "thinking": text}, key, ms)

    def mcp_call(self, kind: str, payload: dict[str, Any], call_id: str, key: str, ms: int) -> None:
        if kind == "mcp_tool_call_end":
            invocation = payload.get("invocation")
            invocation = invocation if isinstance(invocation, dict) else {}
            server = str_field(invocation, "server") or "mcp"
            tool = str_field(invocation, "tool") or "unknown"
            name = f"{server}/{tool}"
            self.add_block(
                {
                    "type": "toolCall",
                    "id": call_id,
                    "name": name,
                    "arguments": _arguments(invocation.get("arguments")),
                },
                key,
                ms,
            )
            raw = payload.get("result")
            ok = raw.get("Ok") if isinstance(raw, dict) else None
            error = raw.get("Err") if isinstance(raw, dict) else None
            if isinstance(error, str):
                content: list[dict[str, Any]] = [{"type": "text", "text": error}]
            else:
                body = ok if ok is not None else raw
                content = _output_content(body.get("content") if isinstance(body, dict) else body)
            result = self.tool_result(call_id, content, ms)
            result["isError"] = isinstance(error, str) or (
                isinstance(ok, dict) and ok.get("isError") is True
            )
            self.after_response.append((result, f"{key}:result"))
            return
        error = str_field(payload, "error")
        content = (
            [{"type": "text", "text": error}]
            if error
            else _output_content(payload.get("content_items"))
        )
        result = self.result(call_id, str_field(payload, "tool"), content, key, ms)
        if error or payload.get("success") is False:
            result["isError"] = True

    def token_count(self, payload: dict[str, Any]) -> None:
        info = payload.get("info")
        if not isinstance(info, dict):
            return
        last = info.get("last_token_usage")
        total = info.get("total_token_usage")
        if isinstance(total, dict) and total == self.last_total:
            # Codex repeats the last count (on a rate-limit update, while a response
            # streams): no tokens were spent since, so it belongs to no response.
            return
        if not isinstance(last, dict) and isinstance(total, dict):
            previous = self.last_total or {}
            last = {k: int_field(total, k) - int_field(previous, k) for k in total}
        if isinstance(total, dict):
            self.last_total = total
        if not isinstance(last, dict):
            return
        self.context_tokens = int_field(last, "input_tokens") + int_field(last, "output_tokens")
        cached = int_field(last, "cached_input_tokens")
        input_tokens = int_field(last, "input_tokens")
        output_tokens = int_field(last, "output_tokens")
        total_tokens = int_field(last, "total_tokens") or input_tokens + output_tokens
        counted = usage(max(input_tokens - cached, 0), output_tokens, cached, 0, total_tokens)
        if self.counts_lead:
            self.next_usage = counted  # for the response whose items follow
            return
        if self.unpriced:
            self.unpriced.pop()["usage"] = counted
            self.unpriced.clear()
            # The count follows its response's items: what comes next is another response.
            self.close()

    def turn_context(self, payload: dict[str, Any], key: str, ms: int) -> None:
        self.close()
        changed = False
        model = str_field(payload, "model")
        if model and model != self.model:
            self.model = model
            self.current = self.builder.model_change(
                self.current, f"{self.provider}/{model}", key, ms
            )
            changed = True
        effort = str_field(payload, "effort")
        level = _EFFORT.get(effort) if effort else None
        if level is not None and level != self.effort:
            self.effort = level
            self.current = self.builder.thinking_level(self.current, level, f"{key}:effort", ms)
            changed = True
        if not changed:
            self.skip("turn_context")

    def compacted(self, payload: dict[str, Any], key: str, ms: int) -> None:
        self.close()
        summary = str_field(payload, "message") or "Context compacted by Codex."
        history = payload.get("replacement_history")
        preserve: dict[str, Any] | None = None
        if isinstance(history, list):
            remote: dict[str, Any] = {"provider": self.provider, "replacementHistory": history}
            item = next(
                (
                    h
                    for h in reversed(history)
                    if isinstance(h, dict) and h.get("type") in ("compaction", "compaction_summary")
                ),
                None,
            )
            if item is not None:
                remote["compactionItem"] = item
            preserve = {"openaiRemoteCompaction": remote}
        self.current = self.builder.compaction(
            self.current, summary, self.context_tokens, key, ms, preserve_data=preserve
        )

    def rollback(self, turns: int) -> None:
        """Back to before the last `turns` prompts: what follows starts a branch there."""
        target: str | None = self.current
        for _ in range(max(turns, 0)):
            if not self.prompt_stack:
                break
            target = self.prompt_stack.pop()
        self.current = target


_CWD = re.compile(r"<cwd>(.*?)</cwd>", re.S)


def environment_cwd(text: str) -> str | None:
    """The cwd an `<environment_context>` message names (the legacy header has none)."""
    match = _CWD.search(text) if "<environment_context>" in text else None
    return match.group(1).strip() or None if match else None


def _context_cwd(records: list[Record], legacy: bool) -> str | None:
    for record in records:
        payload = record.value if legacy else record.value.get("payload")
        if isinstance(payload, dict) and payload.get("type") == "message":
            found = environment_cwd(_item_text(payload.get("content")))
            if found:
                return found
    return None


def _query(action: object) -> object:
    return action.get("query") if isinstance(action, dict) else None


def _scan(
    records: list[Record], legacy: bool
) -> tuple[set[str] | None, set[str], set[str], bool, bool]:
    """What the events repeat (prompts, call ids and texts that response items hold),
    whether there are response items, and whether token counts lead their response."""
    prompts: set[str] = set()
    calls: set[str] = set()
    texts: set[str] = set()
    has_prompt_events = False
    has_items = False
    # Whether the first token count comes before any response item: then every
    # count precedes the items of its response (Codex 0.5x), else it follows them.
    leads: bool | None = None
    for record in records:
        value = record.value
        payload = value if legacy else value.get("payload")
        if not isinstance(payload, dict):
            continue
        kind = payload.get("type")
        if not legacy and value.get("type") == "event_msg":
            if kind == "user_message" and isinstance(payload.get("message"), str):
                has_prompt_events = True
                prompts.add(payload["message"])
                prompts.add(payload["message"].strip())
            if kind == "token_count" and isinstance(payload.get("info"), dict) and leads is None:
                leads = True
            continue
        if not legacy and value.get("type") != "response_item":
            continue
        if leads is None and (
            kind in _ASSISTANT_ITEMS or (kind == "message" and payload.get("role") == "assistant")
        ):
            leads = False
        has_items = True
        for field_name in ("call_id", "id"):
            call = payload.get(field_name)
            if isinstance(call, str) and isinstance(kind, str) and "call" in kind:
                calls.add(call)
        if kind == "message":
            text = _item_text(payload.get("content"))
            if text:
                texts.add(text)
        elif kind == "reasoning":
            for part in list(payload.get("summary") or ()) + list(payload.get("content") or ()):
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.add(part["text"])
    return (prompts if has_prompt_events else None), calls, texts, has_items, leads is True


def read_codex_session(path: str, *, title: str | None = None) -> ForeignSession:
    """Read a Codex rollout into an in-memory v3 session (see the module doc).

    `title`: the thread name from Codex's index (`session_index.jsonl`), used when
    the rollout itself names none. Lines that are not JSON objects are skipped and
    listed in `damaged`. Raises OSError when the file cannot be read,
    NotAForeignSessionError when it is not a rollout.
    """
    return codex_session_from(read_transcript(path), title=title)


def codex_session_from(transcript: Transcript, *, title: str | None = None) -> ForeignSession:
    """`read_codex_session` of a rollout already read (`read_transcript`)."""
    path = transcript.path
    records = transcript.records
    fallback_ms = int(os.stat(path).st_mtime * 1000)
    first = records[0].value if records else {}
    legacy = is_legacy_rollout(first)
    if not legacy and not any(isinstance(r.value.get("payload"), dict) for r in records[:50]):
        raise NotAForeignSessionError(path, "Codex")
    meta: dict[str, Any] = {}
    if legacy:
        meta = first
        records = records[1:]
    else:
        for record in records:
            if record.value.get("type") == "session_meta" and isinstance(
                record.value.get("payload"), dict
            ):
                meta = record.value["payload"]
                break
    session_id = str_field(meta, "id") or rollout_id(path) or os.path.basename(path)
    cwd = str_field(meta, "cwd") or _context_cwd(records, legacy) or ""
    created = timestamp_ms(meta.get("timestamp"))
    if created is None:
        created = next(
            (ms for r in records if (ms := timestamp_ms(r.value.get("timestamp"))) is not None),
            fallback_ms,
        )
    provider = str_field(meta, "model_provider") or "openai"
    prompts, calls, texts, has_items, counts_lead = _scan(records, legacy)
    forked = str_field(meta, "forked_from_id")
    builder = TreeBuilder(cwd, session_id, forked)
    rollout = _Rollout(
        builder,
        provider,
        created,
        prompts,
        calls,
        texts,
        has_items,
        session_id=None if legacy else session_id,
        last_ms=created,
        counts_lead=counts_lead,
    )
    if legacy and isinstance(meta.get("instructions"), str) and meta["instructions"]:
        rollout.current = builder.custom_message(
            None, "codex:instructions", meta["instructions"], "header", created
        )
    for record in records:
        rollout.feed(record, legacy)
    rollout.close()
    name = rollout.name or title
    return ForeignSession(
        source="codex",
        source_id=session_id,
        path=os.path.abspath(path),
        cwd=cwd,
        created_ms=created,
        manager=builder.finish(rollout.current, name, "auto"),
        name=name,
        parent_source_id=forked,
        damaged=list(transcript.damaged),
        skipped=dict(rollout.skipped),
        size=transcript.size,
    )
