"""Several stores' replies streamed (`stream_replies_of`) against the list
(`replies_of`) and the whole-store count: other agents' stores beside pi's."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sessiontree.reports import load_usage, price
from sessiontree.store import Store, replies_of
from sessiontree.store._replies import stream_replies_of
from tests.reports.test_usage import T0, prompt, reply
from tests.reports.test_usage import Store as Sessions
from tests.reports.test_usage_stream import same_reports, shown, whole_store_count

CLAUDE = Path(__file__).parent.parent / "data" / "real" / "foreign" / "claude"
TRANSCRIPTS = [
    CLAUDE
    / (
        "d-kimuson__claude-code-viewer__mock-global-claude-dir__projects__sample-project__"
        "fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
    ),
    CLAUDE / "entireio__cli__26__dcd5518fea__0__full.jsonl",
]
"""Inline sidechain replies (Claude Code 1.0.98) and 1-hour cache writes (2.1)."""


def test_other_agents_stores_stream_as_they_were_counted(agent_dir: Path, tmp_path: Path) -> None:
    """Claude Code transcripts (sidechain replies, 1-hour cache writes) beside pi's
    sessions, counted once across the stores, indexed and read."""
    home = tmp_path / "claude"
    project = home / "projects" / "-work-app"
    project.mkdir(parents=True)
    for file in TRANSCRIPTS:
        shutil.copyfile(file, project / file.name.rsplit("__", 1)[-1])
    agent_dir.mkdir(parents=True)
    Sessions(agent_dir).session("P", [prompt("p0", None, T0), reply("p1", "p0", T0 + 5)])
    for use_index in (True, False):
        with Store(agent_dir) as pi, Store(home, agent="claude") as claude:
            eager: list[Any] = []
            for store in (pi, claude):
                sources, view = store._view(store.files(nested=False))
                eager += load_usage(sources, view, use_index=use_index).sessions
            old, old_dups = whole_store_count(eager)
            listed = replies_of([pi, claude], use_index=use_index)
            streamed = stream_replies_of([pi, claude], use_index=use_index)
            new = list(streamed.replies)
        assert shown(new) == shown(listed.replies) == shown(price(old))
        assert streamed.duplicates == listed.duplicates == old_dups
        assert any(r.record.cache_write_1h for r in new)
        same_reports(price(old), new)
