"""When an HTML export is too big to open well (`html_size_warning`).

The HTML export is one page holding every entry of every branch (the leaf picker
switches between them without a server), so the page is about as big as the
session's file: measured with benchmarks/data.py's sessions, a 10 MB session gave a
10.2 MB page that headless Chromium loaded in 2.5 s, a 50 MB one a 50.9 MB page
loaded in 17.6 s. Paging it would split the tree the page's branch switching needs,
so a session from `HTML_WARN_BYTES` on is exported whole, with a warning that says
what opens it better.
"""

from __future__ import annotations

from sessiontree.storage import SessionStorage

__all__ = ["HTML_WARN_BYTES", "html_size_warning"]

HTML_WARN_BYTES = 50_000_000
"""A session's stored size from which its HTML export is warned about (50 MB: a
page a browser takes about 20 s to open, and more memory than most tabs)."""


def html_size_warning(storage: SessionStorage, path: str) -> str | None:
    """What to say before exporting the session at `path` as HTML, when it is
    `HTML_WARN_BYTES` or bigger (None otherwise, or when its size cannot be read)."""
    try:
        size = storage.stat(path).size
    except (OSError, ValueError):
        return None
    if size < HTML_WARN_BYTES:
        return None
    return (
        f"this session is {size / 1e6:,.1f} MB ({size:,} bytes); its HTML page holds every "
        "branch, about as many bytes, which a browser opens slowly or not at all; "
        "`export -f md` writes one path as Markdown (--leaf ID chooses the branch), and "
        "`sessiontree serve` shows a session of any size a part at a time"
    )
