"""A store of sessions as one value: `Store` (an agent dir, a database, or another
agent's store, read-only) and what is done to it: list, open, create, search, usage,
stats, gc, check, transfers."""

from __future__ import annotations

from sessiontree.store._store import PricedReplies, Store

__all__ = ["PricedReplies", "Store"]
