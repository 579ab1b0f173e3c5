"""Token and cost totals summed from assistant messages' `usage` objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["UsageTotals", "number"]


def number(value: object) -> float | None:
    """`value` when it is an int or float (not a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return None


@dataclass(slots=True)
class UsageTotals:
    """Summed usage of some assistant messages."""

    messages: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0

    def add_usage(self, usage: object) -> None:
        """Add one assistant message's `usage` object (anything else counts the message only)."""
        self.messages += 1
        if not isinstance(usage, dict):
            return
        for attr, key in (
            ("input", "input"),
            ("output", "output"),
            ("cache_read", "cacheRead"),
            ("cache_write", "cacheWrite"),
        ):
            value = number(usage.get(key))
            if value is not None:
                setattr(self, attr, getattr(self, attr) + int(value))
        cost = usage.get("cost")
        if isinstance(cost, dict):
            total = number(cost.get("total"))
            if total is not None:
                self.cost += total

    def merge(self, other: UsageTotals) -> None:
        self.messages += other.messages
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.cost += other.cost

    def to_json(self) -> dict[str, Any]:
        """The on-disk key names: input, output, cacheRead, cacheWrite, cost."""
        return {
            "messages": self.messages,
            "input": self.input,
            "output": self.output,
            "cacheRead": self.cache_read,
            "cacheWrite": self.cache_write,
            "cost": round(self.cost, 10),
        }
