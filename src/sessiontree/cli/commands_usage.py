"""`sessiontree usage`: token and cost reports (daily, weekly, monthly, session, project,
5-hour blocks, and a live view of the active block).

Everything comes from `sessiontree.reports._usage` (each reply counted once, unrecorded
costs estimated from the price table and marked); the commands only render it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Annotated, Any

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
from sessiontree.cli.fit import Column, cut_end, fit_widths, middle_cut, short_model
from sessiontree.cli.options import Command
from sessiontree.cli.options import Group as CommandGroup
from sessiontree.cli.render import money, short_tokens
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

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text

# Rich's drawing (and the console) is imported by the functions that draw: a report
# for scripts (`--json`) loads none of it.

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
        return list(self.stream())

    def stream(self) -> Iterator[Reply]:
        """`replies` one at a time, for a report that sums them as they come
        (`duplicates` is complete once they are exhausted)."""
        if self.stores is None:
            self.stores = all_stores()
        with byte_progress("Indexing sessions") as advance:
            streamed = self.stores.stream_replies(use_index=not self.no_index, progress=advance)
        self.notes, self.duplicates = streamed.notes, streamed.duplicates
        return streamed.replies


_LABEL_LEAST = 10
"""Cells a report's label keeps however narrow the terminal (a day is 10)."""
_LABEL_WANTED = 24
"""Cells a report's label keeps before the bar is left out."""
_BAR_LEAST = 8
_BAR_MOST = 24
"""Cells of a cost bar: below the least it says nothing, past the most nothing more."""


def _bar(value: float, top: float, width: int = _BAR_LEAST) -> Text:
    from rich.text import Text

    if top <= 0 or value <= 0:
        return Text("")
    cells = value / top * width
    full = int(cells)
    part = " ▏▎▍▌▋▊▉"[int((cells - full) * 8)] if full < width else ""
    return Text("█" * full + part.strip(), style="green")


def _totals_cells(t: Totals) -> list[Text]:
    from rich.text import Text

    return [
        Text(short_tokens(t.input)),
        Text(short_tokens(t.output)),
        Text(short_tokens(t.cache_read)),
        Text(short_tokens(t.cache_write)),
        Text(short_tokens(t.total_tokens)),
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


def _session_titles(stores: Stores) -> dict[str, str]:
    """Each session's shown title by path (`format.shown_title`), for `usage session`:
    of every store the report read (another agent's sessions as `list` shows them)."""
    return {
        s.info.path: shown_title(s.info.title, s.info.first_message, s.info.id)
        for s in stores.list(None)
    }


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
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text

    from sessiontree.cli.common import console

    print_notes(inputs.notes)
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
    top = max(row.totals.cost for row in rep.rows)
    titles = _session_titles(inputs.stores or all_stores()) if kind == "session" else {}
    labels: list[tuple[str, str]] = []  # (what may be cut, what is kept whole)
    for row in rep.rows:
        if kind == "session" and row.session is not None:
            sid = row.session.file.session_id or "?"
            when = f" · {_local_time(row.totals.last, inputs.tz)}"
            labels.append((titles.get(row.key) or sid, when))
        else:
            labels.append((row.key, ""))
    # Numbers are never cut: each column as wide as its widest cell. The label takes
    # the spare width (then the bar, up to its most); on a narrow terminal the bar is
    # left out first, then the label is shortened.
    names = ("Input", "Output", "Cache rd", "Cache wr", "Total", "Cost")
    every = [rep.totals, *(row.totals for row in rep.rows)]
    models = [(short_model(name), t) for row in rep.rows for name, t in row.models.items()]
    if breakdown:
        every += [t for _, t in models]
    widths = [
        max([len(name)] + [len(cell.plain) for cell in (_totals_cells(t)[i] for t in every)])
        for i, name in enumerate(names)
    ]
    label_natural = max(
        [len(first), len("Total")]
        + [cell_len(cut + kept) for cut, kept in labels]
        + ([cell_len(f" └ {name}") for name, _ in models] if breakdown else [])
    )
    fitted = fit_widths(
        console.width,
        [
            Column(
                min(label_natural, _LABEL_WANTED),
                least=min(label_natural, _LABEL_LEAST),
                takes_spare=True,
                most=label_natural,
            ),
            *(Column(w) for w in widths),
            Column(_BAR_LEAST, least=_BAR_LEAST, optional=True, takes_spare=True, most=_BAR_MOST),
        ],
        [len(names) + 1, 0],
    )
    label_width, bar_width = fitted[0] or 10, fitted[-1]
    table.add_column(first, no_wrap=True, overflow="ellipsis", width=label_width)
    for name, width in zip(names, widths, strict=True):
        table.add_column(name, justify="right", no_wrap=True, min_width=width)
    if bar_width is not None:
        table.add_column("", no_wrap=True, width=bar_width)
    for row, (cut, kept) in zip(rep.rows, labels, strict=True):
        if label_width - cell_len(kept) < _LABEL_LEAST:  # no room for the time: the title
            kept = ""
        shorten = middle_cut if kind == "project" else cut_end  # a project is a path
        label = shorten(cut, max(1, label_width - cell_len(kept))) + kept
        extra = [_bar(row.totals.cost, top, bar_width)] if bar_width is not None else []
        table.add_row(Text(cut_end(label, label_width)), *_totals_cells(row.totals), *extra)
        if breakdown:
            for name, t in sorted(row.models.items(), key=lambda kv: -kv[1].cost):
                cells = _totals_cells(t)
                short = cut_end(f" └ {short_model(name)}", label_width)
                pad = [Text("")] if bar_width is not None else []
                table.add_row(Text(short, style="dim"), *cells, *pad, style="dim")
    table.add_section()
    pad = [Text("")] if bar_width is not None else []
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
        replies = inputs.stream()
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


def _gap(ms: int) -> str:
    """A gap between blocks: in days and hours from two days on (`67d 22h`)."""
    hours = max(0, ms) // 3_600_000
    return f"{hours // 24}d {hours % 24:02d}h" if hours >= 48 else _duration(ms)


def _blocks_table(found: Sequence[Block], now_ms: int, tz: tzinfo, breakdown: bool) -> Table:
    from rich.table import Table
    from rich.text import Text

    from sessiontree.cli.common import console

    top = max((b.totals.cost for b in found if not b.gap), default=0.0)
    rows: list[list[Text]] = []
    costs: list[float | None] = []  # each row's cost for the bar (None: no bar)
    for block in found:
        if block.gap:
            rows.append(
                [
                    Text(_local_time(block.start, tz), style="dim"),
                    Text(f"gap {_gap(block.end - block.start)}", style="dim"),
                    *(Text("") for _ in range(4)),
                ]
            )
            costs.append(None)
            continue
        status = (
            Text(f"ACTIVE, {_duration(block.end - now_ms)} left", style="bold green")
            if block.active(now_ms)
            else Text(_duration((block.totals.last or block.start) - block.start))
        )
        models = ", ".join(sorted({short_model(name) for name in block.models}))
        rows.append(
            [
                Text(_local_time(block.start, tz)),
                status,
                Text(models),
                Text(f"{block.totals.messages:,}"),
                Text(short_tokens(block.totals.total_tokens)),
                Text(money(block.totals.cost, block.totals.estimated_messages > 0)),
            ]
        )
        costs.append(block.totals.cost)
        if breakdown:
            for name, t in sorted(block.models.items(), key=lambda kv: -kv[1].cost):
                rows.append(
                    [
                        Text(""),
                        Text(""),
                        Text(f"└ {short_model(name)}", style="dim"),
                        Text(f"{t.messages:,}", style="dim"),
                        Text(short_tokens(t.total_tokens), style="dim"),
                        Text(money(t.cost, t.estimated_messages > 0), style="dim"),
                    ]
                )
                costs.append(None)
    headers = ("Block start", "Status", "Models", "Replies", "Tokens", "Cost")
    natural = [max([len(h)] + [r[i].cell_len for r in rows]) for i, h in enumerate(headers)]
    # Times, statuses and numbers are shown whole; the models take the spare width (up
    # to their longest), then the bar; the bar is left out first on a narrow terminal.
    columns = [Column(w) for w in natural]
    columns[2] = Column(
        min(natural[2], _LABEL_WANTED),
        least=min(natural[2], _LABEL_LEAST),
        takes_spare=True,
        most=natural[2],
    )
    columns.append(
        Column(_BAR_LEAST, least=_BAR_LEAST, optional=True, takes_spare=True, most=_BAR_MOST)
    )
    widths = fit_widths(console.width, columns, [len(headers), 2])
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for name, width in zip(headers, widths, strict=False):
        table.add_column(
            name,
            no_wrap=True,
            width=width,
            overflow="ellipsis",
            justify="right" if name in ("Replies", "Tokens", "Cost") else "left",
        )
    bar_width = widths[-1]
    if bar_width is not None:
        table.add_column("", no_wrap=True, width=bar_width)
    for row, cost in zip(rows, costs, strict=True):
        model_width = widths[2] or 1
        row[2] = Text(cut_end(row[2].plain, model_width), style=row[2].style)
        extra = []
        if bar_width is not None:
            extra = [_bar(cost, top, bar_width) if cost is not None else Text("")]
        table.add_row(*row, *extra)
    return table


def live_panel(
    block: Block | None, now_ms: int, tz: tzinfo, *, following: bool = True
) -> RenderableType:
    """The live view of the active block: time bar, tokens, cost, burn rate, projection;
    while `following`, how to stop (the last frame, left on the screen, says nothing of it)."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.text import Text

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
    from sessiontree.cli.common import console

    print_notes(inputs.notes)
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
    from rich.live import Live

    from sessiontree.cli.common import console

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
