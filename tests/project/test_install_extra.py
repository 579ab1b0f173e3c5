"""The library without the command line: installing `sessiontree` for an agent pulls no
CLI, web or report stack (that is the `cli` extra), the library's modules load none of
it, and what needs it says which extra to install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

CLI_STACK = ("typer", "click", "rich", "jinja2", "markdown_it", "pygments", "genai_prices")
"""What only the command line, the HTML export and the cost estimates use."""

LIBRARY_USE = """
import json, os, sys
import sessiontree
from sessiontree import SessionManager, Store
from sessiontree.export import export_markdown
import sessiontree.format, sessiontree.history, sessiontree.layout, sessiontree.listing
import sessiontree.search, sessiontree.session, sessiontree.storage, sessiontree.store

here = sys.argv[1]
with Store(os.path.join(here, "agent")) as store:
    with store.create(here) as sm:
        sm.append_message({"role": "user", "content": "hello", "timestamp": 1})
        # A session is written once it has a reply (as pi does).
        sm.append_message({"role": "assistant", "content": [{"type": "text", "text": "hi"}],
                           "provider": "p", "model": "m", "api": "a", "stopReason": "stop",
                           "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0,
                                     "totalTokens": 2}, "timestamp": 2})
        path = sm.get_session_file()
    with store.open(path, read_only=True) as sm:
        entries = [e["type"] for e in sm.get_entries()]
    listed = [s.path for s in store.list(here)]
stack = sorted(m for m in sys.modules if m.split(".")[0] in json.loads(sys.argv[2]))
print(json.dumps({"entries": entries, "listed": listed == [path], "stack": stack}))
"""
"""Writes, reads and lists a session through the library, then names what of the CLI
stack it loaded."""

BLOCK = """
import importlib.abc, sys
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Missing())
"""
"""A Python prelude that makes `blocked` packages not installed."""


def library_use(python: str, tmp_path: Path) -> dict[str, object]:
    proc = subprocess.run(
        [python, "-c", LIBRARY_USE, str(tmp_path), json.dumps(CLI_STACK)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PI_CODING_AGENT_DIR": str(tmp_path / "agent")},
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_the_library_loads_nothing_of_the_command_line(tmp_path: Path) -> None:
    result = library_use(sys.executable, tmp_path)
    assert result == {"entries": ["message", "message"], "listed": True, "stack": []}


def test_the_core_dependencies_leave_the_command_line_to_its_extra() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    core = {d.split(">")[0].split("[")[0] for d in project["dependencies"]}
    extras = project["optional-dependencies"]
    cli = {d.split(">")[0] for d in extras["cli"]}
    assert core == {"orjson", "xxhash", "zstandard"}
    assert {"typer", "rich", "jinja2", "markdown-it-py", "pygments", "genai-prices"} <= cli
    assert "sessiontree[cli]" in extras["web"]  # the README's `.[web]` installs everything


def run_blocked(blocked: set[str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK.format(blocked=blocked) + code],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_the_extra_the_command_says_what_to_install() -> None:
    proc = run_blocked({"typer"}, "from sessiontree.cli import main; main()")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        "sessiontree: the command line is not installed: pip install 'sessiontree[cli]'\n"
    )


def test_the_html_export_without_the_extra_names_it() -> None:
    proc = run_blocked({"jinja2"}, "from sessiontree.export import export_html")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        "ModuleNotFoundError: export_html needs jinja2, of the cli extra: "
        "pip install 'sessiontree[cli]'"
    )


def test_usage_without_the_price_table_says_why() -> None:
    code = (
        "from sessiontree.reports import price_table; t = price_table(); "
        "print(t.available, t.error)"
    )
    proc = run_blocked({"genai_prices"}, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("False genai-prices unavailable: ")
    assert "pip install 'sessiontree[cli]'" in proc.stdout


@pytest.mark.slow
def test_a_core_install_in_a_fresh_venv_works_without_the_command_line(tmp_path: Path) -> None:
    """`pip install .` without extras, into a new virtualenv (from pip's cache and
    index as configured: the pins keep it to known releases)."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "-c", "constraints.txt", "."],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
    )
    assert install.returncode == 0, install.stderr
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert not installed & {"typer", "click", "rich", "jinja2", "genai-prices", "pydantic"}
    work = tmp_path / "work"
    work.mkdir()
    expected = {"entries": ["message", "message"], "listed": True, "stack": []}
    assert library_use(python, work) == expected
    command = subprocess.run(
        [str(env_dir / "bin" / "sessiontree"), "list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert command.returncode == 1 and "Traceback" not in command.stderr
    assert command.stderr == (
        "sessiontree: the command line is not installed: pip install 'sessiontree[cli]'\n"
    )


@pytest.mark.parametrize("blocked", ["jinja2", "markdown_it", "pygments"])
def test_a_command_whose_part_of_the_extra_is_missing_names_it_without_a_traceback(
    blocked: str,
) -> None:
    """typer is there (installed on its own), the rest of the extra is not: a command
    that draws with it says what to install, as the command line without typer does."""
    code = "import sys; sys.argv = ['sessiontree', 'export', '--help']\n"
    proc = run_blocked({blocked}, code + "from sessiontree.cli import main; main()")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert blocked in proc.stderr and "pip install 'sessiontree[cli]'" in proc.stderr


def test_a_usage_report_without_the_price_table_says_why() -> None:
    code = (
        "import tempfile; from sessiontree import Store\n"
        "with Store(tempfile.mkdtemp()) as s: print(s.usage().prices['error'])"
    )
    proc = run_blocked({"genai_prices"}, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("genai-prices unavailable: ")
