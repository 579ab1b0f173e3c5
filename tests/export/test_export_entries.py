"""What an entry of the HTML page says in its collapsed lines: its time, what a tool
call ran, a tool's output as text; entries only the agent uses folded away."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessiontree import SessionManager
from sessiontree.export import export_html
from sessiontree.export._tools import tool_call_summary, tool_output_text
from tests.helpers import assistant, user


@pytest.mark.parametrize(
    ("arguments", "shown"),
    [
        (
            {"command": "git log --oneline -10", "description": "recent commits"},
            "git log --oneline -10",
        ),
        ({"cmd": "sed -n '1,180p' git.go", "workdir": "/w"}, "sed -n '1,180p' git.go"),
        ({"command": ["bash", "-lc", "ls -la"]}, "ls -la"),
        ({"command": ["git", "status", "--short"]}, "git status --short"),
        ({"file_path": "/w/state.go"}, "/w/state.go"),
        ({"filePath": "/w/SPEC.md"}, "/w/SPEC.md"),
        ({"pattern": "TODO|FIXME", "path": "/w/src"}, "TODO|FIXME in /w/src"),
        ({"pattern": "docs/*.md"}, "docs/*.md"),
        ({"query": "starlette testclient"}, "starlette testclient"),
        ({"input": "*** Begin Patch\n*** Update File: a.go\n*** Add File: b.go\n"}, "a.go, b.go"),
        ('{"command": "make test"}', "make test"),
        ({"taskId": "1"}, ""),
    ],
)
def test_a_tool_call_says_what_it_ran(arguments: object, shown: str) -> None:
    assert tool_call_summary(arguments) == shown


def test_a_long_command_is_one_cut_line() -> None:
    line = tool_call_summary({"command": "echo " + "word\n" * 100})
    assert "\n" not in line and line.endswith("…") and len(line) <= 160


def test_codex_output_documents_read_as_the_text_the_tool_printed() -> None:
    document = json.dumps({"output": "a.md\nb.md\n", "metadata": {"exit_code": 0}})
    assert tool_output_text(document) == "a.md\nb.md\n"
    failed = json.dumps({"output": "no such file\n", "metadata": {"exit_code": 2}})
    assert tool_output_text(failed) == "no such file\n(exit code 2)"
    assert tool_output_text('{"output": broken') == '{"output": broken'
    assert tool_output_text("plain text") == "plain text"


def test_the_page_shows_times_calls_outputs_and_folds_agent_only_entries(tmp_path: Path) -> None:
    call = {"type": "toolCall", "id": "c1", "name": "Bash", "arguments": {"command": "ls docs"}}
    output = json.dumps({"output": "guide.md\nindex.md", "metadata": {"exit_code": 0}})
    with SessionManager.create("/p", str(tmp_path)) as sm:
        sm.append_message(user("list the docs"))
        sm.append_message(assistant(content=[call]))
        sm.append_message(
            {
                "role": "toolResult",
                "toolCallId": "c1",
                "toolName": "Bash",
                "content": [{"type": "text", "text": output}],
                "isError": False,
                "timestamp": 1760000000000,
            }
        )
        sm.append_custom_entry("claude-code:system", {"subtype": "stop_hook_summary"})
        page = export_html(sm)
    assert '<summary>tool call: Bash <code class="ran">ls docs</code></summary>' in page
    assert (
        "guide.md\nindex.md" in page and "\\n" not in page.split("<pre>", 1)[1].split("</pre>")[0]
    )
    assert page.count("<time datetime=") == 4
    assert 'class="entry note agent-only"' in page
    assert 'id="show-agent-only"' in page
