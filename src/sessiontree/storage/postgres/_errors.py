"""The errors of the PostgreSQL store."""

from __future__ import annotations

from sessiontree.errors import SessionTreeError


class PostgresStoreError(SessionTreeError):
    """The PostgreSQL store cannot be used: bad schema name, unreachable server, newer schema."""


class PathOutsideStoreError(PostgresStoreError, ValueError):
    """An absolute path that is not under the store's root (it has no key)."""

    def __init__(self, path: str, root: str) -> None:
        super().__init__(f"{path}: outside the store root {root}")
        self.path = path
        self.root = root
