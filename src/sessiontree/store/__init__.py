"""A store of sessions as one value: `Store` (an agent dir, a database, or another
agent's store, read-only) and what is done to it: list, open, create, search, usage,
stats, gc, check, transfers; `Stores`: several stores read as one (what was skipped
and why); `find_stores`: every agent store on this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiontree._util.lazy import lazy_exports, lazy_table

if TYPE_CHECKING:  # what mypy sees; at run time each name is imported on first use
    from sessiontree._util.env import STORE_ENV
    from sessiontree.store._discover import FoundStore, find_stores, looked_in, store_size
    from sessiontree.store._store import PricedReplies, Store, made_by, replies_of
    from sessiontree.store._stores import (
        ListedSession,
        ListingPage,
        SessionFilter,
        Skipped,
        StoreHit,
        Stores,
        StoresSearch,
        StoresStats,
    )

_WHERE = lazy_table(
    {
        "sessiontree._util.env": "STORE_ENV",
        "_discover": "FoundStore find_stores looked_in store_size",
        "_store": "PricedReplies Store made_by replies_of",
        "_stores": (
            "ListedSession ListingPage SessionFilter Skipped StoreHit Stores StoresSearch "
            "StoresStats"
        ),
    }
)
"""Each name and the module (of this package, by its short name) it is imported from."""

if not TYPE_CHECKING:  # a module `__getattr__` would make type checkers accept any name
    __getattr__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "STORE_ENV",
    "FoundStore",
    "ListedSession",
    "ListingPage",
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
