"""Exports of a session: Markdown and JSONL of a path, one self-contained HTML page
(Jinja2, loaded only for HTML)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sessiontree.export._jsonl import export_jsonl
from sessiontree.export._markdown import export_markdown
from sessiontree.export._size import HTML_WARN_BYTES, html_size_warning

if TYPE_CHECKING:
    from sessiontree.export._html import (
        HtmlEntry,
        NavItem,
        asset_text,
        entry_images,
        export_html,
        html_entry,
        html_environment,
        is_raster_image,
        json_island,
        leaf_choice_text,
        nav_items,
        nav_tokens,
    )
    from sessiontree.export._render import render_markdown

__all__ = [
    "HTML_WARN_BYTES",
    "HtmlEntry",
    "NavItem",
    "asset_text",
    "entry_images",
    "export_html",
    "export_jsonl",
    "export_markdown",
    "html_entry",
    "html_environment",
    "html_size_warning",
    "is_raster_image",
    "json_island",
    "leaf_choice_text",
    "nav_items",
    "nav_tokens",
    "render_markdown",
]

_LAZY = {
    "HtmlEntry": "_html",
    "NavItem": "_html",
    "asset_text": "_html",
    "entry_images": "_html",
    "export_html": "_html",
    "html_entry": "_html",
    "html_environment": "_html",
    "is_raster_image": "_html",
    "json_island": "_html",
    "leaf_choice_text": "_html",
    "nav_items": "_html",
    "nav_tokens": "_html",
    "render_markdown": "_render",
}


_HTML_PACKAGES = frozenset({"jinja2", "markupsafe", "markdown_it", "mdurl", "pygments"})
"""What the HTML half draws with: the `cli` extra's, not the library's."""


def __getattr__(name: str) -> Any:
    """Imported on first use: HTML needs Jinja2, Markdown-it and Pygments (the `cli`
    extra)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    try:
        loaded = importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name not in _HTML_PACKAGES:
            raise
        raise ModuleNotFoundError(
            f"{name} needs {exc.name}, of the cli extra: pip install 'sessiontree[cli]'",
            name=exc.name,
        ) from None
    value = getattr(loaded, name)
    globals()[name] = value
    return value
