"""Write direction against the live pi releases: both releases users run (pi 0.73.1 and
1.6.0, `peers.PI_VERSIONS`) read the files sessiontree writes with the context sessiontree
builds.

sessiontree runs every committed pi- and pi16-flavour op script (`tests/data/peers/ops`,
through `tests/opscript.py`) into pi's store (`.pi/agent`, where it writes as pi does:
images inline, nothing cut). For every file the run leaves, each release's `context FILE
--all-leaves` must equal sessiontree's context of the same file on every leaf: the
messages (the exact `JSON.stringify` bytes, after dropping what pi never copies into a
context message: a custom message's `attribution`, a compaction summary's
`shortSummary`) and the thinking level. The model too, except on the leaves where pi
reports `{}`: sessiontree writes `model_change` as `{"model": "provider/id"}` (API.md),
which pi cannot read; those leaves are counted, not compared.

Where a release and sessiontree disagree today, the case is an expected failure (strict:
it flips when the fix lands) naming the rule it waits for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sessiontree import SessionManager, serialize_entry
from tests import peers
from tests.conftest import FIXTURES
from tests.opscript import load_ops, run_script

DATA = FIXTURES / "peers"
MANIFEST = json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))

KNOWN_DIFFERENCES = {
    ("s21-pi16", "pi"): "decided: pi 0.73.1 reads pi 1.6's entries (null content, system "
    "messages, a compaction's systemMessage) differently from pi 1.6.0; sessiontree follows "
    "1.6.0 (test_peer_interop.FOLLOWS_PI16)",
}


def _cases() -> list[Any]:
    out = []
    for name, script in MANIFEST["scripts"].items():
        if script["flavour"] not in ("pi", "pi16"):
            continue
        for release in peers.PI_VERSIONS:
            reason = KNOWN_DIFFERENCES.get((name, release))
            marks = (
                [pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)]
                if reason
                else []
            )
            out.append(pytest.param(name, release, id=f"{name}/read-by-{release}", marks=marks))
    return out


def pi_view(message: dict[str, Any]) -> dict[str, Any]:
    """A context message as pi builds it from the same entry (no `attribution` on custom
    messages, no `shortSummary` on compaction summaries)."""
    drop = {"custom": "attribution", "compactionSummary": "shortSummary"}.get(message.get("role"))
    if drop is None or drop not in message:
        return message
    return {k: v for k, v in message.items() if k != drop}


def stringify(messages: list[Any]) -> str:
    """`JSON.stringify(messages)`: an array of objects, each as `serialize_entry` writes it."""
    return "[" + ",".join(serialize_entry(m) for m in messages) + "]"


@pytest.mark.peers
@pytest.mark.parametrize(("script", "release"), _cases())
def test_pi_reads_what_sessiontree_wrote_with_the_same_context(
    script: str, release: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    peers.require(release)
    agent = tmp_path / "home" / ".pi" / "agent"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    doc = load_ops(DATA / MANIFEST["scripts"][script]["file"])
    result = run_script(doc, agent / "sessions" / "--proj--", cwd="/proj")
    files = [f for f in dict.fromkeys(result.session_files) if f is not None and Path(f).exists()]
    assert files

    bad = []
    compared = unreadable_models = 0
    for path in files:
        theirs = peers.peer_contexts(release, path)
        with SessionManager.open(path, read_only=True) as sm:
            assert [w["leafId"] for w in theirs] == [e["id"] for e in sm.get_entries()]
            for want in theirs:
                sm.branch(want["leafId"])
                ctx = sm.build_session_context()
                problems = []
                got_text = stringify([pi_view(m) for m in ctx.messages])
                if got_text != stringify(want["context"]["messages"]):
                    problems.append(
                        f"messages ({len(ctx.messages)} vs {len(want['context']['messages'])})"
                    )
                if ctx.thinking_level != want["context"]["thinkingLevel"]:
                    problems.append(
                        f"thinking {ctx.thinking_level!r} vs {want['context']['thinkingLevel']!r}"
                    )
                model = want["context"]["model"]
                if model == {}:
                    unreadable_models += 1
                else:
                    expected = None if model is None else f"{model['provider']}/{model['modelId']}"
                    if ctx.models.get("default") != expected:
                        problems.append(f"models {ctx.models!r} vs {expected!r}")
                compared += 1
                if problems:
                    bad.append(f"{Path(path).name} leaf {want['leafId']}: {'; '.join(problems)}")
    assert compared > unreadable_models
    assert not bad, f"{len(bad)}/{compared} leaves differ from {release}'s, e.g. {bad[:3]}"
