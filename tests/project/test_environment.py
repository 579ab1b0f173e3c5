"""No library, CLI or web code writes the process environment: the agent dir is passed
down as `agent_dir=`. And only `sessiontree._util.env` reads it: the
default store is chosen there, once; everything else is handed its store.

The environment is shared by every thread of the process; the web app serves requests
from a thread pool, and a program that embeds the library has threads of its own. A
write to `os.environ` on behalf of one caller is seen by all of them.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import sessiontree
from sessiontree import SessionManager
from sessiontree.cli import app
from tests import foreign_support as fs
from tests.conftest import require_module
from tests.helpers import assistant, user

SRC = Path(sessiontree.__file__).resolve().parent
"""The package under test (src/sessiontree in a checkout)."""

_WRITERS = {"pop", "popitem", "setdefault", "update", "clear", "__setitem__", "__delitem__"}
_FUNCTIONS = {"putenv", "unsetenv"}


def _is_environ(node: ast.expr, names: set[str]) -> bool:
    """`os.environ` / `os.environb`, or a name bound to one by `from os import ...`."""
    if isinstance(node, ast.Attribute) and node.attr in ("environ", "environb"):
        return isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id in names


def environment_writes(source: str, filename: str = "<source>") -> list[str]:
    """Every place in `source` that writes the process environment, as `file:line what`."""
    tree = ast.parse(source, filename)
    environ_names: set[str] = set()
    function_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            for alias in node.names:
                bound = alias.asname or alias.name
                if alias.name in ("environ", "environb"):
                    environ_names.add(bound)
                elif alias.name in _FUNCTIONS:
                    function_names.add(bound)
    found: list[str] = []

    def hit(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{getattr(node, 'lineno', '?')} {what}")

    def target_writes(target: ast.expr) -> None:
        if isinstance(target, ast.Subscript) and _is_environ(target.value, environ_names):
            hit(target, "environ[...] assignment")
        elif _is_environ(target, environ_names):
            hit(target, "environ rebound")
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                target_writes(element)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                target_writes(target)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            target_writes(node.target)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _is_environ(target.value, environ_names):
                    hit(target, "del environ[...]")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                if func.attr in _WRITERS and _is_environ(func.value, environ_names):
                    hit(node, f"environ.{func.attr}()")
                elif (
                    func.attr in _FUNCTIONS
                    and isinstance(func.value, ast.Name)
                    and func.value.id == "os"
                ):
                    hit(node, f"os.{func.attr}()")
            elif isinstance(func, ast.Name) and func.id in function_names:
                hit(node, f"{func.id}()")
    return found


@pytest.mark.parametrize(
    "snippet",
    [
        "import os\nos.environ['X'] = '1'",
        "import os\nos.environ.pop('X', None)",
        "import os\nos.environ.setdefault('X', '1')",
        "import os\nos.environ.update(X='1')",
        "import os\ndel os.environ['X']",
        "import os\nos.putenv('X', '1')",
        "import os\nos.unsetenv('X')",
        "import os\nos.environ |= {'X': '1'}",
        "import os\nos.environ.clear()",
        "import os\nos.environb[b'X'] = b'1'",
        "from os import environ\nenviron['X'] = '1'",
        "from os import environ as env\nenv.pop('X')",
        "from os import putenv\nputenv('X', '1')",
        "import os\na, os.environ['X'] = 1, '2'",
    ],
)
def test_the_check_finds_every_kind_of_write(snippet: str) -> None:
    assert len(environment_writes(snippet)) == 1, snippet


def test_the_check_lets_reads_pass() -> None:
    reads = (
        "import os\nfrom os import environ\n"
        "a = os.environ.get('X')\nb = os.environ['X']\nc = 'X' in environ\n"
        "d = dict(os.environ)\ne = os.getenv('X')\nf = {**os.environ, 'X': '1'}\n"
    )
    assert environment_writes(reads) == []


def test_no_source_file_writes_the_environment() -> None:
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50  # the package, not an empty glob
    found = [w for f in files for w in environment_writes(f.read_text("utf-8"), str(f))]
    assert found == [], "\n".join(found)


# ---------------------------------------------------------------------------- the CLI

_watch: list[tuple[str, list[str]]] = []
"""(directory, hits): while set, every audited file access under `directory` is recorded."""


def _path_args(args: tuple[Any, ...]) -> Iterator[str]:
    for arg in args:
        if isinstance(arg, str | bytes | os.PathLike):
            try:
                yield os.path.abspath(os.fsdecode(arg))
            except (TypeError, ValueError):
                continue


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _watch:
        return
    if not (event == "open" or event.startswith(("os.", "shutil.", "sqlite3.connect"))):
        return
    for directory, hits in _watch:
        for path in _path_args(args):
            if path == directory or path.startswith(directory + os.sep):
                hits.append(f"{event} {path}")


_hooked = False


@pytest.fixture
def watch() -> Iterator[Any]:
    """`watch(directory)` -> the list of accesses to `directory` from now on (audit hooks:
    open, listdir, scandir, mkdir, rename, remove, sqlite3.connect, ...)."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)  # hooks cannot be removed: this one is idle when unwatched
        _hooked = True

    def start(directory: Path) -> list[str]:
        hits: list[str] = []
        _watch.append((os.path.abspath(directory), hits))
        return hits

    yield start
    _watch.clear()


def _store(project: Path) -> tuple[str, str]:
    """Two sessions of `project` with an image each, in the configured agent dir."""
    paths = []
    for n in range(2):
        sm = SessionManager.create(str(project))
        sm.append_message(user(f"question {n} about parsing"))
        ref = sm.put_blob(b"\x89PNG\r\n\x1a\n" + bytes([n]) * 64)
        sm.append_message(
            {
                "role": "user",
                "content": [{"type": "image", "data": ref.ref, "mimeType": "image/png"}],
                "timestamp": 1,
            }
        )
        sm.append_message(assistant(f"answer {n}"))
        sm.close()
        path = sm.get_session_file()
        assert path is not None
        paths.append(path)
    return paths[0], paths[1]


def test_cli_agent_dir_is_passed_down_not_put_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watch: Any
) -> None:
    """With `--agent-dir X`, every command works on X and nothing touches the agent dir
    of the environment; the environment is the same after each command as before."""
    agent = tmp_path / "chosen"
    other = tmp_path / "environment-agent"  # $PI_CODING_AGENT_DIR: must stay untouched
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    first, second = _store(project)
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(other))
    monkeypatch.setenv("TMUX_PANE", "%7")  # a terminal: breadcrumbs are written and read
    monkeypatch.setenv("COLUMNS", "200")
    claude = tmp_path / "claude"
    fs.claude_subagent_session(claude / "projects")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    first_id = os.path.basename(first).split("_", 1)[1][: -len(".jsonl")]
    leaf = SessionManager.open(first, read_only=True).get_leaf_id()
    assert leaf is not None
    hits = watch(other)
    runner = CliRunner()
    before = dict(os.environ)

    def run(*args: str) -> str:
        result = runner.invoke(app, ["--agent-dir", str(agent), *args])
        assert result.exit_code == 0, (args, result.output, result.exception)
        assert dict(os.environ) == before, args
        assert hits == [], (args, hits)
        return result.stdout

    run("list")
    run("list", "--all", "--json")
    for command in ("show", "tree", "context"):
        run(command, first_id)
    for fmt in ("md", "html", "jsonl"):
        run("export", first_id, "-f", fmt)
    run("search", "parsing")
    run("stats")
    run("usage", "daily")
    run("usage", "blocks")
    run("history")
    assert run("resume", first_id).strip() == first
    run("rename", first_id, "renamed")
    forked = run("fork", first_id).strip()
    assert forked.startswith(str(agent / "sessions"))
    breadcrumb = agent / "terminal-sessions" / "tmux-%7"
    assert breadcrumb.read_bytes().split(b"\n")[1] == os.fsencode(forked)
    extracted = run("extract", first_id, "--leaf", leaf).strip()
    assert os.path.dirname(extracted) == os.path.dirname(first)
    run("migrate", "--all")
    run("verify", "--all")
    run("repair", second, "-o", str(tmp_path / "repaired.jsonl"))
    run("gc")
    run("import", "--from", "claude", "--all")
    run("rm", "--yes", second)
    assert not other.exists()

    # Without --agent-dir, the environment's agent dir is the one used (as before).
    _watch.clear()
    listed = json.loads(
        runner.invoke(app, ["--agent-dir", str(agent), "list", "--all", "--json"]).stdout
    )
    assert listed["total"] >= 3  # the first session, its fork and its extract, the imports
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    assert json.loads(runner.invoke(app, ["list", "--all", "--json"]).stdout) == listed
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(other))
    assert json.loads(runner.invoke(app, ["list", "--all", "--json"]).stdout)["total"] == 0


# ---------------------------------------------------------------------------- reading it

_READERS = {"getenv", "getenvb"}
"""`os` functions that read the environment (besides `os.environ` / `os.environb`)."""
ENV_MODULE = SRC / "_util" / "env.py"
"""The one module that reads the environment."""


def environment_reads(source: str, filename: str = "<source>") -> list[str]:
    """Every place in `source` that touches the process environment (reading it, or
    taking hold of it to read later), as `file:line what`."""
    tree = ast.parse(source, filename)
    os_names = {"os"}
    bound: set[str] = set()  # names `from os import environ, getenv` bound
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "os":
                    os_names.add(alias.asname or "os")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            for alias in node.names:
                if alias.name in ("environ", "environb", *_READERS, "*"):
                    found.append(f"{filename}:{node.lineno} from os import {alias.name}")
                    bound.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "environb", *_READERS):
            if isinstance(node.value, ast.Name) and node.value.id in os_names:
                found.append(f"{filename}:{node.lineno} os.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in bound:
            found.append(f"{filename}:{node.lineno} {node.id}")
    return found


@pytest.mark.parametrize(
    "snippet",
    [
        "import os\na = os.environ.get('X')",
        "import os\na = os.environ['X']",
        "import os\na = 'X' in os.environ",
        "import os\na = dict(os.environ)",
        "import os\na = os.getenv('X')",
        "import os\na = os.getenvb(b'X')",
        "import os\na = os.environb[b'X']",
        "import os as o\na = o.environ.get('X')",
        "import os\nsee = os.environ",
        "import os\nf = os.getenv",
    ],
)
def test_the_read_check_finds_every_kind_of_read(snippet: str) -> None:
    assert len(environment_reads(snippet)) == 1, snippet


@pytest.mark.parametrize(
    "snippet",
    [
        "from os import environ\na = environ.get('X')",
        "from os import getenv as g\na = g('X')",
    ],
)
def test_the_read_check_finds_names_imported_from_os(snippet: str) -> None:
    assert environment_reads(snippet), snippet


def test_the_read_check_lets_the_rest_of_os_pass() -> None:
    other = "import os\nimport os.path\na = os.path.join('a', 'b')\nb = os.getcwd()\n"
    assert environment_reads(other) == []


def test_only_the_env_module_reads_the_environment() -> None:
    """The default store, the other agents' homes, the terminal and the time zone are
    read in `_util/env.py`; every other module is handed what it needs."""
    files = sorted(SRC.rglob("*.py"))
    assert ENV_MODULE in files and len(files) > 50
    found = [
        r for f in files if f != ENV_MODULE for r in environment_reads(f.read_text("utf-8"), str(f))
    ]
    assert found == [], "\n".join(found)
    assert environment_reads(ENV_MODULE.read_text("utf-8"))  # the check sees it there


@pytest.fixture
def env_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the variables read (through `_util/env.py`) from now on."""
    from sessiontree._util import env

    reads: list[str] = []
    real = env._read

    def recording(name: str) -> str | None:
        reads.append(name)
        return real(name)

    monkeypatch.setattr(env, "_read", recording)
    return reads


def test_the_cli_reads_the_default_store_once_and_passes_it_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env_reads: list[str]
) -> None:
    """A command given `--agent-dir` never consults the environment for a store; one
    given none reads it once, as its store is chosen: every other part of the command
    is handed the store (its storage and agent dir)."""
    agent = tmp_path / "chosen"
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    monkeypatch.setenv("TMUX_PANE", "%3")  # a terminal: breadcrumbs are written and read
    monkeypatch.setenv("COLUMNS", "200")
    first, second = _store(project)
    first_id = os.path.basename(first).split("_", 1)[1][: -len(".jsonl")]
    leaf = SessionManager.open(first, read_only=True).get_leaf_id()
    assert leaf is not None
    runner = CliRunner()
    store_variables = {"PI_CODING_AGENT_DIR", "SESSIONTREE_STORE"}
    commands: list[list[str]] = [
        ["list"],
        ["list", "--all", "--json"],
        ["show", first_id],
        ["tree", first_id],
        ["context", first_id],
        ["export", first_id, "-f", "md"],
        ["export", first_id, "-f", "jsonl", "-o", str(tmp_path / "copy{}.jsonl")],
        ["search", "parsing"],
        ["stats"],
        ["usage", "daily"],
        ["history"],
        ["resume", first_id],
        ["rename", first_id, "renamed"],
        ["fork", first_id],
        ["extract", first_id, "--leaf", leaf],
        ["migrate", "--all"],
        ["verify", "--all"],
        ["repair", second, "-o", str(tmp_path / "repaired{}.jsonl")],
        ["gc"],
    ]
    for command in commands:
        args = [a.format(1) for a in command]  # a new output file for each run
        env_reads.clear()
        result = runner.invoke(app, ["--agent-dir", str(agent), *args])
        assert result.exit_code == 0, (args, result.output, result.exception)
        assert store_variables.isdisjoint(env_reads), (args, env_reads)
        args = [a.format(2) for a in command]
        env_reads.clear()
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output, result.exception)
        assert env_reads.count("PI_CODING_AGENT_DIR") == 1, (args, env_reads)
        assert env_reads.count("SESSIONTREE_STORE") == 1, (args, env_reads)


def test_the_web_app_works_on_its_store_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env_reads: list[str]
) -> None:
    """The web app holds one `Store` and reads no store from the environment while it
    serves every kind of page."""
    require_module("httpx")
    require_module("uvicorn")
    import httpx

    from sessiontree import Store
    from sessiontree.web.server import BackgroundServer

    agent = tmp_path / "served"
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    _store(project)
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "elsewhere"))
    with Store(agent) as store:
        env_reads.clear()
        with (
            BackgroundServer(store, poll_seconds=0.05) as server,
            httpx.Client(
                base_url=server.base, cookies=server.login_cookies(), timeout=30
            ) as client,
        ):
            listing = client.get("/sessions")
            assert listing.status_code == 200
            handles = list(dict.fromkeys(re.findall(r'href="(/s/[0-9a-f]+)', listing.text)))
            assert len(handles) == 2
            for handle in handles:
                assert client.get(handle).status_code == 200
                assert client.get(handle + "/export/md").status_code == 200
            assert "parsing" in client.get("/search?q=parsing").text
            assert client.get("/usage").status_code == 200
            assert client.get("/").status_code == 200
        assert "PI_CODING_AGENT_DIR" not in env_reads and "SESSIONTREE_STORE" not in env_reads
    assert not (tmp_path / "elsewhere").exists()
