"""Builders for messages in the ecosystem's shape, shared by tests."""

from __future__ import annotations


def assistant(text: str = "ok", **extra: object) -> dict[str, object]:
    """A minimal assistant message in the ecosystem's shape."""
    message: dict[str, object] = {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": {
            "input": 100,
            "output": 20,
            "cacheRead": 5,
            "cacheWrite": 1,
            "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0, "cacheWrite": 0, "total": 0.3},
        },
        "stopReason": "stop",
        "timestamp": 1760000000000,
    }
    message.update(extra)
    return message


def user(text: str = "hi") -> dict[str, object]:
    return {"role": "user", "content": text, "timestamp": 1760000000000}
