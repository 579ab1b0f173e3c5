"""Every store on this machine (`stores`), and the archive that keeps their sessions
(`archive`, `restore`)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from sessiontree.archive import (
    ArchiveBusyError,
    ArchiveError,
    ArchiveReport,
    ArchiveSource,
    Waiter,
    archive_stats,
    archive_stores,
    archived_files,
    archived_versions,
    restore_files,
    restore_session,
    verify_archive,
)
from sessiontree.cli.common import (
    EXIT_ERROR,
    EXIT_USAGE,
    CliError,
    JsonOption,
    console,
    current_store,
    emit_json,
    err_console,
)
from sessiontree.cli.fit import Column, cut_end, fit_widths, middle_cut
from sessiontree.errors import SessionTreeError
from sessiontree.format import human_size
from sessiontree.store import FoundStore, find_stores, store_size


def _count(found: FoundStore) -> tuple[int, str | None]:
    """(sessions, why they could not be counted)."""
    try:
        with found.open() as store:
            return len(store.list()), None
    except (OSError, SessionTreeError) as exc:
        return 0, str(exc)


def stores_command(as_json: JsonOption = False) -> None:
    found = find_stores()
    rows: list[dict[str, Any]] = []
    for item in found:
        sessions, problem = _count(item)
        rows.append(
            {
                "agent": item.agent,
                "name": item.name,
                "machine": item.machine,
                "path": item.home,
                "via": item.via,
                "sessions": sessions,
                "bytes": store_size(item),
                "readOnly": not item.native,
                "problem": problem,
            }
        )
    if as_json:
        emit_json({"stores": rows})
        return
    if not rows:
        console.print("No agent store found on this machine.", markup=False)
        return
    # The path takes what the other columns leave, cut in the middle (its two ends say
    # most), never wrapped over lines; a problem is said on its own line below. The
    # machine: "here", or the one a sync brought the store's sessions from; a long
    # name gives up width (cut at its end) before the path falls to its least.
    cells = [
        [
            item.agent_name,
            row["machine"] or "here",
            str(row["sessions"]),
            human_size(row["bytes"]),
            row["path"],
        ]
        for item, row in zip(found, rows, strict=True)
    ]
    headers = ("Agent", "Machine", "Sessions", "Size", "Path")
    natural = [max([len(h)] + [cell_len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    columns = [Column(w) for w in natural[:4]]
    columns[1] = Column(natural[1], least=min(natural[1], 12))
    columns.append(Column(min(natural[4], 24), least=min(natural[4], 12), takes_spare=True))
    widths = fit_widths(console.width, columns, [1, 4])
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for name, width in zip(headers, widths, strict=True):
        table.add_column(
            name,
            no_wrap=True,
            width=width,
            justify="left" if name in ("Agent", "Machine", "Path") else "right",
        )
    machine_width, path_width = widths[1] or 12, widths[4] or 12
    for row, cell in zip(rows, cells, strict=True):
        machine = Text(cut_end(cell[1], machine_width))
        table.add_row(cell[0], machine, *cell[2:4], Text(middle_cut(cell[4], path_width)))
        if row["problem"] is not None:
            table.add_row("", "", "", "", Text(f"({row['problem']})", style="dim"))
    console.print(table)


# ---------------------------------------------------------------------------- archive


def _default_archive() -> str:
    store = current_store()
    if store.is_files and not store.read_only:
        return os.path.join(store.agent_dir, "archive")
    from sessiontree._util.env import get_agent_dir

    return os.path.join(get_agent_dir(), "archive")


def _target(to: str | None) -> str:
    if to is not None and "://" in to:
        if not to.startswith(("postgresql://", "postgres://")):
            raise CliError(f"{to}: give a directory or a postgresql:// URL", EXIT_USAGE)
        return to
    return os.path.abspath(os.path.expanduser(to)) if to is not None else _default_archive()


def _sources(archive: str) -> list[ArchiveSource]:
    sources = []
    for item in find_stores():
        if item.machine is not None:
            continue  # another machine's, shown here by a sync: that machine archives it
        roots = tuple(
            r
            for r in item.archive_roots
            if not os.path.realpath(os.path.join(item.home, r)).startswith(
                os.path.join(os.path.realpath(archive), "")
            )
        )
        if roots or item.agent == "opencode":  # its databases are read besides its roots
            sources.append(ArchiveSource(item.agent, item.home, roots))
    return sources


def _summary(report: ArchiveReport) -> str:
    return (
        f"{report.files_seen} files seen: {report.files_new} new, {report.files_grown} grown, "
        f"{report.files_rewritten} rewritten, {report.files_deleted} gone at their source "
        f"(kept); read {human_size(report.bytes_read)}, stored "
        f"{human_size(report.bytes_stored)} in {report.seconds:.2f}s"
        + (f"; {len(report.clobbered)} clobbered (see archive --stats)" if report.clobbered else "")
    )


_HINT = """\
# A systemd --user unit (~/.config/systemd/user/sessiontree-archive.service), then
#   systemctl --user daemon-reload && systemctl --user enable --now sessiontree-archive
[Unit]
Description=Keep a copy of every coding-agent session (sessiontree archive --watch)

[Service]
ExecStart={exe} archive --to {archive} --watch
Restart=on-failure

[Install]
WantedBy=default.target

# Or a cron line (crontab -e), every 10 minutes:
*/10 * * * * {exe} archive --to {archive} >/dev/null
"""


def archive_command(
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="DIR|URL",
            help="The archive: a dir (default: <agent dir>/archive) or a postgresql:// URL.",
        ),
    ] = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="Follow the stores live (inotify, else polling): one status line on a "
            "terminal, a line per change into a pipe.",
        ),
    ] = False,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.1, help="With --watch: seconds between rounds at most."),
    ] = 1.0,
    rounds: Annotated[
        int, typer.Option("--rounds", hidden=True, help="Stop after N rounds (tests).")
    ] = 0,
    stats: Annotated[
        bool, typer.Option("--stats", help="Original bytes, stored bytes and sessions kept.")
    ] = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Check every archived file against its hash.")
    ] = False,
    install_hint: Annotated[
        bool,
        typer.Option("--install-hint", help="Print a systemd --user unit and a cron line."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Incremental (only what is new is read), deduplicated (lines shared by forks and
    resumed copies stored once), compressed (zstd per chunk), never deleting (a session
    gone at its source stays, marked). One run at a time: a second one exits (code 1).
    """
    archive = _target(to)
    if install_hint:
        exe = shutil.which("sessiontree") or f"{sys.executable} -m sessiontree"
        console.print(_HINT.format(exe=exe, archive=archive), markup=False, end="")
        return
    if stats:
        try:
            figures = archive_stats(archive)
        except ArchiveError as exc:
            raise CliError(str(exc), EXIT_ERROR) from None
        document = {
            "archive": archive,
            "sessions": figures.sessions,
            "files": figures.files,
            "deletedAtSource": figures.deleted,
            "originalBytes": figures.original_bytes,
            "storedBytes": figures.stored_bytes,
            "clobbered": figures.clobbered,
        }
        if as_json:
            emit_json(document)
            return
        ratio = figures.stored_bytes / figures.original_bytes if figures.original_bytes else 0.0
        console.print(
            f"{archive}: {figures.sessions} sessions ({figures.deleted} gone at their source) "
            f"in {figures.files} files; original {human_size(figures.original_bytes)}, stored "
            f"{human_size(figures.stored_bytes)} ({ratio:.2f}x)",
            markup=False,
        )
        for clobbered in figures.clobbered:
            console.print(f"clobbered: {clobbered}", markup=False)
        return
    if verify:
        problems = verify_archive(archive)
        if as_json:
            emit_json({"archive": archive, "problems": problems})
        else:
            for problem in problems:
                console.print(problem, markup=False)
            if not problems:
                console.print(f"{archive}: every archived file matches its hash.", markup=False)
        if problems:
            raise typer.Exit(EXIT_ERROR)
        return
    sources = _sources(archive)
    if not watch:
        report = archive_stores(archive, sources)
        _print_report(archive, sources, report, as_json)
        return
    done = 0
    waiter = Waiter()
    status = _StatusLine()
    try:
        while True:
            sources = _sources(archive)
            stamp = time.strftime("%H:%M:%S")
            try:
                report = archive_stores(archive, sources)
                line = f"{stamp} ({waiter.mode}) {_summary(report)}"
                changed = done == 0 or any(
                    (
                        report.files_new,
                        report.files_grown,
                        report.files_rewritten,
                        report.files_deleted,
                        report.clobbered,
                    )
                )
            except ArchiveBusyError:
                # another run (a cron line, a one-off `archive`) holds it now: the
                # watch follows on, and archives what that run did not at its next round
                line = f"{stamp} ({waiter.mode}) another archive run holds it; next round"
                changed = True
            status.show(line, changed)
            done += 1
            if rounds and done >= rounds:
                status.end()
                return
            dirs = [os.path.join(s.home, r) for s in sources for r in s.roots]
            dirs += [s.home for s in sources if s.agent == "opencode"]
            try:
                waiter.wait(dirs, interval)
            except KeyboardInterrupt:
                status.end()
                return
    finally:
        waiter.close()


_REWRITE = "\r\x1b[2K"
"""Back to the line's start, and clear it: the status is written over the last."""


class _StatusLine:
    """The watch's status on stderr: on a terminal one line, rewritten in place (cut to
    the width, so that it never wraps); into a pipe or a file, a line per round that
    changed something (scripts and logs read those)."""

    def __init__(self) -> None:
        self.terminal = err_console.writes_to_terminal()
        self.shown = False

    def show(self, line: str, changed: bool) -> None:
        if not self.terminal:
            if changed:
                err_console.print(line, markup=False)
            return
        err_console.file.write(_REWRITE)
        err_console.print(cut_end(line, err_console.width - 1), end="", markup=False)
        self.shown = True

    def end(self) -> None:
        """Leave the last status on its line (the shell's prompt goes below it)."""
        if self.shown:
            err_console.print("")
            self.shown = False


def _print_report(
    archive: str, sources: list[ArchiveSource], report: ArchiveReport, as_json: bool
) -> None:
    if as_json:
        emit_json(
            {
                "archive": archive,
                "stores": [{"agent": s.agent, "path": s.home} for s in sources],
                "filesSeen": report.files_seen,
                "filesNew": report.files_new,
                "filesGrown": report.files_grown,
                "filesRewritten": report.files_rewritten,
                "filesGoneAtSource": report.files_deleted,
                "bytesRead": report.bytes_read,
                "bytesChecked": report.bytes_checked,
                "bytesStored": report.bytes_stored,
                "clobbered": report.clobbered,
                "skipped": report.skipped,
                "seconds": report.seconds,
            }
        )
        return
    where = ", ".join(f"{s.agent} {s.home}" for s in sources) or "no store found"
    console.print(f"Archived into {archive} from: {where}", markup=False)
    console.print(_summary(report), markup=False)
    for clobbered in report.clobbered:
        err_console.print(f"sessiontree: warning: clobbered: {clobbered}", markup=False)
    for skipped in report.skipped:
        err_console.print(f"sessiontree: warning: {skipped}", markup=False)


def restore_command(
    session: Annotated[
        str | None,
        typer.Argument(
            help="A session id (or its first characters) as `list` shows it, a file name or "
            "a path; `sessiontree --agent-dir ARCHIVE list --all` lists the archive's sessions."
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="DIR|URL",
            help="The archive: a dir (default: <agent dir>/archive) or a postgresql:// URL.",
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="DIR",
            help="Write under this dir instead: as the agent's home (with --all: DIR/<agent>).",
        ),
    ] = None,
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="Every archived file (with --to: a copy of all, a dir per agent)."
        ),
    ] = False,
    versions: Annotated[
        bool,
        typer.Option(
            "--versions", help="List every version of SESSION the archive keeps; write nothing."
        ),
    ] = False,
    version: Annotated[
        int | None,
        typer.Option(
            "--version",
            metavar="N",
            min=1,
            help="Restore version N of SESSION (see --versions; the newest by default).",
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            metavar="TIME",
            help="Restore the version SESSION held at TIME (YYYY-MM-DD, ISO date-time, 2h).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Byte for byte, with its subagent files and mtimes; an existing file is never
    replaced. Without --to, a file is written only where its agent keeps its store on
    this machine, and only as one of that agent's own session files: anything else an
    archive names is refused by name (exit 1). A session an agent rewrote keeps its
    earlier versions: --versions lists them (a clobber, a file cut to a header or to less
    than half its lines, is marked), --version N or --at TIME restores one (with --to when
    the file is there). The archive's sessions are listed (and searched, shown) as a
    store: `sessiontree --agent-dir ARCHIVE list --all`. An OpenCode session comes back
    as the document `opencode export` writes: `opencode import FILE` takes it back.
    """
    archive = _target(source)
    if (session is None) == (not every):
        raise CliError("give a SESSION or --all (not both)", EXIT_USAGE)
    if every and (versions or version is not None or at is not None):
        raise CliError("--versions, --version and --at take a SESSION, not --all", EXIT_USAGE)
    if version is not None and at is not None:
        raise CliError("give --version or --at (not both)", EXIT_USAGE)
    try:
        if versions:
            assert session is not None
            _print_versions(archive, session, as_json)
            return
        if every:
            report = restore_files(
                archive, archived_files(archive), to=to, keep_going=True, per_agent=True
            )
        else:
            assert session is not None
            report = restore_session(archive, session, to=to, version=version, at_ms=_at_ms(at))
    except ArchiveError as exc:
        raise CliError(str(exc), EXIT_ERROR) from None
    if as_json:
        emit_json(
            {
                "written": report.written,
                "unchanged": report.unchanged,
                "conflicts": report.conflicts,
                "notes": report.notes,
            }
        )
    else:
        for path in report.written:
            console.print(f"restored {path}", markup=False)
        for path in report.unchanged:
            console.print(f"already there: {path}", markup=False)
        for note in report.notes:
            err_console.print(f"sessiontree: note: {note}", markup=False)
        for conflict in report.conflicts:
            err_console.print(f"sessiontree: warning: {conflict}", markup=False)
    if report.conflicts:
        raise typer.Exit(EXIT_ERROR)


def _at_ms(at: str | None) -> int | None:
    if at is None:
        return None
    from sessiontree.reports import parse_time

    try:
        return parse_time(at, datetime.now().astimezone().tzinfo or UTC)
    except SessionTreeError as exc:
        raise CliError(f"--at: {exc}", EXIT_USAGE) from None


def _print_versions(archive: str, session: str, as_json: bool) -> None:
    file, versions = archived_versions(archive, session)
    rows = [
        {
            "number": v.number,
            "size": v.size,
            "lines": v.lines,
            "mtime": _iso_ns(v.mtime_ns),
            "replaced": None if v.replaced_ms is None else _iso_ns(v.replaced_ms * 1_000_000),
            "clobber": v.clobber,
        }
        for v in versions
    ]
    if as_json:
        emit_json({"agent": file.agent, "path": f"{file.home}/{file.rel}", "versions": rows})
        return
    console.print(f"{file.agent}:{file.home}/{file.rel}", markup=False)
    for row in rows:
        lines = "?" if row["lines"] is None else str(row["lines"])
        replaced = f"replaced {row['replaced']}" if row["replaced"] else "newest"
        mark = "  clobber" if row["clobber"] else ""
        console.print(
            f"{row['number']:>4}  {lines:>7} lines  {human_size(int(row['size'] or 0)):>9}  "
            f"written {row['mtime']}  {replaced}{mark}",
            markup=False,
            soft_wrap=True,
        )


def _iso_ns(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
