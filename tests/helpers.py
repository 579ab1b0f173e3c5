"""Builders for messages in the ecosystem's shape, and oracles, shared by tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sessiontree.format import loads_line
from tests import peers


def assistant(text: str = "ok", **extra: object) -> dict[str, object]:
    """A minimal assistant message in the ecosystem's shape."""
    message: dict[str, object] = {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": {
            "input": 100,
            "output": 20,
            "cacheRead": 5,
            "cacheWrite": 1,
            "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0, "cacheWrite": 0, "total": 0.3},
        },
        "stopReason": "stop",
        "timestamp": 1760000000000,
    }
    message.update(extra)
    return message


def user(text: str = "hi") -> dict[str, object]:
    return {"role": "user", "content": text, "timestamp": 1760000000000}


def last_entry_id(data: bytes) -> str | None:
    """The leaf every reader takes from a session file's bytes: the id of the last line
    after the header that parses as a JSON object (None when that id is no string)."""
    found: str | None = None
    header = False
    for line in data.removeprefix(b"\xef\xbb\xbf").split(b"\n"):
        try:
            value = loads_line(line) if line.strip() else None
        except ValueError:
            continue
        if not isinstance(value, dict):
            continue
        if header:
            entry_id = value.get("id")
            found = entry_id if isinstance(entry_id, str) else None
        header = header or value.get("type") == "session"
    return found


def peer_context(peer: str, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The context `peer` ("pi", "pi16" or "omp") itself builds at a session file's leaf
    (see `peers.py`)."""
    return peers.peer_context(peer, path)


HANG_S = 60.0
"""Seconds after which a call on a tiny store is taken to hang (far beyond any of them)."""


def without_hang(call: Callable[[], object], fifo: str, timeout: float = HANG_S) -> Any:
    """Run `call` in a thread; the error it raised, else what it returned. A call still
    running after `timeout` fails the test: the FIFO `fifo` is then opened and closed
    again and again (each blocked open of it goes on) until the thread ends, so a
    hang fails the test instead of hanging the suite."""
    import threading

    import pytest

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["value"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        while thread.is_alive():
            for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
                try:
                    os.close(os.open(fifo, flags))
                except OSError:
                    pass  # no one waiting at this moment
            thread.join(0.05)
        pytest.fail(f"blocked on the FIFO {fifo}")
    return outcome.get("value")


def run_cli_within(
    *args: str, home: Path, timeout: float = HANG_S
) -> subprocess.CompletedProcess[str]:
    """`sessiontree ARGS` in a child process with `home` as HOME; a run past `timeout`
    (a command blocked on a FIFO) fails the test instead of hanging the suite."""
    import pytest

    env = {**os.environ, "HOME": str(home), "COLUMNS": "200", "NO_COLOR": "1"}
    try:
        return subprocess.run(
            [sys.executable, "-m", "sessiontree", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`sessiontree {' '.join(args)}` hung (on a FIFO?)")
