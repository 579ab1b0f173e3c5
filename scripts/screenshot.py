"""Regenerate the pictures of `sessiontree serve`: the README's (the demo session's page),
or every page at a laptop's width and a phone's.

    .venv/bin/python scripts/screenshot.py [OUT.png]     # default: docs/serve-session.png
    .venv/bin/python scripts/screenshot.py --pages [DIR] # default: docs/screenshots/
        projects, sessions, session, search, usage (and the exported page) at 1280
        and 400 px: <page>-<width>.png

Builds the demo session (`sessiontree demo`) in a temporary home's ~/.xcsh/agent,
serves it on loopback, and has Chromium (Debian's package, as the tests use)
photograph the session page on its main branch.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("SESSIONTREE_CHROMIUM", "/usr/bin/chromium")
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]


WIDTHS = (1280, 400)


def main() -> None:
    pages = len(sys.argv) > 1 and sys.argv[1] == "--pages"
    if pages:
        out = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs" / "screenshots"
    else:
        out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "serve-session.png"
    with tempfile.TemporaryDirectory(prefix="sessiontree-shot-") as tmp:
        home = Path(tmp) / "home"
        agent = home / ".xcsh" / "agent"
        project = home / "src" / "app"
        project.mkdir(parents=True)
        # Paths show as ~/...; the resume commands are those of the default agent dir.
        os.environ["HOME"] = str(home)
        os.environ["PI_CODING_AGENT_DIR"] = str(agent)

        from playwright.sync_api import sync_playwright

        from sessiontree.cli.demo import build_demo_session
        from sessiontree.storage import FileSessionStorage
        from sessiontree.web.data import handle_of
        from sessiontree.web.server import BackgroundServer

        with build_demo_session(str(agent), str(project)) as sm:
            path = str(sm.get_session_file())
            leaf = next(
                e["id"]
                for e in sm.get_entries()
                if "Pinned python3.11" in str(e.get("message", {}).get("content", ""))
            )
        with BackgroundServer(FileSessionStorage(), str(agent)) as server, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            if pages:
                _every_page(browser, server, handle_of("s", path), leaf, out)
                browser.close()
                return
            context = browser.new_context(
                viewport={"width": 1000, "height": 600}, color_scheme="light"
            )
            page = context.new_page()
            page.goto(server.url)
            page.goto(f"{server.base}/s/{handle_of('s', path)}?leaf={leaf}")
            page.wait_for_function("() => document.getElementById('live').textContent === 'live'")
            page.wait_for_function("() => [...document.images].every(i => i.complete)")
            page.evaluate("window.scrollTo(0, 0)")
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out))
            browser.close()
    print(f"Wrote {out} ({out.stat().st_size:,} bytes)")


def _every_page(browser: Any, server: Any, handle: str, leaf: str, out: Path) -> None:
    """Each page at each width into `out` (the usage page once its numbers are in)."""
    out.mkdir(parents=True, exist_ok=True)
    urls = {
        "projects": "/",
        "sessions": "/sessions",
        "session": f"/s/{handle}?leaf={leaf}",
        "search": "/search?q=python",
        "usage": "/usage",
        "export": f"/s/{handle}/export/html?leaf={leaf}",
    }
    for width in WIDTHS:
        context = browser.new_context(
            viewport={"width": width, "height": 900}, color_scheme="light"
        )
        page = context.new_page()
        page.goto(server.new_link())  # a link works once: one per browser
        for name, url in urls.items():
            if name == "export":  # a download: shown from a file, as a reader opens it
                saved = out / ".export.html"
                saved.write_bytes(page.request.get(server.base + url).body())
                page.goto(saved.as_uri())
            else:
                page.goto(server.base + url)
            for _ in range(50):
                if name != "usage" or page.locator("#usage-summary").count():
                    break
                time.sleep(0.2)
                page.reload()
            if name == "session":
                page.wait_for_function(
                    "() => document.getElementById('live').textContent === 'live'"
                )
            page.wait_for_function("() => [...document.images].every(i => i.complete)")
            page.evaluate("window.scrollTo(0, 0)")
            target = out / f"{name}-{width}.png"
            page.screenshot(path=str(target))
            print(f"Wrote {target} ({target.stat().st_size:,} bytes)")
        (out / ".export.html").unlink(missing_ok=True)
        context.close()


if __name__ == "__main__":
    main()
