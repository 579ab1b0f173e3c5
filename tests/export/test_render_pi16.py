"""pi 1.6's new entries and fields, shown: `usage` and `context_edit` entries, role
"system" messages, the new assistant and tool-result fields, in `tree`, `show`, the
HTML page (the web viewer's entries are the same `html_entry`) and Markdown; and kept
byte for byte on a rewrite. The session is the one pi 1.6.0 wrote
(`tests/data/pi16/usage-sample.jsonl`, see tests/data/README.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from sessiontree import SessionManager
from sessiontree.cli import app
from sessiontree.export import export_html, export_markdown, html_entry
from tests.conftest import FIXTURES

SAMPLE = FIXTURES / "pi16" / "usage-sample.jsonl"
USAGE, EDIT, SYSTEM = "fd73fbe6", "b6031322", "b90f16f6"
REPLY, RESULT, DEFERRED = "e05dba40", "9b8a940a", "e7873f73"


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_tree_says_what_the_new_entries_hold() -> None:
    """Before: `system:` blank, `usage` and `context_edit` bare, a deferred reply blank."""
    tree = json.loads(cli("tree", "--json", str(SAMPLE)))
    preview = {e["id"]: e["preview"] for e in tree["entries"]}
    assert preview[SYSTEM] == "system: sections identity, rules · tools added: read"
    assert preview[USAGE].startswith("usage: cache_warm · anthropic/claude-sonnet-4-5 · 40,000 t")
    assert preview[EDIT] == "context edit: 7b12337a replaced: Read notes.txt (edited)"
    assert preview[DEFERRED] == "assistant: [deferred]"
    assert f"{SYSTEM} system: sections identity" in cli("tree", str(SAMPLE))


def test_html_entries_show_details() -> None:
    with SessionManager.open(str(SAMPLE), read_only=True) as sm:
        views = {e["id"]: html_entry(e, n, {}) for n, e in enumerate(sm.get_entries())}
    system = views[SYSTEM]
    assert [(b.kind, b.name, b.text) for b in system.blocks] == [
        ("section", "identity", "You are a coding agent."),
        ("section", "rules", "Be brief."),
        (
            "tool_list",
            "tools added: read",
            '[\n  {\n    "name": "read",\n    "description": "Read a file"\n  }\n]',
        ),
    ]
    usage = views[USAGE]
    assert usage.heading == "usage · cache_warm"
    assert "kept the prompt cache warm" in usage.blocks[0].text
    assert usage.usage == "in 0 · out 0 · cache read 40,000 · $0.0120"
    assert views[EDIT].blocks[0].text == "7b12337a replaced: Read notes.txt (edited)"
    reply = views[REPLY].usage or ""
    for fact in (
        "reasoning 120",
        "$0.0210 billed",
        "thinking medium (provider: high)",
        "provider stop: tool_use",
        "2.3 s",
    ):
        assert fact in reply
    result = views[RESULT].usage or ""
    for fact in ("in 500", "nested calls: grep", "tools added: grep", "41 ms"):
        assert fact in result
    assert "deferred" in (views[DEFERRED].usage or "")


def test_exports_show_details() -> None:
    with SessionManager.open(str(SAMPLE), read_only=True) as sm:
        markdown = export_markdown(sm, "e7873f73")
        page = export_html(sm)
    assert "**Section `identity`**\n\nYou are a coding agent." in markdown
    assert "*usage: cache_warm · anthropic/claude-sonnet-4-5 · 40,000 tokens · $0.0120" in markdown
    assert "*context edit: 7b12337a replaced: Read notes.txt (edited)*" in markdown
    assert "nested calls: grep · tools added: grep · 41 ms" in markdown
    assert "*deferred*" in markdown
    assert "section: identity" in page and "kept the prompt cache warm" in page


def test_show_counts_the_new_types() -> None:
    out = cli("show", str(SAMPLE))
    assert "usage 1" in out and "context_edit 1" in out and "system 1" in out


def test_rewrite_keeps_the_new_fields_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    shutil.copy(SAMPLE, path)
    with SessionManager.open(str(path)) as sm:
        sm.rewrite_entries()
    assert path.read_bytes() == SAMPLE.read_bytes()


def test_search_finds_system_prompts_and_edits(agent_dir: Path) -> None:
    """A system message's sections and a context edit's replacement are text search finds
    (before, neither held any text), by their roles `system` and `context_edit`."""
    project = agent_dir / "sessions" / "--work-demo--"
    project.mkdir(parents=True)
    shutil.copy(SAMPLE, project / "2026-12-06T19-50-36-276Z_usage-sample.pi16.jsonl")
    for extra in ([], ["--no-index"]):
        hits = json.loads(
            cli("search", "coding agent", "--all", "--role", "system", "--json", *extra)
        )
        assert [h["entryId"] for h in hits["hits"]] == [SYSTEM]
        hits = json.loads(cli("search", "(edited)", "--all", "--json", *extra))
        assert [(h["entryId"], h["role"]) for h in hits["hits"]] == [(EDIT, "context_edit")]
