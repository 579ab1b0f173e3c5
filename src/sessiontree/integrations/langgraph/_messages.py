"""LangChain messages (or dicts of their shape) as pi messages: what a thread's
`messages` channel is also written as, so every view of a session reads a graph's
conversation.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["message_key", "millis", "pi_message"]


def _text_of(content: Any) -> list[dict[str, Any]]:
    """LangChain content (a string or a list of blocks) as pi text blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                blocks.append({"type": "text", "text": block})
            elif isinstance(block, dict):
                text = block.get("text")
                if block.get("type") in ("text", None) and isinstance(text, str):
                    blocks.append({"type": "text", "text": text})
                elif block.get("type") in ("thinking", "reasoning"):
                    thought = block.get("thinking", block.get("reasoning"))
                    if isinstance(thought, str):
                        blocks.append({"type": "thinking", "thinking": thought})
                else:
                    blocks.append({"type": "text", "text": f"[{block.get('type', 'block')}]"})
    return blocks


def _field(message: Any, name: str) -> Any:
    if isinstance(message, dict):
        return message.get(name)
    return getattr(message, name, None)


def _int(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def _tool_calls(message: Any) -> list[dict[str, Any]]:
    calls = []
    raw = _field(message, "tool_calls")
    for call in raw if isinstance(raw, list) else []:
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if isinstance(function, dict):  # the OpenAI shape of a dict message
            name, args = function.get("name"), function.get("arguments")
            if isinstance(args, str):
                import json

                try:
                    args = json.loads(args)
                except ValueError:
                    args = {"arguments": args}
        else:
            name, args = call.get("name"), call.get("args")
        calls.append(
            {
                "type": "toolCall",
                "id": str(call.get("id") or ""),
                "name": str(name or "unknown"),
                "arguments": args if isinstance(args, dict) else {},
            }
        )
    return calls


def _usage(message: Any) -> dict[str, Any]:
    meta = _field(message, "usage_metadata")
    meta = meta if isinstance(meta, dict) else {}
    details = meta.get("input_token_details")
    details = details if isinstance(details, dict) else {}
    cache_read, cache_write = _int(details.get("cache_read")), _int(details.get("cache_creation"))
    input_ = max(0, _int(meta.get("input_tokens")) - cache_read - cache_write)
    output = _int(meta.get("output_tokens"))
    total = _int(meta.get("total_tokens")) or input_ + output + cache_read + cache_write
    zero = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
    return {
        "input": input_,
        "output": output,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "totalTokens": total,
        "cost": zero,
    }


def pi_message(message: Any, timestamp: int) -> dict[str, Any] | None:
    """A LangChain message (or a dict of that shape) as a pi message; None for what pi
    has no message for (system prompts, removals)."""
    kind = _field(message, "type")
    if isinstance(message, dict) and kind is None:
        kind = message.get("role")
    content = _field(message, "content")
    if kind in ("human", "user"):
        return {
            "role": "user",
            "content": content if isinstance(content, str) else _text_of(content),
            "timestamp": timestamp,
        }
    if kind in ("ai", "assistant"):
        calls = _tool_calls(message)
        meta = _field(message, "response_metadata")
        meta = meta if isinstance(meta, dict) else {}
        model = meta.get("model_name") or meta.get("model") or "unknown"
        provider = meta.get("model_provider") or "langgraph"
        return {
            "role": "assistant",
            "content": [*_text_of(content), *calls],
            "provider": str(provider),
            "model": str(model),
            "usage": _usage(message),
            "stopReason": "toolUse" if calls else "stop",
            "timestamp": timestamp,
        }
    if kind == "tool":
        call_id = _field(message, "tool_call_id")
        if call_id is None and isinstance(message, dict):
            call_id = message.get("toolCallId")
        return {
            "role": "toolResult",
            "toolCallId": str(call_id or ""),
            "toolName": str(_field(message, "name") or "unknown"),
            "content": _text_of(content),
            "isError": _field(message, "status") == "error",
            "timestamp": timestamp,
        }
    return None


def message_key(message: Any) -> Any:
    key = _field(message, "id")
    return key if key is not None else id(message)


def millis(ts: Any) -> int:
    if isinstance(ts, str):
        try:
            return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            pass
    return int(datetime.now(UTC).timestamp() * 1000)
