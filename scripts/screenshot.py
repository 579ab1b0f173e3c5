"""Regenerate the README's picture of `sessiontree serve`: the demo session's page.

    .venv/bin/python scripts/screenshot.py [OUT.png]     # default: docs/serve-session.png

Builds the demo session (`sessiontree demo`) in a temporary home's ~/.xcsh/agent,
serves it on loopback, and has Chromium (Debian's package, as the tests use)
photograph the session page on its main branch.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("SESSIONTREE_CHROMIUM", "/usr/bin/chromium")
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]


def main() -> None:
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


if __name__ == "__main__":
    main()
