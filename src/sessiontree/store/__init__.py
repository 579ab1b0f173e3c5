"""A store of sessions as one value: `Store` (an agent dir, a database, or another
agent's store, read-only) and what is done to it: list, open, create, search, usage,
stats, gc, check, transfers; `Stores`: several stores read as one (what was skipped
and why); `find_stores`: every agent store on this machine."""

from __future__ import annotations

from sessiontree._util.env import STORE_ENV
from sessiontree.store._discover import FoundStore, find_stores, looked_in, store_size
from sessiontree.store._store import PricedReplies, Store, made_by, replies_of
from sessiontree.store._stores import (
    ListedSession,
    SessionFilter,
    Skipped,
    StoreHit,
    Stores,
    StoresSearch,
    StoresStats,
)

__all__ = [
    "STORE_ENV",
    "FoundStore",
    "ListedSession",
    "PricedReplies",
    "SessionFilter",
    "Skipped",
    "Store",
    "StoreHit",
    "Stores",
    "StoresSearch",
    "StoresStats",
    "find_stores",
    "looked_in",
    "made_by",
    "replies_of",
    "store_size",
]
