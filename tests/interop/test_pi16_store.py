"""Writing into pi's store as pi 1.6.0 writes, judged by pi 1.6.0 itself.

The same op script (`tests/opscript.py`, the oracles' `run` format) is run by pi 1.6.0's
`SessionManager` (`pi16-oracle.mjs run`) and by sessiontree in pi's store (an agent dir
`.pi/agent`), and the files are compared line by line: ids become their position in the
file, entry and header timestamps `T`, the session id `S`, a `parentSession` the number
of the file it names; every other byte must be what pi wrote (key order included). pi
1.6.0 and pi 0.73.1 then read our files with the contexts sessiontree builds, on every
leaf. What pi 1.6 does that 0.73.1 did not:

* the file appears at the first user message (0.73.1: the first assistant message);
* `branch_with_summary`'s `fromId` is the leaf it leaves (0.73.1: the branch target);
* `create_branched_session` re-links the children of the label entries it drops and
  keeps a compaction's first kept entry (0.73.1 left them naming a missing parent);
* a `session_info` name loses its line breaks (0.73.1 only trimmed it).

A change of the default model is written as both pi versions write it (`provider`,
`modelId`), since neither reads oh-my-pi's `model`.

In the xcsh and oh-my-pi stores sessiontree goes on writing what oh-my-pi writes.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sessiontree import SessionManager
from sessiontree.cli import app
from sessiontree.format import serialize_entry, serialize_entry_bytes
from tests import peers
from tests.conftest import examples
from tests.interop.test_opscript_shapes import collapse_name_entries, read_entries, shape
from tests.opscript import OpRunResult, run_script

CWD = "/proj"


def usage() -> dict[str, Any]:
    cost = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
    return {
        "input": 1,
        "output": 1,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 2,
        "cost": cost,
    }


def user(text: str, ts: int) -> dict[str, Any]:
    return {"op": "appendMessage", "message": {"role": "user", "content": text, "timestamp": ts}}


def reply(text: str, ts: int) -> dict[str, Any]:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "api": "openai-responses",
        "provider": "openai",
        "model": "gpt-5",
        "usage": usage(),
        "stopReason": "stop",
        "timestamp": ts,
    }
    return {"op": "appendMessage", "message": message}


def label(ref: int, text: str | None) -> dict[str, Any]:
    return {"op": "appendLabelChange", "targetRef": ref, "label": text}


def name(text: str) -> dict[str, Any]:
    return {"op": "setSessionName", "name": text, "source": "user"}


# Every item at once: a setup entry before the conversation, labels with children, a
# compaction keeping from a label entry, a branch with a summary, names to clean, and a
# branched session of a path with labels, named again afterwards.
SCRIPT: list[dict[str, Any]] = [
    {"op": "appendThinkingLevelChange", "thinkingLevel": "high"},  # 0
    {"op": "appendCustomEntry", "customType": "setup", "data": {"k": 1}},  # 1
    user("hello", 1),  # 2
    reply("hi", 2),  # 3
    label(2, "start"),  # 4: its child is the next message
    user("second", 3),  # 5
    reply("two", 4),  # 6
    label(5, "second"),  # 7
    label(2, "start again"),  # 8
    {"op": "appendCompaction", "summary": "so far", "firstKeptRef": 4, "tokensBefore": 99},  # 9
    user("third", 5),  # 10
    {"op": "branchWithSummary", "ref": 3, "summary": "left third"},  # 11
    user("instead", 6),  # 12
    name("  Named\r\n\nsession\t "),  # 13
    {"op": "branch", "ref": 10},  # 14
    reply("three", 7),  # 15
    {"op": "branchWithSummary", "ref": None, "summary": "from the top"},  # 16
    {"op": "branch", "ref": 15},  # 17
    {"op": "createBranchedSession", "ref": 15},  # 18
    user("in the branch", 8),  # 19
    name("Branched \u3000"),  # 20
    label(19, "new"),  # 21
]

# A branched session of a path without a user or assistant message: pi 1.6 writes it
# once one arrives.
DEFERRED: list[dict[str, Any]] = [
    {"op": "appendCustomEntry", "customType": "setup"},  # 0
    label(0, "setup"),  # 1
    {"op": "appendCustomEntry", "customType": "more"},  # 2: the label's child
    user("hello", 1),  # 3
    reply("hi", 2),  # 4
    {"op": "createBranchedSession", "ref": 2},  # 5
    {"op": "appendCustomEntry", "customType": "still no conversation"},  # 6
    user("now", 3),  # 7
    {"op": "appendModelChange", "model": "anthropic/claude-sonnet-4-5"},  # 8: pi's form
    user("and now", 4),  # 9
]

# Names as people paste them: line breaks of every kind, tabs, spaces JavaScript trims
# and Python's strip does not (and the other way round).
NAMES = [
    " a\nb ",
    "line\r\nbreak",
    "many\n\n\r\nbreaks\n",
    "\ttab\tinside\t",
    "\ufeffbom\ufeff",
    "\u00a0nbsp\u2028sep\u3000",
    "\x1cfile separator\x1c",
    "  double  space  ",
    "\u200bzero width\u200b",
]


def pi_store(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".pi" / "agent"


def project(agent: Path) -> Path:
    return agent / "sessions" / "--proj--"


def ours(ops: list[dict[str, Any]], session_dir: Path) -> OpRunResult:
    return run_script({"cwd": CWD, "ops": ops}, session_dir)


def theirs(ops: list[dict[str, Any]], work: Path, peer: str = "pi16") -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    script = work / "ops.json"
    script.write_text(json.dumps({"cwd": CWD, "ops": ops}), encoding="utf-8")
    result: dict[str, Any] = json.loads(peers.oracle(peer, "run", script, work / "out", "--json"))
    return result


def normalized(path: str | Path, files: list[str | None]) -> list[str]:
    """The file's lines with what is random or wall-clock replaced (see the module doc).
    Our own lines must be `JSON.stringify`'s too: each parses and serializes back."""
    data = Path(path).read_bytes()
    assert data.endswith(b"\n")
    lines = data[:-1].split(b"\n")
    entries = [json.loads(line) for line in lines]
    assert [serialize_entry_bytes(e) for e in entries] == lines
    header, body = entries[0], entries[1:]
    ids = {e["id"]: f"E{n}" for n, e in enumerate(body)}

    def ref(value: Any) -> Any:
        if value is None or value == "root":
            return value
        return ids.get(value, f"missing:{value}")

    header = {**header, "id": "S", "timestamp": "T"}
    if "parentSession" in header:
        header["parentSession"] = f"F{files.index(header['parentSession'])}"
    out = [serialize_entry(header)]
    for entry in body:
        entry = {**entry, "timestamp": "T"}
        for key in ("id", "parentId", "targetId", "firstKeptEntryId", "fromId"):
            if key in entry:
                entry[key] = ref(entry[key])
        out.append(serialize_entry(entry))
    return out


def same_files(mine: OpRunResult, pi: dict[str, Any]) -> None:
    """Every file pi pointed at: written by both or neither, and the same lines."""
    our_files = [str(p) for p in mine.session_files]
    assert len(our_files) == len(pi["sessionFiles"])
    for n, (a, b) in enumerate(zip(our_files, pi["sessionFiles"], strict=True)):
        assert Path(a).exists() == Path(b).exists(), f"file {n}: exists {Path(a).exists()}"
        if Path(b).exists():
            got = normalized(a, list(our_files))
            want = normalized(b, list(pi["sessionFiles"]))
            assert got == want, f"file {n}"


def contexts_agree(path: str, peer: str) -> int:
    """pi's context (`peer`) of every leaf of our file equals ours; returns the count."""
    want = peers.peer_contexts(peer, path)
    with SessionManager.open(path, read_only=True) as sm:
        assert [w["leafId"] for w in want] == [e["id"] for e in sm.get_entries()]
        for w in want:
            sm.branch(w["leafId"])
            ctx = sm.build_session_context()
            model = w["context"]["model"]
            assert ctx.messages == w["context"]["messages"], w["leafId"]
            assert ctx.thinking_level == w["context"]["thinkingLevel"], w["leafId"]
            expected = None if model is None else f"{model.get('provider')}/{model.get('modelId')}"
            assert ctx.models.get("default") == expected, w["leafId"]
    return len(want)


@pytest.mark.peers
def test_the_file_appears_with_the_first_user_message(tmp_path: Path) -> None:
    """pi 1.6 writes a new session at its first user message (setup entries before it
    in the same write); in pi's store so do we. oh-my-pi still waits for the answer."""
    ops = SCRIPT[:3]
    pi = theirs(ops, tmp_path / "pi16")
    assert pi["exists"]
    mine = ours(ops, project(pi_store(tmp_path)))
    same_files(mine, pi)
    elsewhere = ours(ops, tmp_path / "agent" / "sessions" / "--proj--")
    assert elsewhere.session_file is not None
    assert not Path(elsewhere.session_file).exists()


@pytest.mark.peers
@pytest.mark.parametrize("script", [SCRIPT, DEFERRED], ids=["everything", "deferred-branch"])
def test_what_sessiontree_writes_in_pi_store_is_what_pi16_writes(
    tmp_path: Path, script: list[dict[str, Any]]
) -> None:
    same_files(ours(script, project(pi_store(tmp_path))), theirs(script, tmp_path / "pi16"))


@pytest.mark.peers
@pytest.mark.parametrize("peer", peers.PI_VERSIONS)
def test_both_pi_versions_read_what_was_written_in_pi_store_as_we_do(
    tmp_path: Path, peer: str
) -> None:
    """On every leaf of every file: pi 0.73.1 opens the files written the 1.6 way with
    the same contexts as 1.6 and sessiontree."""
    mine = ours(SCRIPT + DEFERRED, project(pi_store(tmp_path)))
    leaves = sum(contexts_agree(str(p), peer) for p in mine.session_files if Path(p).exists())
    assert leaves >= len(SCRIPT)


@pytest.mark.parametrize("writer", ["sessiontree", pytest.param("pi16", marks=pytest.mark.peers)])
def test_a_branched_session_in_pi_store_keeps_every_parent(tmp_path: Path, writer: str) -> None:
    """Every parentId and firstKeptEntryId names an entry of the new file, the labels
    are re-created with the timestamps of the label entries that set them, and the
    compaction keeps what it kept in the session it came from: in the files we write,
    and in pi 1.6's own (what the byte comparison cannot see: it sets times aside)."""
    if writer == "pi16":
        done = theirs(SCRIPT, tmp_path / "pi16")
        files, leaf = done["sessionFiles"], done["ids"][15]
    else:
        mine = ours(SCRIPT, project(pi_store(tmp_path)))
        files, leaf = [str(p) for p in mine.session_files], mine.ids[15]
    source, branched = files[:2]
    entries = read_entries(Path(branched))
    ids = {e["id"] for e in entries}
    assert all(e["parentId"] is None or e["parentId"] in ids for e in entries)
    assert all(e.get("firstKeptEntryId") in ids for e in entries if e["type"] == "compaction")
    set_at = {}
    for e in read_entries(Path(source)):
        if e["type"] == "label":
            set_at[e["targetId"]] = e["timestamp"]
    labels = [e for e in entries if e["type"] == "label"]
    assert [e["label"] for e in labels[:2]] == ["start again", "second"]
    assert all(e["timestamp"] == set_at[e["targetId"]] for e in labels[:2])
    with SessionManager.open(source, read_only=True) as old, SessionManager.open(branched) as new:
        old.branch(leaf or "")
        new.branch(leaf or "")
        assert new.build_session_context() == old.build_session_context()


@pytest.mark.peers
def test_names_are_stored_as_pi16_stores_them(tmp_path: Path) -> None:
    ops = [user("hello", 1), reply("hi", 2), *(name(n) for n in NAMES)]
    pi = theirs(ops, tmp_path / "pi16")
    mine = ours(ops, project(pi_store(tmp_path)))
    same_files(mine, pi)
    got = [e["name"] for e in read_entries(Path(mine.session_file or ""))[2:]]
    assert len(got) == len(NAMES)
    assert not any("\n" in n or "\r" in n for n in got)


@pytest.mark.peers
def test_a_rename_in_pi_store_is_the_name_pi16_shows(tmp_path: Path) -> None:
    """`sessiontree rename`: pi shows the new name (it read none from the header's title,
    which an older sessiontree wrote; that title goes, the entries stay)."""
    agent = pi_store(tmp_path)
    mine = ours(SCRIPT[:4], project(agent))
    path = str(mine.session_file)
    before = Path(path).read_bytes().split(b"\n")
    header = json.loads(before[0])
    legacy = serialize_entry_bytes({**header, "title": "Old", "titleSource": "user"})
    Path(path).write_bytes(b"\n".join([legacy, *before[1:]]))
    shown = json.loads(peers.oracle("pi16", "entries", path))["name"]
    assert shown is None
    runner = CliRunner()
    done = runner.invoke(app, ["--agent-dir", str(agent), "rename", path, " New\nname "])
    assert done.exit_code == 0, done.output
    after = Path(path).read_bytes().split(b"\n")
    assert after[0] == before[0]
    assert after[1:-2] == before[1:-1]
    assert json.loads(after[-2])["name"] == "New name"
    assert json.loads(peers.oracle("pi16", "entries", path))["name"] == "New name"
    with SessionManager.open(path, read_only=True) as sm:
        assert sm.get_session_name() == "New name"


@pytest.mark.peers
def test_other_stores_still_write_what_omp_writes(tmp_path: Path) -> None:
    """The xcsh store, the same script: the file waits for the assistant, `fromId` is
    the branch target, the branched file keeps oh-my-pi's shape (an entry whose parent
    was a dropped label still names it), names go to the header; as oh-my-pi's own run."""
    mine = ours(SCRIPT, tmp_path / "agent" / "sessions" / "--proj--")
    omp = theirs(SCRIPT, tmp_path / "omp", peer="omp")
    assert len(mine.session_files) == len(omp["sessionFiles"]) == 2
    for a, b in zip(mine.session_files, omp["sessionFiles"], strict=True):
        got = read_entries(Path(str(a)))
        want = collapse_name_entries(read_entries(Path(b)))
        assert shape(got) == shape(want)
        assert not any(e["type"] == "session_info" for e in got)
    summaries = [e for e in read_entries(Path(str(mine.session_files[0]))) if "fromId" in e]
    assert [e["fromId"] for e in summaries] == [mine.ids[3], "root"]


tree_ops = st.lists(
    st.tuples(
        st.sampled_from(["user", "reply", "label", "clear", "branch", "compaction", "custom"]),
        st.integers(0, 1000),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=tree_ops, at=st.integers(0, 1000))
def test_any_branched_session_in_pi_store_keeps_every_parent_and_its_context(
    ops: list[tuple[str, int]], at: int
) -> None:
    """Any tree of messages, labels (set, cleared, set again), branches and compactions,
    branched at any entry in pi's store: no entry of the new file names a parent the
    file lacks, nor a first kept entry its path held (one off the path stays, as pi
    keeps it), and its context at that entry is the one the
    session it came from has there (the file is written once a user or assistant
    message is on the path)."""
    with tempfile.TemporaryDirectory() as tmp:
        sm = SessionManager.create(CWD, str(project(pi_store(Path(tmp)))))
        ids: list[str] = []
        for kind, n in ops:
            pick = ids[n % len(ids)] if ids else None
            if kind == "user":
                ids.append(sm.append_message({"role": "user", "content": "u", "timestamp": n}))
            elif kind == "reply":
                ids.append(sm.append_message(reply("a", n)["message"]))
            elif kind in ("label", "clear") and pick is not None:
                ids.append(sm.append_label_change(pick, f"l{n}" if kind == "label" else None))
            elif kind == "branch" and pick is not None:
                sm.branch(pick)
            elif kind == "compaction" and pick is not None:
                if pick in {e["id"] for e in sm.get_branch()}:
                    ids.append(sm.append_compaction("s", None, pick, n))
                    continue
                # Off the path: refused here, written by pi 1.6 (and read as pi reads it).
                leaf_before = sm.get_leaf_id()
                with pytest.raises(ValueError, match=pick):
                    sm.append_compaction("s", None, pick, n)
                assert sm.get_leaf_id() == leaf_before
                ids.append(sm.append_compaction("s", None, None, n))
                sm.get_entries()[-1]["firstKeptEntryId"] = pick
                sm.rewrite_entries()
            else:
                ids.append(sm.append_custom_entry("c", {"n": n}))
        leaf = ids[at % len(ids)]
        sm.branch(leaf)
        want = sm.build_session_context()
        on_path = {e["id"]: e.get("firstKeptEntryId") for e in sm.get_branch(leaf)}
        path = sm.create_branched_session(leaf)
        assert path is not None
        entries = sm.get_entries()
        kept = {e["id"] for e in entries}
        assert all(e["parentId"] is None or e["parentId"] in kept for e in entries)
        for e in entries:
            if e["type"] == "compaction" and on_path[e["id"]] in on_path:
                assert e["firstKeptEntryId"] in kept  # a label it kept from: the entry after
        if leaf in kept:
            sm.branch(leaf)
            assert sm.build_session_context() == want
        conversation = any(
            e["type"] == "message" and e["message"]["role"] in ("user", "assistant")
            for e in entries
        )
        sm.close()
        assert Path(path).exists() == conversation
        if conversation:
            assert [json.loads(line) for line in Path(path).read_bytes().splitlines()[1:]] == (
                entries
            )


@pytest.mark.peers
@pytest.mark.parametrize("how", ["persist_copy", "fork_from", "create_branched_session"])
def test_a_copy_into_pi_store_is_named_as_pi_reads_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A named session of the xcsh store (its name in the header) copied into pi's
    store: the copy's name is a `session_info` entry after its leaf, which pi shows,
    and the header carries no title pi would not show."""
    xcsh = tmp_path / "agent" / "sessions" / "--proj--"
    sm = SessionManager.create(CWD, str(xcsh))
    sm.append_message(user("hello", 1)["message"])
    sm.append_message(reply("hi", 2)["message"])
    sm.set_session_name("Carried\nname ", "user")
    sm.close()
    source = sm.get_session_file() or ""
    pi = project(pi_store(tmp_path))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(pi_store(tmp_path)))
    if how == "persist_copy":
        with SessionManager.open(source, read_only=True) as src:
            copy = src.persist_copy(str(pi))
    elif how == "fork_from":
        copy = SessionManager.fork_from(source, CWD, str(pi))
    else:
        copy = SessionManager.open(source, session_dir=str(pi))
        copy.create_branched_session(copy.get_leaf_id() or "")
    path = copy.get_session_file() or ""
    copy.close()
    assert path.startswith(str(pi))
    lines = [json.loads(line) for line in Path(path).read_bytes().splitlines()]
    assert "title" not in lines[0]
    assert (lines[-1]["type"], lines[-1]["name"], lines[-1]["parentId"]) == (
        "session_info",
        "Carried name",
        lines[-2]["id"],
    )
    assert json.loads(peers.oracle("pi16", "entries", path))["name"] == "Carried name"
    with SessionManager.open(path, read_only=True) as again:
        assert again.get_session_name() == "Carried name"
    assert contexts_agree(path, "pi16") == len(lines) - 1
