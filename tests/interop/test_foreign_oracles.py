"""The readers and the import against three oracles.

* **oh-my-pi's importers** (`ClaudeSessionStore`, `CodexSessionStore`), run by
  `scripts/gen_foreign_oracles.py` on the real files, committed in
  `tests/data/foreign/oracles.json`: the tool calls (id, name, arguments), tool
  results (id, tool name, error flag, content), assistant text, thinking and user
  text of every converted entry, in order, and the usage of every response.
  Differences kept on purpose, each handled by name below:
  - *merged response lines*: oh-my-pi keeps one assistant message per Claude Code
    line, each with the response's usage so far; we keep one per response, with its
    usage once. The streams compare blocks, so they match; usage per response id
    matches oh-my-pi's last line.
  - *better branch handling*: oh-my-pi hangs parallel tool results under the lines
    the source gives and its context then loses calls on the side branches; we chain
    them. Compared on all entries, not its context.
  - *content kept as text*: blocks oh-my-pi drops (a `tool_reference` result, an
    image without data) we keep as `[claude-code <type>] <json>` text; stripped here.
  - *events that repeat items*: oh-my-pi adds a Codex UI event whose text is not
    exactly an item's as a message (a review prompt the main thread never sent, an
    answer shown without its memory citations); we keep the first as a custom entry
    and drop the second as a repeat. Those texts are the only extra in its streams.
  - oh-my-pi does not read the pre-envelope Codex format.
* **The Claude Agent SDK's reader** (`claude_agent_sdk.get_session_messages`, offline):
  the chain Claude Code resumes. Our context at the leaf holds the same calls,
  results and texts in the same order, with the `isCompactSummary` message as the
  compaction's summary and without the `isMeta` lines the SDK hides.
* **pi and oh-my-pi reading our imports**: pi's `context --all-leaves` equals ours on
  every leaf of every imported file (subagents' too), and oh-my-pi's `tree --flat` ours.

The committed data is checked against the live peers by the `peers`-marked tests
(oh-my-pi's importers on both agents' files; both pi releases' contexts and oh-my-pi's
trees of two imports), found by `tests/peers.py`: they skip with a message where the
peers are not installed, and fail under CI.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from sessiontree import SessionManager, build_session_context, load_entries_from_file
from sessiontree.foreign import ForeignSession, read_claude_session, read_codex_session
from sessiontree.format import serialize_entry
from tests import foreign_support as fs
from tests import peers
from tests.conftest import REAL_FILES, require_module, unavailable

FOREIGN = REAL_FILES / "foreign"
ORACLES: dict[str, Any] = json.loads((fs.DATA / "oracles.json").read_text(encoding="utf-8"))
CLAUDE = sorted(p.name for p in (FOREIGN / "claude").glob("*.jsonl"))
CODEX = sorted(p.name for p in (FOREIGN / "codex").glob("*.jsonl"))
REAL_CLAUDE = [n for n in CLAUDE if n not in fs.HAND_ASSEMBLED]
REAL_CODEX = [n for n in CODEX if n not in fs.HAND_ASSEMBLED]


def fixture(kind: str, name: str) -> Path:
    path = FOREIGN / kind / name
    if not path.is_file():
        unavailable(f"real file {path} is missing")
    return path


def read(kind: str, name: str) -> ForeignSession:
    path = str(fixture(kind, name))
    return read_claude_session(path) if kind == "claude" else read_codex_session(path)


def without_kept_text(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries without the `[<agent> <type>] <json>` text blocks we keep where
    oh-my-pi drops the block."""
    out = copy.deepcopy(entries)
    for entry in out:
        message = entry.get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            message["content"] = [
                b
                for b in message["content"]
                if not (
                    b.get("type") == "text"
                    and b.get("text", "").startswith(("[claude-code ", "[codex "))
                )
            ]
    return out


def raw(kind: str, name: str) -> list[dict[str, Any]]:
    out = []
    for line in fixture(kind, name).read_text(encoding="utf-8").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


# ----------------------------------------------------------------------------- oh-my-pi


def test_the_oracle_data_covers_every_file() -> None:
    assert set(ORACLES["files"]) == set(CLAUDE) | set(CODEX)
    assert set(ORACLES["omp"]) == set(CLAUDE) | set(CODEX) - {
        "AcidicSoil__codex-session-viewer__docs__example.jsonl"  # omp cannot read it
    }
    assert not any("error" in v for v in ORACLES["omp"].values())


@pytest.mark.parametrize("name", REAL_CLAUDE)
def test_omp_claude_importer_holds_the_same_content(name: str) -> None:
    want = ORACLES["omp"][name]
    entries = read("claude", name).manager.get_entries()
    assert fs.streams(without_kept_text(entries)) == want["streams"]


@pytest.mark.parametrize("name", REAL_CLAUDE)
def test_omp_claude_usage_per_response(name: str) -> None:
    """Our one message per response carries the usage oh-my-pi's last line of it has."""
    want = ORACLES["omp"][name]["usage"]
    got = fs.response_usage(read("claude", name).manager.get_entries())
    assert got == want
    assistants = sum(
        1
        for e in read("claude", name).manager.get_entries()
        if e["type"] == "message" and e["message"]["role"] == "assistant"
    )
    assert assistants == len(want)  # one message per response


def _event_extras(name: str) -> dict[str, list[str]]:
    """UI event texts oh-my-pi turns into messages because no item has exactly that text."""
    records = raw("codex", name)
    items: dict[str, set[str]] = {"user": set(), "assistant": set()}
    for r in records:
        p = r.get("payload")
        if r.get("type") == "response_item" and isinstance(p, dict) and p.get("type") == "message":
            text = "".join(c.get("text", "") for c in p.get("content") or [])
            items.setdefault(p.get("role"), set()).add(text)
    extras: dict[str, list[str]] = {"utext": [], "atext": []}
    for r in records:
        p = r.get("payload")
        if r.get("type") != "event_msg" or not isinstance(p, dict):
            continue
        if p.get("type") == "user_message" and p["message"] not in items["user"]:
            extras["utext"].append(fs.digest(p["message"]))
        if p.get("type") == "agent_message" and p["message"] not in items["assistant"]:
            extras["atext"].append(fs.digest(p["message"]))
    return extras


@pytest.mark.parametrize("name", [n for n in REAL_CODEX if n in ORACLES["omp"]])
def test_omp_codex_importer_holds_the_same_content(name: str) -> None:
    want = ORACLES["omp"][name]["streams"]
    entries = read("codex", name).manager.get_entries()
    got = fs.streams(without_kept_text(entries))
    # One response may hold several reasoning items: oh-my-pi's are one message each.
    got["think"] = [
        fs.digest(b["thinking"])
        for e in entries
        if e["type"] == "message" and e["message"]["role"] == "assistant"
        for b in e["message"]["content"]
        if b["type"] == "thinking" and b["thinking"]
    ]
    extras = _event_extras(name)
    for kind in ("call", "result", "think", "uimage"):
        assert got[kind] == want[kind], kind
    for kind in ("utext", "atext"):
        # Ours in order; oh-my-pi's holds the event texts besides (see the module doc).
        assert sorted(got[kind] + extras[kind]) == sorted(want[kind]), kind
        rest = list(want[kind])
        for digest in extras[kind]:
            rest.remove(digest)
        assert rest == got[kind], kind


# ----------------------------------------------------------------------------- the SDK


def _sdk_view(messages: list[Any]) -> dict[str, list[Any]]:
    entries = []
    for m in messages:
        message = m.message
        if m.type == "assistant":
            content = [_sdk_block(b) for b in message["content"]]
            entries.append(
                {
                    "type": "message",
                    "message": {"role": "assistant", "content": [b for b in content if b]},
                }
            )
            continue
        content = message["content"]
        if isinstance(content, str):
            entries.append({"type": "message", "message": {"role": "user", "content": content}})
            continue
        for b in content:
            if b.get("type") == "tool_result":
                entries.append(
                    {
                        "type": "message",
                        "message": {
                            "role": "toolResult",
                            "toolCallId": b["tool_use_id"],
                            "toolName": "",
                            "isError": False,
                            "content": "",
                        },
                    }
                )
        blocks = [b for b in content if b.get("type") in ("text", "image")]
        if blocks:
            user = [
                {"type": "text", "text": b["text"]}
                if b["type"] == "text"
                else {"type": "image", "data": b["source"]["data"]}
                for b in blocks
            ]
            entries.append({"type": "message", "message": {"role": "user", "content": user}})
    return fs.streams(entries)


def _sdk_block(block: dict[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block["text"]}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block["thinking"]}
    if kind == "tool_use":
        return {
            "type": "toolCall",
            "id": block["id"],
            "name": block["name"],
            "arguments": block.get("input", {}),
        }
    return None


def _our_view(sm: SessionManager) -> dict[str, list[Any]]:
    entries: list[dict[str, Any]] = []
    for m in sm.build_session_context().messages:
        if m["role"] == "compactionSummary":
            entries.append(
                {"type": "message", "message": {"role": "user", "content": m["summary"]}}
            )
        elif m["role"] in ("user", "assistant"):
            entries.append({"type": "message", "message": m})
        elif m["role"] == "toolResult":
            entries.append(
                {
                    "type": "message",
                    "message": {**m, "toolName": "", "isError": False, "content": ""},
                }
            )
    view = fs.streams(without_kept_text(entries))
    # The SDK's lines are blocks one by one: compare thinking per block, not per message.
    view["think"] = [
        fs.digest(b["thinking"])
        for e in entries
        if e["message"]["role"] == "assistant"
        for b in e["message"]["content"]
        if b["type"] == "thinking" and b["thinking"]
    ]
    return view


@pytest.mark.parametrize("name", CLAUDE)
def test_sdk_chain_is_our_context_at_the_leaf(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk = require_module("claude_agent_sdk")
    source = fixture("claude", name)
    sid = fs.claude_layout_name(source)
    project = tmp_path / "config" / "projects" / "-fixtures"
    project.mkdir(parents=True)
    shutil.copyfile(source, project / f"{sid}.jsonl")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "config"))
    chain = sdk.get_session_messages(sid)
    want = _sdk_view(chain)
    want["think"] = [fs.digest(t) for t in want["think"]]
    want["think"] = [
        fs.digest(b["thinking"])
        for m in chain
        if m.type == "assistant"
        for b in m.message["content"]
        if b.get("type") == "thinking" and b.get("thinking")
    ]
    sm = read_claude_session(str(project / f"{sid}.jsonl")).manager
    got = _our_view(sm)
    for kind in ("call", "result", "atext", "think", "utext", "uimage"):
        assert got[kind] == want[kind], kind


# ----------------------------------------------------------------------------- pi and omp


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    if not FOREIGN.is_dir():
        unavailable(f"real files {FOREIGN} are missing")
    agent = tmp_path_factory.mktemp("foreign-imports") / "agent"
    saved = os.environ.get("PI_CODING_AGENT_DIR")
    os.environ["PI_CODING_AGENT_DIR"] = str(agent)
    try:
        return fs.import_all(FOREIGN, agent)
    finally:
        if saved is None:
            os.environ.pop("PI_CODING_AGENT_DIR", None)
        else:
            os.environ["PI_CODING_AGENT_DIR"] = saved


GIANT = 500
"""Entries past which a session is a giant for the every-leaf check, whose cost grows with
the square of the size: those few are `slow` (most of its time); the quick run checks the rest."""


def _files(giants_are_slow: bool = False) -> list[Any]:
    return [
        pytest.param(
            name,
            index,
            id=f"{name[:40]}#{index}",
            marks=[pytest.mark.slow]
            if giants_are_slow and len(ORACLES["pi"][f"{name}#{index}"]) > GIANT
            else [],
        )
        for name, count in sorted(ORACLES["files"].items())
        for index in range(count)
    ]


@pytest.mark.parametrize(("name", "index"), _files(giants_are_slow=True))
def test_pi_context_of_an_import_equals_ours_on_every_leaf(
    name: str, index: int, imported: dict[str, list[str]]
) -> None:
    path = imported[name][index]
    entries = load_entries_from_file(path)[1:]  # as stored: pi resolves no blob refs
    leaves = ORACLES["pi"][f"{name}#{index}"]
    assert [w["leafId"] for w in leaves] == [e["id"] for e in entries]
    bad = []
    for want in leaves:
        ctx = build_session_context(entries, want["leafId"])
        messages = [fs.pi_view(m) for m in ctx.messages]
        text = "[" + ",".join(serialize_entry(m) for m in messages) + "]"
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        model = want["model"]
        if digest != want["messagesSha256"] or ctx.thinking_level != want["thinkingLevel"]:
            bad.append(f"leaf {want['leafId']}: {len(messages)} vs {want['messageCount']} messages")
        # pi reads no oh-my-pi-format model_change (`{}`); otherwise it names the same model.
        if (
            model not in ({}, None)
            and ctx.models.get("default") != f"{model['provider']}/{model['modelId']}"
        ):
            bad.append(f"leaf {want['leafId']}: model {ctx.models} vs {model}")
    assert not bad, bad[:5]


@pytest.mark.parametrize(("name", "index"), _files())
def test_omp_tree_of_an_import_equals_ours(
    name: str, index: int, imported: dict[str, list[str]]
) -> None:
    want = ORACLES["ompTree"][f"{name}#{index}"]
    sm = SessionManager.open(imported[name][index], read_only=True)
    try:
        entries = sm.get_entries()
        assert sm.get_leaf_id() == want["leafId"]
        assert [
            {"id": e["id"], "parentId": e.get("parentId"), "type": e["type"]} for e in entries
        ] == want["entries"]
        roots = sm.get_tree()
        assert [r.entry["id"] for r in roots] == want["rootIds"]
        children: dict[str, list[str]] = {}
        stack = list(roots)
        while stack:
            node = stack.pop()
            if node.children:
                children[node.entry["id"]] = [c.entry["id"] for c in node.children]
            stack.extend(node.children)
        assert children == want["children"]
    finally:
        sm.close()


# ----------------------------------------------------------------------------- live peers


def _require_real_files() -> None:
    if not FOREIGN.is_dir():
        unavailable(f"real files {FOREIGN} are missing")


@pytest.mark.peers
@pytest.mark.slow  # runs the peers themselves (bun, node)
@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_live_omp_importer_agrees_with_the_committed_data(kind: str, tmp_path: Path) -> None:
    """The committed oracle data is still what oh-my-pi's importer says (needs the peers)."""
    _require_real_files()
    claude, codex, placed = fs.layout(FOREIGN, tmp_path)
    by_path = {str(p): n for n, p in placed.items()}
    out = peers.oracle("omp", "foreign", kind, str(claude if kind == "claude" else codex))
    seen = set()
    for line in out.splitlines():
        record = json.loads(line)
        name = by_path[record["info"]["path"]]
        if "error" in record:
            assert name not in ORACLES["omp"], (name, record["error"])
            continue
        assert fs.streams(record["entries"]) == ORACLES["omp"][name]["streams"], name
        assert fs.response_usage(record["entries"]) == ORACLES["omp"][name]["usage"], name
        seen.add(name)
    assert seen == {n for n in ORACLES["omp"] if n in (CLAUDE if kind == "claude" else CODEX)}


@pytest.mark.peers
@pytest.mark.slow  # runs the peers themselves (bun, node)
def test_live_peers_open_imports_as_the_committed_data_says(
    imported: dict[str, list[str]],
) -> None:
    """pi's context (every leaf) and oh-my-pi's tree of some imports, asked now, are
    what the committed data holds (needs the peers; the full set is regenerated by
    scripts/gen_foreign_oracles.py). Both pi releases are asked: the imports hold no
    entry that pi 1.6.0 reads differently, so it must say what 0.73.1 said."""
    _require_real_files()
    names = [
        "entireio__cli__de__22551397e1__0__full.jsonl",  # a /rewind branch
        "kvsankar__agent-history__tests__fixtures__real_sessions__codex__session-01.jsonl",
    ]
    for name in names:
        for index, path in enumerate(imported[name]):
            key = f"{name}#{index}"
            tree = peers.oracle("omp", "tree", path, "--flat")
            assert json.loads(tree) == ORACLES["ompTree"][key], key
            want = ORACLES["pi"][key]
            for release in peers.PI_VERSIONS:
                leaves = peers.peer_contexts(release, path)
                assert len(leaves) == len(want), (key, release)
                check_leaves(leaves, want)


def check_leaves(leaves: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """A pi release's contexts (`--all-leaves`) are the committed compacted ones."""
    for got, expected in zip(leaves, want, strict=True):
        messages = [fs.pi_view(m) for m in got["context"]["messages"]]
        text = "[" + ",".join(serialize_entry(m) for m in messages) + "]"
        assert got["leafId"] == expected["leafId"]
        assert hashlib.sha256(text.encode()).hexdigest() == expected["messagesSha256"]
        assert got["context"]["thinkingLevel"] == expected["thinkingLevel"]
        assert got["context"]["model"] == expected["model"]
