"""LangGraph checkpoints as session trees: `SessionTreeSaver`.

A LangGraph checkpointer (`langgraph.checkpoint.base.BaseCheckpointSaver`) on a store
of sessions, files or PostgreSQL (`pip install 'sessiontree[langgraph]'`):

- a thread (`thread_id`, all its `checkpoint_ns`) is one session, under the project
  `/langgraph` of the store (`<agent dir>/sessions/--langgraph--/`), named by the thread
  id; its file name ends in a UUID made from the thread id, so a thread is found by
  one directory listing, and the threads are the store's listing of that project;
- each checkpoint is one custom entry (`customType` `langgraph.checkpoint`, which
  every reader keeps as it is) whose tree parent is its parent checkpoint's (through
  the writes and messages between them): a fork (`update_state` on an old checkpoint)
  is a branch of the tree;
- channel values are stored by version: a version is written once, in the entry of
  the first checkpoint that has it, so a value unchanged since the parent is not
  written again; a list that extends its parent's version (a growing `messages`
  list) is written as the items it adds; a serialized value or item over
  `INLINE_BYTES` goes to the store's blob store (content-addressed) and the entry
  holds its `blob:sha256:` ref;
- pending writes (`put_writes`) are `langgraph.writes` entries under their
  checkpoint; metadata is plain JSON in the entry (when it is JSON), filtered by
  `list(filter=)`; writes saved late, under an older checkpoint, are followed by a
  `langgraph.leaf` entry under the newest checkpoint's last entry, so the file's last
  entry (the leaf every reader opens at) stays on the newest path;
- the `messages` channel (LangChain messages, or dicts of that shape) is also written
  as pi messages (user, assistant with tool calls and usage, tool results) on the same
  branch, just before the checkpoint that added them, so `sessiontree show`, `tree`,
  `search`, `usage` and the web app read a graph's conversation. The checkpoint
  entries stay the source of truth for LangGraph.

Concurrency: a saver takes a thread's writer lock at its first write to the thread
and keeps it until `close()` (or `release(thread_id)`): another saver (another
process) writing the same thread gets `SessionLockError`; it does not wait. Threads
are files of their own, so writers of different threads never block each other.
Reading a thread takes no lock; a saver that does not write a thread reads it again
when its file changed.

`delete_thread` removes the thread's file (`sessiontree rm`); `delete_for_runs` and
`prune` rewrite a thread's file atomically without what they remove (a value a kept
checkpoint still needs is moved into it first, and what its DeltaChannels need of the
removed ancestors' writes); `copy_thread` writes the copy as a new session whose
header names its source (a fork). docs/langgraph.md says it all at length.
"""

from sessiontree.integrations.langgraph._messages import pi_message
from sessiontree.integrations.langgraph._saver import SessionTreeSaver
from sessiontree.integrations.langgraph._thread_state import (
    CHECKPOINT_TYPE,
    LEAF_TYPE,
    PROJECT,
    THREAD_TYPE,
    WRITES_TYPE,
    thread_file_key,
)
from sessiontree.integrations.langgraph._values import INLINE_BYTES

__all__ = [
    "CHECKPOINT_TYPE",
    "INLINE_BYTES",
    "LEAF_TYPE",
    "PROJECT",
    "THREAD_TYPE",
    "WRITES_TYPE",
    "SessionTreeSaver",
    "pi_message",
    "thread_file_key",
]
