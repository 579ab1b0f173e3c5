"""Storage backends for session files (real filesystem, in-memory, PostgreSQL).

`PostgresSessionStorage` is imported on first use: it needs the optional extra
(`pip install 'sessiontree[postgres]'`) and says so when it is missing.
"""

from typing import TYPE_CHECKING, Any

from sessiontree.storage.base import (
    BlobBackedStorage,
    LockingStorage,
    RootedStorage,
    SessionIndexStorage,
    SessionMeta,
    SessionStorage,
    SessionStorageWriter,
    StorageStat,
    WriterLock,
)
from sessiontree.storage.file import FileSessionStorage
from sessiontree.storage.memory import MemorySessionStorage

if TYPE_CHECKING:
    from sessiontree.storage.postgres import PostgresSessionStorage

__all__ = [
    "BlobBackedStorage",
    "FileSessionStorage",
    "LockingStorage",
    "MemorySessionStorage",
    "PostgresSessionStorage",
    "RootedStorage",
    "SessionIndexStorage",
    "SessionMeta",
    "SessionStorage",
    "SessionStorageWriter",
    "StorageStat",
    "WriterLock",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresSessionStorage":
        from sessiontree.storage.postgres import PostgresSessionStorage

        return PostgresSessionStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
