"""`StoreParts`: what every store-wide function works on, said once.

A store is a storage (files, a database, another agent's reader), the agent dir its
paths are under (whose caches, prompt history and `rescue/` are used) and, for a
copy, the blob store its images go to. `Store` holds one and hands it down; the
listing, maintenance, report, search and foreign packages take it instead of
`storage=`, `agent_dir=` and `blob_store=` one by one. Which store is the default is
not decided here: `store_parts` fills in the defaults only for the API contract's
functions that always had them (`Store()` chooses the default store).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sessiontree._util.env import agent_dir_or_default
from sessiontree.storage import RootedStorage, default_storage

if TYPE_CHECKING:
    from sessiontree.storage import BlobStoreLike, SessionStorage

__all__ = ["StoreParts", "store_parts"]


@dataclass(frozen=True, slots=True)
class StoreParts:
    """A store's storage, its agent dir and (for a copy) the blob store images go to."""

    storage: SessionStorage
    agent_dir: str
    """The agent dir the store's paths are under (`<agent_dir>/sessions/...`) and whose
    caches are used: for a database, the root its paths are relative to."""
    blobs: BlobStoreLike | None = None
    """Where images go and are read from; None: each session's by the one rule
    (`blob_store_for`: the storage's own, else the `blobs/` of the agent dir holding
    the session, else `agent_dir`'s)."""

    @property
    def root(self) -> str:
        """The agent dir whose `sessions/` and `blobs/` the storage holds: a database's
        `root` (`RootedStorage`), else `agent_dir` (a file store's are where they are)."""
        storage = self.storage
        if isinstance(storage, RootedStorage) and isinstance(storage.root, str):
            return storage.root
        return self.agent_dir

    @property
    def sessions_dir(self) -> str:
        """`<agent dir>/sessions`, where every project's session dir is."""
        return os.path.join(self.agent_dir, "sessions")

    def blobs_for(self, session_path: str | None) -> BlobStoreLike:
        """The blob store of the session at `session_path` (None: of the store)."""
        if self.blobs is not None:
            return self.blobs
        # Here: the agent dir's rules (breadcrumbs, blob refs) are a session's that is
        # read or written, and a listing looks at none.
        from sessiontree.layout._agent_dir import blob_store_for

        return blob_store_for(session_path, self.storage, self.agent_dir)


def store_parts(
    storage: SessionStorage | None = None, agent_dir: str | os.PathLike[str] | None = None
) -> StoreParts:
    """The parts a function of the API contract works on when given none: the agent
    dir's files, the configured agent dir (`$PI_CODING_AGENT_DIR`, else
    `~/.xcsh/agent`). The one place those two defaults are filled in together."""
    directory = os.fspath(agent_dir) if agent_dir is not None else None
    return StoreParts(default_storage(storage), agent_dir_or_default(directory))
