"""Shared fixtures: every test gets its own agent dir and no terminal identity.

Hypothesis runs under one of two profiles (see `profile_name`): `ci`, what CI runs
(derandomized, no deadline, no example database, 100 examples a test), and `dev`, a
tenth of the examples, for the inner loop. A test that needs more (or fewer)
examples than the default says how many under `ci` with `examples(n)`.

Every file a test reads is in the repository: the real session files of the agents are
copied into `tests/data/real` (sources and licences in its SOURCES.md). What a test needs
from outside the repository (psycopg, the TypeScript peers: `tests/peers.py`) is found here,
in one place. When it is missing the test skips locally
but FAILS under CI (`CI` set): there, a missing prerequisite must never pass as a
skip.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest
from hypothesis import HealthCheck, settings

FIXTURES = Path(__file__).resolve().parent / "data"
REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_FILES = FIXTURES / "real"
"""Real session files the agents wrote (Claude Code, Codex, OpenCode, Gemini CLI, Copilot
CLI in `foreign/`, a pi v1 session), kept byte for byte; `foreign/SOURCES.md` says where
each comes from and under which licence."""


CI_EXAMPLES = 100
"""Examples per test under the `ci` profile (hypothesis's default, what CI always ran)."""
DEV_EXAMPLES = 10
"""Examples per test under the `dev` profile."""

# What CI has always run: hypothesis's own profile for CI (which it loads by itself when `CI`
# is set), written out so that no hypothesis release changes it.
settings.register_profile(
    "ci",
    max_examples=CI_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# No deadline and no too-slow health check: the machines we develop on are shared, and
# a test that is slow because another program took the CPU has found nothing.
settings.register_profile(
    "dev",
    max_examples=DEV_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def profile_name(environ: Mapping[str, str]) -> str:
    """The hypothesis profile to run: `$HYPOTHESIS_PROFILE`, else `ci` under CI, else `dev`.

    (`pytest --hypothesis-profile NAME` overrides it: hypothesis loads that one later.)
    """
    return environ.get("HYPOTHESIS_PROFILE") or ("ci" if environ.get("CI") else "dev")


settings.load_profile(profile_name(os.environ))


def examples(ci: int, override: str | None = None) -> int:
    """How many examples a test that runs `ci` of them under the `ci` profile runs now.

    The same share of the loaded profile's `max_examples` (a tenth under `dev`), rounded
    up: a test keeps its weight against the others under every profile. The environment
    variable named `override`, when set, gives the count outright, under any profile.
    """
    if override is not None and os.environ.get(override):
        return int(os.environ[override])
    current = settings.default
    assert current is not None
    return max(1, -(-ci * current.max_examples // CI_EXAMPLES))


def unavailable(reason: str) -> NoReturn:
    """Skip the test for a missing prerequisite; under CI, fail it instead."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (required under CI)", pytrace=False)
    pytest.skip(reason)


FRESH_CHILD = "SESSIONTREE_TEST_FRESH_PROCESS"
"""Set in the pytest process a `fresh_process` test is run again in."""


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a test marked `fresh_process` in a new pytest process when this one runs other
    threads: what it tests (forked workers) is refused in a process with threads (a fork
    would copy a lock another thread holds), and a worker that ran other tests first may
    hold some of theirs (a writer thread, a pool). The test passes when it passes there."""
    if (
        pyfuncitem.get_closest_marker("fresh_process") is None
        or os.environ.get(FRESH_CHILD)
        or threading.active_count() == 1
    ):
        return None
    root = pyfuncitem.config.rootpath
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            pyfuncitem.nodeid,
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
        ],
        cwd=root,
        env={**os.environ, FRESH_CHILD: "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"in a fresh process (exit {result.returncode}):\n{result.stdout[-6000:]}\n"
            f"{result.stderr[-3000:]}",
            pytrace=False,
        )
    return True


def real_file(name: str) -> Path:
    """The path of a real session file (`tests/data/real/NAME`); fails when it is missing."""
    path = REAL_FILES / name
    if not path.is_file():
        pytest.fail(f"the real file {path} is missing from the repository", pytrace=False)
    return path


def require_module(name: str) -> ModuleType:
    """`pytest.importorskip`, but failing under CI. Usable at module level."""
    if os.environ.get("CI"):
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            pytest.fail(f"{name} cannot be imported under CI: {exc}", pytrace=False)
    return pytest.importorskip(name)


def unique_prefix(target: str, ids: Iterable[str], least: int = 8) -> str:
    """The shortest prefix of `target` (at least `least` chars) that no other id shares.

    Ids made in the same millisecond share their first 13 hex digits, so a fixed
    `id[:10]` is ambiguous now and then; this one is unique by construction.
    """

    def shared(other: str) -> int:
        n = 0
        while n < min(len(target), len(other)) and target[n] == other[n]:
            n += 1
        return n

    longest = max((shared(i) for i in ids if i != target), default=0)
    assert longest < len(target), f"{target} is a prefix of another id"
    return target[: max(least, longest + 1)]


@pytest.fixture(autouse=True)
def agent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private agent dir per test, so nothing touches the user's real store."""
    directory = tmp_path / "agent"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(directory))
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)  # the CLI's database, if any
    for var in ("TMUX_PANE", "KITTY_WINDOW_ID", "TERM_SESSION_ID", "WT_SESSION"):
        monkeypatch.delenv(var, raising=False)
    return directory


@pytest.fixture
def homes_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The agents' homes on this machine are the test's (`<tmp>/.claude`, `<tmp>/.codex`,
    `<tmp>/.pi/agent`, ...): a restore without --to writes only to a home where its agent
    keeps its store. Returns the home."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in (
        "PI_CODING_AGENT_DIR",
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
        "XDG_DATA_HOME",
        "GEMINI_CLI_HOME",
        "COPILOT_HOME",
    ):
        monkeypatch.delenv(var, raising=False)
    return tmp_path
