"""Paths are keys: a path under the store's root is stored relative to it.

An absolute path under the root becomes its path relative to the root
(`sessions/--proj--/2026-..._id.jsonl`) and a relative path *is* a key, so hosts
with different agent dirs see the same sessions, each under its own absolute paths.
"""

from __future__ import annotations

import os
import posixpath

from sessiontree._util.fs import name_problem
from sessiontree.storage.postgres._errors import PathOutsideStoreError


class Keys:
    """The keys of paths under `root`, and the paths of keys (on this host)."""

    __slots__ = ("_root_prefix", "root")

    def __init__(self, root: str) -> None:
        self.root = os.path.normpath(os.path.abspath(root))
        self._root_prefix = self.root if self.root.endswith(os.sep) else self.root + os.sep

    def key_for(self, path: str) -> str:
        """The key of `path`: relative to the root ('' is the root itself)."""
        p = os.fspath(path)
        if "\x00" in p:
            raise ValueError("embedded null byte")
        if os.path.isabs(p):
            norm = os.path.normpath(p)
            if norm == self.root:
                return ""
            if not norm.startswith(self._root_prefix):
                raise PathOutsideStoreError(p, self.root)
            rel = norm[len(self._root_prefix) :]
        else:
            rel = posixpath.normpath(p.replace(os.sep, "/"))
            if rel == ".":
                return ""
            if rel == ".." or rel.startswith("../"):
                raise PathOutsideStoreError(p, self.root)
        return rel.replace(os.sep, "/")

    def path_for(self, key: str) -> str:
        """This host's absolute path of a key."""
        return os.path.join(self.root, *key.split("/")) if key else self.root


def split_key(key: str) -> tuple[str, str]:
    """The key's parent key and its name."""
    parent, _, name = key.rpartition("/")
    return parent, name


def child_key(parent: str, name: str) -> str:
    """The key of `name` in the directory `parent`."""
    return f"{parent}/{name}" if parent else name


def key_ok(key: str) -> bool:
    """Whether every component of a key read from the database is a plain name, so
    that it becomes a path under the root and nowhere else."""
    return all(name_problem(part) is None for part in key.split("/"))
