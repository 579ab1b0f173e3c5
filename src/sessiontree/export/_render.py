"""A message's Markdown as HTML, for the exported page and `sessiontree serve`.

markdown-it-py (CommonMark, with tables and strikethrough) turns the text into HTML;
Pygments colours fenced code on the server (no script on the page does it). Raw
HTML in a message is never markup: markdown-it-py's `html` option is off, so `<script>`
or `<img onerror=...>` come out as the text they are. Links keep only the schemes a
person can follow safely (http, https, mailto); anything else (`javascript:`, `data:`,
`vbscript:`, `file:`, an address relative to the page) is left as text. Images
are never fetched: `![alt](url)` becomes a link to the address, so a message cannot
make the page load anything.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup
from pygments import format as format_tokens
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

__all__ = ["HIGHLIGHT_CSS_CLASS", "highlight_css", "render_markdown"]

HIGHLIGHT_CSS_CLASS = "hl"
"""The class of a highlighted code block's `<pre>`, which `highlight_css` styles."""

_HIGHLIGHT_MAX_CHARS = 100_000
"""Longer code blocks are shown plain (highlighting them would hold up the page)."""
_HIGHLIGHT_SECONDS = 0.1
_HIGHLIGHT_SECONDS_PER_CHAR = 50e-6
"""A block's lexing may take this long (0.1 s, and 50 µs a character: several times what
Pygments needs for ordinary code), else the block is shown plain. Some lexers take
quadratic time on some text (the C lexer on lines of blanks, AutoHotkey's worse:
4,000 characters took 40 s), and a message chooses both the language and the text."""
_SAFE_SCHEME = re.compile(r"^(https?|mailto):", re.IGNORECASE)
_LANGUAGE = re.compile(r"^[\w+#.\-]{1,40}$")


def _safe_link(url: str) -> bool:
    """http(s) and mailto addresses only. Not a relative one: on `sessiontree serve` it
    would lead to the server's own pages, which a message has no business choosing."""
    # Browsers drop tabs and newlines inside a scheme ("java\tscript:"), and control
    # characters and spaces before it: look at the address as they will.
    seen = re.sub(r"[\x00-\x20\x7f]", "", url)
    return _SAFE_SCHEME.match(seen) is not None


def _highlight(code: str, lang: str, _attrs: str) -> str:
    """Pygments' HTML for a fenced block in a language it knows; "" lets markdown-it
    escape the code as plain text."""
    name = lang.strip().split(maxsplit=1)[0] if lang.strip() else ""
    if not name or not _LANGUAGE.match(name) or len(code) > _HIGHLIGHT_MAX_CHARS:
        return ""
    try:
        lexer = get_lexer_by_name(name, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return ""
    deadline = time.monotonic() + _HIGHLIGHT_SECONDS + len(code) * _HIGHLIGHT_SECONDS_PER_CHAR
    tokens = []
    for token in lexer.get_tokens(code):  # one regular expression match at a time
        tokens.append(token)
        if time.monotonic() > deadline:
            return ""
    body = format_tokens(tokens, HtmlFormatter(nowrap=True))
    css_lang = escapeHtml(name)
    code_open = f'<code class="language-{css_lang}">'
    return f'<pre class="{HIGHLIGHT_CSS_CLASS}">{code_open}{body}</code></pre>\n'


def _image_as_link(
    self: Any, tokens: Any, idx: int, options: Any, env: Any
) -> str:  # markdown-it's renderer signature
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = self.renderInlineAsText(token.children or [], options, env) or "image"
    text = escapeHtml(f"[image: {alt}]")
    if not src or not _safe_link(src):
        return text
    return f'<a href="{escapeHtml(src)}" rel="noopener noreferrer nofollow">{text}</a>'


def _link_open(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    return str(self.renderToken(tokens, idx, options, env))


@functools.cache
def _parser() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark",
        {"html": False, "linkify": False, "typographer": False, "highlight": _highlight},
    ).enable(["table", "strikethrough"])
    md.validateLink = _safe_link  # type: ignore[method-assign]
    md.add_render_rule("image", _image_as_link)
    md.add_render_rule("link_open", _link_open)
    return md


def render_markdown(text: str) -> Markup:
    """`text` (a message's Markdown) as safe HTML: every string from the session is
    escaped or rendered by markdown-it-py, never passed through as markup."""
    return Markup(_parser().render(text))


@functools.cache
def highlight_css() -> str:
    """The colours of highlighted code: Pygments' light style, and a dark one under
    `prefers-color-scheme: dark`."""
    prefix = f"pre.{HIGHLIGHT_CSS_CLASS} ."

    def tokens(style: str) -> str:
        # Only the token colours: the block's own background comes from session.css.
        formatter: HtmlFormatter[str] = HtmlFormatter(style=style)
        defs = str(formatter.get_style_defs(f"pre.{HIGHLIGHT_CSS_CLASS}"))  # type: ignore[no-untyped-call]
        return "\n".join(
            line
            for line in defs.splitlines()
            if line.startswith(prefix) and not line.startswith(prefix + "hll")
        )

    return (
        tokens("default")
        + "\n@media (prefers-color-scheme: dark) {\n"
        + tokens("monokai")
        + "\n}\n"
    )
