"""OpenAI Responses API input items as the pi messages pi and oh-my-pi read as the same
thing (pure: dicts in, dicts out, no framework imported)."""

from __future__ import annotations

import time
from typing import Any

from sessiontree.format import loads_line

__all__ = ["EMPTY_USAGE", "item_to_pi_message", "text_of"]

EMPTY_USAGE: dict[str, Any] = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}


def text_of(content: Any) -> str:
    """The text of a Responses content value (a string, or parts with `text`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or part.get("refusal") or "")
            for part in content
            if isinstance(part, dict)
        )
    return ""


def _user_content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        url = part.get("image_url")
        if kind == "input_image" and isinstance(url, str) and url.startswith("data:"):
            head, _, data = url.partition(",")
            mime = head[5:].split(";", 1)[0] or "image/png"
            blocks.append({"type": "image", "data": data, "mimeType": mime})
        elif kind == "input_image":
            blocks.append({"type": "text", "text": f"[image: {url or part.get('file_id')}]"})
        elif kind == "input_file":
            blocks.append({"type": "text", "text": f"[file: {part.get('filename') or ''}]"})
        else:
            blocks.append({"type": "text", "text": text_of([part])})
    return blocks


def _assistant(content: list[dict[str, Any]], stop: str, model: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "api": "openai-responses",
        "provider": "openai",
        "model": model,
        "usage": {**EMPTY_USAGE, "cost": dict(EMPTY_USAGE["cost"])},
        "stopReason": stop,
        "timestamp": int(time.time() * 1000),
    }


def _arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw if isinstance(raw, dict) else {}
    try:
        value = loads_line(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def item_to_pi_message(
    item: dict[str, Any], tool_names: dict[str, str], model: str = "unknown"
) -> dict[str, Any] | None:
    """The pi message an item is, or None for an item that is no message pi has (it is
    kept as a custom entry). `tool_names` maps call ids to tool names (a function call
    adds its own; a function call's output reads it)."""
    kind = item.get("type")
    role = item.get("role")
    now = int(time.time() * 1000)
    if kind in (None, "message") and role == "user":
        return {"role": "user", "content": _user_content(item.get("content")), "timestamp": now}
    if kind in (None, "message") and role == "assistant":
        text = text_of(item.get("content"))
        return _assistant([{"type": "text", "text": text}], "stop", model)
    if kind == "function_call":
        call_id = str(item.get("call_id") or item.get("id") or "")
        name = str(item.get("name") or "")
        tool_names[call_id] = name
        block = {
            "type": "toolCall",
            "id": call_id,
            "name": name,
            "arguments": _arguments(item.get("arguments")),
        }
        return _assistant([block], "toolUse", model)
    if kind == "function_call_output":
        call_id = str(item.get("call_id") or "")
        output = item.get("output")
        text = output if isinstance(output, str) else text_of(output)
        return {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": tool_names.get(call_id, ""),
            "content": [{"type": "text", "text": text}],
            "isError": False,
            "timestamp": now,
        }
    if kind == "reasoning":
        summary = item.get("summary")
        thinking = "\n\n".join(str(s.get("text", "")) for s in summary or [] if isinstance(s, dict))
        thought: dict[str, Any] = {"type": "thinking", "thinking": thinking}
        if isinstance(item.get("encrypted_content"), str):
            thought["thinkingSignature"] = item["encrypted_content"]
        return _assistant([thought], "stop", model)
    return None
