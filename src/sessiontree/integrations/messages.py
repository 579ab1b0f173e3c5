"""Message converters for agents written on the raw SDKs: pi messages (what
`build_session_context(...).messages` and `convert_to_llm` give: user, assistant and
toolResult messages) to the Anthropic Messages API and to OpenAI Chat Completions and
Responses input; and a response (with its usage) back to the pi assistant message to
append with `SessionManager.append_message`.

Pure functions over plain dicts: no SDK is imported. A response may be given as the
SDK's object (anything with `model_dump()`) or as its dict.

- `to_anthropic(messages, system=None) -> {"system": ..., "messages": [...]}`:
  images as base64 `source` blocks, tool calls as `tool_use`, tool results as
  `tool_result` blocks (consecutive results in one user message), thinking with its
  signature (thinking without one, which Anthropic would refuse, as text).
- `to_openai_chat(messages, system=None)`: chat messages (`tool_calls`, `tool` role);
  thinking is not sent.
- `to_openai_responses(messages, system=None)`: Responses input items (`function_call`,
  `function_call_output`; a reasoning item when the thinking block's signature holds
  one, as pi keeps it).
- `from_anthropic(message)`, `from_openai_chat(completion)`,
  `from_openai_response(response)`: the pi assistant message (content, `usage` in pi's
  fields, `stopReason`, `api`, `provider`, `model`, `timestamp`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sessiontree.format import loads_line, serialize_entry

__all__ = [
    "from_anthropic",
    "from_openai_chat",
    "from_openai_response",
    "to_anthropic",
    "to_openai_chat",
    "to_openai_responses",
]

Message = dict[str, Any]


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _text(content: Any) -> str:
    return "".join(str(b.get("text", "")) for b in _blocks(content) if b.get("type") == "text")


def _data_url(block: dict[str, Any]) -> str:
    return f"data:{block.get('mimeType', 'image/png')};base64,{block.get('data', '')}"


def _dump(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    dump = getattr(obj, "model_dump", None)
    if dump is None:
        raise TypeError(f"not a response: {type(obj).__name__}")
    value = dump(mode="json", exclude_none=False)
    assert isinstance(value, dict)
    return value


def _usage(inp: int, out: int, cache_read: int = 0, cache_write: int = 0) -> dict[str, Any]:
    return {
        "input": inp,
        "output": out,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "totalTokens": inp + out + cache_read + cache_write,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


def _assistant(
    content: list[dict[str, Any]],
    usage: dict[str, Any],
    stop: str,
    api: str,
    provider: str,
    model: str,
    response_id: str | None = None,
) -> Message:
    message: Message = {
        "role": "assistant",
        "content": content,
        "api": api,
        "provider": provider,
        "model": model,
        "usage": usage,
        "stopReason": stop,
        "timestamp": int(time.time() * 1000),
    }
    if response_id:
        message["responseId"] = response_id
    return message


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str) and raw.strip():
        try:
            value = loads_line(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


# ---------------------------------------------------------------------- Anthropic


def _anthropic_image(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": block.get("mimeType", "image/png"),
            "data": block.get("data", ""),
        },
    }


def _anthropic_user(content: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in _blocks(content):
        if block.get("type") == "image":
            out.append(_anthropic_image(block))
        elif block.get("type") == "text":
            out.append({"type": "text", "text": str(block.get("text", ""))})
    return out


def _anthropic_assistant(content: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in _blocks(content):
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            out.append({"type": "text", "text": str(block["text"])})
        elif kind == "thinking":
            signature = block.get("thinkingSignature")
            if block.get("redacted") and isinstance(signature, str):
                out.append({"type": "redacted_thinking", "data": signature})
            elif isinstance(signature, str) and signature:
                out.append(
                    {
                        "type": "thinking",
                        "thinking": block.get("thinking", ""),
                        "signature": signature,
                    }
                )
            elif block.get("thinking"):
                out.append({"type": "text", "text": str(block["thinking"])})
        elif kind == "toolCall":
            out.append(
                {
                    "type": "tool_use",
                    "id": str(block.get("id", "")),
                    "name": str(block.get("name", "")),
                    "input": block.get("arguments") or {},
                }
            )
    return out


def to_anthropic(messages: Sequence[Message], system: str | None = None) -> dict[str, Any]:
    """`{"system": system, "messages": [...]}` for `client.messages.create(**...)`
    (`system` left out when None)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "user":
            out.append({"role": "user", "content": _anthropic_user(m.get("content"))})
        elif role == "assistant":
            blocks = _anthropic_assistant(m.get("content"))
            if blocks:
                out.append({"role": "assistant", "content": blocks})
        elif role == "toolResult":
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": str(m.get("toolCallId", "")),
                "content": _anthropic_user(m.get("content")),
                "is_error": bool(m.get("isError")),
            }
            last = out[-1] if out else None
            if (
                last is not None
                and last["role"] == "user"
                and all(b.get("type") == "tool_result" for b in last["content"])
            ):
                last["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
    request: dict[str, Any] = {"messages": out}
    if system is not None:
        request["system"] = system
    return request


_ANTHROPIC_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "toolUse",
    "refusal": "error",
}


def from_anthropic(message: Any) -> Message:
    """The pi assistant message of an Anthropic `Message` (object or dict)."""
    data = _dump(message)
    content: list[dict[str, Any]] = []
    for block in data.get("content") or []:
        kind = block.get("type")
        if kind == "text":
            content.append({"type": "text", "text": block.get("text", "")})
        elif kind == "thinking":
            content.append(
                {
                    "type": "thinking",
                    "thinking": block.get("thinking", ""),
                    "thinkingSignature": block.get("signature", ""),
                }
            )
        elif kind == "redacted_thinking":
            content.append(
                {
                    "type": "thinking",
                    "thinking": "",
                    "thinkingSignature": block.get("data", ""),
                    "redacted": True,
                }
            )
        elif kind == "tool_use":
            content.append(
                {
                    "type": "toolCall",
                    "id": block.get("id", ""),
                    "name": block.get("name", ""),
                    "arguments": block.get("input") or {},
                }
            )
    u = data.get("usage") or {}
    usage = _usage(
        int(u.get("input_tokens") or 0),
        int(u.get("output_tokens") or 0),
        int(u.get("cache_read_input_tokens") or 0),
        int(u.get("cache_creation_input_tokens") or 0),
    )
    stop = _ANTHROPIC_STOP.get(str(data.get("stop_reason")), "stop")
    return _assistant(
        content,
        usage,
        stop,
        "anthropic-messages",
        "anthropic",
        str(data.get("model", "")),
        data.get("id"),
    )


# ---------------------------------------------------------------------- OpenAI Chat Completions


def to_openai_chat(messages: Sequence[Message], system: str | None = None) -> list[dict[str, Any]]:
    """Chat Completions `messages` (a system message first when `system` is given)."""
    out: list[dict[str, Any]] = []
    if system is not None:
        out.append({"role": "system", "content": system})
    for m in messages:
        role = m.get("role")
        content = m.get("content")
        if role == "user":
            if isinstance(content, str):
                out.append({"role": "user", "content": content})
                continue
            parts: list[dict[str, Any]] = []
            for block in _blocks(content):
                if block.get("type") == "image":
                    parts.append({"type": "image_url", "image_url": {"url": _data_url(block)}})
                elif block.get("type") == "text":
                    parts.append({"type": "text", "text": str(block.get("text", ""))})
            out.append({"role": "user", "content": parts})
        elif role == "assistant":
            text = _text(content)
            calls = [
                {
                    "id": str(b.get("id", "")),
                    "type": "function",
                    "function": {
                        "name": str(b.get("name", "")),
                        "arguments": serialize_entry(b.get("arguments") or {}),
                    },
                }
                for b in _blocks(content)
                if b.get("type") == "toolCall"
            ]
            if not text and not calls:
                continue
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = calls
            out.append(message)
        elif role == "toolResult":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(m.get("toolCallId", "")),
                    "content": _text(content),
                }
            )
    return out


_CHAT_STOP = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "toolUse",
    "function_call": "toolUse",
}


def from_openai_chat(completion: Any) -> Message:
    """The pi assistant message of a `ChatCompletion`'s first choice (object or dict)."""
    data = _dump(completion)
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            {
                "type": "toolCall",
                "id": call.get("id", ""),
                "name": function.get("name", ""),
                "arguments": _arguments(function.get("arguments")),
            }
        )
    u = data.get("usage") or {}
    cached = int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    usage = _usage(
        int(u.get("prompt_tokens") or 0) - cached, int(u.get("completion_tokens") or 0), cached
    )
    stop = _CHAT_STOP.get(str(choice.get("finish_reason")), "error")
    return _assistant(
        content,
        usage,
        stop,
        "openai-completions",
        "openai",
        str(data.get("model", "")),
        data.get("id"),
    )


# ---------------------------------------------------------------------- OpenAI Responses


def _reasoning_item(block: dict[str, Any]) -> dict[str, Any] | None:
    signature = block.get("thinkingSignature")
    if not isinstance(signature, str) or not signature.startswith("{"):
        return None
    try:
        item = loads_line(signature)
    except ValueError:
        return None
    if not isinstance(item, dict) or item.get("type") != "reasoning":
        return None
    return {k: v for k, v in item.items() if v is not None}  # a dump's unset fields


def to_openai_responses(
    messages: Sequence[Message], system: str | None = None
) -> list[dict[str, Any]]:
    """Responses API `input` items (a system message first when `system` is given)."""
    out: list[dict[str, Any]] = []
    if system is not None:
        out.append({"role": "system", "content": system})
    for m in messages:
        role = m.get("role")
        content = m.get("content")
        if role == "user":
            parts: list[dict[str, Any]] = []
            for block in _blocks(content):
                if block.get("type") == "image":
                    parts.append(
                        {"type": "input_image", "image_url": _data_url(block), "detail": "auto"}
                    )
                elif block.get("type") == "text":
                    parts.append({"type": "input_text", "text": str(block.get("text", ""))})
            out.append({"role": "user", "content": parts})
        elif role == "assistant":
            for block in _blocks(content):
                kind = block.get("type")
                if kind == "text" and block.get("text"):
                    out.append({"role": "assistant", "content": str(block["text"])})
                elif kind == "toolCall":
                    out.append(
                        {
                            "type": "function_call",
                            "call_id": str(block.get("id", "")),
                            "name": str(block.get("name", "")),
                            "arguments": serialize_entry(block.get("arguments") or {}),
                        }
                    )
                elif kind == "thinking":
                    item = _reasoning_item(block)
                    if item is not None:
                        out.append(item)
        elif role == "toolResult":
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": str(m.get("toolCallId", "")),
                    "output": _text(content),
                }
            )
    return out


def from_openai_response(response: Any) -> Message:
    """The pi assistant message of a Responses API `Response` (object or dict)."""
    data = _dump(response)
    content: list[dict[str, Any]] = []
    calls = False
    for item in data.get("output") or []:
        kind = item.get("type")
        if kind == "message":
            text = "".join(
                str(p.get("text") or p.get("refusal") or "") for p in item.get("content") or []
            )
            content.append({"type": "text", "text": text})
        elif kind == "function_call":
            calls = True
            content.append(
                {
                    "type": "toolCall",
                    "id": item.get("call_id", ""),
                    "name": item.get("name", ""),
                    "arguments": _arguments(item.get("arguments")),
                }
            )
        elif kind == "reasoning":
            summary = "\n\n".join(str(s.get("text", "")) for s in item.get("summary") or [])
            content.append(
                {
                    "type": "thinking",
                    "thinking": summary,
                    "thinkingSignature": serialize_entry(item),
                }
            )
    u = data.get("usage") or {}
    details = u.get("input_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    written = int(details.get("cache_write_tokens") or 0)
    usage = _usage(
        int(u.get("input_tokens") or 0) - cached - written,
        int(u.get("output_tokens") or 0),
        cached,
        written,
    )
    status = data.get("status")
    if calls:
        stop = "toolUse"
    elif status == "incomplete":
        stop = "length"
    elif status == "failed":
        stop = "error"
    else:
        stop = "stop"
    return _assistant(
        content,
        usage,
        stop,
        "openai-responses",
        "openai",
        str(data.get("model", "")),
        data.get("id"),
    )
