"""`sessiontree search`: full-text search across sessions, newest hits first; read-only."""

from __future__ import annotations

import difflib
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from sessiontree.cli.common import (
    EXIT_USAGE,
    CliError,
    JsonOption,
    all_stores,
    byte_progress,
    emit_json,
    print_notes,
)
from sessiontree.cli.render import (
    time_ago,
)
from sessiontree.format import (
    SEARCH_ROLES,
    format_iso,
    shown_title,
    time_range,
)
from sessiontree.store import (
    Stores,
)

if TYPE_CHECKING:
    from sessiontree.search import SearchHit

# Rich's drawing, the reports, the search and the history are imported by the commands
# that use them: `list --json` (a script's listing) loads none of them.

AllOption = Annotated[bool, typer.Option("--all", "-a", help="Every project, not just this one.")]


def _no_such_project(stores: Stores, where: str) -> NoReturn:
    """Refuse a project dir without sessions, naming the projects there are."""
    projects = {s.info.cwd for s in stores.list() if s.info.cwd}
    ordered = sorted(projects)
    known = ", ".join(ordered[:10]) + (", ..." if len(ordered) > 10 else "")
    raise CliError(
        f"no sessions of a project in {where}"
        + (f"; the projects are: {known}" if ordered else "; the store has none"),
        EXIT_USAGE,
    )


def _check_roles(roles: list[str] | None) -> None:
    for wanted in roles or ():
        if wanted not in SEARCH_ROLES:
            close = difflib.get_close_matches(wanted, SEARCH_ROLES, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise CliError(
                f"unknown role {wanted!r}{hint}; the roles are: {', '.join(SEARCH_ROLES)}",
                EXIT_USAGE,
            )


def _print_hits(hits: list[SearchHit], titles: dict[str, str], machines: dict[str, str]) -> None:
    """Newest first, each session's hits together (in file order) under its title (and
    the machine it was made on, when a sync brought it from another)."""
    from rich.text import Text

    from sessiontree.cli.common import console

    grouped: dict[str, list[SearchHit]] = {}
    for hit in hits:
        grouped.setdefault(hit.path, []).append(hit)
    for path, group in grouped.items():
        console.print()
        title = titles.get(path) or shown_title(None, None, group[0].session_id)
        machine = machines.get(path)
        console.print(
            Text.assemble(
                (group[0].session_id, "bold"),
                "  ",
                title,
                f"  (from {machine})" if machine else "",
                "  ",
                (path, "dim"),
            ),
            soft_wrap=True,
        )
        for hit in sorted(group, key=lambda h: h.line):
            when = (
                time_ago(datetime.fromtimestamp(hit.timestamp / 1000, UTC))
                if hit.timestamp is not None
                else ""
            )
            console.print(
                Text.assemble(
                    "  ",
                    (str(hit.entry_id or (f"line {hit.line}" if hit.line else "")), "dim"),
                    " ",
                    (hit.role, "cyan"),
                    " ",
                    (when, "dim"),
                    "  ",
                    hit.before,
                    (hit.match, "bold reverse"),
                    hit.after,
                )
            )


def _hit_json(hit: SearchHit) -> dict[str, Any]:
    return {
        "path": hit.path,
        "sessionId": hit.session_id,
        "entryId": hit.entry_id,
        "line": hit.line,
        "role": hit.role,
        "timestamp": format_iso(hit.timestamp) if hit.timestamp is not None else None,
        "snippet": hit.snippet,
        "matchStart": len(hit.before),
        "matchEnd": len(hit.before) + len(hit.match),
    }


def search_command(
    text: Annotated[
        str,
        typer.Argument(
            help="Text to look for, spaces included (a phrase); case-insensitive unless -s."
        ),
    ],
    all_projects: AllOption = False,
    project: Annotated[
        str | None,
        typer.Option("--project", "-p", metavar="DIR", help="The sessions of the project in DIR."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Stop after N hits.")] = 100,
    case_sensitive: Annotated[
        bool, typer.Option("--case-sensitive", "-s", help="Match case exactly.")
    ] = False,
    regex: Annotated[
        bool,
        typer.Option("--regex", "-e", help="TEXT is a regular expression (Python syntax)."),
    ] = False,
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role",
            "-r",
            metavar="ROLE",
            help="Only entries of this role (user, assistant, toolResult, title, label, ...); "
            "repeatable.",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Entries from this time: YYYY-MM-DD, ISO date-time, or 30m/12h/7d ago."),
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Entries up to this time (a date: to its end).")
    ] = None,
    no_index: Annotated[
        bool, typer.Option("--no-index", help="Read every session instead of the content index.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    if not text.strip():
        raise CliError("search text is empty", EXIT_USAGE)
    _check_roles(role)
    since_ms, until_ms = time_range(since, until)
    if all_projects and project is not None:
        raise CliError("give --all or --project, not both", EXIT_USAGE)
    where = os.path.abspath(os.path.expanduser(project)) if project is not None else os.getcwd()
    stores = all_stores()  # every store found, when none was named: each through its index
    with byte_progress("Indexing sessions") as advance:
        found = stores.search(
            text,
            cwd=None if all_projects else where,
            regex=regex,
            case_sensitive=case_sensitive,
            roles=role or None,
            since=since_ms,
            until=until_ms,
            limit=limit,
            use_index=not no_index,
            progress=advance,
        )
    if project is not None and not found.sessions:
        _no_such_project(stores, where)
    hits = [h.hit for h in found.hits]
    if as_json:
        emit_json(
            {
                "query": text,
                "regex": regex,
                "mode": found.mode,
                "notes": found.notes,
                "hits": [
                    {**_hit_json(h.hit), "machine": stores[h.store].machine} for h in found.hits
                ],
            }
        )
        if not hits:
            raise typer.Exit(1)  # like grep: 1 means no match
        return
    from rich.text import Text

    from sessiontree.cli.common import console

    print_notes(found.notes)
    if not hits:
        where = "" if all_projects else f" of {where}"
        console.print(Text(f"No match for {text!r} in {len(found.sessions)} session(s){where}."))
        if not all_projects:
            console.print(Text("--all looks in the sessions of every project.", style="dim"))
        raise typer.Exit(1)
    s = [one.info for one in found.sessions]
    machines = {one.info.path: one.machine for one in found.sessions if one.machine}
    _print_hits(
        hits, {i.path: shown_title(i.title, i.first_message, i.id, 70) for i in s}, machines
    )
    if len(hits) >= limit:
        console.print(Text(f"\nStopped after {limit} hits (--limit).", style="dim"))
