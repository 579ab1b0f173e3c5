"""Several `SessionTreeSession` objects of one session id, in one process and in
several, all read and write it, as the SDK's `SQLiteSession` objects of one id do: the
same calls give the same answers (a state machine runs both side by side)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.conftest import REPO_ROOT, examples, require_module
from tests.pg_support import drop_schema, pg_url

require_module("agents")

from agents import SQLiteSession  # noqa: E402

from sessiontree.integrations.openai_agents import SessionTreeSession  # noqa: E402

CWD = "/work/proj"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.fixture(params=["sqlite", "files", "postgres"])
def two(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two session objects of one session id, in one store."""
    schema = None
    if request.param == "sqlite":
        made: list[Any] = [SQLiteSession("shared", tmp_path / "s.db") for _ in range(2)]
    else:
        location = str(tmp_path / "agent")
        if request.param == "postgres":
            from sessiontree.storage.postgres import new_schema_name

            url = pg_url()
            schema = new_schema_name("st_openai")
            location = f"{url}{'&' if '?' in url else '?'}schema={schema}"
        made = [SessionTreeSession("shared", location, cwd=CWD) for _ in range(2)]
    try:
        yield made[0], made[1]
    finally:
        for session in made:
            session.close()
        if schema is not None:
            drop_schema(pg_url(), schema)


def test_two_objects_of_one_session_in_one_process_both_write_it(two: tuple[Any, Any]) -> None:
    a, b = two
    run(a.add_items([_user("a1"), _user("a2")]))
    run(b.add_items([_user("b1")]))  # while `a` lives (it raised SessionLockError)
    assert run(a.get_items()) == run(b.get_items()) == [_user("a1"), _user("a2"), _user("b1")]
    assert run(a.pop_item()) == _user("b1")
    assert run(b.pop_item()) == _user("a2")
    run(b.clear_session())
    assert run(a.get_items()) == []
    run(a.add_items([_user("a3")]))
    assert run(b.get_items()) == [_user("a3")]
    assert run(b.pop_item()) == _user("a3") and run(a.pop_item()) is None


_OTHER_PROCESS = """
import asyncio, json, sys
from sessiontree.integrations.openai_agents import SessionTreeSession

async def main():
    session = SessionTreeSession("shared", sys.argv[1], cwd="/work/proj")
    seen = {"before": await session.get_items()}
    seen["popped"] = await session.pop_item()
    await session.add_items([{"role": "user", "content": "from the other process"}])
    seen["after"] = await session.get_items()
    if sys.argv[2] == "clear":
        await session.clear_session()
    session.close()
    print(json.dumps(seen))

asyncio.run(main())
"""


def _other_process(location: str, then: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS, location, then],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_another_process_writes_the_session_while_this_object_lives(tmp_path: Path) -> None:
    location = str(tmp_path / "agent")
    here = SessionTreeSession("shared", location, cwd=CWD)
    try:
        run(here.add_items([_user("one"), _user("two")]))
        # `here` keeps its lock for its next call a moment; the other process waits for
        # it, reads what `here` wrote, pops, adds and clears.
        seen = _other_process(location, "keep")
        assert seen == {
            "before": [_user("one"), _user("two")],
            "popped": _user("two"),
            "after": [_user("one"), _user("from the other process")],
        }
        assert run(here.get_items()) == seen["after"]
        run(here.add_items([_user("three")]))
        assert _other_process(location, "clear")["before"] == [*seen["after"], _user("three")]
        assert run(here.get_items()) == []
        run(here.add_items([_user("four")]))
        assert run(here.get_items()) == [_user("four")]
    finally:
        here.close()


# -- the same calls on SQLiteSession objects and on ours --------------------------------------

texts = st.text(alphabet="abc", min_size=1, max_size=3)


class TwoObjectsLikeSQLiteSession(RuleBasedStateMachine):
    """Two `SQLiteSession` objects and two `SessionTreeSession` objects of one session
    id, the same calls on the same one of each pair: the same answers."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.tmp = tempfile.TemporaryDirectory()
        root = Path(self.tmp.name)
        self.theirs = [SQLiteSession("shared", root / "s.db") for _ in range(2)]
        self.ours = [SessionTreeSession("shared", root / "agent", cwd=CWD) for _ in range(2)]

    def both(self, which: int, call: str, *args: Any) -> None:
        want = run(getattr(self.theirs[which], call)(*args))
        got = run(getattr(self.ours[which], call)(*args))
        assert got == want, (call, args)

    @rule(which=st.integers(0, 1), items=st.lists(texts.map(_user), max_size=3))
    def add_items(self, which: int, items: list[dict[str, Any]]) -> None:
        self.both(which, "add_items", items)

    @rule(which=st.integers(0, 1), limit=st.none() | st.integers(-1, 4))
    def get_items(self, which: int, limit: int | None) -> None:
        self.both(which, "get_items", limit)

    @rule(which=st.integers(0, 1))
    def pop_item(self, which: int) -> None:
        self.both(which, "pop_item")

    @rule(which=st.integers(0, 1))
    def clear_session(self, which: int) -> None:
        self.both(which, "clear_session")

    @invariant()
    def every_object_reads_the_same(self) -> None:
        want = run(self.theirs[0].get_items())
        assert [run(s.get_items()) for s in self.ours] == [want, want]

    def teardown(self) -> None:
        for session in [*self.theirs, *self.ours]:
            session.close()
        self.tmp.cleanup()


TwoObjectsLikeSQLiteSession.TestCase.settings = settings(
    max_examples=examples(50),
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_two_objects_behave_as_two_sqlite_sessions = TwoObjectsLikeSQLiteSession.TestCase
