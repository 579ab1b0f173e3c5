"""What a tool call ran, in one line (the command, the file, the pattern, the query),
and what a tool returned, as the text the tool printed.

Agents name their tools and arguments differently (Claude Code's `Bash` takes
`command`, Codex's `exec_command` takes `cmd`, OpenCode's `read` takes `filePath`);
the page's collapsed line shows the argument that says what the call did, whatever
the agent, so a reader can scan a session without opening every call."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["tool_call_summary", "tool_output_text"]

SUMMARY_CHARS = 160
"""Characters of a call's one line at most (the page cuts it to its width too)."""

# The argument that says what a call did, most telling first: a shell command, what
# a search looked for (a pattern is shown with the folder it looked in), then what a
# file tool touched.
_SUMMARY_KEYS = (
    "command",
    "cmd",
    "pattern",
    "query",
    "file_path",
    "filePath",
    "notebook_path",
    "path",
    "url",
    "skill",
    "description",
    "subject",
    "prompt",
)
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.MULTILINE)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 1] + "…"


def tool_call_summary(arguments: object) -> str:
    """What a call ran, in one line ("" when its arguments say nothing short)."""
    if isinstance(arguments, str):  # some agents keep the arguments as JSON text
        text = arguments
        try:
            arguments = json.loads(text)
        except ValueError:
            return _one_line(text)
    if not isinstance(arguments, dict):
        return ""
    for key in _SUMMARY_KEYS:
        value = arguments.get(key)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            # An argv: Codex's `shell` takes ["bash", "-lc", "<script>"]: the script
            # is what ran.
            shell = len(value) == 3 and value[1] in ("-c", "-lc")
            value = value[2] if shell else " ".join(value)
        if isinstance(value, str) and value.strip():
            if key == "pattern" and isinstance(arguments.get("path"), str):
                return _one_line(f"{value} in {arguments['path']}")
            return _one_line(value)
    patch = arguments.get("input") or arguments.get("patch")
    if isinstance(patch, str):  # Codex's apply_patch: the files it changes
        files = _PATCH_FILE.findall(patch)
        if files:
            return _one_line(", ".join(files))
    return ""


def tool_output_text(text: str) -> str:
    """A tool's output as the tool printed it. Codex's older rollouts keep a shell
    call's output as a JSON document (`{"output": "...", "metadata": {"exit_code":
    0, ...}}`), which reads as one line of escapes; its `output` is the text, its
    exit code a line after it. Anything else is returned as it is."""
    if not text.startswith('{"output"'):
        return text
    try:
        value: Any = json.loads(text)
    except ValueError:
        return text
    if not isinstance(value, dict) or not isinstance(value.get("output"), str):
        return text
    out: str = value["output"]
    metadata = value.get("metadata")
    code = metadata.get("exit_code") if isinstance(metadata, dict) else None
    if isinstance(code, int) and code != 0:
        out = f"{out.rstrip()}\n(exit code {code})"
    return out
