"""A message's Markdown rendered: headings, lists, emphasis, tables and code
coloured on the server through markdown-it-py and Pygments; raw HTML and dangerous links
stay text, in the export and in the web app, whatever a message holds."""

from __future__ import annotations

import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import SessionManager
from sessiontree.export import export_html, render_markdown
from tests.conftest import real_file
from tests.helpers import assistant, user

# What markdown-it-py (CommonMark, tables, strikethrough) and Pygments write, and nothing else.
TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote",
    "em", "strong", "s", "code", "pre", "span", "a",
    "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
ATTRIBUTES = {
    "a": {"href", "rel"},
    "pre": {"class"},
    "code": {"class"},
    "span": {"class"},
    "ol": {"start"},
    "th": {"style"},
    "td": {"style"},
}


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def elements(html: str) -> Elements:
    parser = Elements()
    parser.feed(html)
    parser.close()
    return parser


def check_safe(html: str) -> Elements:
    found = elements(html)
    for tag, attrs in found.tags:
        assert tag in TAGS, (tag, html)
        assert set(attrs) <= ATTRIBUTES.get(tag, set()), (tag, attrs, html)
        if tag == "a":
            href = str(attrs["href"])
            assert href.lower().startswith(("http:", "https:", "mailto:")), html
            assert attrs["rel"] == "noopener noreferrer nofollow"
        if "style" in attrs:
            assert attrs["style"] in ("text-align:left", "text-align:right", "text-align:center")
    return found


MARKDOWN = """## Why CI fails

The runner has **Python 3.11**, the project *wants* `3.12`:

| where | version |
|-------|--------:|
| CI    | 3.11    |
| here  | 3.12    |

```python
def pin(version: str) -> str:
    return f"python{version}"  # <b>not bold</b>
```

1. pin it
2. ~~hope~~ check

> quoted [docs](https://docs.python.org/3/) and <https://example.org/a?b=1&c=2>
"""

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](java\tscript:alert(1))",
    "[click](&#106;avascript:alert(1))",
    "[click](%6Aavascript:alert(1))",
    "[click]( javascript:alert(1))",
    "<javascript:alert(1)>",
    "[x](vbscript:msgbox)",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](file:///etc/passwd)",
    "[x](//evil.example/)",
    "[x](/link)",
    '![x](https://evil.example/pixel.png "t")',
    "![x](javascript:alert(1))",
    '[x](https://ok.example/ "title" onclick="alert(1)")',
    "```html\n<script>alert(1)</script>\n```",
    '```"><script>alert(1)</script>\nx\n```',
    "<style>body{display:none}</style>",
    "<!-- comment --> <?php ?> <![CDATA[x]]>",
    "<iframe src=//evil></iframe>",
    "[a]: javascript:alert(1)\n\n[a]",
    "`<b>` <b>bold?</b>",
    "x" * 10 + "<svg/onload=alert(1)>",
]


def test_markdown_renders_as_elements() -> None:
    html = str(render_markdown(MARKDOWN))
    found = check_safe(html)
    tags = [t for t, _ in found.tags]
    for tag in ("h2", "strong", "em", "code", "table", "th", "td", "pre", "ol", "s", "blockquote"):
        assert tag in tags, tag
    # Code is coloured on the server: Pygments' token classes inside the block.
    assert '<pre class="hl"><code class="language-python"><span class="k">def</span>' in html
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html
    links = [a["href"] for t, a in found.tags if t == "a"]
    assert links == ["https://docs.python.org/3/", "https://example.org/a?b=1&c=2"]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_markdown_stays_text(text: str) -> None:
    html = str(render_markdown(text))
    found = check_safe(html)
    assert "<script" not in html and "<img" not in html and "<iframe" not in html
    assert not any(t in ("script", "img", "iframe", "style", "svg") for t, _ in found.tags)
    # What was written is still there to read (as text, or as a safe link's label).
    if text.startswith("<script>"):
        assert "<script>alert(1)</script>" in "".join(found.text)


@given(
    st.text(
        alphabet=st.sampled_from(list("<>[]()!`*_#|-:/\\\"'=& \n\tjavascriptonerorhttps.1")),
        max_size=80,
    )
)
@settings(max_examples=300, deadline=None)
def test_any_text_renders_safely(text: str) -> None:
    check_safe(str(render_markdown(text)))


def test_the_export_renders_markdown_and_keeps_scripts_as_text(tmp_path: Path) -> None:
    with SessionManager.create("/p", str(tmp_path)) as sm:
        sm.append_message(user("Explain, please.\n\n<script>alert('user')</script>"))
        sm.append_message(assistant(MARKDOWN + "\n\n<script>alert('assistant')</script>"))
        page = export_html(sm)
    found = elements(page)
    tags = [t for t, _ in found.tags]
    assert {"h2", "table", "code"} <= set(tags)
    # Our two scripts only (the data island and export.js); the messages' are text.
    assert tags.count("script") == 2
    assert "<script>alert('user')</script>" in "".join(found.text)
    assert "<script>alert('assistant')</script>" in "".join(found.text)
    assert "pre.hl .k {" in page  # the colours travel with the page


def test_every_message_of_a_real_session_renders_safely(tmp_path: Path) -> None:
    """The large pi session (real messages: code, tables, tool output): each article's
    rendered Markdown holds only the elements markdown-it-py and Pygments write."""
    copy = tmp_path / "big.jsonl"
    shutil.copyfile(real_file("pi-v1-large-session.jsonl"), copy)
    with SessionManager.open(str(copy), read_only=True) as sm:
        page = export_html(sm)

    class Articles(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.depth = 0
            self.md_tags: list[tuple[str, dict[str, Any]]] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            classes = (dict(attrs).get("class") or "").split()
            if self.depth:
                self.depth += tag not in ("br", "hr")  # no end tag
                self.md_tags.append((tag, dict(attrs)))
            elif tag == "div" and "md" in classes:
                self.depth = 1

        def handle_endtag(self, tag: str) -> None:
            if self.depth:
                self.depth -= 1

    articles = Articles()
    articles.feed(page)
    assert len(articles.md_tags) > 100  # rendered, not one text run
    for tag, attrs in articles.md_tags:
        if tag == "button":  # the "more" button of a long text
            continue
        assert tag in TAGS, tag
        assert set(attrs) <= ATTRIBUTES.get(tag, set()), (tag, attrs)


def test_a_fence_that_pygments_lexes_in_quadratic_time_is_shown_plain() -> None:
    """A message chooses the language and the code: AutoHotkey's lexer takes quadratic
    time on lines of blanks (4,000 characters: 40 s, a page of them: hours; C's lexer
    too, more slowly). The block's lexing has a budget; past it the code is plain text."""
    code = " \n" * 3_000
    html = str(render_markdown("```autohotkey\n" + code + "```"))
    assert 'class="hl"' not in html
    assert html == '<pre><code class="language-autohotkey">' + code + "</code></pre>\n"
    # Ordinary code in the same language is still coloured.
    assert 'class="hl"' in str(render_markdown("```autohotkey\nMsgBox, hello\n```"))
