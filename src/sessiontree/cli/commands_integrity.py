"""Integrity commands: verify (read-only), repair (writes a copy), gc (blob collection)."""

from __future__ import annotations

import os
import shlex
import time
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from sessiontree.cli.common import (
    EXIT_ERROR,
    EXIT_USAGE,
    CliError,
    JsonOption,
    SessionArg,
    console,
    current_store,
    emit_json,
    err_console,
    progress,
    resolve_session,
    select_files,
)
from sessiontree.format import human_size
from sessiontree.layout import EXTERNAL_SESSION_DIRS
from sessiontree.maintenance import (
    DEFAULT_MIN_AGE_SECONDS,
    BlobFile,
    Finding,
    GcReport,
)


def _finding_json(f: Finding) -> dict[str, Any]:
    return {"kind": f.kind, "line": f.line, "entryId": f.entry_id, "message": f.message}


def _finding_text(f: Finding) -> Text:
    where = f"line {f.line}" if f.line is not None else "file"
    return Text.assemble("  ", (f"{where:>10}", "dim"), "  ", (f.kind, "yellow"), "  ", f.message)


def verify_command(
    paths: Annotated[
        list[str] | None,
        typer.Argument(help="Session files or prefixes (default: this project's sessions)."),
    ] = None,
    all_projects: Annotated[
        bool, typer.Option("--all", "-a", help="Every session file in the store.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Reports unparseable lines, a torn final line, an invalid header, duplicate
    ids, dangling parentIds, cycles, compactions keeping entries off their
    path, labels on unknown entries, missing or damaged blobs and conflict copies.
    """
    files = select_files(paths, all_projects)
    store = current_store()
    found: dict[str, list[Finding]] = {path: [] for path in files}
    with progress("Verifying", len(files)) as advance:
        for finding in store.check(files, progress=advance):
            found[finding.path or ""].append(finding)
    # A file that could not be read has that one finding: reported as its reason.
    report: list[tuple[str, list[Finding] | str]] = [
        (path, fs[0].message if [f.kind for f in fs] == ["unreadable"] else fs)
        for path, fs in found.items()
    ]
    bad = sum(1 for _, result in report if not isinstance(result, list) or result)
    if as_json:
        emit_json(
            {
                "files": [
                    {
                        "path": path,
                        "ok": isinstance(result, list) and not result,
                        "findings": [_finding_json(f) for f in result]
                        if isinstance(result, list)
                        else [
                            {"kind": "unreadable", "line": None, "entryId": None, "message": result}
                        ],
                    }
                    for path, result in report
                ],
                "checked": len(report),
                "withProblems": bad,
            }
        )
    else:
        for path, result in report:
            if isinstance(result, list) and not result:
                continue
            console.print(Text(path, style="bold"), soft_wrap=True)
            if isinstance(result, str):
                console.print(Text(f"  {result}", style="red"))
                continue
            for finding in result:
                console.print(_finding_text(finding), soft_wrap=True)
        summary = f"{len(report)} file(s) checked, {bad} with problems"
        console.print(Text(summary, style="bold red" if bad else "bold green"))
    if bad:
        raise typer.Exit(EXIT_ERROR)


def repair_command(
    session: SessionArg,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Where to write the copy (default: <file>.repaired, or .repaired-2... if taken).",
        ),
    ] = None,
    in_place: Annotated[
        bool,
        typer.Option("--in-place", help="Replace the file itself, keeping the original as .bak."),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report the changes; write nothing.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Unparseable and torn lines are dropped, duplicate ids renamed, dangling
    parents and cycles made roots. The original is only replaced with --in-place.
    No other file is ever replaced: an earlier <file>.repaired is kept (the copy goes
    to <file>.repaired-2, -3...), and an --output that exists is refused.
    """
    if in_place and output is not None:
        raise CliError("--in-place and --output exclude each other", EXIT_USAGE)
    path = resolve_session(session)
    out = os.path.abspath(os.path.expanduser(output)) if output is not None else None
    store = current_store()
    report = store.repair(path, out, in_place=in_place, dry_run=dry_run)
    if as_json:
        emit_json(
            {
                "path": report.path,
                "dryRun": dry_run,
                "outPath": report.out_path,
                "backupPath": report.backup_path,
                "changes": [_finding_json(f) for f in report.changes],
                "remaining": [_finding_json(f) for f in report.remaining],
            }
        )
        return
    if not report.changes:
        console.print(Text(f"{path}: nothing to repair"), soft_wrap=True)
    else:
        console.print(Text(path, style="bold"), soft_wrap=True)
        for change in report.changes:
            console.print(_finding_text(change), soft_wrap=True)
        if dry_run:
            console.print(Text(f"{len(report.changes)} change(s) would be made; nothing written"))
        elif report.backup_path:
            console.print(
                Text(f"Repaired in place; the original is kept as {report.backup_path}"),
                soft_wrap=True,
            )
        else:
            kept = output is None and not str(report.out_path).endswith(".repaired")
            note = " (earlier repaired copies are kept)" if kept else ""
            console.print(
                Text(f"Wrote {report.out_path}; the original is unchanged{note}"), soft_wrap=True
            )
            # What to do with the copy: look at it, then put it in the original's place.
            console.print(
                Text(
                    f"Next: check it (sessiontree show {shlex.quote(str(report.out_path))}), "
                    f"then replace the original with it: "
                    f"mv {shlex.quote(str(report.out_path))} {shlex.quote(path)}",
                    style="dim",
                ),
                soft_wrap=True,
            )
    if report.remaining:
        console.print(Text("Left as they are:", style="bold"))
        for finding in report.remaining:
            console.print(_finding_text(finding), soft_wrap=True)


def _blob_json(blob: BlobFile, now: float) -> dict[str, Any]:
    return {
        "hash": blob.hash,
        "size": blob.size,
        "paths": list(blob.paths),
        "ageSeconds": round(now - blob.newest, 3),
    }


def _age(seconds: float) -> str:
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"


_UNSEEN_WARNING = (
    "Warning: sessions gc cannot see (in another agent dir, on another host, in a dir "
    "not recorded) may still reference blobs it calls unreferenced."
)


def gc_command(
    delete: Annotated[
        bool, typer.Option("--delete", help="Delete the unreferenced blobs (default: list them).")
    ] = False,
    min_age: Annotated[
        float,
        typer.Option(
            "--min-age",
            min=DEFAULT_MIN_AGE_SECONDS,
            help="Keep blobs younger than this many seconds (at least 600).",
        ),
    ] = DEFAULT_MIN_AGE_SECONDS,
    as_json: JsonOption = False,
) -> None:
    """Every file under <agent>/sessions (all projects, subagent sessions, .bak and
    conflict copies), every breadcrumb target and every session dir recorded in
    <agent>/external-session-dirs is read; sessions anywhere else are not seen. A
    blob younger than 10 minutes is never deleted, and nothing is deleted if any
    file is unreadable. A place gc cannot read (a project dir linked to a disk that
    is not mounted, a recorded dir that is not there, a dir it may not list) is
    unknown, not empty: gc names it, deletes nothing and exits 1, dry run or not.
    """
    store = current_store()
    with progress("Reading session files", None) as advance:
        report = store.gc(delete=delete, min_age_seconds=min_age, progress=advance)
    if as_json:
        emit_json(_gc_json(report, delete))
    else:
        _print_gc(report, store.agent_dir, store.is_files, delete, min_age)
    if delete and report.refused is not None:
        err_console.print(Text(f"sessiontree: error: {report.refused}"), soft_wrap=True)
        raise typer.Exit(EXIT_ERROR)
    if report.unreadable:
        # A dry run's list is wrong too when a place could not be read: a blob it
        # calls unreferenced may be named there.
        err_console.print(
            Text(
                f"sessiontree: error: {len(report.unreadable)} place(s) could not be read; "
                "blobs listed may be referenced there, and --delete would delete nothing"
            ),
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_ERROR)


def _gc_json(report: GcReport, delete: bool) -> dict[str, Any]:
    now = time.time()
    return {
        "delete": delete,
        "blobDir": report.blob_dir,
        "filesScanned": report.files_scanned,
        "bytesScanned": report.bytes_scanned,
        "referenced": report.referenced,
        "pinned": report.pinned,
        "stalePins": report.stale_pins,
        "blobs": report.blobs,
        "blobBytes": report.blob_bytes,
        "unreferenced": [_blob_json(b, now) for b in report.unreferenced],
        "unreferencedBytes": report.unreferenced_bytes,
        "young": [_blob_json(b, now) for b in report.young],
        "unreadable": [{"path": p, "error": e} for p, e in report.unreadable],
        "externalDirs": report.external_dirs,
        "deleted": [b.hash for b in report.deleted],
        "freedBytes": report.freed_bytes,
        "refused": report.refused,
    }


def _print_gc(report: GcReport, agent: str, files: bool, delete: bool, min_age: float) -> None:
    where = report.blob_dir if files else f"{report.blob_dir} (in the database)"
    console.print(
        Text(
            f"Read {report.files_scanned} file(s) ({human_size(report.bytes_scanned)}); "
            f"{report.blobs} blob(s) ({human_size(report.blob_bytes)}) in {where}"
        ),
        soft_wrap=True,
    )
    if files:
        registry = os.path.join(agent, EXTERNAL_SESSION_DIRS)
        console.print(
            Text(
                f"Session dirs outside {os.path.join(agent, 'sessions')} read "
                f"(from {registry}): {len(report.external_dirs) or 'none'}"
            ),
            soft_wrap=True,
        )
        for directory in report.external_dirs:
            console.print(Text(f"  {directory}"), soft_wrap=True)
    for path, error in report.unreadable:
        err_console.print(Text(f"sessiontree: cannot read {path}: {error}"), soft_wrap=True)
    if report.unreferenced:
        console.print(_blob_table(report.unreferenced))
    if report.pinned:
        console.print(
            Text(f"{report.pinned} blob(s) held by live sessions on this host (kept)"),
            soft_wrap=True,
        )
    young = f"; {len(report.young)} more younger than {int(min_age // 60)} min kept"
    console.print(
        Text(
            f"{len(report.unreferenced)} unreferenced blob(s) holding "
            f"{human_size(report.unreferenced_bytes)}" + (young if report.young else "")
        )
    )
    if delete and report.refused is None:
        console.print(
            Text(
                f"Deleted {len(report.deleted)} blob(s), freed {human_size(report.freed_bytes)}",
                style="bold",
            )
        )
    elif not delete and report.unreferenced:
        console.print(Text("Dry run: --delete removes them.", style="dim"))
    console.print(Text(_UNSEEN_WARNING, style="yellow"), soft_wrap=True)


def _blob_table(blobs: list[BlobFile]) -> Table:
    now = time.time()
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("Blob")
    table.add_column("Size", justify="right")
    table.add_column("Age", justify="right")
    table.add_column("Files", justify="right")
    for blob in blobs:
        table.add_row(
            blob.hash[:16] + "…",
            human_size(blob.size),
            _age(now - blob.newest),
            str(len(blob.paths)),
        )
    return table
