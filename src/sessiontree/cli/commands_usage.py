"""`sessiontree usage`: token and cost reports (daily, weekly, monthly, session, project,
5-hour blocks, and a live view of the active block).

Everything comes from `sessiontree.reports._usage` (each reply counted once, unrecorded
costs estimated from the price table and marked); the commands only render it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import datetime, tzinfo
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from sessiontree.cli.common import (
    EXIT_USAGE,
    CliError,
    JsonOption,
    all_stores,
    byte_progress,
    console,
    current_store,
    emit_json,
    err_console,
)
from sessiontree.cli.options import Command
from sessiontree.cli.options import Group as CommandGroup
from sessiontree.cli.render import money
from sessiontree.format import format_iso, shown_title
from sessiontree.reports import (
    BLOCK_HOURS,
    Block,
    Duplicates,
    Reply,
    Report,
    ReportKind,
    Totals,
    blocks,
    parse_time,
    price_table,
    report,
    time_zone,
)
from sessiontree.store import Stores

usage_app = typer.Typer(
    name="usage",
    cls=CommandGroup,
    no_args_is_help=True,
    rich_markup_mode=None,
)

SinceOption = Annotated[
    str | None,
    typer.Option(
        help="From this time: YYYY-MM-DD, YYYYMMDD, YYYY-MM, ISO date-time, or 7d/12h ago."
    ),
]
UntilOption = Annotated[
    str | None, typer.Option(help="Up to this time (a date or month: to its end).")
]
TzOption = Annotated[
    str | None,
    typer.Option("--tz", help="Time zone of days, weeks, months and times (default: local)."),
]
BreakdownOption = Annotated[
    bool, typer.Option("--breakdown", "-b", help="A row per model under each row.")
]
ProjectOption = Annotated[
    list[str] | None,
    typer.Option(
        "--project",
        "-p",
        metavar="DIR",
        help="Only sessions of the project in DIR (repeatable; default: every project).",
    ),
]
NoIndexOption = Annotated[
    bool, typer.Option("--no-index", help="Read every session instead of the content index.")
]


class _Inputs:
    """What every report reads: counted, priced replies and the options' times."""

    def __init__(
        self,
        since: str | None,
        until: str | None,
        tz_name: str | None,
        projects: list[str] | None,
        no_index: bool,
    ) -> None:
        self.tz, self.tz_name = time_zone(tz_name)
        self.since = parse_time(since, self.tz) if since else None
        self.until = parse_time(until, self.tz, end=True) if until else None
        if self.since is not None and self.until is not None and self.since > self.until:
            raise CliError("--since is after --until", EXIT_USAGE)
        self.projects = (
            [os.path.abspath(os.path.expanduser(p)) for p in projects] if projects else None
        )
        self.no_index = no_index
        self.notes: list[str] = []
        self.duplicates = Duplicates()
        self.stores: Stores | None = None
        """Every store found when none was named (each reply counted once across them)."""

    def replies(self) -> list[Reply]:
        if self.stores is None:
            self.stores = all_stores()
        with byte_progress("Indexing sessions") as advance:
            priced = self.stores.replies(use_index=not self.no_index, progress=advance)
        self.notes, self.duplicates = priced.notes, priced.duplicates
        return priced.replies


def _bar(value: float, top: float, width: int = 8) -> Text:
    if top <= 0 or value <= 0:
        return Text("")
    cells = value / top * width
    full = int(cells)
    part = " ▏▎▍▌▋▊▉"[int((cells - full) * 8)] if full < width else ""
    return Text("█" * full + part.strip(), style="green")


def _tokens(n: int) -> str:
    """1234 -> '1,234'; 1234567 -> '1.23M' (tables stay narrow; --json has every digit)."""
    for size, unit in ((10**9, "B"), (10**6, "M")):
        if abs(n) >= size:
            return f"{n / size:,.2f}{unit}"
    return f"{n:,}"


def _totals_cells(t: Totals) -> list[Text]:
    return [
        Text(_tokens(t.input)),
        Text(_tokens(t.output)),
        Text(_tokens(t.cache_read)),
        Text(_tokens(t.cache_write)),
        Text(_tokens(t.total_tokens)),
        Text(money(t.cost, t.estimated_messages > 0)),
    ]


def _iso(ms: int | None) -> str | None:
    return format_iso(ms) if ms is not None else None


def _local_time(ms: int | None, tz: tzinfo) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz).strftime("%Y-%m-%d %H:%M")


def _row_json(kind: ReportKind, row: Any, tz: tzinfo) -> dict[str, Any]:
    out: dict[str, Any]
    if kind == "session":
        session = row.session
        out = {
            "path": row.key,
            "sessionId": session.file.session_id if session is not None else None,
            "project": session.project if session is not None else None,
            "first": _iso(row.totals.first),
            "last": _iso(row.totals.last),
        }
    elif kind == "project":
        out = {"project": row.key}
    else:
        out = {"period": row.key}
    out.update(row.totals.to_json())
    out["models"] = {name: t.to_json() for name, t in sorted(row.models.items())}
    return out


def _session_titles() -> dict[str, str]:
    """Each session's shown title by path (`format.shown_title`), for `usage session`."""
    return {s.path: shown_title(s.title, s.first_message, s.id) for s in current_store().list(None)}


def _replies(n: int) -> str:
    return f"{n:,} {'reply' if n == 1 else 'replies'}"


def _prices_note(rep_prices: dict[str, str | None], totals: Totals) -> list[str]:
    lines = []
    if totals.estimated_messages:
        lines.append(
            f"~ includes ${totals.estimated_cost:,.4f} estimated for "
            f"{_replies(totals.estimated_messages)} without a recorded cost "
            f"({rep_prices.get('table')} {rep_prices.get('version')})"
        )
    if totals.unpriced_messages:
        lines.append(
            f"{_replies(totals.unpriced_messages)} without a recorded cost and with a model "
            "the price table does not know count $0"
        )
    return lines


def _emit(kind: ReportKind, rep: Report, inputs: _Inputs) -> None:
    emit_json(
        {
            "report": kind,
            "timeZone": rep.time_zone,
            "since": _iso(inputs.since),
            "until": _iso(inputs.until),
            "projects": inputs.projects,
            "prices": rep.prices,
            "duplicates": rep.duplicates.to_json(),
            "notes": inputs.notes,
            "rows": [_row_json(kind, row, inputs.tz) for row in rep.rows],
            "totals": rep.totals.to_json(),
        }
    )


def _print_report(kind: ReportKind, rep: Report, inputs: _Inputs, breakdown: bool) -> None:
    for note in inputs.notes:
        err_console.print(Text(f"sessiontree: note: {note}", style="dim"), soft_wrap=True)
    if not rep.rows:
        console.print("No usage in that range.", markup=False)
        return
    first = {
        "daily": "Day",
        "weekly": "Week of",
        "monthly": "Month",
        "session": "Session",
        "project": "Project",
    }[kind]
    table = Table(
        show_edge=False,
        pad_edge=False,
        header_style="bold",
        title=f"Usage by {kind.removesuffix('ly') if kind != 'daily' else 'day'} ({rep.time_zone})",
        title_justify="left",
    )
    # Numbers are never cut: each column as wide as its widest cell; the label takes
    # what is left, and the bar only shows where there is room for it.
    names = ("Input", "Output", "Cache rd", "Cache wr", "Total", "Cost")
    every = [rep.totals, *(row.totals for row in rep.rows)]
    if breakdown:
        every += [t for row in rep.rows for t in row.models.values()]
    widths = [
        max([len(name)] + [len(cell.plain) for cell in (_totals_cells(t)[i] for t in every)])
        for i, name in enumerate(names)
    ]
    left = console.width - sum(widths) - 3 * len(names)
    bar = left >= 8 + 3 + 24
    label_width = max(10, min(60, left - (11 if bar else 0)))
    table.add_column(first, no_wrap=True, overflow="ellipsis", width=label_width)
    for name, width in zip(names, widths, strict=True):
        table.add_column(name, justify="right", no_wrap=True, min_width=width)
    if bar:
        table.add_column("", no_wrap=True)
    top = max(row.totals.cost for row in rep.rows)
    titles = _session_titles() if kind == "session" else {}
    for row in rep.rows:
        label = row.key
        if kind == "session" and row.session is not None:
            sid = row.session.file.session_id or "?"
            label = f"{titles.get(row.key) or sid} · {_local_time(row.totals.last, inputs.tz)}"
        elif kind == "project":
            label = row.key
        extra = [_bar(row.totals.cost, top)] if bar else []
        table.add_row(Text(label), *_totals_cells(row.totals), *extra)
        if breakdown:
            for name, t in sorted(row.models.items(), key=lambda kv: -kv[1].cost):
                cells = _totals_cells(t)
                short = name.split("/", 1)[-1]
                pad = [Text("")] if bar else []
                table.add_row(Text(f" └ {short}", style="dim"), *cells, *pad, style="dim")
    table.add_section()
    pad = [Text("")] if bar else []
    table.add_row(Text("Total", style="bold"), *_totals_cells(rep.totals), *pad, style="bold")
    console.print(table)
    for line in _prices_note(rep.prices, rep.totals):
        console.print(Text(line, style="dim"))


def _report_command(kind: ReportKind) -> Callable[..., None]:
    def command(
        since: SinceOption = None,
        until: UntilOption = None,
        tz: TzOption = None,
        breakdown: BreakdownOption = False,
        project: ProjectOption = None,
        no_index: NoIndexOption = False,
        as_json: JsonOption = False,
    ) -> None:
        inputs = _Inputs(since, until, tz, project, no_index)
        replies = inputs.replies()
        rep = report(
            replies,
            kind,
            tz=inputs.tz,
            tz_name=inputs.tz_name,
            since=inputs.since,
            until=inputs.until,
            projects=inputs.projects,
            duplicates=inputs.duplicates,
        )
        if as_json:
            _emit(kind, rep, inputs)
        else:
            _print_report(kind, rep, inputs, breakdown)

    command.__doc__ = {
        "daily": "Tokens and cost per day.",
        "weekly": "Tokens and cost per week (weeks start on Monday).",
        "monthly": "Tokens and cost per month.",
        "session": "Tokens and cost per session, most recently used last.",
        "project": "Tokens and cost per project (the sessions' working directory).",
    }[kind]
    return command


# ---------------------------------------------------------------------------- blocks


def _block_json(block: Block, now_ms: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "start": _iso(block.start),
        "end": _iso(block.end),
        "gap": block.gap,
        "active": block.active(now_ms),
    }
    if block.gap:
        return out
    out["first"] = _iso(block.totals.first)
    out["last"] = _iso(block.totals.last)
    out.update(block.totals.to_json())
    out["models"] = {name: t.to_json() for name, t in sorted(block.models.items())}
    rate = block.burn_rate()
    out["burnRate"] = (
        {"tokensPerMinute": round(rate[0], 3), "costPerHour": round(rate[1], 6)} if rate else None
    )
    projection = block.projection(now_ms)
    out["projection"] = (
        {"totalTokens": projection[0], "cost": round(projection[1], 6)} if projection else None
    )
    return out


def _duration(ms: int) -> str:
    minutes = max(0, ms) // 60_000
    return f"{minutes // 60}h {minutes % 60:02d}m"


def _blocks_table(found: Sequence[Block], now_ms: int, tz: tzinfo, breakdown: bool) -> Table:
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("Block start", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Models", overflow="ellipsis", no_wrap=True, max_width=30)
    table.add_column("Replies", justify="right")
    table.add_column("Tokens", justify="right", no_wrap=True)
    table.add_column("Cost", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    top = max((b.totals.cost for b in found if not b.gap), default=0.0)
    for block in found:
        if block.gap:
            table.add_row(
                Text(_local_time(block.start, tz), style="dim"),
                Text(f"gap {_duration(block.end - block.start)}", style="dim"),
                "",
                "",
                "",
                "",
                "",
            )
            continue
        status = (
            Text(f"ACTIVE, {_duration(block.end - now_ms)} left", style="bold green")
            if block.active(now_ms)
            else Text(_duration((block.totals.last or block.start) - block.start))
        )
        models = ", ".join(sorted({name.split("/", 1)[-1] for name in block.models}))
        table.add_row(
            Text(_local_time(block.start, tz)),
            status,
            Text(models),
            str(block.totals.messages),
            _tokens(block.totals.total_tokens),
            money(block.totals.cost, block.totals.estimated_messages > 0),
            _bar(block.totals.cost, top),
        )
        if breakdown:
            for name, t in sorted(block.models.items(), key=lambda kv: -kv[1].cost):
                table.add_row(
                    "",
                    "",
                    Text(f"└ {name}", style="dim"),
                    Text(str(t.messages), style="dim"),
                    Text(_tokens(t.total_tokens), style="dim"),
                    Text(money(t.cost, t.estimated_messages > 0), style="dim"),
                    "",
                )
    return table


def live_panel(
    block: Block | None, now_ms: int, tz: tzinfo, *, following: bool = True
) -> RenderableType:
    """The live view of the active block: time bar, tokens, cost, burn rate, projection;
    while `following`, how to stop (the last frame, left on the screen, says nothing of it)."""
    if block is None:
        return Text(
            f"No active {BLOCK_HOURS}-hour block: no reply in the last {BLOCK_HOURS} hours."
            + (" Waiting… (Ctrl-C stops)" if following else "")
        )
    total = block.end - block.start
    elapsed = min(total, max(0, now_ms - block.start))
    lines: list[RenderableType] = [
        Text.assemble(
            ("Active block ", "bold"),
            f"{_local_time(block.start, tz)} → {_local_time(block.end, tz)}",
            f"   {_duration(elapsed)} elapsed, {_duration(total - elapsed)} left",
        ),
        ProgressBar(total=total, completed=elapsed, width=50),
    ]
    t = block.totals
    lines.append(
        Text(
            f"{t.messages:,} replies · {t.total_tokens:,} tokens · "
            f"{money(t.cost, t.estimated_messages > 0)}"
        )
    )
    rate = block.burn_rate()
    if rate is not None:
        lines.append(Text(f"Burn rate: {rate[0]:,.0f} tokens/min · {money(rate[1])}/hour"))
        projection = block.projection(now_ms)
        if projection is not None:
            lines.append(
                Text(
                    f"Projected at the block's end: {projection[0]:,} tokens · "
                    f"{money(projection[1])}"
                )
            )
    if following:
        lines.append(Text("Ctrl-C stops", style="dim"))
    return Group(*lines)


def _active(found: Sequence[Block], now_ms: int) -> Block | None:
    return next((b for b in reversed(found) if b.active(now_ms)), None)


def blocks_command(
    since: SinceOption = None,
    until: UntilOption = None,
    tz: TzOption = None,
    breakdown: BreakdownOption = False,
    project: ProjectOption = None,
    live: Annotated[
        bool,
        typer.Option("--live", help="Follow the active block as sessions grow (Ctrl-C stops)."),
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.05, help="Seconds between refreshes (--live).")
    ] = 5.0,
    no_index: NoIndexOption = False,
    as_json: JsonOption = False,
) -> None:
    """Tokens and cost per 5-hour block (from the first reply's hour), gaps between."""
    inputs = _Inputs(since, until, tz, project, no_index)
    if live:
        if as_json:
            raise CliError("--live shows a terminal view; it has no --json", EXIT_USAGE)
        _follow(inputs, interval)
        return
    replies = inputs.replies()
    now_ms = int(time.time() * 1000)
    found = blocks(replies, since=inputs.since, until=inputs.until, projects=inputs.projects)
    if as_json:
        table = price_table()
        totals = Totals()
        for reply in replies:
            if _in_blocks(reply, inputs):
                totals.add(reply)
        emit_json(
            {
                "report": "blocks",
                "timeZone": inputs.tz_name,
                "since": _iso(inputs.since),
                "until": _iso(inputs.until),
                "projects": inputs.projects,
                "prices": {"table": table.name, "version": table.version},
                "duplicates": inputs.duplicates.to_json(),
                "notes": inputs.notes,
                "blockHours": BLOCK_HOURS,
                "blocks": [_block_json(b, now_ms) for b in found],
                "totals": totals.to_json(),
            }
        )
        return
    for note in inputs.notes:
        err_console.print(Text(f"sessiontree: note: {note}", style="dim"), soft_wrap=True)
    if not found:
        console.print("No usage in that range.", markup=False)
        return
    console.print(_blocks_table(found, now_ms, inputs.tz, breakdown))
    active = _active(found, now_ms)
    if active is not None:
        console.print()
        console.print(live_panel(active, now_ms, inputs.tz, following=False))


def _in_blocks(reply: Reply, inputs: _Inputs) -> bool:
    ts = reply.record.timestamp
    if ts is None:
        return False
    if inputs.since is not None and ts < inputs.since:
        return False
    if inputs.until is not None and ts > inputs.until:
        return False
    return inputs.projects is None or reply.session.project in inputs.projects


def _follow(inputs: _Inputs, interval: float) -> None:
    """Redraw the active block every `interval` seconds until Ctrl-C."""
    with Live(console=console, auto_refresh=False, transient=False) as view:
        shown: tuple[Block | None, int] | None = None
        try:
            while True:
                replies = inputs.replies()
                now_ms = int(time.time() * 1000)
                found = blocks(
                    replies, since=inputs.since, until=inputs.until, projects=inputs.projects
                )
                shown = (_active(found, now_ms), now_ms)
                view.update(live_panel(*shown, inputs.tz), refresh=True)
                time.sleep(interval)
        except KeyboardInterrupt:
            if shown is not None:  # the frame left on the screen once the run has ended
                view.update(live_panel(*shown, inputs.tz, following=False), refresh=True)


for _kind in ("daily", "weekly", "monthly", "session", "project"):
    usage_app.command(_kind, cls=Command)(_report_command(_kind))
usage_app.command("blocks", cls=Command)(blocks_command)

__all__ = ["live_panel", "usage_app"]
