"""`sessiontree sync HUB`: this machine's pi-format stores (xcsh, oh-my-pi, pi) synced
both ways with a hub, once or (`--watch`) as sessions change; `--status` what each
machine last sent and received. The work is `sessiontree.sync`'s."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from sessiontree.archive import Waiter
from sessiontree.cli.common import EXIT_ERROR, CliError, JsonOption, console, emit_json, err_console
from sessiontree.errors import SessionTreeError
from sessiontree.format import human_size
from sessiontree.layout import StoreParts
from sessiontree.storage import FileSessionStorage
from sessiontree.store import FoundStore, find_stores
from sessiontree.sync import (
    SYNCED_AGENTS,
    HubNameError,
    SyncBusyError,
    SyncReport,
    sync,
    sync_status,
)

_FIRST_SKIPPED = 20
"""Skipped files and lines a round lists on stderr (the rest are counted)."""


def _stores() -> tuple[list[tuple[str, StoreParts]], list[FoundStore]]:
    """(agent, parts) of every pi-format store found here, each agent once (the first
    found: `$PI_CODING_AGENT_DIR`'s before the default ones); and this machine's stores
    of the other agents (sent read-only)."""
    out: dict[str, StoreParts] = {}
    others: list[FoundStore] = []
    for found in find_stores():
        if found.machine is not None:
            continue
        if found.agent in SYNCED_AGENTS:
            if found.agent not in out:
                out[found.agent] = StoreParts(FileSessionStorage(), found.home)
        else:
            others.append(found)
    return list(out.items()), others


def _summary(report: SyncReport) -> str:
    return (
        f"sent {report.sent_lines} lines of {report.sent_sessions} sessions "
        f"({human_size(report.sent_bytes)}, {report.sent_blobs} blobs); received "
        f"{report.received_lines} lines of {report.received_sessions} sessions "
        f"({human_size(report.received_bytes)}, {report.received_blobs} blobs): "
        f"{len(report.created)} new here, {len(report.merged)} merged, "
        f"{len(report.leaf_markers)} leaf markers"
        + _others_summary(report)
        + f"; {report.elapsed:.2f}s"
    )


def _others_summary(report: SyncReport) -> str:
    sent, got = report.other_sent, report.other_received
    if not (sent.files_sent or got.files_received):
        return ""
    return (
        f"; other agents' files: {sent.files_sent} sent ({human_size(sent.bytes_sent)}), "
        f"{got.files_received} received ({human_size(got.bytes_received)})"
    )


def _print_report(report: SyncReport, stores: list[tuple[str, StoreParts]], as_json: bool) -> None:
    if as_json:
        emit_json(
            {
                **report.to_json(),
                "stores": [{"agent": a, "path": p.agent_dir} for a, p in stores],
            }
        )
        return
    # no pi-format store here: the round carried other agents' sessions only
    where = ", ".join(f"{a} {p.agent_dir}" for a, p in stores) or "other agents' sessions"
    console.print(f"Synced {where} with {report.hub} as {report.machine}", markup=False)
    console.print(_summary(report), markup=False)
    _warn_skipped(report)


def _warn_skipped(report: SyncReport) -> None:
    for what, why in report.skipped[:_FIRST_SKIPPED]:
        err_console.print(f"sessiontree: skipped: {what}: {why}", markup=False)
    if len(report.skipped) > _FIRST_SKIPPED:
        more = len(report.skipped) - _FIRST_SKIPPED
        err_console.print(f"sessiontree: skipped: {more} more (see --json)", markup=False)


def _status(hub: str, as_json: bool) -> None:
    machines = sync_status(hub)
    if as_json:
        emit_json({"hub": hub, "machines": [m.to_json() for m in machines]})
        return
    if not machines:
        console.print(f"{hub}: no machine has synced yet.", markup=False)
    for m in machines:
        console.print(
            f"{m.machine}: last round {m.last_round or 'never finished'}; sent "
            f"{m.sent_lines} lines of {m.sent_sessions} sessions ({human_size(m.sent_bytes)}),"
            f" received {m.received_lines} lines of {m.received_sessions} sessions "
            f"({human_size(m.received_bytes)})"
            + (
                f"; other agents' files: {m.other_sent_files} sent "
                f"({human_size(m.other_sent_bytes)}), {m.other_received_files} received "
                f"({human_size(m.other_received_bytes)})"
                if m.other_sent_files or m.other_received_files
                else ""
            ),
            markup=False,
        )


def _progress(message: str) -> None:
    err_console.print(f"sessiontree: {message}", markup=False)


def sync_command(
    hub: Annotated[
        str,
        typer.Argument(
            metavar="HUB",
            help="A dir every machine sees (a mounted drive, Syncthing, a share), made if "
            "missing, or a postgresql:// URL.",
        ),
    ],
    machine: Annotated[
        str | None,
        typer.Option(
            "--machine",
            metavar="NAME",
            help="This machine's name in the hub (default: the host name).",
        ),
    ] = None,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="Keep syncing as sessions change (Ctrl-C ends it)."),
    ] = False,
    interval: Annotated[
        float,
        typer.Option(
            "--interval",
            min=0.5,
            help="With --watch: seconds between rounds at most (other machines' sessions "
            "arrive at the next round).",
        ),
    ] = 30.0,
    rounds: Annotated[
        int, typer.Option("--rounds", hidden=True, help="Stop after N rounds (tests).")
    ] = 0,
    status: Annotated[
        bool, typer.Option("--status", help="What each machine last sent and received.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Every pi-format store here (xcsh, oh-my-pi, pi) gets the sessions the other
    machines made or continued, and gives them its own: run the same command on each
    machine. A session continued on two machines ends with both branches on both; a
    session deleted on one machine stays on the others (docs/sync.md). Claude Code,
    Codex, OpenCode, Gemini CLI and Copilot CLI sessions go one way, read-only: each
    machine's to the others, where `stores`, `list` and `serve` show them marked with
    the machine they came from.

    Example, on the laptop and on the desktop:

        sessiontree sync /mnt/shared/sessiontree-hub

    or, through PostgreSQL: sessiontree sync postgresql://me@server/sessions
    """
    try:
        if status:
            _status(hub, as_json)
            return
        stores, others = _stores()
        if not stores and not others:
            raise CliError("no agent's store found on this machine; nothing to sync")
        if not watch:
            report = sync(hub, stores, machine=machine, progress=_progress, others=others)
            _print_report(report, stores, as_json)
            return
        _watch(hub, machine, interval, rounds)
    except HubNameError as exc:
        raise CliError(str(exc), 2) from None
    except SessionTreeError as exc:
        raise CliError(str(exc), EXIT_ERROR) from None


def _watch(hub: str, machine: str | None, interval: float, rounds: int) -> None:
    """Rounds until Ctrl-C (or `rounds`): one as soon as a local session changes, and one
    every `interval` seconds for what other machines send."""
    waiter = Waiter()
    done = 0
    try:
        while True:
            stores, others = _stores()
            stamp = time.strftime("%H:%M:%S")
            try:
                report = sync(hub, stores, machine=machine, others=others)
                if done == 0 or report.changed:
                    err_console.print(f"{stamp} {_summary(report)}", markup=False)
                _warn_skipped(report)
            except SyncBusyError:
                err_console.print(f"{stamp} another sync holds it; next round", markup=False)
            done += 1
            if rounds and done >= rounds:
                return
            dirs = [os.path.join(p.agent_dir, "sessions") for _, p in stores]
            waiter.wait(dirs, interval)
    except KeyboardInterrupt:
        return
    finally:
        waiter.close()
