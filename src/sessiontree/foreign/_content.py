"""Small shared pieces of the two readers: usage, unknown blocks, text of a content list."""

from __future__ import annotations

import math
from typing import Any

from sessiontree.format import serialize_entry

__all__ = ["ZERO_COST", "block_as_text", "int_field", "str_field", "text_of", "usage"]

ZERO_COST = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}


def str_field(record: dict[str, Any], key: str) -> str | None:
    value = record.get(key)
    return value if isinstance(value, str) and value else None


def int_field(record: object, key: str) -> int:
    """A count the record holds under `key` (tokens, turns): 0 for what is no count."""
    if not isinstance(record, dict):
        return 0
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, int):
        # A negative count (no reply spends fewer than no tokens) counts nothing, as the
        # cost already takes it.
        return max(0, value)
    # NaN and infinity (JSON.parse reads a number beyond a double as one) count nothing.
    return max(0, int(value)) if math.isfinite(value) else 0


def usage(
    input_: int, output: int, cache_read: int, cache_write: int, total: int | None = None
) -> dict[str, Any]:
    """A `usage` object as pi and oh-my-pi store it, with a zero cost: an import keeps what
    the source recorded, and neither agent records a cost (prices are estimated later,
    at report time, never written into a session)."""
    return {
        "input": input_,
        "output": output,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "totalTokens": total if total is not None else input_ + output + cache_read + cache_write,
        "cost": dict(ZERO_COST),
    }


def block_as_text(kind: str, block: object) -> dict[str, Any]:
    """A content block this format has no place for, kept whole as a text block
    (`[<agent> <type>] <json>`), so nothing the source recorded is lost."""
    try:
        body = serialize_entry(block)
    except (TypeError, ValueError):
        body = repr(block)
    return {"type": "text", "text": f"[{kind}] {body}"}


def text_of(content: object) -> str:
    """The text of string content or of its text blocks, joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b["text"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
    return ""
