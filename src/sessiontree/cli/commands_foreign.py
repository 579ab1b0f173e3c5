"""`import`: copy another agent's session (or, with `--all`, every one not imported
yet) into this agent's store. Reading another agent's store in place (`--agent`, or
one of its session files by its path) is `foreign_stores.py`'s.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer
from rich.text import Text

from sessiontree._util.fs import file_kind
from sessiontree.cli.common import (
    EXIT_AMBIGUOUS,
    EXIT_USAGE,
    CliError,
    JsonOption,
    console,
    current_store,
    emit_json,
    err_console,
    error_text,
    progress,
    warn_passed_over,
)
from sessiontree.errors import SessionTreeError
from sessiontree.foreign import ForeignSession
from sessiontree.foreign.agents import detect_file
from sessiontree.foreign.importer import (
    AlreadyImportedError,
    EarlierImport,
    ImportLockError,
    find_imports,
    import_session,
)
from sessiontree.foreign.opencode_db import (
    is_opencode_db,
    split_db_path,
)
from sessiontree.foreign.store import (
    AGENT_NAMES,
    FOREIGN_AGENTS,
    ForeignListing,
    ForeignStore,
)
from sessiontree.layout import StoreParts
from sessiontree.store import find_stores

__all__ = ["import_command"]

# ---------------------------------------------------------------------------- import


def _source_store(source: str) -> ForeignStore:
    agent = next((a for a in FOREIGN_AGENTS if a == source), None)
    if agent is None:
        raise CliError(
            f"--from must be one of {', '.join(FOREIGN_AGENTS)}, not {source!r}", EXIT_USAGE
        )
    return ForeignStore.default(agent, current_store().agent_dir)


def _no_file(arg: str, path: str) -> CliError:
    """SESSION names no file: nothing there, or what is there instead (a FIFO is never
    opened)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return CliError(f"{arg}: no such file")
    return CliError(f"{arg}: {file_kind(mode)}, not a regular file")


def _detected_source(arg: str) -> tuple[str, list[ForeignListing] | None]:
    """Whose session SESSION is (`import SESSION` without --from), and, for an id or
    prefix, what it matched in that agent's store (None for a file's path).

    A file (or an OpenCode database's `<db>/<session id>`) is read for its format,
    as `show FILE` detects it. An id or prefix is looked up in every other agent's
    store found here without setup (`sessiontree stores`): found in one, that agent
    it is; in several, a usage error naming them; in none, an error."""
    path = os.path.abspath(os.path.expanduser(arg))
    if os.path.isfile(path) or split_db_path(path) is not None:
        agent = detect_file(path)
        if agent is None:
            raise CliError(
                f"{arg}: not a session file of {', '.join(AGENT_NAMES.values())} "
                "(give --from AGENT to read it as one)"
            )
        return agent, None
    if os.sep in arg or arg.endswith((".jsonl", ".json")):
        raise _no_file(arg, path)
    return _inferred_source(arg)


def _inferred_source(arg: str) -> tuple[str, list[ForeignListing]]:
    """The one agent whose store holds a session SESSION (an id or prefix) names."""
    present = {f.agent for f in find_stores() if f.machine is None}  # this machine's
    agents = [a for a in FOREIGN_AGENTS if a in present]
    cache = current_store().agent_dir
    matches: dict[str, list[ForeignListing]] = {}
    looked: list[str] = []
    for agent in agents:
        store = ForeignStore.default(agent, cache)
        looked.extend(r for r in store.roots if os.path.exists(r))
        try:
            found = store.find(arg)
        except (OSError, SessionTreeError) as exc:
            err_console.print(
                Text(f"sessiontree: warning: {store.name} store not read: {error_text(exc)}"),
                soft_wrap=True,
            )
            continue
        if found:
            matches[agent] = found
    if len(matches) == 1:
        [(only, found)] = matches.items()
        return only, found
    flags = f"--from {'|'.join(FOREIGN_AGENTS)}"
    if matches:
        named = "; ".join(
            f"{AGENT_NAMES[a]}: "
            + ", ".join(os.path.basename(f.path) for f in found[:3])
            + (f" and {len(found) - 3} more" if len(found) > 3 else "")
            for a, found in matches.items()
        )
        raise CliError(
            f"{arg!r} matches sessions in {len(matches)} agents' stores ({named}); "
            f"say whose with --from {'|'.join(matches)}",
            EXIT_USAGE,
        )
    if not agents:
        raise CliError(
            f"no other agent's store found here to look for {arg!r} in "
            f"({', '.join(AGENT_NAMES[a] for a in FOREIGN_AGENTS)}: see `sessiontree "
            f"stores`); give a session file's path, or {flags}"
        )
    raise CliError(
        f"no session matches {arg!r} in the stores of "
        f"{', '.join(AGENT_NAMES[a] for a in agents)} (looked in {', '.join(looked)}); "
        f"give a session file's path, or {flags}"
    )


def _source_path(store: ForeignStore, arg: str, found: list[ForeignListing] | None = None) -> str:
    """SESSION as a file: a path, else a session-id or file-name prefix in the store
    (`found`: what it matched there, when looked up already)."""
    path = os.path.abspath(os.path.expanduser(arg))
    if os.path.isfile(path) and is_opencode_db(path):
        names = ", ".join(ForeignStore.at("opencode", path).sessions_in(path)[:3])
        raise CliError(
            f"{arg} is an OpenCode database; name one of its sessions as {path}/SESSION_ID"
            + (f" (such as {names})" if names else "")
        )
    if os.path.isfile(path) or split_db_path(path) is not None:
        return path
    if os.sep in arg or arg.endswith((".jsonl", ".json")):
        raise _no_file(arg, path)
    if found is None:
        found = store.find(arg)
    if not found:
        where = ", ".join(store.roots)
        raise CliError(f"no {store.name} session matches {arg!r} (looked in {where})")
    if len({f.meta.id for f in found}) > 1:
        names = ", ".join(os.path.basename(f.path) for f in found[:5])
        raise CliError(
            f"{arg!r} matches {len(found)} {store.name} sessions ({names}); give a longer prefix",
            EXIT_AMBIGUOUS,
        )
    return found[0].path


def _read(store: ForeignStore, path: str) -> ForeignSession:
    session = store.read(path)
    if session.damaged:
        shown = ", ".join(str(d) for d in session.damaged[:3])
        more = f" and {len(session.damaged) - 3} more" if len(session.damaged) > 3 else ""
        err_console.print(Text(f"sessiontree: warning: {path}: skipped {shown}{more}"))
    return session


def _summary(path: str, session: ForeignSession, subsessions: list[str]) -> dict[str, Any]:
    return {
        "path": path,
        "source": session.source,
        "sourceId": session.source_id,
        "sourcePath": session.path,
        "title": session.name,
        "entries": len(session.manager.get_entries()),
        "subsessions": subsessions,
        "skipped": session.skipped,
        "damagedLines": [d.line for d in session.damaged],
    }


def import_command(
    session: Annotated[
        str | None,
        typer.Argument(
            help="Another agent's session: its file's path (an OpenCode database's session: "
            "<db>/<session id>; an `opencode export` document), or a session-id prefix in "
            "the agent's default store.",
            show_default=False,
        ),
    ] = None,
    source: Annotated[
        str,
        typer.Option(
            "--from",
            metavar="AGENT",
            help="Whose session: claude, codex, opencode, gemini or copilot. Without it, "
            "a file's format is detected, and an id is looked for in every agent's store "
            "found here (`sessiontree stores`).",
        ),
    ] = "",
    cwd: Annotated[
        str | None,
        typer.Option("--cwd", help="The working directory to file it under (default: its own)."),
    ] = None,
    again: Annotated[
        bool, typer.Option("--again", help="Import a source imported before, as a new session.")
    ] = False,
    every: Annotated[
        bool, typer.Option("--all", help="Import every session of the store not imported yet.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Writes the new session (subagents into its artifacts dir) and its images, nothing
    else. A source imported before is refused unless --again.
    """
    if (session is None) == (not every):
        raise CliError("give SESSION or --all", EXIT_USAGE)
    matched = None
    if not source:
        if session is None:
            raise CliError(f"--from {'|'.join(FOREIGN_AGENTS)} is required", EXIT_USAGE)
        source, matched = _detected_source(session)
    store = _source_store(source)
    if cwd is not None:
        cwd = os.path.abspath(os.path.expanduser(cwd))
    parts = current_store().parts
    passed_over: list[tuple[str, str]] = []
    earlier = find_imports(parts, passed_over=passed_over)
    warn_passed_over(passed_over)
    if session is not None:
        path = _source_path(store, session, matched)
        foreign = _read(store, path)
        try:
            done = import_session(foreign, parts, cwd=cwd, again=again, earlier=earlier)
        except AlreadyImportedError as exc:
            raise CliError(str(exc)) from None
        if as_json:
            emit_json(_summary(done.path, foreign, done.subsessions))
            return
        subs = f" (+{len(done.subsessions)} subagent session(s))" if done.subsessions else ""
        console.print(Text(f"Imported {foreign.path}\n      -> {done.path}{subs}"), soft_wrap=True)
        return
    _import_all(store, parts, cwd, again, earlier, as_json)


def _import_all(
    store: ForeignStore,
    parts: StoreParts,
    cwd: str | None,
    again: bool,
    earlier: list[EarlierImport],
    as_json: bool,
) -> None:
    listing: list[ForeignListing] = store.list()
    imported: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    with progress(f"Importing from {store.name}", len(listing)) as advance:
        for item in sorted(listing, key=lambda i: i.path):
            advance(item.path)
            # What the listing knows is enough to pass over a source imported before.
            previous = next(
                (
                    e
                    for e in reversed(earlier)
                    if e.source == store.agent
                    and (e.source_id == item.meta.id or e.source_path == item.path)
                ),
                None,
            )
            if previous is not None and not again:
                grown = previous.source_bytes is not None and item.size > previous.source_bytes
                skipped.append(
                    {"sourcePath": item.path, "importedAs": previous.path, "grown": grown}
                )
                continue
            try:
                foreign = store.read(item.path)
            except (OSError, SessionTreeError) as exc:
                failed.append({"sourcePath": item.path, "error": str(exc)})
                continue
            try:
                # Asked again under the store's import lock: another run may have
                # imported it since this one listed the store.
                done = import_session(foreign, parts, cwd=cwd, again=again, earlier=earlier)
            except AlreadyImportedError as exc:
                skipped.append(
                    {"sourcePath": item.path, "importedAs": exc.earlier.path, "grown": exc.grown}
                )
                continue
            except ImportLockError as exc:
                # Every source after it would wait and fail alike: the run stops here.
                error = f"{exc}; the run stopped here, the sources after it were not tried"
                failed.append({"sourcePath": item.path, "error": error})
                break
            except (SessionTreeError, OSError) as exc:
                failed.append({"sourcePath": item.path, "error": str(exc)})
                continue
            imported.append(_summary(done.path, foreign, done.subsessions))
            record = (foreign.source, foreign.source_id, foreign.path, foreign.size)
            earlier.append(EarlierImport(done.path, *record))
    if as_json:
        emit_json({"imported": imported, "skipped": skipped, "failed": failed})
    else:
        changed = sum(1 for s in skipped if s["grown"])
        note = f" ({changed} grown since: import one with --again)" if changed else ""
        console.print(
            Text(
                f"Imported {len(imported)} {store.name} session(s); {len(skipped)} imported "
                f"before{note}; {len(failed)} failed"
            ),
            soft_wrap=True,
        )
        for fail in failed:
            err_console.print(Text(f"  {fail['sourcePath']}: {fail['error']}"), soft_wrap=True)
    if failed:
        raise typer.Exit(1)
