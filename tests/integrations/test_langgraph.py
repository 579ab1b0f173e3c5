"""The LangGraph checkpointer (`sessiontree.integrations.langgraph`): LangGraph's own
conformance suite on files and PostgreSQL (every capability, nothing skipped), a real
graph (messages, a tool, an interrupt resumed in another process, time travel as a
branch), the same history as `InMemorySaver`, the messages as pi messages, and the
rewrites' four questions (the same path, not ours, changed a moment ago, a write that
fails halfway)."""

# ruff: noqa: E402  (the LangGraph imports come after the check that they are installed)
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO_ROOT, require_module
from tests.pg_support import fresh_schema

require_module("langgraph.checkpoint.conformance")  # skips locally without it; fails in CI
require_module("langgraph.checkpoint.sqlite")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver

from sessiontree import SessionManager, Store
from sessiontree.cli import app
from sessiontree.cli.common import console as cli_console
from sessiontree.errors import (
    SessionLockError,
    SessionPersistenceError,
    SessionWriteConflictError,
)
from sessiontree.integrations.langgraph import (
    CHECKPOINT_TYPE,
    INLINE_BYTES,
    LEAF_TYPE,
    SessionTreeSaver,
    pi_message,
    thread_file_key,
)
from sessiontree.storage import FileSessionStorage, acquire_session_lock
from tests import langgraph_support as support
from tests import peers
from tests.helpers import peer_context

HERE = REPO_ROOT / "tests"


@contextmanager
def store_at(kind: str, tmp_path: Path) -> Iterator[str]:
    """Where a store is, as `--store` takes it: an agent dir, or a database schema."""
    if kind == "files":
        yield str(tmp_path / "store")
        return
    with fresh_schema() as (url, schema):
        separator = "&" if "?" in url else "?"
        yield f"{url}{separator}schema={schema}"


@pytest.fixture(params=["files", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with store_at(request.param, tmp_path) as where:
        yield where


# ----------------------------------------------------------------------------- conformance


@pytest.mark.parametrize(
    "backend", ["files", pytest.param("postgres", marks=pytest.mark.slow)]
)  # (PostgreSQL's run takes 20 s: the full suite, CI's, runs it)
def test_conformance_every_capability(backend: str, tmp_path: Path) -> None:
    with store_at(backend, tmp_path) as location:
        conformance(location)


def conformance(location: str) -> None:
    @checkpointer_test(name=f"SessionTreeSaver-{uuid.uuid4().hex}")
    async def factory() -> Any:
        saver = SessionTreeSaver(location)
        try:
            yield saver
        finally:
            await asyncio.to_thread(saver.close)

    report = asyncio.run(validate(factory))
    results = {name: result for name, result in report.results.items()}
    assert set(results) == {
        "put",
        "put_writes",
        "get_tuple",
        "list",
        "delete_thread",
        "delete_for_runs",
        "copy_thread",
        "prune",
    }
    for name, result in results.items():
        assert result.detected, name
        assert result.tests_skipped == 0, name
        assert result.passed, (name, result.failures)
        assert result.tests_passed > 0, name


# ----------------------------------------------------------------------------- a real graph


def ask(graph: Any, thread_id: str, text: str) -> dict[str, Any]:
    result: dict[str, Any] = graph.invoke(
        {"messages": [HumanMessage(text)]}, support.config(thread_id)
    )
    return result


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result.stdout


def test_graph_interrupt_resume_in_another_process_time_travel_and_views(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SessionTreeSaver(location) as saver:
        graph = support.build(saver)
        first = ask(graph, "weather", "What is the weather in Paris?")
        assert first["__interrupt__"][0].value["question"] == "run the tool?"
        assert graph.get_state(support.config("weather")).next == ("review",)
    # The saver closed (its lock let go): another process resumes after the interrupt.
    done = subprocess.run(
        [sys.executable, str(HERE / "langgraph_support.py"), location, "weather", "yes"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )
    assert done.stdout.strip() == "The weather: Sunny in Paris, 21 C."
    with SessionTreeSaver(location) as saver:
        graph = support.build(saver)
        state = graph.get_state(support.config("weather"))
        assert state.next == ()
        assert [m.type for m in state.values["messages"]] == ["human", "ai", "tool", "ai"]
        history = list(graph.get_state_history(support.config("weather")))
        # Time travel: back to the checkpoint before the model's first reply, and on.
        old = next(s for s in history if s.next == ("model",) and s.metadata["step"] == 0)
        forked = graph.update_state(
            old.config, {"messages": [HumanMessage("And in Rome?")]}, as_node="__start__"
        )
        again = graph.invoke(None, forked)
        assert again["__interrupt__"]
        again = graph.invoke(
            support.Command(resume="yes"),  # type: ignore[attr-defined]
            forked | {"configurable": {**forked["configurable"], "checkpoint_id": None}},
        )
        assert again["messages"][-1].content == "The weather: Sunny in Rome, 21 C."
        # The original branch is still there, whole.
        original = graph.get_state(history[0].config)
        assert original.values["messages"][-1].content == "The weather: Sunny in Paris, 21 C."
        path = saver.session_path("weather")
        assert path is not None
        assert saver.list_threads() == ["weather"]
    store = ["--store", location]
    # Wide: writes saved late branch the tree (deeper lines), which cuts previews at 80.
    monkeypatch.setattr(cli_console, "_width", 400)
    tree = cli(*store, "tree", path, "--full")
    assert "user: What is the weather in Paris?" in tree
    assert "user: And in Rome?" in tree
    assert "assistant: The weather: Sunny in Rome, 21 C." in tree
    assert "assistant: The weather: Sunny in Paris, 21 C." in tree
    with Store(location) as st, st.open(path, read_only=True) as manager:
        # The fork is a branch: the two answers are on two paths of one tree.
        leaves = [e for e in manager.get_entries() if e["type"] == "message"]
        answers = [
            e for e in leaves if e["message"]["role"] == "assistant" and "The weather" in str(e)
        ]
        assert len(answers) == 2
        paths = [{x["id"] for x in manager.get_branch(e["id"])} for e in answers]
        assert answers[0]["id"] not in paths[1] and answers[1]["id"] not in paths[0]
        context = [m["role"] for m in manager.build_session_context().messages]
        assert context == ["user", "user", "assistant", "toolResult", "assistant"]
        hits = st.search("Rome").hits
        assert {h.role for h in hits} >= {"user", "assistant"}
    show = json.loads(cli(*store, "show", path, "--json"))  # the table folds a long name
    assert "scripted/scripted-1" in show["models"]


def test_same_history_as_in_memory_saver(tmp_path: Path) -> None:
    def scenario(saver: Any) -> list[Any]:
        graph = support.build(saver)
        ask(graph, "t", "What is the weather in Oslo?")
        graph.invoke(support.Command(resume="yes"), support.config("t"))  # type: ignore[attr-defined]
        ask(graph, "t", "What is the weather in Lima?")
        graph.invoke(support.Command(resume="no"), support.config("t"))  # type: ignore[attr-defined]
        return support.history_shape(graph, "t")

    memory = scenario(InMemorySaver())
    with SessionTreeSaver(str(tmp_path / "store")) as saver:
        ours = scenario(saver)
    assert len(ours) == len(memory) >= 10
    assert ours == memory
    # And read back by a new saver, from the file alone.
    with SessionTreeSaver(str(tmp_path / "store")) as saver:
        assert support.history_shape(support.build(saver), "t") == memory


# ----------------------------------------------------------------------------- storage


def put_chain(
    saver: SessionTreeSaver, thread_id: str, values: list[dict[str, Any]], run_ids: list[str]
) -> list[dict[str, Any]]:
    """Checkpoints with these channel values (versions bumped where a value changed)."""
    configs = []
    parent: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    versions: dict[str, int] = {}
    previous: dict[str, Any] = {}
    for value, run_id in zip(values, run_ids, strict=True):
        checkpoint = empty_checkpoint()
        new = {}
        for channel, v in value.items():
            if previous.get(channel, object()) != v:
                versions[channel] = versions.get(channel, 0) + 1
                new[channel] = versions[channel]
        checkpoint["channel_values"] = dict(value)
        checkpoint["channel_versions"] = dict(versions)
        parent = saver.put(parent, checkpoint, {"source": "loop", "run_id": run_id}, new)
        configs.append(parent)
        previous = dict(value)
    return configs


def lines_of(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_values_by_version_deltas_and_blobs(tmp_path: Path) -> None:
    big = "x" * (INLINE_BYTES * 3)
    msgs = [HumanMessage("a", id="1"), AIMessage("b", id="2"), HumanMessage("c", id="3")]
    with SessionTreeSaver(str(tmp_path / "store")) as saver:
        configs = put_chain(
            saver,
            "t",
            [
                {"messages": msgs[:1], "doc": big},
                {"messages": msgs[:2], "doc": big},
                {"messages": msgs[:3], "doc": big},
            ],
            ["r", "r", "r"],
        )
        path = saver.session_path("t")
        assert path is not None
        for config, n in zip(configs, (1, 2, 3), strict=True):
            got = saver.get_tuple(config)
            assert got is not None
            assert got.checkpoint["channel_values"] == {"messages": msgs[:n], "doc": big}
    checkpoints = [e["data"] for e in lines_of(path) if e.get("customType") == CHECKPOINT_TYPE]
    # The document is written once (as a blob ref), the list as what each version adds.
    assert [sorted(c["values"]) for c in checkpoints] == [
        ["doc", "messages"],
        ["messages"],
        ["messages"],
    ]
    assert checkpoints[0]["values"]["doc"]["ref"].startswith("blob:sha256:")
    assert [c["values"]["messages"]["t"] for c in checkpoints] == ["list", "list+", "list+"]
    assert [len(c["values"]["messages"]["items"]) for c in checkpoints] == [1, 1, 1]
    # The messages as pi messages, once each, on the checkpoints' branch.
    messages = [e["message"] for e in lines_of(path) if e["type"] == "message"]
    assert [
        (m["role"], m["content"] if m["role"] == "user" else m["content"][0]["text"])
        for m in messages
    ] == [
        ("user", "a"),
        ("assistant", "b"),
        ("user", "c"),
    ]
    with Store(str(tmp_path / "store")) as store:
        assert store.check() == []
        assert store.gc().unreferenced == []


def test_delete_for_runs_keeps_what_later_checkpoints_need(location: str) -> None:
    msgs = [HumanMessage(str(i), id=str(i)) for i in range(4)]
    values = [{"messages": msgs[: i + 1], "fixed": "kept"} for i in range(4)]
    with SessionTreeSaver(location) as saver:
        configs = put_chain(saver, "t", values, ["r1", "r1", "r2", "r2"])
        other = put_chain(saver, "u", values[:2], ["r1", "r3"])
        saver.put_writes(configs[0], [("ch", "doomed")], "task")
        saver.put_writes(configs[3], [("ch", "kept")], "task")
        path = saver.session_path("t")
        saver.delete_for_runs(["r1"])
        assert saver.get_tuple(configs[0]) is None and saver.get_tuple(configs[1]) is None
        assert saver.get_tuple(other[0]) is None and saver.get_tuple(other[1]) is not None
        for config, value in zip(configs[2:], values[2:], strict=True):
            got = saver.get_tuple(config)
            assert got is not None
            assert got.checkpoint["channel_values"] == value
        got = saver.get_tuple(configs[3])
        assert got is not None and [w[2] for w in got.pending_writes or []] == ["kept"]
        assert saver.session_path("t") == path  # rewritten in place
    with SessionTreeSaver(location) as saver:  # read back from the store alone
        got = saver.get_tuple(configs[3])
        assert got is not None and got.checkpoint["channel_values"] == values[3]
        assert [t.metadata["run_id"] for t in saver.list({"configurable": {"thread_id": "t"}})] == [
            "r2",
            "r2",
        ]
    with Store(location) as store:
        assert store.check() == []
        assert path is not None
        with store.open(path, read_only=True) as manager:
            text = json.dumps(manager.get_entries())
        assert "doomed" not in text
        # The messages of the kept checkpoints stay, in order, on their branch.
        assert [m["content"] for m in manager.build_session_context().messages] == [
            "0",
            "1",
            "2",
            "3",
        ]


def test_prune_keep_latest_and_copy_thread_is_a_fork(location: str) -> None:
    msgs = [HumanMessage(str(i), id=str(i)) for i in range(5)]
    values = [{"messages": msgs[: i + 1]} for i in range(5)]
    with SessionTreeSaver(location) as saver:
        configs = put_chain(saver, "t", values, ["r"] * 5)
        saver.copy_thread("t", "copy")
        saver.prune(["t"])
        listed = list(saver.list({"configurable": {"thread_id": "t"}}))
        assert [t.config["configurable"]["checkpoint_id"] for t in listed] == [
            configs[-1]["configurable"]["checkpoint_id"]
        ]
        assert listed[0].checkpoint["channel_values"] == values[-1]
        assert len(list(saver.list({"configurable": {"thread_id": "copy"}}))) == 5
        source, copy = saver.session_path("t"), saver.session_path("copy")
        assert sorted(saver.list_threads()) == ["copy", "t"]
    with Store(location) as store:
        assert copy is not None and source is not None
        with store.open(copy, read_only=True) as manager:
            header = manager.get_header()
            assert header is not None and header.get("parentSession") == source
            assert manager.get_session_name() == "copy"


# ----------------------------------------------------------------------------- concurrency


def test_two_savers_of_one_thread_the_second_gets_the_lock_error(location: str) -> None:
    with SessionTreeSaver(location) as first, SessionTreeSaver(location) as second:
        put_chain(first, "t", [{"a": 1}], ["r"])
        with pytest.raises(SessionLockError):
            put_chain(second, "t", [{"a": 2}], ["r"])
        # Reading takes no lock; another thread is not held up.
        assert second.get_tuple({"configurable": {"thread_id": "t"}}) is not None
        put_chain(second, "u", [{"a": 3}], ["r"])
        first.release("t")
        put_chain(second, "t", [{"a": 4}], ["r"])
        assert len(list(first.list({"configurable": {"thread_id": "t"}}))) == 2


def test_two_threads_written_at_once_from_two_os_threads(tmp_path: Path) -> None:
    with SessionTreeSaver(str(tmp_path / "store")) as saver:
        errors: list[BaseException] = []

        def work(thread_id: str) -> None:
            try:
                put_chain(saver, thread_id, [{"n": i} for i in range(30)], ["r"] * 30)
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert errors == []
        for i in range(4):
            assert len(list(saver.list({"configurable": {"thread_id": f"t{i}"}}))) == 30


# ----------------------------------------------------------------------------- four questions


def test_rewrite_refused_when_the_file_changed_a_moment_ago(tmp_path: Path) -> None:
    with SessionTreeSaver(str(tmp_path / "store")) as saver:
        put_chain(saver, "t", [{"a": i} for i in range(3)], ["r1", "r2", "r2"])
        path = saver.session_path("t")
        assert path is not None
        foreign = '{"type":"custom","customType":"x","id":"ffffffff","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z"}\n'
        with open(path, "a", encoding="utf-8") as f:
            f.write(foreign)  # another program, behind the lock's back
        before = Path(path).read_bytes()
        with pytest.raises(SessionWriteConflictError):
            saver.delete_for_runs(["r1"])
        assert Path(path).read_bytes() == before  # nothing of it lost
        # The saver reads the thread again, the other program's line with it.
        assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 3


def test_rewrite_that_fails_halfway_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SessionTreeSaver(str(tmp_path / "store")) as saver:
        configs = put_chain(saver, "t", [{"a": i} for i in range(3)], ["r1", "r2", "r2"])
        path = saver.session_path("t")
        assert path is not None
        before = Path(path).read_bytes()
        real = FileSessionStorage.write_atomic

        def broken(self: FileSessionStorage, target: str, chunks: Any) -> Any:
            def half() -> Iterator[bytes]:
                for i, chunk in enumerate(chunks):
                    if i == 1:
                        raise OSError(28, "No space left on device")
                    yield chunk

            return real(self, target, half())

        monkeypatch.setattr(FileSessionStorage, "write_atomic", broken)
        with pytest.raises((OSError, SessionPersistenceError)):
            saver.prune(["t"])
        monkeypatch.undo()
        assert Path(path).read_bytes() == before
        assert [p for p in os.listdir(os.path.dirname(path)) if not p.startswith(".")] == [
            os.path.basename(path)
        ]
        for config in configs:  # the saver goes on as before
            assert saver.get_tuple(config) is not None
        saver.prune(["t"])
        assert saver.get_tuple(configs[0]) is None and saver.get_tuple(configs[2]) is not None


def test_rewrite_refused_while_another_saver_holds_the_thread(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    with SessionTreeSaver(location) as writer, SessionTreeSaver(location) as other:
        put_chain(writer, "t", [{"a": i} for i in range(3)], ["r1", "r2", "r2"])
        path = writer.session_path("t")
        assert path is not None
        before = Path(path).read_bytes()
        with pytest.raises(SessionLockError):
            other.prune(["t"])
        with pytest.raises(SessionLockError):
            other.delete_thread("t")
        assert Path(path).read_bytes() == before


def test_delete_thread_touches_no_other_session(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    with Store(location) as store, store.create("/langgraph") as manager:
        manager.append_message({"role": "user", "content": "mine", "timestamp": 1})
        manager.ensure_on_disk()
        mine = manager.get_session_file()
    with SessionTreeSaver(location) as saver:
        put_chain(saver, "t", [{"a": 1}], ["r"])
        put_chain(saver, "u", [{"a": 1}], ["r"])
        saver.delete_thread("t")
        saver.prune(["u"], strategy="delete")
        assert saver.list_threads() == []
    assert mine is not None and os.path.exists(mine)
    with SessionManager.open(mine, read_only=True) as again:
        assert [e["message"]["content"] for e in again.get_entries()] == ["mine"]


def test_pi_messages_from_dicts_and_langchain_messages() -> None:
    assert pi_message({"role": "user", "content": "hi"}, 5) == {
        "role": "user",
        "content": "hi",
        "timestamp": 5,
    }
    converted = pi_message(
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"x": 1}'}}],
        },
        5,
    )
    assert converted is not None
    assert converted["content"][1] == {
        "type": "toolCall",
        "id": "c",
        "name": "f",
        "arguments": {"x": 1},
    }
    assert converted["stopReason"] == "toolUse"
    assert pi_message({"role": "system", "content": "be brief"}, 5) is None


@pytest.mark.slow
def test_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    """benchmarks/bench_langgraph.py at a tiny size: a broken benchmark is caught here."""
    env = {k: v for k, v in os.environ.items() if k != "SESSIONTREE_TEST_PG"}
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE.parent / "benchmarks" / "bench_langgraph.py"),
            "--steps",
            "12",
            "--repeat",
            "1",
            "--pg",
            "",
            "--work",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=300,
    )
    for saver in ("sessiontree ", "sessiontree+fsync", "sqlite", "memory"):
        assert saver in proc.stdout, proc.stdout
    turns = subprocess.run(
        [
            sys.executable,
            str(HERE.parent / "benchmarks" / "bench_langgraph.py"),
            *("--steps", "6", "--history-turns", "1", "--work", str(tmp_path / "turns")),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=300,
    )
    assert "history in turns, sqlite" in turns.stdout


def test_thread_with_its_fork_in_the_web_app(tmp_path: Path) -> None:
    httpx = require_module("httpx")
    require_module("uvicorn")
    from sessiontree.web.data import handle_of
    from sessiontree.web.server import BackgroundServer

    agent = tmp_path / "agent"
    with SessionTreeSaver(str(agent)) as saver:
        graph = support.build(saver)
        ask(graph, "w", "What is the weather in Paris?")
        graph.invoke(support.Command(resume="yes"), support.config("w"))  # type: ignore[attr-defined]
        start = next(
            s
            for s in graph.get_state_history(support.config("w"))
            if s.next == ("model",) and s.metadata["step"] == 0
        )
        fork = graph.update_state(start.config, {"messages": [HumanMessage("And in Rome?")]})
        graph.invoke(None, fork)
        graph.invoke(support.Command(resume="yes"), support.config("w"))  # type: ignore[attr-defined]
        path = saver.session_path("w")
    assert path is not None
    with (
        BackgroundServer(FileSessionStorage(), str(agent), poll_seconds=0.05) as server,
        httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=30) as client,
    ):
        listing = client.get("/")
        assert listing.status_code == 200 and "langgraph" in listing.text
        page = client.get("/s/" + handle_of("s", path))
        assert page.status_code == 200
        # The branch shown (the last written) and the fork point's other branch.
        assert "Sunny in Rome" in page.text
        assert "And in Rome?" in page.text
        assert "What is the weather in Paris?" in page.text
        assert "Sunny in Paris" in page.text  # the other branch, in the tree


def test_many_threads_read_keep_few_open(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    with SessionTreeSaver(location) as writer:
        for i in range(70):
            put_chain(writer, f"t{i}", [{"n": i}], ["r"])
    with SessionTreeSaver(location) as reader:
        listed = list(reader.list(None))
        assert sorted(t.checkpoint["channel_values"]["n"] for t in listed) == list(range(70))
        assert len(reader._threads) <= 64
        assert len(reader.list_threads()) == 70


def test_two_processes_two_threads_never_block_one_thread_refused(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    script = (
        "import sys\n"
        "from sessiontree.integrations.langgraph import SessionTreeSaver\n"
        "from langgraph.checkpoint.base import empty_checkpoint\n"
        "with SessionTreeSaver(sys.argv[1]) as s:\n"
        "    c = empty_checkpoint(); c['channel_values'] = {'a': 1}; c['channel_versions'] = {'a': 1}\n"
        "    s.put({'configurable': {'thread_id': sys.argv[2], 'checkpoint_ns': ''}}, c, {}, {'a': 1})\n"
        "    print('ok')\n"
    )
    with SessionTreeSaver(location) as holder:
        put_chain(holder, "mine", [{"a": 1}], ["r"])  # holds the thread's lock
        other = subprocess.run(
            [sys.executable, "-c", script, location, "theirs"], capture_output=True, text=True
        )
        assert other.returncode == 0 and other.stdout.strip() == "ok", other.stderr
        refused = subprocess.run(
            [sys.executable, "-c", script, location, "mine"], capture_output=True, text=True
        )
        assert refused.returncode != 0 and "SessionLockError" in refused.stderr
        assert sorted(holder.list_threads()) == ["mine", "theirs"]


def test_two_savers_creating_one_thread_at_once_end_with_one_file(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def create(saver: SessionTreeSaver) -> None:
        barrier.wait()
        try:
            put_chain(saver, "same", [{"a": 1}], ["r"])
            outcomes.append("wrote")
        except SessionLockError:
            outcomes.append("locked")

    with SessionTreeSaver(location) as a, SessionTreeSaver(location) as b:
        workers = [threading.Thread(target=create, args=(s,)) for s in (a, b)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert sorted(outcomes) == ["locked", "wrote"]
        directory = os.path.dirname(a.session_path("same") or "")
        assert len([n for n in os.listdir(directory) if n.endswith(".jsonl")]) == 1
        assert a.list_threads() == ["same"]


def test_delta_channel_survives_prune_and_delete_for_runs(location: str) -> None:
    config: Any = {"configurable": {"thread_id": "d"}}
    with SessionTreeSaver(location) as saver:
        graph = support.delta_graph(saver)
        graph.invoke({"items": [], "n": 0}, {**config, "metadata": {"run_id": "first"}})
        graph.invoke({"n": 8}, {**config, "metadata": {"run_id": "second"}})
        expected = graph.get_state(config).values
        assert expected["items"] == list(range(16))
        memory = support.delta_graph(InMemorySaver())
        memory.invoke({"items": [], "n": 0}, config)
        memory.invoke({"n": 8}, config)
        assert [s.values for s in graph.get_state_history(config)] == [
            s.values for s in memory.get_state_history(config)
        ]
        saver.delete_for_runs(["first"])
        assert graph.get_state(config).values == expected
        saver.prune(["d"])
        assert len(list(saver.list(config))) == 1
        assert graph.get_state(config).values == expected
    with SessionTreeSaver(location) as saver:  # from the store alone, and on from there
        graph = support.delta_graph(saver)
        assert graph.get_state(config).values == expected
        graph.invoke({"n": 16}, config)
        assert graph.get_state(config).values["items"] == list(range(24))


def test_copy_thread_onto_itself_or_onto_a_held_thread_changes_nothing(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    with SessionTreeSaver(location) as saver, SessionTreeSaver(location) as holder:
        put_chain(saver, "src", [{"a": 1}, {"a": 2}], ["r", "r"])
        put_chain(holder, "held", [{"a": 9}], ["r"])
        saver.copy_thread("src", "src")
        assert len(list(saver.list({"configurable": {"thread_id": "src"}}))) == 2
        with pytest.raises(SessionLockError):
            saver.copy_thread("src", "held")
        got = holder.get_tuple({"configurable": {"thread_id": "held"}})
        assert got is not None and got.checkpoint["channel_values"] == {"a": 9}
        assert sorted(saver.list_threads()) == ["held", "src"]
        directory = os.path.dirname(saver.session_path("src") or "")
        assert len([n for n in os.listdir(directory) if n.endswith(".jsonl")]) == 2


# ----------------------------------------------------------------------------- red team


def test_metadata_json_cannot_hold_is_stored_as_in_memory_saver_stores_it(
    tmp_path: Path,
) -> None:
    """A metadata string with a lone surrogate (JSON as UTF-8 cannot hold it) goes
    through the serde, as InMemorySaver's does, instead of failing the put."""
    odd = {"source": "input", "note": "\ud800"}
    memory = InMemorySaver()
    with SessionTreeSaver(str(tmp_path / "store")) as saver:
        got = []
        for each in (memory, saver):
            config = each.put(
                {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                empty_checkpoint(),
                dict(odd),
                {},
            )
            found = each.get_tuple(config)
            assert found is not None
            got.append(found.metadata)
        assert got[1] == got[0]
        assert [t.metadata for t in saver.list(None, filter={"source": "input"})] == [got[0]]


def test_copy_thread_whose_rename_fails_keeps_the_target_and_leaves_no_stray_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy takes the target's place in one step: when it cannot (the rename
    fails: a full disk, a database error), the target keeps its checkpoints and no
    copy is left behind under a name no thread leads to."""
    location = str(tmp_path / "store")
    with SessionTreeSaver(location) as saver:
        put_chain(saver, "src", [{"a": 1}, {"a": 2}], ["r", "r"])
        put_chain(saver, "dst", [{"a": 9}], ["r"])
        saver.release("dst")
        directory = os.path.dirname(saver.session_path("src") or "")

        storage = saver.store.storage
        rename = storage.rename
        key = thread_file_key("dst")

        def refuse(source: str, target: str) -> None:  # the copy into the target's place
            if key in target and target.endswith(".jsonl"):
                raise OSError(28, "No space left on device")
            rename(source, target)

        monkeypatch.setattr(storage, "rename", refuse)
        with pytest.raises(OSError):
            saver.copy_thread("src", "dst")
        monkeypatch.undo()
        got = saver.get_tuple({"configurable": {"thread_id": "dst"}})
        assert got is not None and got.checkpoint["channel_values"] == {"a": 9}
        assert sorted(saver.list_threads()) == ["dst", "src"]
        assert len([n for n in os.listdir(directory) if n.endswith(".jsonl")]) == 2
        assert not [n for n in os.listdir(directory) if n.endswith(".copying")]
        saver.copy_thread("src", "dst")  # and then it works, named as the target
        copied = [t.checkpoint["channel_values"] for t in saver.list(support.config("dst"))]
        assert copied == [{"a": 2}, {"a": 1}]
        assert sorted(saver.list_threads()) == ["dst", "src"]
        assert len([n for n in os.listdir(directory) if n.endswith(".jsonl")]) == 2


def test_copy_thread_killed_before_the_rename_leaves_no_stray_session(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    script = (
        "import os, sys\n"
        "from sessiontree.integrations.langgraph import SessionTreeSaver\n"
        "s = SessionTreeSaver(sys.argv[1])\n"
        "rename = s.store.storage.rename\n"
        "def killed(a, b):  # at the rename into the target's place, or at the first\n"
        "    if b.endswith('.jsonl') or sys.argv[2] == 'first':\n"
        "        os._exit(9)\n"
        "    rename(a, b)\n"
        "s.store.storage.rename = killed\n"
        "s.copy_thread('src', 'dst')\n"
    )
    with SessionTreeSaver(location) as saver:
        put_chain(saver, "src", [{"a": 1}], ["r"])
        directory = os.path.dirname(saver.session_path("src") or "")

    def killed_copy(when: str = "last") -> str:
        done = subprocess.run([sys.executable, "-c", script, location, when], capture_output=True)
        assert done.returncode == 9, done.stderr
        left = [n for n in os.listdir(directory) if n.endswith(".copying")]
        assert len(left) == 1
        return os.path.join(directory, left[0])

    def age(path: str) -> None:
        old = time.time() - 11 * 60
        for name in os.listdir(directory):
            if os.path.basename(path) in name:  # its temp files too
                os.utime(os.path.join(directory, name), (old, old))

    leftover = killed_copy()
    # No session, no thread: the copy is under a name no listing shows.
    with SessionTreeSaver(location) as saver:
        assert saver.list_threads() == ["src"]
        assert saver.get_tuple(support.config("dst")) is None
        assert [i.title for i in saver.store.list("/langgraph")] == ["src"]
    assert len([n for n in os.listdir(directory) if n.endswith(".jsonl")]) == 1
    assert os.path.exists(leftover)  # too recent to be taken for a leftover
    # Ten minutes later, a saver opening the store removes it; list_threads too.
    age(leftover)
    with SessionTreeSaver(location) as saver:
        assert not os.path.exists(leftover)
        second = killed_copy("first")  # in the copy's own rewrite: its temp file left
        assert any(n.endswith(".tmp") for n in os.listdir(directory))
        age(second)
        assert saver.list_threads() == ["src"]
        assert not os.path.exists(second)
    # A copy whose writer is alive (its lock held) stays, however old.
    third = killed_copy()
    age(third)
    lock = acquire_session_lock(FileSessionStorage(), third)
    try:
        with SessionTreeSaver(location) as saver:
            assert saver.list_threads() == ["src"]
        assert os.path.exists(third)
    finally:
        assert lock is not None
        lock.release()
    with SessionTreeSaver(location) as saver:
        saver.copy_thread("src", "dst")  # and a copy that goes through is the thread
        assert sorted(saver.list_threads()) == ["dst", "src"]
        assert not os.path.exists(third)
    assert sorted(os.listdir(directory)) == sorted(
        n for n in os.listdir(directory) if n.endswith(".jsonl")
    )
    with Store(location) as store:
        assert store.check() == []


def test_a_saver_kept_across_a_fork_reads_in_the_child_while_a_parent_thread_held_it(
    tmp_path: Path,
) -> None:
    """fork() while another thread is inside a saver call: the child's copy of the
    saver's lock was held by a thread the child does not have, so every call hung."""
    script = (
        "import os, sys, threading\n"
        "from langgraph.checkpoint.base import empty_checkpoint\n"
        "from sessiontree.integrations.langgraph import SessionTreeSaver\n"
        "s = SessionTreeSaver(sys.argv[1])\n"
        "c = empty_checkpoint(); c['channel_values'] = {'a': 1}; c['channel_versions'] = {'a': 1}\n"
        "s.put({'configurable': {'thread_id': 'T', 'checkpoint_ns': ''}}, c, {}, {'a': 1})\n"
        "held, done = threading.Event(), threading.Event()\n"
        "def busy():\n"
        "    with s._lock:  # another thread in the middle of a call\n"
        "        held.set(); done.wait()\n"
        "t = threading.Thread(target=busy); t.start(); held.wait()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    got = s.get_tuple({'configurable': {'thread_id': 'T'}})\n"
        "    print(got.checkpoint['channel_values'], flush=True)\n"
        "    os._exit(0)\n"
        "done.set(); t.join()\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('child', status, flush=True)\n"
        "s.close()\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "store")],
            capture_output=True,
            text=True,
            timeout=120,  # (a hang guard, not a timing)
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the forked child hung on the saver's lock")
    assert done.stdout.split("\n")[:2] == ["{'a': 1}", "child 0"], done.stderr


def test_a_thread_writes_again_once_a_full_disk_has_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put that fails on a full disk (ENOSPC) fails; once there is room, the next
    puts and writes of that thread succeed (the thread is read again from its file),
    instead of every later call failing with the old error until the saver closes."""
    real_write = os.write
    full = False

    def write(fd: int, data: Any) -> int:
        if full:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    def put(saver: SessionTreeSaver, parent: Any, value: int) -> Any:
        checkpoint = empty_checkpoint()
        version = f"{value:012d}.0"
        checkpoint["channel_values"] = {"a": value}
        checkpoint["channel_versions"] = {"a": version}
        return saver.put(parent, checkpoint, {"run_id": "r"}, {"a": version})

    monkeypatch.setattr(os, "write", write)
    location = str(tmp_path / "store")
    with SessionTreeSaver(location) as saver:
        config = put(saver, {"configurable": {"thread_id": "T", "checkpoint_ns": ""}}, 1)
        full = True
        with pytest.raises(SessionPersistenceError):
            put(saver, config, 2)
        full = False
        config = put(saver, config, 3)
        saver.put_writes(config, [("a", 4)], "task")
        got = saver.get_tuple(support.config("T"))
        assert got is not None and got.checkpoint["channel_values"] == {"a": 3}
        assert got.pending_writes == [("task", "a", 4)]
    with SessionTreeSaver(location) as saver:
        assert [t.checkpoint["channel_values"] for t in saver.list(support.config("T"))] == [
            {"a": 3},
            {"a": 1},
        ]


def late_writes_thread(saver: SessionTreeSaver, thread_id: str, late: bool) -> list[Any]:
    """Three checkpoints of a conversation, each with its writes; `late`: the writes of
    the first two saved after the third checkpoint and its writes (LangGraph's
    background writer may save them so), two tasks' for the first."""
    messages = [HumanMessage("question", id="1"), AIMessage("answer", id="2")]
    messages += [HumanMessage("more", id="3"), AIMessage("more answer", id="4")]
    parent: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    configs = []
    for i, count in enumerate([1, 2, 4]):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"1f0-{i}"
        checkpoint["ts"] = "2026-01-01T00:00:00+00:00"
        checkpoint["channel_values"] = {"messages": messages[:count]}
        checkpoint["channel_versions"] = {"messages": f"00000000000{i + 1}.0"}
        parent = saver.put(parent, checkpoint, {}, {"messages": f"00000000000{i + 1}.0"})
        configs.append(parent)
    writes = [
        (configs[2], "end", [("done", True)]),  # in time
        (configs[0], "model", [("messages", [messages[1]])]),
        (configs[0], "other", [("other", "x")]),
        (configs[1], "human", [("messages", messages[2:3])]),
    ]
    if not late:
        return configs
    for config, task, items in writes:
        saver.put_writes(config, items, task)
    return configs


def leaf_and_context(path: str) -> tuple[dict[str, Any], list[Any]]:
    with SessionManager.open(path, read_only=True) as manager:
        leaf = manager.get_leaf_entry()
        assert leaf is not None
        return leaf, manager.build_session_context().messages


def test_late_writes_of_an_older_checkpoint_leave_the_leaf_on_the_newest(tmp_path: Path) -> None:
    with SessionTreeSaver(str(tmp_path / "plain")) as saver:
        late_writes_thread(saver, "t", late=False)
        plain = saver.session_path("t")
    with SessionTreeSaver(str(tmp_path / "late")) as saver:
        configs = late_writes_thread(saver, "t", late=True)
        path = saver.session_path("t")
        got = saver.get_tuple(configs[0])
        assert got is not None and sorted(w[0] for w in got.pending_writes or []) == [
            "model",
            "other",
        ]
    assert plain is not None and path is not None
    leaf, context = leaf_and_context(path)
    assert context == leaf_and_context(plain)[1]
    assert [m["content"] for m in context][-1] == [{"type": "text", "text": "more answer"}]
    # The leaf: one leaf entry after each late put_writes, pointing at the newest
    # checkpoint's last entry (its own writes, saved in time, are that entry).
    entries = lines_of(path)
    markers = [e for e in entries if e.get("customType") == LEAF_TYPE]
    assert len(markers) == 3 and entries[-1] == leaf == markers[-1]
    by_id = {e.get("id"): e for e in entries}
    assert "data" not in leaf
    tip = by_id[leaf["parentId"]]
    assert tip["customType"] == "langgraph.writes" and tip["data"]["checkpoint"] == "1f0-2"
    # A saver that opens the file again knows the tip: no leaf entry for the newest
    # checkpoint's writes, one for another late write.
    with SessionTreeSaver(str(tmp_path / "late")) as saver:
        saver.put_writes(configs[2], [("after", 1)], "again")
        again = lines_of(path)[-1]
        assert again["data"]["task"] == "again" and again["parentId"] == tip["id"]
        saver.put_writes(configs[1], [("late", 1)], "late-again")
        last = lines_of(path)[-1]
        assert last["customType"] == LEAF_TYPE and last["parentId"] == again["id"]
    assert leaf_and_context(path)[1] == context


@pytest.mark.peers
@pytest.mark.slow  # runs the peers themselves (node, bun): 15 s
def test_late_writes_leave_the_peers_context_on_the_newest(tmp_path: Path) -> None:
    with SessionTreeSaver(str(tmp_path / "plain")) as saver:
        late_writes_thread(saver, "t", late=False)
        plain = saver.session_path("t")
    with SessionTreeSaver(str(tmp_path / "late")) as saver:
        late_writes_thread(saver, "t", late=True)
        path = saver.session_path("t")
    assert plain is not None and path is not None
    for peer in peers.PEERS:  # both pi releases and oh-my-pi
        got = peer_context(peer, path)
        assert got == peer_context(peer, plain)
        assert len(got["messages"]) == 4, peer


def test_prune_and_delete_for_runs_keep_the_leaf_entry_pointing_at_a_kept_entry(
    tmp_path: Path,
) -> None:
    location = str(tmp_path / "store")
    with SessionTreeSaver(location) as saver:
        configs = late_writes_thread(saver, "t", late=True)
        saver.copy_thread("t", "copy")
        path, copy = saver.session_path("t"), saver.session_path("copy")
        assert path is not None and copy is not None
        # The copy carries the leaf entries: the same context.
        assert leaf_and_context(copy)[1] == leaf_and_context(path)[1]
        saver.prune(["t"])
        entries = lines_of(path)
        ids = {e.get("id") for e in entries}
        markers = [e for e in entries if e.get("customType") == LEAF_TYPE]
        assert markers == [entries[-1]] and markers[0]["parentId"] in ids
        context = leaf_and_context(path)[1]
        assert [m["role"] for m in context] == ["user", "assistant", "user", "assistant"]
        got = saver.get_tuple(configs[2])
        assert got is not None and [w[0] for w in got.pending_writes or []] == ["end"]
    # The newest checkpoint's run goes: the leaf entry follows its parent up.
    with SessionTreeSaver(location) as saver:
        for i, config in enumerate(late_writes_thread(saver, "u", late=True)):
            assert saver.get_tuple(config) is not None, i
        checkpoint = empty_checkpoint()
        checkpoint["id"] = "1f0-9"
        checkpoint["channel_values"] = {"messages": [HumanMessage("x", id="9")]}
        checkpoint["channel_versions"] = {"messages": "000000000009.0"}
        newest = saver.put(
            {"configurable": {"thread_id": "u", "checkpoint_ns": "", "checkpoint_id": "1f0-2"}},
            checkpoint,
            {"run_id": "doomed"},
            {"messages": "000000000009.0"},
        )
        saver.put_writes(configs[0], [("late", 1)], "late")  # a leaf entry under 1f0-9
        saver.delete_for_runs(["doomed"])
        assert saver.get_tuple(newest) is None
        upath = saver.session_path("u")
        assert upath is not None
        entries = lines_of(upath)
        ids = {e.get("id") for e in entries}
        assert all(e["parentId"] in ids for e in entries if e.get("customType") == LEAF_TYPE)
        assert entries[-1]["customType"] == LEAF_TYPE
        assert leaf_and_context(upath)[1] == leaf_and_context(path)[1]
    with Store(location) as store:
        assert store.check() == []
