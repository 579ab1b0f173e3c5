"""Storage backends for session files (real filesystem and in-memory)."""

from sessiontree.storage.base import SessionStorage, SessionStorageWriter, StorageStat
from sessiontree.storage.file import FileSessionStorage
from sessiontree.storage.memory import MemorySessionStorage

__all__ = [
    "FileSessionStorage",
    "MemorySessionStorage",
    "SessionStorage",
    "SessionStorageWriter",
    "StorageStat",
]
