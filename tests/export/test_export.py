"""Exports: Markdown of a path, one self-contained HTML file of the tree, JSONL of a path."""

from __future__ import annotations

import base64
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from sessiontree import EntryNotFoundError, SessionManager
from sessiontree.export import export_html, export_jsonl, export_markdown
from sessiontree.format import message_text
from sessiontree.maintenance import check_session
from tests.conftest import real_file
from tests.helpers import assistant, user

LARGE_FIXTURE = "pi-v1-large-session.jsonl"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8).decode()


class Page(HTMLParser):
    """Collects what the tests look at: entries, their text, scripts, links."""

    def __init__(self) -> None:
        super().__init__()
        self.articles: list[dict[str, Any]] = []
        self.urls: list[str] = []
        """What the page would fetch: src, href (of anything but a link), action, ..."""
        self.links: list[str] = []
        self.scripts: list[dict[str, str | None]] = []
        self.script_text: list[str] = []
        self.metas: list[dict[str, str | None]] = []
        self.options: list[dict[str, str | None]] = []
        self._article: dict[str, Any] | None = None
        self._depth = 0
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "a" and attributes.get("href"):
            # A link a message's Markdown made: followed only when clicked, never fetched,
            # and with neither opener nor referrer (export/_render.py).
            self.links.append(str(attributes["href"]))
            assert attributes.get("rel") == "noopener noreferrer nofollow", attributes
            assert str(attributes["href"]).lower().startswith(("http:", "https:", "mailto:"))
        else:
            for name in ("src", "href", "action", "srcset", "poster"):
                if attributes.get(name):
                    self.urls.append(str(attributes[name]))
        if tag == "script":
            self.scripts.append(attributes)
            self._in_script = True
            self.script_text.append("")
        if tag == "meta":
            self.metas.append(attributes)
        if tag == "option":
            self.options.append(attributes)
        if tag == "article":
            self._article = {"attrs": attributes, "text": ""}
            self.articles.append(self._article)
            self._depth = 1
        elif self._article is not None and tag not in ("img", "br", "meta", "input"):
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False
        if self._article is not None:
            self._depth -= 1
            if self._depth == 0:
                self._article = None

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_text[-1] += data
        if self._article is not None:
            self._article["text"] += data


def parse(page: str) -> Page:
    parser = Page()
    parser.feed(page)
    parser.close()
    return parser


def branched(agent_dir: Path) -> tuple[SessionManager, dict[str, str]]:
    sm = SessionManager.create("/proj")
    ids: dict[str, str] = {}
    ids["q"] = sm.append_message(user("Why does CI fail?"))
    ids["a1"] = sm.append_message(
        assistant(
            "Looking at the log.",
            content=[
                {"type": "thinking", "thinking": "hmm, probably python"},
                {"type": "text", "text": "Looking at the log."},
                {
                    "type": "toolCall",
                    "id": "c1",
                    "name": "bash",
                    "arguments": {"command": "cat ci.log"},
                },
            ],
        )
    )
    ids["t1"] = sm.append_message(
        {
            "role": "toolResult",
            "toolCallId": "c1",
            "toolName": "bash",
            "content": [{"type": "text", "text": "python3.12: not found"}],
            "isError": False,
            "timestamp": 2,
        }
    )
    ids["img"] = sm.append_message(
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "Screenshot <b>attached</b> </script><script>alert(1)</script>",
                },
                {"type": "image", "data": PNG, "mimeType": "image/png"},
            ],
            "timestamp": 3,
        }
    )
    ids["a2"] = sm.append_message(assistant("Pin python 3.11. See https://example.com/docs"))
    sm.append_label_change(ids["a2"], "fix")
    sm.branch(ids["q"])
    ids["b1"] = sm.append_message(assistant("Other idea: install 3.12."))
    ids["b2"] = sm.append_message(user("Try that"))
    sm.flush()
    return sm, ids


def test_markdown_has_the_path_and_nothing_else(agent_dir: Path) -> None:
    sm, ids = branched(agent_dir)
    md = export_markdown(sm, ids["a2"])
    for text in (
        "Why does CI fail?",
        "Looking at the log.",
        "python3.12: not found",
        "Pin python 3.11",
    ):
        assert text in md
    assert "Other idea" not in md
    assert "```json" in md and '"command": "cat ci.log"' in md
    assert "> *Thinking*" in md and "`#fix`" in md
    assert "[image: image/png]" in md
    current = export_markdown(sm)  # default: the current leaf
    assert "Other idea: install 3.12." in current and "Pin python" not in current
    with pytest.raises(EntryNotFoundError):
        export_markdown(sm, "nope")


def test_markdown_fences_outlast_backticks_in_content(agent_dir: Path) -> None:
    sm = SessionManager.in_memory("/proj")
    sm.append_message(
        {
            "role": "toolResult",
            "toolCallId": "c",
            "toolName": "read",
            "content": [{"type": "text", "text": "````\ncode\n````"}],
            "isError": False,
            "timestamp": 1,
        }
    )
    assert "`````\n````\ncode\n````\n`````" in export_markdown(sm)


def test_html_is_self_contained_and_shows_the_path(agent_dir: Path) -> None:
    sm, ids = branched(agent_dir)
    page = export_html(sm, ids["a2"])
    doc = parse(page)
    # No network: no external URL in any src/href, and a CSP forbidding fetches.
    assert all(not u.lower().startswith(("http:", "https:", "//")) for u in doc.urls), doc.urls
    assert any(u.startswith("data:image/png;base64,") for u in doc.urls)
    csp = [m for m in doc.metas if m.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in str(csp[0]["content"])
    # Exactly our two scripts: user text never becomes markup.
    assert len(doc.scripts) == 2 and not any(s.get("src") for s in doc.scripts)
    assert "</script><script>alert(1)</script>" in "".join(a["text"] for a in doc.articles)
    # Every entry is in the page; the exported path is visible, the rest hidden.
    entries = sm.get_entries()
    assert len(doc.articles) == len(entries)
    visible = {a["attrs"]["data-id"] for a in doc.articles if "hidden" not in a["attrs"]}
    path_ids = {e["id"] for e in sm.get_branch(ids["a2"])}
    assert visible == path_ids
    by_id = {a["attrs"]["data-id"]: a["text"] for a in doc.articles}
    for entry in sm.get_branch(ids["a2"]):
        if entry["type"] == "message":
            for line in message_text(entry["message"], tools=False).split("\n"):
                if line and line != "[image]":
                    assert line in by_id[entry["id"]]
    assert "Other idea: install 3.12." in by_id[ids["b1"]]
    # The branch-switching data: every entry's parent, and the initial leaf.
    data = json.loads(
        next(
            t
            for t, s in zip(doc.script_text, doc.scripts, strict=True)
            if s.get("type") == "application/json"
        )
    )
    index = {a["attrs"]["data-id"]: a["attrs"]["data-n"] for a in doc.articles}
    assert data["leaf"] == int(index[ids["a2"]])
    assert data["parents"][index[ids["b1"]]] == int(index[ids["q"]])
    assert len(data["parents"]) == len(entries)
    # One choice per branch tip.
    label_entry = next(e for e in entries if e["type"] == "label")
    tips = {index[ids["b2"]], index[label_entry["id"]]}
    # The exported leaf is offered (and selected) too, though it is not a tip.
    assert {o.get("value") for o in doc.options} == tips | {index[ids["a2"]]}
    assert [o.get("value") for o in doc.options if "selected" in o] == [index[ids["a2"]]]


def test_html_escapes_data_for_the_json_island(agent_dir: Path) -> None:
    sm = SessionManager.in_memory("/proj")
    sm.append_message(user("</script><!-- & -->"))
    page = export_html(sm)
    island = page.split('id="session-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in island and ">" not in island


def test_html_of_an_empty_session(agent_dir: Path) -> None:
    sm = SessionManager.in_memory("/proj")
    doc = parse(export_html(sm))
    assert doc.articles == []


def test_jsonl_export_is_a_new_valid_session_of_the_path(agent_dir: Path, tmp_path: Path) -> None:
    sm, ids = branched(agent_dir)
    data = export_jsonl(sm, ids["a2"])
    out = tmp_path / "exported.jsonl"
    out.write_bytes(data)
    assert check_session(str(out)) == []
    lines = [json.loads(line) for line in data.decode().splitlines()]
    header = lines[0]
    assert header["type"] == "session" and header["version"] == 3
    assert header["id"] != sm.get_session_id() and len(header["id"]) == 16
    assert header["parentSession"] == sm.get_session_file()
    with SessionManager.open(str(out), read_only=True) as copy:
        path_ids = [e["id"] for e in sm.get_branch(ids["a2"]) if e["type"] != "label"]
        assert [e["id"] for e in copy.get_entries()][: len(path_ids)] == path_ids
        assert copy.get_label(ids["a2"]) == "fix"
        sm.branch(ids["a2"])
        expected = sm.build_session_context().messages
        copy.branch(ids["a2"])
        assert copy.build_session_context().messages == expected
    # Images are inlined: the file stands alone.
    assert "blob:sha256:" not in data.decode()


def test_jsonl_export_header_carries_the_name_in_the_reference_key_order(
    agent_dir: Path,
) -> None:
    sm = SessionManager.in_memory("/proj")
    sm.append_message({"role": "user", "content": "q", "timestamp": 1})
    assert sm.set_session_name("Named", "user")
    header = json.loads(export_jsonl(sm).decode().splitlines()[0])
    assert list(header) == [
        "type",
        "version",
        "id",
        "timestamp",
        "cwd",
        "title",
        "titleSource",
        "parentSession",
    ]
    assert (header["title"], header["titleSource"], header["cwd"]) == ("Named", "user", "/proj")
    assert header["parentSession"] == sm.get_session_id()  # in memory: no file to name


def test_exports_of_the_large_v1_fixture(tmp_path: Path) -> None:
    fixture = real_file(LARGE_FIXTURE)
    copy = tmp_path / "big.jsonl"
    shutil.copyfile(fixture, copy)
    with SessionManager.open(str(copy), read_only=True) as sm:
        last = sm.get_branch()[-1]
        md = export_markdown(sm)
        page = export_html(sm)
        data = export_jsonl(sm)
    assert copy.read_bytes() == fixture.read_bytes()
    text = message_text(last["message"], tools=False).split("\n")[0]
    assert text[:40] in md
    doc = parse(page)
    assert len(doc.articles) == 1018
    assert all(not u.startswith(("http:", "https:")) for u in doc.urls)
    assert len(data.splitlines()) == 1019
