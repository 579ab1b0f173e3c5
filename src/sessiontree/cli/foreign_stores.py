"""Other agents' stores as the store of an invocation: `--agent` (or an `--agent-dir`
that is such a store) and a session file of theirs given by its path.

Either way the store is a read-only `ForeignStorage`: the commands that only read
(`registry.Access.READS`) work on it unchanged, and every other command is refused
before it runs. No command module is imported here: the global options (`options.py`)
and the session lookup (`common.py`) use it as an invocation starts.
"""

from __future__ import annotations

import os

from sessiontree.cli.errors import EXIT_USAGE, CliError
from sessiontree.cli.registry import only_reads, reading_commands
from sessiontree.errors import InvalidStoreError
from sessiontree.foreign.agents import detect_file
from sessiontree.foreign.opencode_db import (
    DatabaseError,
    is_opencode_db,
    list_db_sessions,
    split_db_path,
)
from sessiontree.foreign.storage import ForeignStorage
from sessiontree.foreign.store import (
    AGENT_NAMES,
    AGENTS,
    FOREIGN_AGENTS,
    ForeignStore,
    detect_agent,
)
from sessiontree.store import Store

__all__ = ["agent_store", "in_place_store"]


def agent_store(
    agent: str | None, agent_dir: str | None, url: str | None, command: str | None
) -> Store:
    """The store `--agent` and `--agent-dir` name (`url`: the database `--store` names).

    `agent_dir` (absolute) is where the store is when given; `agent` says whose it is
    (without it, the format of `agent_dir` is detected). Raises CliError (usage) for
    an unknown agent, a command that would write another agent's store, or such a
    store with a database.
    """
    if agent is not None and agent not in AGENTS:
        raise CliError(f"--agent must be one of {', '.join(AGENTS)}, not {agent!r}", EXIT_USAGE)
    if url is not None:
        kind = agent if agent is not None else detect_agent(agent_dir) if agent_dir else None
        # Claude Code's layout in a database (the Claude Agent SDK adapter's) is read from
        # it, `--agent-dir` the root its paths are under; no other agent's is kept there.
        if kind in FOREIGN_AGENTS and agent != "claude":
            raise CliError(
                f"--store and the {AGENT_NAMES[kind]} store cannot be used together", EXIT_USAGE
            )
    try:
        if url is not None:
            store = Store(url, agent=agent, agent_dir=agent_dir)
        else:
            store = Store(agent_dir, agent=agent)
    except InvalidStoreError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if store.read_only and command is not None and not only_reads(command):
        name = AGENT_NAMES[store.agent]
        store.close()
        raise CliError(
            f"`{command}` does not work on the {name} store, which sessiontree only "
            f"reads ({', '.join(reading_commands())}); `sessiontree import --from "
            f"{store.agent}` copies its sessions into this agent's store",
            EXIT_USAGE,
        )
    return store


def in_place_store(path: str, command: str | None, here: str) -> Store | None:
    """The store that reads `path` in place if it is another agent's session file (or an
    OpenCode database's `<db>/<session id>`), read-only, as `--agent` reads that agent's
    store; None if it is not. `here`: the invocation's agent dir, whose caches and blobs
    stay in use. Raises CliError for a `command` that would write it, and for a whole
    OpenCode database (it holds many sessions)."""
    if not os.path.isfile(path) and split_db_path(path) is None:
        return None
    agent = detect_file(path)
    if agent is None:
        return None
    if os.path.isfile(path) and is_opencode_db(path):
        store = ForeignStore.at("opencode", path)
        names = ", ".join(store.sessions_in(path)[:3])
        such = f" (such as {names})" if names else ""
        raise CliError(
            f"{path} is an OpenCode database; name one of its sessions as {path}/SESSION_ID{such}"
        )
    if not only_reads(command):
        raise CliError(
            f"{path} is a session of {AGENT_NAMES[agent]}, which sessiontree only reads "
            f"({', '.join(reading_commands())}); `sessiontree import {path}` copies "
            "it into this agent's store",
            EXIT_USAGE,
        )
    split = split_db_path(path)
    if split is not None:
        # Said now: once adopted, a database that cannot be read looks like no session.
        try:
            list_db_sessions(*split)
        except DatabaseError as exc:
            raise CliError(str(exc)) from None
    return Store(here, storage=ForeignStorage(ForeignStore.single(agent, path)))
