"""Each machine's journal and status in the hub (`machines/<machine>/`).

The journal is how a round finds what other machines sent without listing the hub's
sessions: one line per growth of one of its logs, `{"log": <path>, "size": N}`,
appended by that machine only, read by the others from where they stopped. The status
is what the machine's last round that changed anything did (`sync --status`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sessiontree._version import __version__
from sessiontree.sync._hub import Hub, LogPath
from sessiontree.sync._model import MachineStatus, SyncReport
from sessiontree.sync._names import check_machine_name

__all__ = [
    "JournalRead",
    "append_journal",
    "journal_rel",
    "read_journal",
    "read_statuses",
    "write_status",
]


def _journal(machine: str) -> str:
    return f"machines/{machine}/journal.jsonl"


def journal_rel(machine: str) -> str:
    """The path of `machine`'s journal in the hub."""
    return _journal(machine)


def append_journal(
    hub: Hub, machine: str, grown: Sequence[tuple[LogPath, int]], *, durable: bool = True
) -> None:
    """Say in `machine`'s journal that its logs grew to these sizes."""
    if grown:
        lines = b"".join(
            json.dumps({"log": log.rel, "size": size}, separators=(",", ":")).encode() + b"\n"
            for log, size in grown
        )
        hub.append(_journal(machine), lines, durable=durable)


@dataclass(slots=True)
class JournalRead:
    """What a machine's journal said since `offset` was reached."""

    end: int
    """Where the next read starts."""
    grown: dict[LogPath, int] = field(default_factory=dict)
    """Each log named, and the largest size given for it."""
    refused: list[str] = field(default_factory=list)
    """Lines that do not parse, or name a log not of that machine."""
    foreign: dict[str, int] = field(default_factory=dict)
    """Files under `foreign/<that machine>/` named (other agents' sessions, mirrored
    read-only: not this module's to check or read), with their sizes."""


def read_journal(hub: Hub, machine: str, offset: int) -> JournalRead:
    """The logs `machine`'s journal names after `offset` (complete lines only; a journal
    shorter than `offset`, one made again, is read from its start)."""
    size = hub.size(_journal(machine))
    if size < offset:
        offset = 0
    if size == offset:
        return JournalRead(offset)
    data = hub.read(_journal(machine), offset, size)
    end = data.rfind(b"\n") + 1
    read = JournalRead(offset + end)
    for raw in data[:end].splitlines():
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        rel = value.get("log") if isinstance(value, dict) else None
        grown_to = value.get("size") if isinstance(value, dict) else None
        if isinstance(rel, str) and rel.startswith(f"foreign/{machine}/"):
            if type(grown_to) is int:
                read.foreign[rel] = max(read.foreign.get(rel, 0), grown_to)
            continue
        log = LogPath.parse(rel)
        if log is None or log.machine != machine or type(grown_to) is not int or grown_to < 0:
            read.refused.append(raw[:200].decode("utf-8", "replace"))
            continue
        read.grown[log] = max(read.grown.get(log, 0), grown_to)
    return read


def write_status(hub: Hub, report: SyncReport) -> None:
    """Replace this machine's status with what `report`'s round did."""
    body = {
        "machine": report.machine,
        "lastRound": datetime.now(UTC).isoformat(timespec="seconds"),
        "sent": {
            "sessions": report.sent_sessions,
            "lines": report.sent_lines,
            "bytes": report.sent_bytes,
            "otherFiles": report.other_sent.files_sent,
            "otherBytes": report.other_sent.bytes_sent,
        },
        "received": {
            "sessions": report.received_sessions,
            "lines": report.received_lines,
            "bytes": report.received_bytes,
            "otherFiles": report.other_received.files_received,
            "otherBytes": report.other_received.bytes_received,
        },
        "version": __version__,
    }
    hub.write(f"machines/{report.machine}/status.json", json.dumps(body, indent=1).encode())


def _count(body: dict[str, object], side: str, what: str) -> int:
    part = body.get(side)
    value = part.get(what) if isinstance(part, dict) else None
    return value if type(value) is int else 0


def read_statuses(hub: Hub) -> list[MachineStatus]:
    """Every machine of the hub, with what its status says (nothing, if it has none)."""
    out = []
    for machine in hub.machines():
        check_machine_name(machine)
        try:
            body = json.loads(hub.read(f"machines/{machine}/status.json") or b"{}")
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        last = body.get("lastRound")
        version = body.get("version")
        out.append(
            MachineStatus(
                machine,
                last if isinstance(last, str) else None,
                _count(body, "sent", "sessions"),
                _count(body, "sent", "lines"),
                _count(body, "sent", "bytes"),
                _count(body, "received", "sessions"),
                _count(body, "received", "lines"),
                _count(body, "received", "bytes"),
                version if isinstance(version, str) else None,
                other_sent_files=_count(body, "sent", "otherFiles"),
                other_sent_bytes=_count(body, "sent", "otherBytes"),
                other_received_files=_count(body, "received", "otherFiles"),
                other_received_bytes=_count(body, "received", "otherBytes"),
            )
        )
    return out
