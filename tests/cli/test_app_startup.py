"""How the command line starts: commands imported when run, `python -m sessiontree`,
`--version`, and the global options taken before or after the command."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.core import TyperCommand
from typer.main import get_command
from typer.testing import CliRunner, Result

import sessiontree
from sessiontree import SessionManager
from sessiontree import store as store_module
from sessiontree.cli import app, options
from sessiontree.cli.app import load_command
from sessiontree.cli.options import Command, Group
from sessiontree.cli.registry import COMMANDS, PANELS, Access, only_reads, writes_store
from tests.conftest import REPO_ROOT, examples
from tests.helpers import assistant, user

runner = CliRunner()

GLOBAL_FLAGS = ("--agent-dir", "--store", "--agent")

HEAVY = (
    # What only some commands need: never loaded to list the commands or say the version.
    "jinja2",
    "markupsafe",
    "rich",
    "pydantic",  # typer's coercion of a value, which --help and --version never reach
    "psycopg",
    "psycopg_pool",
    "starlette",
    "uvicorn",
    "genai_prices",
)
HEAVY_PARTS = {
    # Library modules by their own name, wherever they sit (`sessiontree.maintenance._gc` now,
    # `sessiontree.maintenance._files.gc` after a move): a module with such a dotted part.
    "content_index",
    "foreign",
    "gc",
    "export",
    "search",
    "stats",
    "usage_report",
    "pricing",
    "maintenance",
    "check",
    "web",
    "postgres",
    "stores",
}
STARTUP_CLI = {
    "sessiontree.cli",
    "sessiontree.cli.app",
    "sessiontree.cli.coercion",
    "sessiontree.cli.errors",
    "sessiontree.cli.options",
    "sessiontree.cli.registry",
}
"""The CLI modules `sessiontree --help` and `--version` may load: no command's."""

PROBE = """
import json, runpy, sys
out = sys.argv.pop(1)
try:
    runpy.run_module("sessiontree", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exc:
    code = exc.code
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""
"""Runs `python -m sessiontree ARGS` and writes its exit code and every module it imported."""


def probe(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0 and out.exists(), proc.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    return proc, report


def loaded(modules: list[str], names: tuple[str, ...] | set[str]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


def heavy(modules: list[str]) -> list[str]:
    ours = [m for m in modules if m.startswith("sessiontree.")]
    return loaded(modules, HEAVY) + [m for m in ours if HEAVY_PARTS & set(m.split("."))]


def root_modules(tmp_path: Path) -> list[str]:
    """The modules `import sessiontree` loads."""
    out = tmp_path / "root.json"
    script = (
        f"import json, sys, sessiontree; json.dump(sorted(sys.modules), open({str(out)!r}, 'w'))"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, cwd=tmp_path)
    modules: list[str] = json.loads(out.read_text())
    return modules


def run(*args: str) -> Result:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def one_error_line(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sessiontree: error:"), result.stderr
    return lines[0]


# ---------------------------------------------------------------------- what starts


@pytest.mark.parametrize("args", [["--help"], ["--version"], []])
def test_help_and_version_import_no_command(tmp_path: Path, args: list[str]) -> None:
    proc, report = probe(tmp_path, *args)
    # `sessiontree` alone prints the help as a usage error does (exit 2)
    assert report["code"] == (0 if args else 2), proc.stderr
    modules = report["modules"]
    assert loaded(modules, HEAVY) == []
    assert set(loaded(modules, ("sessiontree.cli",))) <= STARTUP_CLI
    # Of the library, nothing but what `import sessiontree` loads anyway (its own budget).
    beyond_root = sorted(set(modules) - set(root_modules(tmp_path)))
    assert heavy(beyond_root) == []
    assert set(loaded(beyond_root, ("sessiontree",))) <= STARTUP_CLI | {"sessiontree._version"}
    if args == ["--version"]:
        assert proc.stdout == f"sessiontree {sessiontree.__version__}\n"
    else:
        shown = proc.stdout + proc.stderr
        assert all(f"  {name} " in shown for name in COMMANDS), shown


def test_a_command_imports_its_own_module_only(tmp_path: Path) -> None:
    proc, report = probe(tmp_path, "gc", "--help")
    assert report["code"] == 0 and "Usage: " in proc.stdout
    others = {f"sessiontree.cli.{e.module}" for n, e in COMMANDS.items() if n != "gc"}
    others.discard("sessiontree.cli.commands_integrity")
    assert loaded(report["modules"], others) == []
    assert loaded(report["modules"], ("starlette", "psycopg", "sessiontree.web")) == []


RICH_DRAWING = ("rich.console", "rich.text", "rich.table", "rich.progress")
"""Rich's drawing, which a command printing JSON does not need (`rich.cells`, which
measures text, is light)."""


@pytest.mark.parametrize(
    "args",
    [
        ["list", "--help"],
        ["list", "--all", "--json"],
        ["list", "-n", "20", "--since", "2d", "--json"],
        ["search", "hello", "--all", "--json"],
    ],
)
def test_a_listing_or_search_for_scripts_imports_only_what_it_uses(
    tmp_path: Path, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No pydantic (typer's value checks), no rich drawing, no reports, exports, foreign
    readers, web app or database driver: what runs a listing is the store and the listing."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "agent"))
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)
    sm = SessionManager.create(str(tmp_path))
    sm.append_message(user("hello there"))
    sm.append_message(assistant("general kenobi"))
    sm.close()
    env = dict(os.environ)
    proc, report = probe(tmp_path, *args, env=env)
    assert report["code"] in (0, None), proc.stderr
    modules = report["modules"]
    assert loaded(modules, tuple(set(HEAVY) - {"rich"}) + RICH_DRAWING) == []
    parts = {"reports", "export", "foreign", "web", "history", "archive", "postgres", "sync"}
    assert [m for m in modules if m.startswith("sessiontree.") and parts & set(m.split("."))] == []
    if args[0] == "list":
        assert loaded(modules, ("sessiontree.search",)) == []
        # Nor what opens, checks or builds the context of a session: a listing reads
        # the listing cache (`sessiontree.session` and the others load lazily).
        unused = ("session._manager", "session._loader", "maintenance._check", "format._context")
        assert loaded(modules, tuple(f"sessiontree.{m}" for m in unused)) == []
        assert "--help" in args or json.loads(proc.stdout)["sessions"] != []


NOT_AT_START = ("secrets", "hmac", "hashlib", "socket", "tempfile", "asyncio", "httpx", "httpx2")
"""What a listing or a report for scripts does not use: ids and temp names are
`os.urandom`'s, digests are taken where images and over-long names are handled, the
hand-over's lock socket is a rewrite's, the HTTP client the price table's updater's."""

UNUSED_BY_A_REPORT = (
    "sessiontree.session._manager",
    "sessiontree.session._file",
    "sessiontree.maintenance._check",
    "sessiontree.maintenance._gc",
    "sessiontree.reports._stats",
    "sessiontree.search._search",
    "sessiontree.search._hits",
    "sessiontree.search._pg_index",
    "sessiontree.foreign",
)
"""What opens, checks or searches sessions: a usage report reads the index's rows."""


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["list", "--all", "--json"],
        ["list", "--all", "-n", "20"],
        ["usage", "daily", "--json"],
        ["usage", "blocks", "--json"],
        ["usage", "daily"],
        ["show", "SESSION", "--json"],
    ],
)
def test_a_command_imports_only_what_it_uses(
    tmp_path: Path, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No price table when every cost is recorded (its version read without it), no rich
    drawing for `--json`, no database driver, web app or HTML templates; a listing or a
    report loads no secrets, hashlib, socket or tempfile."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "agent"))
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)
    sm = SessionManager.create(str(tmp_path))
    sm.append_message(user("hello there"))
    sm.append_message(assistant("general kenobi"))  # its cost is recorded
    sm.close()
    args = [sm.get_session_id()[:13] if a == "SESSION" else a for a in args]
    probe(tmp_path, *args, env=dict(os.environ))  # warm: the listing cache and index built
    proc, report = probe(tmp_path, *args, env=dict(os.environ))
    assert report["code"] in (0, None), proc.stderr
    modules = report["modules"]
    assert loaded(modules, ("genai_prices", "pydantic", "psycopg", "jinja2", "starlette")) == []
    if "--json" in args:
        assert loaded(modules, RICH_DRAWING) == []
    if args[0] != "show":  # a session opened for reading is locked as the agents lock it
        assert loaded(modules, NOT_AT_START) == []
    if args[0] == "usage":
        assert loaded(modules, UNUSED_BY_A_REPORT) == []
    if args[0] == "show":
        assert loaded(modules, ("sessiontree.foreign", "sessiontree.cli.foreign_stores")) == []
    if args[:2] in (["usage", "daily"], ["usage", "blocks"]) and "--json" in args:
        prices = json.loads(proc.stdout)["prices"]
        assert prices == {
            "table": "genai-prices",
            "version": importlib.metadata.version("genai_prices"),
        }


def test_python_m_sessiontree_is_the_command(tmp_path: Path) -> None:
    version = subprocess.run(
        [sys.executable, "-m", "sessiontree", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert version.returncode == 0 and version.stderr == ""
    assert version.stdout == f"sessiontree {sessiontree.__version__}\n"
    env = {**os.environ, "PI_CODING_AGENT_DIR": str(tmp_path / "agent"), "COLUMNS": "200"}
    listing = subprocess.run(
        [sys.executable, "-m", "sessiontree", "list", "--all", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout)["sessions"] == []
    bad = subprocess.run(
        [sys.executable, "-m", "sessiontree", "no-such-command"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "No such command" in bad.stderr


def test_the_store_variable_is_the_librarys() -> None:
    assert options.STORE_ENV == store_module.STORE_ENV


def test_the_version_is_written_once() -> None:
    """`sessiontree --version`, `sessiontree.__version__` and the package metadata agree,
    and pyproject reads the version from `_version.py` instead of repeating it."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "src/sessiontree/_version.py"
    assert importlib.metadata.version("sessiontree") == sessiontree.__version__
    result = run("--version")
    assert result.exit_code == 0 and result.stdout == f"sessiontree {sessiontree.__version__}\n"
    assert run("--version", "list", "--all").stdout == result.stdout  # eager: nothing runs


# ---------------------------------------------------------------------- the registry


def test_a_commands_help_starts_with_its_registry_line() -> None:
    """The line is written once, in the registry; the command's docstring follows it."""
    for name, entry in COMMANDS.items():
        command = load_command(name)
        assert command.name == name
        assert " ".join(command.help.split("\n\n")[0].split()) == entry.help, name
        assert entry.help.startswith(command.get_short_help_str(10_000)), name


def test_help_lists_the_commands_under_their_headings() -> None:
    result = run("--help")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    headings = [line[:-1] for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert headings == ["Options", *PANELS]
    in_order = [entry.panel for entry in COMMANDS.values()]
    assert in_order == sorted(in_order, key=PANELS.index)  # each heading's commands together
    commands = lines[lines.index("Inspect:") :]
    listed = [line.split()[0] for line in commands if line.startswith("  ")]
    assert listed == list(COMMANDS)


def test_what_a_command_does_to_the_store_is_said_once() -> None:
    reads = {name for name in COMMANDS if only_reads(name)}
    writes = {name for name in COMMANDS if writes_store(name)}
    assert reads == {
        "list", "show", "tree", "context", "export", "search", "stats", "resume", "usage", "serve"
    }  # fmt: skip
    assert writes == {"rename", "rm", "fork", "extract", "migrate", "repair", "gc", "import"}
    assert not only_reads(None) and not writes_store(None)
    assert all(isinstance(entry.access, Access) for entry in COMMANDS.values())


@settings(max_examples=examples(25), deadline=None)
@given(width=st.integers(min_value=30, max_value=220))
def test_help_lists_the_same_commands_built_or_not(width: int) -> None:
    group: Any = get_command(app)
    ctx = group.make_context("sessiontree", [], resilient_parsing=True, terminal_width=width)
    lazy = group.get_help(ctx)
    assert all(group.commands.built(name) is None for name in COMMANDS)
    for name in group.list_commands(ctx):
        group.get_command(ctx, name)
    assert all(group.commands.built(name) is not None for name in COMMANDS)
    assert group.get_help(ctx) == lazy
    assert list(group.list_commands(ctx)) == list(COMMANDS)


def test_every_command_takes_the_global_options_once() -> None:
    def walk(command: Any, path: str) -> None:
        assert isinstance(command, Command | Group), path
        flags = [opt for param in command.params for opt in param.opts]
        for flag in GLOBAL_FLAGS:
            assert flags.count(flag) == 1, (path, flag)
        # the program's --version (a flag) is the top's alone; `restore --version N` picks
        # one of a session's archived versions, next to `restore --versions`
        prints_version = [
            p for p in command.params if "--version" in p.opts and getattr(p, "is_flag", False)
        ]
        assert bool(prints_version) == (path == "sessiontree"), path
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(get_command(app), "sessiontree")


def test_a_misspelt_command_is_suggested_without_building_them() -> None:
    group: Any = get_command(app)
    ctx = group.make_context("sessiontree", ["lst"])
    with pytest.raises(Exception) as raised:
        group.resolve_command(ctx, ["lst"])
    assert getattr(raised.value, "exit_code", None) == 2
    assert "No such command 'lst'. Did you mean 'list'?" in str(raised.value)
    assert all(group.commands.built(name) is None for name in COMMANDS)
    assert run("lst").exit_code == 2


def test_the_registry_cannot_lose_a_command() -> None:
    group: Any = get_command(app)
    with pytest.raises(TypeError):
        del group.commands["list"]
    extra = TyperCommand("extra", help="An extra command.")
    group.add_command(extra)
    assert list(group.commands)[-1] == "extra" and len(group.commands) == len(COMMANDS) + 1
    del group.commands["extra"]
    assert list(group.commands) == list(COMMANDS)


# ---------------------------------------------------------------------- global options


@dataclass
class Stores:
    home: Path
    agent: Path  # ~/.pi/agent: the store the options name
    empty: Path  # $PI_CODING_AGENT_DIR: an empty store, what no option means
    prefix: str  # a session-id prefix in `agent`
    path: str


@pytest.fixture
def stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Stores:
    home = tmp_path / "home"
    agent = home / ".pi" / "agent"
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(project)
    sm = SessionManager.create(str(project))
    sm.append_message(user("hello there"))
    sm.append_message(assistant("general kenobi"))
    sm.set_session_name("greeting", "user")
    sm.close()
    other = SessionManager.create("/elsewhere/project")
    other.append_message(user("unrelated question"))
    other.append_message(assistant("unrelated answer"))
    other.close()
    path = sm.get_session_file()
    assert path is not None
    empty = tmp_path / "empty-agent"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(empty))
    return Stores(home, agent, empty, sm.get_session_id()[:13], path)


COMMAND_LINES: list[tuple[list[str], int]] = [
    # (the command line, how many of its words name the command), SESSION for the prefix
    (["list", "--all", "--json"], 1),
    (["show", "SESSION", "--json"], 1),
    (["tree", "SESSION", "--json"], 1),
    (["context", "SESSION", "--json"], 1),
    (["search", "kenobi", "--all", "--no-index", "--json"], 1),
    (["stats", "--all", "--json"], 1),
    (["history", "--json"], 1),
    (["resume", "SESSION"], 1),
    (["export", "SESSION", "--format", "md"], 1),
    (["verify", "--all", "--json"], 1),
    (["gc", "--json"], 1),
    (["migrate", "--all", "--dry-run", "--json"], 1),
    (["usage", "daily", "--tz", "UTC", "--json"], 2),
    (["usage", "session", "--tz", "UTC", "--json"], 2),
]


def spellings(stores: Stores) -> dict[str, list[str]]:
    """Each global option's ways of naming `stores.agent` (all mean the same store)."""
    return {
        "--agent-dir": [str(stores.agent), "~/.pi/agent", str(stores.home / ".pi/./agent")],
        "--store": [str(stores.agent), "~/.pi/agent", f"file://{stores.agent}"],
        "--agent": ["pi"],
    }


def place(words: list[str], depth: int, given: list[tuple[str, str, int, bool]]) -> list[str]:
    """`words` with each (flag, value, level, at_end) put at `level`: 0 before the
    command, n after its n-th word (at the end of the line when `at_end`)."""
    before: list[str] = []
    after: dict[int, list[str]] = {n: [] for n in range(1, depth + 1)}
    tail: list[str] = []
    for flag, value, level, at_end in given:
        if level == 0:
            before += [flag, value]
        elif at_end and level == depth:
            tail += [flag, value]
        else:
            after[level] += [flag, value]
    line = list(before)
    for n, word in enumerate(words[:depth], start=1):
        line += [word, *after[n]]
    return line + words[depth:] + tail


def session(words: list[str], stores: Stores) -> list[str]:
    return [stores.prefix if w == "SESSION" else w for w in words]


@st.composite
def placements(draw: st.DrawFn) -> tuple[int, list[tuple[str, int, int, bool]]]:
    """A command line and its global options: each option at one or more levels, with a
    spelling (an index into `spellings`) each time."""
    line = draw(st.integers(0, len(COMMAND_LINES) - 1))
    depth = COMMAND_LINES[line][1]
    flags = draw(st.lists(st.sampled_from(GLOBAL_FLAGS), min_size=1, max_size=3, unique=True))
    given: list[tuple[str, int, int, bool]] = []
    for flag in flags:
        levels = draw(st.lists(st.integers(0, depth), min_size=1, max_size=depth + 1, unique=True))
        for level in levels:
            given.append((flag, draw(st.integers(0, 2)), level, draw(st.booleans())))
    return line, draw(st.permutations(given))


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=placements())
def test_global_options_mean_the_same_before_or_after_the_command(
    stores: Stores, case: tuple[int, list[tuple[str, int, int, bool]]]
) -> None:
    """Wherever the options stand, and however the store is spelt, the command sees the
    same store as with `--agent-dir` before it, and not the environment's."""
    line, given = case
    words, depth = COMMAND_LINES[line]
    words = session(words, stores)
    names = spellings(stores)
    options = [
        (flag, names[flag][spelling % len(names[flag])], level, at_end)
        for flag, spelling, level, at_end in given
    ]
    expected = run("--agent-dir", str(stores.agent), *words)
    assert expected.exit_code == 0, expected.output
    result = run(*place(words, depth, options))
    assert (result.exit_code, result.stdout) == (0, expected.stdout), result.stderr


def test_without_options_the_environment_store_is_used(stores: Stores) -> None:
    """What the property test compares against is not what no option gives."""
    listing = json.loads(run("list", "--all", "--json").stdout)
    assert listing["sessions"] == []
    named = json.loads(run("list", "--all", "--json", "--agent-dir", str(stores.agent)).stdout)
    assert {s["path"] for s in named["sessions"]} >= {stores.path}


def test_the_environment_store_gives_way_to_one_typed_after_the_command(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SESSIONTREE_STORE", str(stores.empty))
    assert json.loads(run("list", "--all", "--json").stdout)["sessions"] == []
    for line in (
        ["list", "--all", "--json", "--store", str(stores.agent)],
        ["--store", str(stores.agent), "list", "--all", "--json"],
    ):
        result = run(*line)
        assert result.exit_code == 0, result.stderr
        assert len(json.loads(result.stdout)["sessions"]) == 2


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    line=st.integers(0, len(COMMAND_LINES) - 1),
    flag=st.sampled_from(GLOBAL_FLAGS),
    levels=st.lists(st.integers(0, 2), min_size=2, max_size=2, unique=True),
)
def test_different_values_before_and_after_are_a_usage_error(
    stores: Stores, line: int, flag: str, levels: list[int]
) -> None:
    words, depth = COMMAND_LINES[line]
    words = session(words, stores)
    first, second = (min(level, depth) for level in levels)
    if first == second:
        first, second = 0, depth
    other = {"--agent-dir": str(stores.empty), "--store": str(stores.empty), "--agent": "omp"}
    mine = {"--agent-dir": str(stores.agent), "--store": str(stores.agent), "--agent": "pi"}
    before = snapshot(stores.home)
    result = run(
        *place(words, depth, [(flag, mine[flag], first, False), (flag, other[flag], second, True)])
    )
    message = one_error_line(result, 2)
    assert flag in message and mine[flag] in message and other[flag] in message
    assert "before the command" in message or "after `" in message
    assert result.stdout == "" and snapshot(stores.home) == before


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_conflict_stops_a_deleting_command_before_it_acts(stores: Stores) -> None:
    result = run(
        "--agent-dir", str(stores.agent), "rm", stores.prefix, "--yes", "--agent-dir", "/x"
    )
    assert "--agent-dir" in one_error_line(result, 2)
    assert os.path.exists(stores.path)
    result = run("rm", stores.prefix, "--yes", "--agent-dir", str(stores.agent))
    assert result.exit_code == 0, result.stderr
    assert not os.path.exists(stores.path)


def test_writing_commands_act_on_the_store_named_after_them(stores: Stores) -> None:
    result = run("rename", stores.prefix, "renamed", "--agent-dir", str(stores.agent))
    assert result.exit_code == 0, result.stderr
    fork = run("fork", stores.prefix, "--store", str(stores.agent))
    assert fork.exit_code == 0, fork.stderr
    forked = fork.stdout.strip()
    assert forked.startswith(str(stores.agent / "sessions"))
    titles = {
        s["path"]: s["title"]
        for s in json.loads(run("list", "--all", "--json", "--agent", "pi").stdout)["sessions"]
    }
    assert titles[stores.path] == "renamed" and forked in titles
    assert not stores.empty.exists()  # the environment's store was never written


def test_a_foreign_store_named_after_a_writing_command_is_refused(
    stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude = tmp_path / "claude"
    (claude / "projects").mkdir(parents=True)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    result = run("rm", "whatever", "--yes", "--agent", "claude")
    message = one_error_line(result, 2)
    assert "`rm` does not work on the Claude Code store" in message
    result = run("usage", "daily", "--json", "--agent", "claude")
    assert result.exit_code == 0, result.stderr  # a reading command, through its group
