"""One sync round: this machine's new lines to the hub (push), then the other machines'
into this machine's files (pull), under this machine's lock of the hub's state.

The push comes first and writes nothing local: a hub that cannot be written (full,
read-only, unreachable) stops the round before any local file is touched. The pull
writes each session whole or not at all, so a round stopped at any point loses
nothing and, run again, writes nothing twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from sessiontree.layout import StoreParts
from sessiontree.listing import read_start_ns
from sessiontree.sync._foreign import ForeignSource
from sessiontree.sync._foreign_pull import pull_foreign
from sessiontree.sync._foreign_push import push_foreign
from sessiontree.sync._hub import MARK, Hub, hub_label, opened_hub
from sessiontree.sync._journal import read_statuses, write_status
from sessiontree.sync._model import MachineStatus, NotAHubError, SyncReport
from sessiontree.sync._names import (
    SYNCED_AGENTS,
    HubNameError,
    check_machine_name,
    default_machine_name,
)
from sessiontree.sync._pull import pull
from sessiontree.sync._push import push_store
from sessiontree.sync._state import foreign_dir, locked_state

__all__ = ["sync", "sync_status"]


def sync(
    hub: str,
    parts: Sequence[tuple[str, StoreParts]],
    *,
    machine: str | None = None,
    progress: Callable[[str], None] | None = None,
    others: Sequence[ForeignSource] | None = None,
) -> SyncReport:
    """Sync pi-format stores with a hub both ways, one round.

    `hub`: a dir (made if missing; a non-empty dir that is not a hub is refused) or a
    `postgresql://` URL (schema `sessiontree_hub` unless it names one). `parts`: (agent,
    its store's parts) per store, agent one of `SYNCED_AGENTS`, each agent once; a
    session reaches this machine only in the store of the agent that made it.
    `machine`: this machine's name in the hub (default: the host name). `progress`
    hears what a long round is doing. `others`: other agents' stores of this machine
    (as `find_stores` gives them; pi-format ones and views are passed over), mirrored
    into the hub read-only, and the other machines' mirrors brought into this machine's
    views; None (the default): that part is not run (docs/sync.md, "Other agents' sessions").

    Raises:
        HubError: the hub cannot be read or written (nothing local was changed but whole
            sessions merged before it failed); NotAHubError, MachineNameTakenError.
        SyncBusyError: another sync with this hub runs on this machine.
        HubNameError: a machine name that cannot be used.
    """
    name = check_machine_name(machine if machine is not None else default_machine_name())
    stores: dict[str, StoreParts] = {}
    for agent, store in parts:
        if agent not in SYNCED_AGENTS:
            raise HubNameError(f"{agent!r} is not synced both ways ({', '.join(SYNCED_AGENTS)})")
        if agent in stores:
            raise HubNameError(f"two stores of {agent} given; sync one per agent")
        stores[agent] = store
    started = time.monotonic()
    report = SyncReport(name, hub_label(hub))
    with locked_state(report.hub) as state, opened_hub(hub) as place:
        place.prepare()
        place.claim(name, state.machine_id)
        now_ns = read_start_ns()
        for agent, store in stores.items():
            push_store(place, state, name, agent, store, now_ns, report, progress)
        pull(place, state, name, stores, report, progress)
        if others is not None:
            _other_agents(place, name, others, report)
        if report.changed:
            write_status(place, report)
    report.elapsed = time.monotonic() - started
    return report


def _other_agents(
    place: Hub, name: str, others: Sequence[ForeignSource], report: SyncReport
) -> None:
    """Other agents' files both ways, read-only: this machine's to the hub, the other
    machines' into this machine's views. Run after the pi-format pull, so a hub that
    fails here has already merged every session it could."""
    where = foreign_dir(report.hub)
    state = os.path.join(where, "foreign.db")
    with place.io("send other agents' sessions"):
        report.other_sent = push_foreign(place.storage, place.root, name, others, state)
    with place.io("receive other agents' sessions"):
        report.other_received = pull_foreign(
            place.storage, place.root, name, os.path.join(where, "machines"), state
        )
    for note in report.other_sent.notes + report.other_received.notes:
        report.note("other agents' sessions", note)


def sync_status(hub: str) -> list[MachineStatus]:
    """What each machine of the hub last sent and received (its last round that changed
    anything); NotAHubError when `hub` is not one (nothing is made)."""
    with opened_hub(hub) as place:
        if not place.read(MARK):
            raise NotAHubError(f"{place.label}: not a sessiontree hub ({MARK} missing)")
        return read_statuses(place)
