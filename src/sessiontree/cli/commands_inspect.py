"""Read-only commands: list, show, tree, context, history, stats (search: commands_search).

Every session is opened with `read_only=True`: these commands never write.
"""

from __future__ import annotations

import gc
import json
import os
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sessiontree._util.gcpause import gc_paused
from sessiontree.cli.common import (
    EXIT_USAGE,
    CliError,
    JsonOption,
    SessionArg,
    all_stores,
    byte_progress,
    current_store,
    emit_json,
    open_read_only,
    resolve_session,
    warn_passed_over,
)
from sessiontree.cli.fit import GAP, Column, cut_end, fit_widths, middle_cut, short_model
from sessiontree.cli.render import (
    TreeOptions,
    money,
    preview,
    render_tree,
    short_tokens,
    time_ago,
)
from sessiontree.format import (
    entry_role,
    format_iso,
    human_size,
    message_text,
    shown_title,
    time_range,
)
from sessiontree.store import (
    ListingPage,
    Store,
    Stores,
    find_stores,
    looked_in,
    made_by,
    store_size,
)

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table

    from sessiontree.reports import StoreStats, Totals, UsageTotals

# Rich's drawing, the reports, the search and the history are imported by the commands
# that use them: `list --json` (a script's listing) loads none of them.

AllOption = Annotated[bool, typer.Option("--all", "-a", help="Every project, not just this one.")]


def _iso(moment: object) -> str | None:
    """A datetime as the store writes timestamps (`2026-02-16T10:20:30.000Z`)."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return format_iso(int(moment.timestamp() * 1000))
    return None


def short_ids(ids: list[str], least: int = 8, of: Iterable[str] | None = None) -> dict[str, str]:
    """Each id's shortest prefix (at least `least` characters) that no other id shares,
    as git abbreviates hashes: what `show`, `resume` and the others accept. `of`: only
    these ids' (a page of a long listing), still unique among all `ids`."""
    if of is not None:
        # A page needs only the ids that share its ids' first `least` characters: no
        # other can make one longer (and sorting a long listing's every id costs more).
        of = list(of)
        heads = {sid[:least] for sid in of}
        ordered = sorted({sid for sid in ids if sid[:least] in heads})
    else:
        ordered = sorted(set(ids))
    out = {}
    for sid in ordered if of is None else of:
        # Only the neighbours in sorted order can share a longer prefix than any other id.
        i = bisect_left(ordered, sid)
        need = least
        for other in (
            ordered[i - 1] if i else None,
            ordered[i + 1] if i + 1 < len(ordered) else None,
        ):
            if other is not None:
                common = next(
                    (k for k, (a, b) in enumerate(zip(sid, other, strict=False)) if a != b),
                    min(len(sid), len(other)),
                )
                need = max(need, common + 1)
        out[sid] = sid[:need]
    return out


def _file_size(path: str) -> int:
    """A session file's size in the store in effect (0 when it cannot be read)."""
    try:
        return current_store().storage.stat(path).size
    except (OSError, ValueError):
        return 0


def _looked(read: list[Store]) -> str:
    named = [f"{st.location} ({made_by(st.agent, st.machine)})" for st in read]
    return ", ".join(named) or "no store"


def _list_json(page: ListingPage, stores: Stores) -> None:
    read = stores.readable
    emit_json(
        {
            "total": page.total,
            **(
                {
                    "stores": [
                        {"agent": st.agent, "machine": st.machine, "location": st.location}
                        for st in read
                    ]
                }
                if len(read) > 1 or current_store().found_by_default
                else {}
            ),
            "sessions": [
                {
                    "path": s.info.path,
                    "agent": s.agent,
                    "machine": s.machine,
                    "id": s.info.id,
                    "cwd": s.info.cwd,
                    "title": s.info.title,
                    "shownTitle": shown_title(s.info.title, s.info.first_message, s.info.id),
                    "firstMessage": s.info.first_message,
                    "messageCount": s.info.message_count,
                    "created": _iso(s.info.created),
                    "modified": _iso(s.info.modified),
                    "size": s.size,
                    "parentSessionPath": s.info.parent_session_path,
                }
                for s in page.sessions
            ],
        }
    )


def _no_sessions(stores: Stores, all_projects: bool, filtered: bool) -> None:
    """Say that nothing was listed, and where else there are sessions; on a machine with
    none at all, where they were looked for and how to try the commands anyway."""
    from rich.text import Text

    from sessiontree.cli.common import console

    if not filtered and current_store().found_by_default and not stores.list():
        console.print("No sessions found on this machine. Looked in:", markup=False)
        for name, home in looked_in():
            console.print(Text(f"  {home} ({name})"))
        console.print(
            "`sessiontree demo` builds a small branched session to try the commands on.",
            markup=False,
        )
        return
    where = "any project" if all_projects else os.getcwd()
    matching = " matching the filters" if filtered else ""
    console.print(
        f"No sessions{matching} for {where} in {_looked(stores.readable)}.",
        markup=False,
        soft_wrap=True,
    )
    if not all_projects and not filtered:
        others = len(stores.list())
        if others:
            console.print(
                f"{others} sessions of other projects are there: sessiontree list --all",
                markup=False,
            )


_TITLE_WANTED = 24
"""Cells a title keeps before the project and agent columns give up their own."""
_TITLE_LEAST = 16
_AGENT_LEAST = 16
"""Cells the agent column keeps before it is left out: enough to tell `claude` from
`claude@<machine>` (the same session may be here and from another machine)."""


def _list_table(page: ListingPage, all_projects: bool) -> Table:
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text

    from sessiontree.cli.common import console

    shown = page.sessions
    several = len(page.made_by) > 1
    headers = (
        ["Modified", "ID", "Msgs", "Size"]
        + (["Agent"] if several else [])
        + (["Project"] if all_projects else [])
        + ["Title"]
    )
    short = short_ids(page.every_id(), of=[s.info.id for s in shown])
    rows: list[list[str]] = []
    for one in shown:
        s = one.info
        row = [time_ago(s.modified), short[s.id], f"{s.message_count:,}", human_size(one.size)]
        if several:  # `claude@laptop`: made on another machine, shown here by a sync
            row.append(one.made_by)
        if all_projects:
            row.append(os.path.basename(s.cwd.rstrip("/")) or s.cwd)
        row.append(shown_title(s.title, s.first_message, s.id))
        rows.append(row)
    # Ids, counts and sizes are shown whole; the title takes the spare width, and on a
    # narrow terminal the project gives up width first (cut in the middle), then is
    # left out, then the agent gives up width, so the title keeps a width worth reading.
    natural = [max([cell_len(h)] + [cell_len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    project = headers.index("Project") if all_projects else None
    agent = headers.index("Agent") if several else None
    title = len(headers) - 1
    columns = [Column(w) for w in natural]
    columns[title] = Column(
        min(natural[title], _TITLE_WANTED), least=_TITLE_LEAST, takes_spare=True
    )
    if project is not None:
        columns[project] = Column(natural[project], least=min(natural[project], 8), optional=True)
    if agent is not None:  # cut at its end, `claude@lapt…`; left out only when the
        # whole columns, it at its least and the title at its least are too wide
        least = min(natural[agent], _AGENT_LEAST)
        kept = [w for i, w in enumerate(natural) if i not in (project, agent, title)]
        needed = sum(kept) + least + _TITLE_LEAST + GAP * (len(kept) + 1)
        columns[agent] = Column(natural[agent], least=least, optional=needed > console.width)
    give = [i for i in (project, agent, title) if i is not None]
    widths = fit_widths(console.width, columns, give)
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for name, width in zip(headers, widths, strict=True):
        if width is None:
            continue
        table.add_column(
            name,
            no_wrap=True,
            width=width,
            overflow="ellipsis",
            justify="right" if name in ("Msgs", "Size") else "left",
        )
    for row in rows:
        cells = [
            middle_cut(cell, width) if i == project else cut_end(cell, width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            if width is not None
        ]
        table.add_row(*(Text(cell) for cell in cells))
    return table


def _shown_size(known: int | None, path: str) -> int:
    """`known` (a listing's or a summary's size), else the file's as the store states it."""
    return known if known is not None and known >= 0 else _file_size(path)


def list_command(
    text: Annotated[
        str | None,
        typer.Argument(
            metavar="TEXT",
            help="Only sessions whose title, first prompt, id or directory contains TEXT "
            "(case-insensitive).",
            show_default=False,
        ),
    ] = None,
    all_projects: AllOption = False,
    limit: Annotated[int, typer.Option("--limit", "-n", min=0, help="Show at most N.")] = 50,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="DATE",
            help="Sessions modified from this time: YYYY-MM-DD, ISO date-time, or 30m/12h/7d ago.",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            metavar="DATE", help="Sessions modified up to this time (a date: to its end)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """With no --agent, --agent-dir or --store (and no $SESSIONTREE_STORE or
    $PI_CODING_AGENT_DIR), every agent store found on this machine is read
    (`sessiontree stores` lists them)."""
    stores = all_stores()
    since_ms, until_ms = time_range(since, until)
    cwd = None if all_projects else os.getcwd()
    with gc_paused():
        if limit:  # a page: only its sessions' infos are built
            page = stores.list_page(cwd, limit=limit, text=text, since=since_ms, until=until_ms)
        else:
            page = ListingPage.of(stores.list(cwd, text=text, since=since_ms, until=until_ms))
        # The listing's rows live as long as the process (its listing cache keeps them):
        # kept out of the collector's sight, they are not all scanned once it resumes
        # (a tenth of a page of 100,000 sessions).
        gc.freeze()
    if as_json:
        _list_json(page, stores)
    elif not page.total:
        _no_sessions(stores, all_projects, bool(text or since or until))
    else:
        from rich.text import Text

        from sessiontree.cli.common import console, err_console

        if len(stores.readable) > 1:
            err_console.print(Text(f"Read {_looked(stores.readable)}.", style="dim"))
        console.print(_list_table(page, all_projects))
        if page.total > len(page.sessions):
            more = page.total - len(page.sessions)
            console.print(Text(f"{more} more; use --limit 0 to show all.", style="dim"))


_NAME_WANTED = 16
"""Cells a model's name keeps before the token counts are shortened (1.03M)."""


def _usage_cells(usage: UsageTotals | Totals, count: Callable[[int], str]) -> list[str]:
    from sessiontree.reports import Totals

    return [
        f"{usage.messages:,}",
        count(usage.input),
        count(usage.output),
        count(usage.cache_read),
        count(usage.cache_write),
        money(usage.cost, isinstance(usage, Totals) and usage.estimated_messages > 0),
    ]


def _usage_table(rows: Mapping[str, UsageTotals | Totals], first: str) -> Table | Group:
    """A row per model (or day); on a terminal too narrow for the numbers, a line each,
    so that no number is ever cut and no name wrapped over lines."""
    from rich.cells import cell_len
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from sessiontree.cli.common import console

    # Model names are shortened (no provider, no date); token counts are shown in full
    # where the names keep a width worth reading, else shortened (1.03M), and the names
    # are cut to what the numbers leave.
    shown = [short_model(name) if first == "Model" else name for name in rows]
    names = ("Replies", "Input", "Output", "Cache rd", "Cache wr", "Cost")
    natural = max([len(first)] + [cell_len(n) for n in shown])
    for count in (lambda n: f"{n:,}", short_tokens):
        cells = [_usage_cells(usage, count) for usage in rows.values()]
        widths = [max([len(name)] + [len(c[i]) for c in cells]) for i, name in enumerate(names)]
        label_width = console.width - sum(widths) - 3 * len(names)
        if label_width >= min(natural, _NAME_WANTED):
            break
    if label_width < min(natural, 10):
        lines = []
        for name, row in zip(shown, cells, strict=True):
            parts = [f"{label.lower()} {value}" for label, value in zip(names, row, strict=True)]
            lines.append(Text.assemble((name, "bold"), "  ", " · ".join(parts)))
        return Group(*lines)
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column(first, no_wrap=True, width=min(natural, label_width))
    for name, widest in zip(names, widths, strict=True):
        table.add_column(name, justify="right", no_wrap=True, min_width=widest)
    for name, row in zip(shown, cells, strict=True):
        table.add_row(Text(cut_end(name, min(natural, label_width))), *row)
    return table


def _version_text(path: str, loaded: int) -> str:
    from sessiontree.maintenance import file_version

    on_disk = file_version(path, current_store().storage)
    if on_disk is not None and on_disk < loaded:
        return f"{on_disk} on disk (read as {loaded}; `sessiontree migrate` upgrades the file)"
    return str(loaded)


def show_command(session: SessionArg, as_json: JsonOption = False) -> None:
    from sessiontree.maintenance import file_version
    from sessiontree.reports import summarize_session

    path = resolve_session(session)
    # Another agent's store knows what a session spent beside its entries (its
    # `extra_usage`): the summary prices it as `usage` does.
    extra_usage = getattr(current_store().storage, "extra_usage", None)
    with open_read_only(path) as sm:
        summary = summarize_session(sm, extra_usage(path) if extra_usage else None)
        leaf = sm.get_leaf_entry()
        leaf_preview = preview(leaf, 70) if leaf is not None else None
    if as_json:
        emit_json(
            {
                "path": summary.path,
                "id": summary.id,
                "title": summary.title,
                "shownTitle": summary.shown_title,
                "messageCount": summary.message_count,
                "version": file_version(path, current_store().storage),
                "header": summary.header,
                "size": _shown_size(summary.size, path),
                "entries": summary.entries,
                "types": summary.types,
                "roles": summary.roles,
                "leafId": summary.leaf_id,
                "activePathLength": summary.active_path_length,
                "tips": summary.tips,
                "branchPoints": summary.branch_points,
                "roots": summary.roots,
                "models": {name: u.to_json() for name, u in summary.models.items()},
                "usage": summary.usage.to_json(),
                "labels": summary.labels,
            }
        )
        return
    from rich.table import Table  # drawing: not for --json
    from rich.text import Text

    from sessiontree.cli.common import console

    header = summary.header
    key_width = len("Directory")

    value_width = max(12, console.width - key_width - 2)

    def grid_of(rows: list[tuple[str, object]]) -> Table:
        # Sentences wrap between words; a path or an id is cut in the middle instead and
        # a title at its end, so that no line holds a piece of one.
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", min_width=key_width)
        grid.add_column()
        for key, value in rows:
            shown = str(value)
            if key in ("Directory", "Parent", "Session"):
                shown = middle_cut(shown, value_width)
            elif key == "Title":
                shown = cut_end(shown, value_width)
            grid.add_row(key, Text(shown))
        return grid

    console.print(grid_of([("Session", summary.id), ("Title", summary.shown_title)]))
    # The path on one line, whatever the width, so that it can be copied whole.
    console.print(
        Text.assemble(
            ("File".ljust(key_width + 2), "bold"),
            path,
            f" ({human_size(_shown_size(summary.size, path))})",
        ),
        soft_wrap=True,
    )
    rows: list[tuple[str, object]] = [
        ("Directory", header.get("cwd", "")),
        ("Created", header.get("timestamp", "")),
        ("Version", _version_text(path, summary.version)),
    ]
    if header.get("parentSession"):
        rows.append(("Parent", header["parentSession"]))
    types = ", ".join(f"{k} {v}" for k, v in sorted(summary.types.items(), key=lambda kv: -kv[1]))
    roles = ", ".join(f"{k} {v}" for k, v in sorted(summary.roles.items(), key=lambda kv: -kv[1]))
    rows += [
        ("Entries", f"{summary.entries} ({types})" if types else "0"),
        ("Messages", f"{summary.message_count:,} ({roles})" if roles else "none"),
        (
            "Branches",
            f"{len(summary.tips)} tip(s), {summary.branch_points} branch point(s), "
            f"{summary.roots} root(s)",
        ),
        (
            "Leaf",
            f"{summary.leaf_id} ({summary.active_path_length} entries on its path): {leaf_preview}"
            if summary.leaf_id
            else "none",
        ),
    ]
    console.print(grid_of(rows))
    # Models that only a model change names (no reply) make no row.
    replied = {name: u for name, u in summary.models.items() if u.messages}
    if replied:
        console.print()
        models = dict(replied)
        if len(models) > 1:
            models["total"] = summary.usage
        console.print(_usage_table(models, "Model"))
    if summary.labels:
        console.print()
        console.print(Text("Labels", style="bold"))
        for target, label in summary.labels.items():
            console.print(Text(f"  #{label} → {target}"))


def tree_command(
    session: SessionArg,
    full: Annotated[bool, typer.Option("--full", help="Do not collapse long linear runs.")] = False,
    depth: Annotated[
        int | None,
        typer.Option("--depth", min=0, help="Show branches nested at most this deep."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    from rich.text import Text

    from sessiontree.cli.common import console
    from sessiontree.session import message_count, session_shown_title

    path = resolve_session(session)
    with open_read_only(path) as sm:
        if as_json:
            active = {id(e) for e in sm.get_branch()}
            entries = sm.get_entries()
            emit_json(
                {
                    "sessionId": sm.get_session_id(),
                    "path": path,
                    "shownTitle": session_shown_title(sm, None),
                    "messageCount": message_count(sm),
                    "leafId": sm.get_leaf_id(),
                    "roots": [node.entry.get("id") for node in sm.get_tree()],
                    "entries": [
                        {
                            "id": e.get("id"),
                            "parentId": e.get("parentId"),
                            "type": e.get("type"),
                            "role": entry_role(e),
                            "timestamp": e.get("timestamp"),
                            "label": sm.get_label(e["id"])
                            if isinstance(e.get("id"), str)
                            else None,
                            "preview": preview(e, 120),
                            "children": [c.get("id") for c in sm.get_children(e.get("id"))]
                            if isinstance(e.get("id"), str)
                            else [],
                            "onActivePath": id(e) in active,
                        }
                        for e in entries
                    ],
                }
            )
            return
        title = Text.assemble(
            (sm.get_session_id(), "bold"),
            "  ",
            session_shown_title(sm),
            (f"  {message_count(sm):,} messages", "dim"),
        )
        console.print(render_tree(sm, title, TreeOptions(full=full, depth=depth)))


def _context_text(message: dict[str, Any], full: bool) -> str:
    text = message_text(message, thinking=False)
    lines = text.split("\n")
    if not full and len(lines) > 12:
        text = "\n".join(lines[:12]) + f"\n… ({len(lines) - 12} more lines; --full shows all)"
    return text


def context_command(
    session: SessionArg,
    leaf: Annotated[
        str | None, typer.Option("--leaf", help="Entry id to build the context at.")
    ] = None,
    llm: Annotated[
        bool, typer.Option("--llm", help="Convert to provider messages (convert_to_llm).")
    ] = False,
    full: Annotated[bool, typer.Option("--full", help="Do not shorten long messages.")] = False,
    as_json: JsonOption = False,
) -> None:
    from rich.text import Text

    from sessiontree.cli.common import console
    from sessiontree.format import convert_to_llm

    path = resolve_session(session)
    with open_read_only(path) as sm:
        if leaf is not None:
            sm.branch(leaf)
        ctx = sm.build_session_context()
        leaf_id = sm.get_leaf_id()
    messages = convert_to_llm(ctx.messages) if llm else ctx.messages
    thinking = "null" if ctx.thinking_level is None else ctx.thinking_level
    if as_json:
        payload: dict[str, Any] = {
            "path": path,
            "leafId": leaf_id,
            "llm": llm,
            "messages": messages,
            "thinkingLevel": ctx.thinking_level,
            "models": ctx.models,
            "injectedTtsrRules": ctx.injected_ttsr_rules,
            "mode": ctx.mode,
        }
        if ctx.mode_data is not None:
            payload["modeData"] = ctx.mode_data
        emit_json(payload)
        return
    console.print(
        Text.assemble(
            ("Context at ", "bold"),
            (str(leaf_id), "bold"),
            f"  {len(messages)} messages · thinking {thinking} · models {json.dumps(ctx.models)}",
        )
    )
    for message in messages:
        role = str(message.get("role"))
        console.print()
        console.print(Text(f"[{role}]", style="bold"))
        console.print(Text(_context_text(message, full)))


def history_command(
    search: Annotated[
        str | None, typer.Option("--search", "-s", help="Prompts containing these words.")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=1000, help="Show at most N prompts.")
    ] = 20,
    as_json: JsonOption = False,
) -> None:
    from rich.table import Table
    from rich.text import Text

    from sessiontree.cli.common import console
    from sessiontree.history import read_history

    database = current_store().history_path
    entries = read_history(database, search, limit)
    if as_json:
        emit_json(
            {
                "entries": [
                    {"id": e.id, "prompt": e.prompt, "createdAt": e.created_at, "cwd": e.cwd}
                    for e in entries
                ]
            }
        )
        return
    if not entries:
        console.print(Text(f"No prompts found in {database}."), soft_wrap=True)
        return
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("When", no_wrap=True)
    table.add_column("Directory", overflow="ellipsis", max_width=30, no_wrap=True, style="dim")
    table.add_column("Prompt", overflow="ellipsis", no_wrap=True, ratio=1)
    for e in entries:
        when = time_ago(datetime.fromtimestamp(e.created_at, UTC))
        table.add_row(when, Text(e.cwd or ""), Text(" ".join(e.prompt.split())))
    console.print(table)
    console.print(Text(f"From {database}", style="dim"), soft_wrap=True)


def _stats_json(stats: StoreStats) -> dict[str, Any]:
    return {
        "sessions": stats.sessions,
        "invalidFiles": stats.invalid,
        "projects": stats.projects,
        "bytes": stats.bytes,
        "entries": stats.entries,
        "blobs": stats.blobs,
        "blobBytes": stats.blob_bytes,
        "usage": stats.usage.to_json(),
        "byModel": {k: v.to_json() for k, v in sorted(stats.by_model.items())},
        "byDay": {k: v.to_json() for k, v in sorted(stats.by_day.items())},
        "duplicates": stats.duplicates.to_json(),
        "prices": stats.prices,
    }


def stats_command(
    project: Annotated[
        str | None,
        typer.Option(
            "--project",
            "-p",
            metavar="DIR",
            help="Only the project in DIR (default: every project, as `usage`).",
        ),
    ] = None,
    all_projects: Annotated[
        bool, typer.Option("--all", "-a", help="Every project (the default).", hidden=True)
    ] = False,
    days: Annotated[int, typer.Option("--days", min=0, help="Days shown in the table.")] = 14,
    as_json: JsonOption = False,
) -> None:
    """With no --agent, --agent-dir or --store (and no $SESSIONTREE_STORE or
    $PI_CODING_AGENT_DIR), every agent store found on this machine is counted: a row
    per store and their total (each reply counted once across them, as in `usage`).
    Every project unless -p, as `usage`.
    """
    from rich.table import Table
    from rich.text import Text

    from sessiontree.cli.common import console

    scope = None if project is None else os.path.abspath(os.path.expanduser(project))
    if all_projects and scope is not None:
        raise CliError("give --all or --project, not both", EXIT_USAGE)
    stores = all_stores(existing=True)
    with byte_progress("Indexing sessions") as advance:
        both = stores.stats(scope, progress=advance)
    warn_passed_over(both.total.passed_over)
    per = [(stores[key], one) for key, one in both.per_store]
    sized = [(store, replace(one, bytes=_store_bytes(store, one))) for store, one in per]
    stats = replace(
        both.total,
        bytes=both.total.bytes
        + sum(new.bytes - old.bytes for (_, new), (_, old) in zip(sized, per, strict=True)),
    )
    per = sized
    if as_json:
        emit_json(
            {
                "scope": "all" if scope is None else scope,
                **_stats_json(stats),
                **(
                    {
                        "stores": [
                            {
                                "agent": store.agent,
                                "machine": store.machine,
                                "location": store.location,
                                **_stats_json(one),
                            }
                            for store, one in per
                        ]
                    }
                    if len(per) > 1 or current_store().found_by_default
                    else {}
                ),
            }
        )
        return
    key_width = len("Not sessions" if stats.invalid else "Sessions")
    # The scope and each store on a line of their own: a path is never broken over lines
    # (on a terminal it is cut in the middle to the width; into a pipe it is whole).
    lines = [("Scope", "all projects" if scope is None else scope)]
    if len(per) > 1:
        lines += [
            (
                "Stores" if i == 0 else "",
                f"{made_by(store.agent, store.machine)} ({store.location})",
            )
            for i, (store, _) in enumerate(per)
        ]
        lines.append(("", "the figures below are their total"))
    fits = console.writes_to_terminal()
    for key, value in lines:
        shown = middle_cut(value, max(12, console.width - key_width - 2)) if fits else value
        console.print(Text.assemble((key.ljust(key_width + 2), "bold"), shown))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", min_width=key_width)
    grid.add_column()
    grid.add_row("Sessions", f"{stats.sessions} in {stats.projects} project dir(s)")
    if stats.invalid:
        grid.add_row("Not sessions", f"{stats.invalid} file(s) (see `sessiontree verify`)")
    grid.add_row("Size", f"{human_size(stats.bytes)}, {stats.entries:,} entries")
    whole = "whole store" if len(per) == 1 else "whole stores"
    grid.add_row("Blobs", f"{stats.blobs} ({human_size(stats.blob_bytes)}), {whole}")
    u = stats.usage
    grid.add_row(
        "Tokens",
        f"in {u.input:,} · out {u.output:,} · cache read {u.cache_read:,} · "
        f"cache write {u.cache_write:,}",
    )
    cost = f"${u.cost:.4f} over {u.messages:,} replies"
    if u.estimated_messages:
        cost += (
            f" (${u.estimated_cost:.4f} of it estimated for {u.estimated_messages:,} replies "
            f"from {stats.prices.get('table')} {stats.prices.get('version')})"
        )
    grid.add_row("Cost", cost)
    copies = sum(one.usage.messages for _, one in per) - u.messages
    if len(per) > 1 and copies > 0:
        grid.add_row("Copies", f"{copies:,} replies held by more than one store, counted once")
    console.print(grid)
    if len(per) > 1:
        console.print()
        console.print(_stores_table(per, stats))
    if stats.by_model:
        console.print()
        by_model = dict(sorted(stats.by_model.items(), key=lambda kv: -kv[1].cost))
        console.print(_usage_table(by_model, "Model"))
    if stats.by_day and days:
        console.print()
        recent = dict(sorted(stats.by_day.items())[-days:])
        console.print(_usage_table(recent, "Day (UTC)"))


def _store_bytes(store: Store, stats: StoreStats) -> int:
    """The bytes a store holds: its session files', but an OpenCode store's are its
    databases' and files' (`store_size`), as its sessions are rows of a database."""
    if store.agent != "opencode":
        return stats.bytes
    here = os.path.realpath(store.agent_dir)
    for found in find_stores():
        if os.path.realpath(found.home) == here:
            return store_size(found)
    return stats.bytes


def _stores_table(per: list[tuple[Store, StoreStats]], total: StoreStats) -> Table:
    """A row per store and the total (whose replies are counted once across stores)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("Store", no_wrap=True)
    for name in ("Sessions", "Projects", "Size", "Entries", "Blobs", "Replies", "Cost $"):
        table.add_column(name, justify="right", no_wrap=True)

    def cells(stats: StoreStats) -> list[str]:
        return [
            str(stats.sessions),
            str(stats.projects),
            human_size(stats.bytes),
            f"{stats.entries:,}",
            str(stats.blobs),
            f"{stats.usage.messages:,}",
            f"{stats.usage.cost:.4f}",
        ]

    for store, stats in per:
        table.add_row(Text(made_by(store.agent, store.machine)), *cells(stats))
    table.add_row(Text("total", style="bold"), *cells(total))
    return table
