"""`sessiontree serve` in a real browser: Debian's Chromium driven by Playwright.

A person's walk through the app: the printed link, projects, sessions, branches,
search, usage, a live append; screenshots checked against the session's content;
the hostile session runs no script; no token, no page.
"""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontree import SessionManager
from sessiontree.format import message_text
from sessiontree.storage import FileSessionStorage
from tests.conftest import REAL_FILES, require_module, unavailable
from tests.helpers import assistant, user
from tests.web_support import (
    AGENT_VARIABLES,
    BROWSER_ARGS,
    CHROMIUM,
    CLAUDE_FIXTURE,
    CLAUDE_ID,
    HOSTILE,
    LONG_TEXT_CHARS,
    WebStore,
    build_home,
    build_store,
    decode_png,
)

# A real Chromium: its start and its pages cost more CPU than the rest of the web tests
# together (tests/web/test_app.py checks every route without a browser, in the quick run too).
pytestmark = pytest.mark.slow

sync_api = require_module("playwright.sync_api")
require_module("starlette")
require_module("uvicorn")

from sessiontree.web.data import handle_of  # noqa: E402
from sessiontree.web.server import BackgroundServer  # noqa: E402
from sessiontree.web.sessions import PATH_CHUNK  # noqa: E402

# Records every Content-Security-Policy violation and alert, before any page script runs.
WATCH = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', e => window.__violations.push(e.violatedDirective));
window.alert = () => { window.__alerted = true; };
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> WebStore:
    agent = tmp_path_factory.mktemp("browser") / "agent"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PI_CODING_AGENT_DIR", str(agent))
        return build_store(agent)


@pytest.fixture(scope="module")
def server(store: WebStore) -> Iterator[BackgroundServer]:
    with BackgroundServer(FileSessionStorage(), str(store.agent), poll_seconds=0.05) as s:
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        unavailable(f"{CHROMIUM} is missing (apt-get install chromium; scripts/test does)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield b
        b.close()


@pytest.fixture()
def page(browser: Any, server: BackgroundServer) -> Iterator[Any]:
    """A fresh browser profile that followed the printed link (so it has the cookie)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(WATCH)
    context.set_default_timeout(10_000)
    p = context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    p.goto(server.new_link())
    p.wait_for_url(server.base + "/")
    yield p
    assert errors == []
    assert p.evaluate("window.__violations") == []
    context.close()


def shown_ids(page: Any) -> list[str]:
    return list(
        page.eval_on_selector_all("#entries article.entry", "as => as.map(a => a.dataset.id)")
    )


def path_ids(path: str, leaf: str | None = None) -> list[str]:
    with SessionManager.open(path, read_only=True) as sm:
        return [e["id"] for e in sm.get_branch(leaf)]


def test_the_printed_link_then_projects_sessions_and_branches(
    page: Any, server: BackgroundServer, store: WebStore
) -> None:
    assert page.url == server.base + "/"  # the token left the address bar
    assert page.locator("#projects").get_by_text("/work/app").is_visible()
    page.locator("#projects").get_by_role("link", name="/work/app").click()
    page.get_by_role("link", name="CI fails on Python version").click()
    page.wait_for_url(f"**/s/{handle_of('s', store.demo)}")
    assert shown_ids(page) == path_ids(store.demo)
    assert page.locator("#live").inner_text() == "live"
    # Switch branches in the tree: no reload (a marker survives), the URL follows.
    page.evaluate("window.__marker = 'still here'")
    page.locator("#tree button", has_text="assistant: Pinned python3.11").click()
    page.wait_for_url(f"**?leaf={store.ids['a3']}")
    page.locator("#entries").get_by_text("Pinned python3.11 in .ci/run.").wait_for()
    assert shown_ids(page) == path_ids(store.demo, store.ids["a3"])
    assert page.evaluate("window.__marker") == "still here"
    assert page.locator("#path-info").inner_text() == f"{len(shown_ids(page))} entries on this path"
    selected = page.locator("#tree button.selected")
    assert selected.get_attribute("data-id") == store.ids["a3"]
    # The leaf picker: back to the other branch.
    page.select_option("#leaf-picker", store.ids["b1"])
    page.locator("#entries").get_by_text("Alternatively we could install 3.12").wait_for()
    assert shown_ids(page) == path_ids(store.demo, store.ids["b1"])
    assert page.evaluate("window.__marker") == "still here"
    # Thinking is folded until opened.
    page.select_option("#leaf-picker", store.ids["a3"])
    thought = page.get_by_text("Probably the Python version.")
    thought.wait_for(state="attached")
    assert not thought.is_visible()
    page.locator("details.thinking summary").click()
    assert thought.is_visible()


def test_screenshot_shows_the_session_as_it_is(
    page: Any, server: BackgroundServer, store: WebStore, tmp_path: Path
) -> None:
    page.goto(f"{server.base}/s/{handle_of('s', store.demo)}?leaf={store.ids['img']}")
    image = page.locator("#entries img")
    image.wait_for()
    page.wait_for_function("() => document.querySelector('#entries img').complete")
    shot = page.screenshot(path=str(tmp_path / "session.png"))
    width, height, rows = decode_png(shot)
    assert (width, height) == (1280, 900)
    # The image is drawn where the page puts it: its left half is the red of the PNG.
    box = image.bounding_box()
    assert box is not None and box["width"] == 96 and box["height"] == 64
    x, y = int(box["x"] + box["width"] / 4), int(box["y"] + box["height"] / 2)
    channels = len(rows[0]) // width
    pixel = tuple(rows[y][x * channels : x * channels + 3])
    assert all(abs(a - b) <= 3 for a, b in zip(pixel, (220, 38, 38), strict=True)), pixel
    # What is on screen is the session's path, entry by entry, in order.
    with SessionManager.open(store.demo, read_only=True) as sm:
        path = sm.get_branch(store.ids["img"])
    visible = []
    for entry in path:
        article = page.locator(f'#entries article[data-id="{entry["id"]}"]')
        box = article.bounding_box()
        assert box is not None and box["y"] < height and box["y"] + box["height"] > 0
        visible.append(box["y"])
        if entry["type"] == "message":
            text = message_text(entry["message"], tools=False).replace("[image]", "").strip()
            assert text.split("\n")[0] in article.inner_text()
    assert visible == sorted(visible)
    # The clip of one entry is its own pixels: the user's message on its colour.
    user_box = page.locator(f'#entries article[data-id="{store.ids["q"]}"]').bounding_box()
    assert user_box is not None
    corner = rows[int(user_box["y"] + 4)][int(user_box["x"] + 8) * channels :][:3]
    assert tuple(corner) == (0xE8, 0xF0, 0xFE)  # --user in the light scheme


def test_a_live_append_arrives(page: Any, server: BackgroundServer, store: WebStore) -> None:
    page.goto(f"{server.base}/s/{handle_of('s', store.live)}")
    page.wait_for_function("() => document.getElementById('live').textContent === 'live'")
    before = shown_ids(page)
    with SessionManager.open(store.live) as sm:
        new = sm.append_message(user("appended while the page was open"))
        sm.flush()
        page.locator("#entries").get_by_text("appended while the page was open").wait_for()
        answer = sm.append_message(assistant("and the answer too"))
        sm.flush()
        page.locator("#entries").get_by_text("and the answer too").wait_for()
    assert shown_ids(page) == [*before, new, answer]
    assert page.locator("#leaf-picker").input_value() == answer
    assert page.locator("#path-info").inner_text() == f"{len(before) + 2} entries on this path"
    # A rewrite of the file ends the live view and says so.
    data = Path(store.live).read_bytes()
    Path(store.live).write_bytes(data.replace(b"and the answer too", b"and the answer 2!"))
    page.locator("#notice").get_by_text("rewritten").wait_for()
    assert page.locator("#live").inner_text() == "not live"


def test_search_from_the_header(page: Any, store: WebStore) -> None:
    page.get_by_role("searchbox", name="Search every session").fill("homepage")
    page.keyboard.press("Enter")
    page.wait_for_url("**/search?q=homepage")
    assert page.locator("section.hits").count() == 2  # the session and its copy
    assert page.locator("mark").first.inner_text().lower() == "homepage"
    page.locator("section.hits a", has_text="Why is the").first.click()
    page.locator("#entries").get_by_text("Why is the homepage slow?").wait_for()


def test_the_usage_page(page: Any, server: BackgroundServer) -> None:
    page.goto(server.base + "/usage")
    bars = page.locator("#chart-day-cost rect")
    assert bars.count() >= 1
    assert page.locator("#chart-model-cost svg").is_visible()
    models = page.locator("#table-models").inner_text()
    assert "anthropic/claude-sonnet-4-5" in models and "openai/gpt-5" in models
    title = bars.first.locator("title").text_content()
    assert title is not None and " · cost: $" in title


def test_the_hostile_session_runs_no_script(
    page: Any, server: BackgroundServer, store: WebStore
) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    for url in (f"/s/{handle_of('s', store.hostile)}", "/sessions", "/search?q=pwned", "/usage"):
        page.goto(server.base + url)
        page.wait_for_load_state("load")
        for summary in page.locator("details summary").all():
            summary.click()
        assert page.evaluate("window.pwned") is None, url
        assert page.evaluate("window.__alerted") is None, url
        assert page.locator('img[src="x"]').count() == 0, url
        assert page.locator("script").count() == 1, url
    page.goto(f"{server.base}/s/{handle_of('s', store.hostile)}")
    assert page.title() == f"{HOSTILE} · sessiontree"
    assert page.locator("#entries").get_by_text(HOSTILE, exact=True).first.is_visible()
    assert page.locator("#entries").get_by_text("the hostile session ends here").is_visible()
    assert dialogs == []


def test_without_the_token_the_browser_gets_nothing(browser: Any, server: BackgroundServer) -> None:
    context = browser.new_context()
    try:
        p = context.new_page()
        response = p.goto(server.base + "/sessions")
        assert response is not None and response.status == 403
        assert "one of its links" in p.content()
        assert "CI fails" not in p.content()
    finally:
        context.close()


def test_copy_earlier_entries_and_whole_texts(
    page: Any, browser: Any, server: BackgroundServer, store: WebStore
) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base)
    page.goto(f"{server.base}/s/{handle_of('s', store.long)}")
    # The end of the path is on screen; earlier entries come when asked.
    assert len(shown_ids(page)) == PATH_CHUNK
    last = page.locator("#entries article.entry").last
    assert "the last answer" in last.inner_text() and last.is_visible()
    assert page.evaluate(
        "() => { const r = document.querySelector('#entries article:last-child')"
        ".getBoundingClientRect(); return r.top < innerHeight && r.bottom > 0; }"
    )
    copy = page.locator("button.copy").first
    command = copy.get_attribute("data-copy")
    copy.click()
    page.get_by_role("button", name="Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == command
    page.locator("#earlier").click()
    page.wait_for_function(
        f"() => document.querySelectorAll('#entries article').length > {PATH_CHUNK}"
    )
    assert shown_ids(page) == path_ids(store.long)[-2 * PATH_CHUNK :]
    # The long tool output: cut, then whole on request.
    pre = page.locator("#entries pre", has_text="xxxxx").last
    assert len(pre.inner_text()) < LONG_TEXT_CHARS
    pre.locator("button.more").click()
    page.wait_for_function(
        "(n) => [...document.querySelectorAll('#entries pre')].some(p => p.textContent.length === n)",
        arg=LONG_TEXT_CHARS,
    )
    assert page.locator("#entries pre", has_text="END").count() == 1


def test_the_web_benchmark_runs(browser: Any, tmp_path: Path) -> None:
    """benchmarks/bench_web.py at tiny sizes: a broken benchmark is caught here."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "bench_web.py"),
            "--files",
            "20",
            "--mb",
            "1",
            "--runs",
            "1",
            "--work",
            str(tmp_path / "bench"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:2] == ["measurement", "median"]
    assert any(line.startswith("GET / (projects), 20 sessions, warm") for line in lines)
    assert any("page until the leaf's message shows" in line for line in lines)


# ---------------------------------------------------------------------------- links and cookies


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Another local server: records the Cookie header of every request; its page
    links to `link`, as a chat or a mail with the printed link would."""

    cookies: list[str | None]
    link = ""

    def do_GET(self) -> None:
        self.cookies.append(self.headers.get("cookie"))
        body = f'<!DOCTYPE html><a id="go" href="{self.link}">the link</a>'.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture()
def elsewhere() -> Iterator[tuple[str, type[_Recorder]]]:
    """Another server on 127.0.0.1 (where every local server usually is)."""
    handler = type("Handler", (_Recorder,), {"cookies": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_link_works_once_in_the_browser(browser: Any, server: BackgroundServer) -> None:
    """The link opens the store in the first browser that opens it; in another it is
    refused; in the first one, opened again from the history, it just moves on."""
    link = server.new_link()
    first, second = browser.new_context(), browser.new_context()
    try:
        p = first.new_page()
        p.goto(link)
        p.wait_for_url(server.base + "/")
        assert p.locator("#projects").get_by_text("/work/app").is_visible()
        [cookie] = first.cookies()
        assert cookie["name"] == server.options.cookie and cookie["value"] not in link
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert cookie["expires"] == -1  # a session cookie
        assert cookie["domain"] == server.host  # its own host: see the next test
        q = second.new_page()
        response = q.goto(link)
        assert response is not None and response.status == 403
        assert "CI fails" not in q.content()
        assert second.cookies() == []
        p.goto(link)
        p.wait_for_url(server.base + "/")
        assert p.locator("#projects").get_by_text("/work/app").is_visible()
    finally:
        first.close()
        second.close()


def test_the_cookie_goes_to_no_other_local_server(
    browser: Any, server: BackgroundServer, elsewhere: tuple[str, type[_Recorder]]
) -> None:
    """A browser sends a cookie to every port of its host: the server is on a loopback
    address of its own, so the other local servers (on 127.0.0.1, localhost) never get
    it. A link that another site shows works too."""
    other, recorder = elsewhere
    assert server.host != "127.0.0.1"
    recorder.link = server.new_link()
    context = browser.new_context()
    try:
        p = context.new_page()
        p.goto(other + "/")
        p.click("#go")  # the link from another site (a chat, a mail, a file)
        p.wait_for_url(server.base + "/")
        assert p.locator("#projects").get_by_text("/work/app").is_visible()
        assert len(context.cookies()) == 1
        for url in (other + "/a", other.replace("127.0.0.1", "localhost") + "/b"):
            p.goto(url)
        assert len(recorder.cookies) >= 3 and set(recorder.cookies) == {None}  # favicons too
    finally:
        context.close()


def test_the_file_open_gives_the_browser_leads_to_the_store(
    browser: Any, server: BackgroundServer
) -> None:
    """`serve --open` hands the browser a private file that moves on to a one-time link
    (with a redirect instead of a page that moves on, Chromium would not send the
    SameSite=Strict cookie on the way from the file: refused)."""
    from sessiontree.web.server import BrowserFile

    page_file = BrowserFile(server.options, server.base + "/", seconds=60)
    context = browser.new_context()
    try:
        p = context.new_page()
        p.goto(page_file.url)
        p.wait_for_url(server.base + "/")
        assert p.locator("#projects").get_by_text("/work/app").is_visible()
        assert not os.path.exists(page_file.path)  # used: gone
        with pytest.raises(sync_api.Error, match="ERR_FILE_NOT_FOUND"):
            context.new_page().goto(page_file.url)
    finally:
        context.close()
        page_file.remove()


class _Attacker(http.server.BaseHTTPRequestHandler):
    """A page of another site (or of another server on this server's own address) that
    tries to have the browser ask the server for a link, and to read what comes back."""

    target = ""

    def do_GET(self) -> None:
        t = self.target
        body = f"""<!DOCTYPE html><img src="{t}/link"><script>
window.read = "pending"; window.opaque = "pending";
fetch("{t}/link", {{credentials: "include"}}).then(r => r.text())
  .then(text => {{ window.read = text; }}, e => {{ window.read = "blocked: " + e; }});
fetch("{t}/link", {{credentials: "include", mode: "no-cors"}})
  .then(r => r.text()).then(text => {{ window.opaque = text; }}, e => {{ window.opaque = "blocked"; }});
</script>""".encode()
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize("where", ["another site", "another port of its address"])
def test_another_page_can_neither_mint_nor_read_a_link(
    browser: Any, server: BackgroundServer, where: str
) -> None:
    """A browser that holds the cookie visits a page elsewhere. Another site (127.0.0.1)
    gets no SameSite=Strict cookie sent along: the server mints nothing and answers 403,
    a top-level visit too. A page on the server's own address but another port is the
    same site (the cookie goes along) but another origin: it cannot read the answer."""
    handler = type("Attacker", (_Attacker,), {"target": server.base})
    host = "127.0.0.1" if where == "another site" else server.host
    httpd = http.server.ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    context = browser.new_context()
    try:
        p = context.new_page()
        p.goto(server.new_link())
        p.wait_for_url(server.base + "/")
        links = len(server.options.keys._links)
        p.goto(f"http://{host}:{httpd.server_address[1]}/")
        p.wait_for_function("window.read !== 'pending' && window.opaque !== 'pending'")
        assert p.evaluate("window.read").startswith("blocked: ")
        assert "token=" not in p.evaluate("window.opaque")
        if where == "another site":
            assert len(server.options.keys._links) == links  # nothing minted
            with p.expect_navigation() as moved:  # the page itself goes there
                p.evaluate(f"location.href = {server.base + '/link'!r}")
            assert moved.value is not None and moved.value.status == 403
            assert len(server.options.keys._links) == links
    finally:
        context.close()
        httpd.shutdown()
        httpd.server_close()


def test_switching_branches_moves_the_export_links_the_url_and_the_picker(
    page: Any, server: BackgroundServer, store: WebStore
) -> None:
    h = handle_of("s", store.demo)
    page.goto(f"{server.base}/s/{h}")

    def exports() -> dict[str, str]:
        return dict(
            page.eval_on_selector_all(
                ".exports a[data-format]",
                "as => as.map(a => [a.dataset.format, a.getAttribute('href')])",
            )
        )

    for leaf, text in (("b1", "Alternatively we could install 3.12"), ("a3", "Pinned python3.11")):
        page.select_option("#leaf-picker", store.ids[leaf])
        page.wait_for_url(f"**/s/{h}?leaf={store.ids[leaf]}")
        page.locator("#entries").get_by_text(text).first.wait_for()
        assert exports() == {
            fmt: f"/s/{h}/export/{fmt}?leaf={store.ids[leaf]}" for fmt in ("md", "html", "jsonl")
        }
    # An entry inside a branch, picked in the tree: the picker shows it, not the old tip.
    page.locator(f"#tree button[data-id='{store.ids['a2']}']").click()
    page.wait_for_url(f"**?leaf={store.ids['a2']}")
    assert page.locator("#leaf-picker").input_value() == store.ids["a2"]
    assert exports()["md"] == f"/s/{h}/export/md?leaf={store.ids['a2']}"
    # The exported path is the shown one, and the address opens the same path.
    shown = shown_ids(page)
    assert shown == path_ids(store.demo, store.ids["a2"])
    page.goto(page.url)
    assert shown_ids(page) == shown
    assert page.locator("#leaf-picker").input_value() == store.ids["a2"]


MARKDOWN_MESSAGE = """## Plan

Pin **Python** with `uv`:

| where | version |
|-------|---------|
| CI    | 3.11    |

```python
print("<b>hi</b>")
```

<script>window.__pwned = true</script> [x](javascript:window.__pwned=true)
"""


def test_a_markdown_message_renders_and_its_script_stays_text(
    page: Any, server: BackgroundServer, store: WebStore
) -> None:
    directory = store.agent / "sessions" / "--work-markdown--"
    with SessionManager.create("/work/markdown", str(directory)) as sm:
        sm.append_message(user("How do we pin it?"))
        sm.append_message(assistant(MARKDOWN_MESSAGE))
        path = sm.get_session_file() or ""
    page.goto(server.base + "/sessions")  # the listing sees the new session
    page.goto(f"{server.base}/s/{handle_of('s', path)}")
    body = page.locator("#entries article.assistant .md")
    assert body.locator("h2").inner_text() == "Plan"
    assert body.locator("table td").first.inner_text() == "CI"
    assert body.locator("pre.hl code span.nb").first.inner_text() == "print"
    assert body.locator("script").count() == 0
    assert "<script>window.__pwned = true</script>" in body.inner_text()
    assert body.locator("a").count() == 0
    assert page.evaluate("window.__pwned") is None
    # Code is coloured (highlight.css is served and applies).
    color = body.locator("pre.hl span.nb").first.evaluate("e => getComputedStyle(e).color")
    assert color != body.locator("pre.hl").evaluate("e => getComputedStyle(e).color")


OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const wide = Array.from(document.querySelectorAll('body *'))
    .filter(e => e.getBoundingClientRect().right > width + 1 && e.closest('nav.tree, pre, table.md, .md table, figure.chart') === null)
    .slice(0, 3).map(e => e.tagName + '.' + e.className);
  return [document.documentElement.scrollWidth, width, wide];
}"""


@pytest.mark.parametrize("width", [1280, 400])
def test_no_page_scrolls_sideways(
    browser: Any, server: BackgroundServer, store: WebStore, width: int, tmp_path: Path
) -> None:
    """Every page at a laptop's width and a phone's: nothing wider than the window,
    the hostile session's unbroken strings included; the exported page too."""
    context = browser.new_context(viewport={"width": width, "height": 800})
    page = context.new_page()
    page.goto(server.new_link())
    page.wait_for_url(server.base + "/")
    urls = ["/", "/sessions", "/search?q=python", "/usage", "/link", "/nope"]
    urls += [f"/s/{handle_of('s', p)}" for p in (store.demo, store.long, store.hostile)]
    for url in urls:
        page.goto(server.base + url)
        scroll, client, wide = page.evaluate(OVERFLOW)
        assert scroll <= client, (width, url, scroll, wide)
    export = tmp_path / "export.html"
    export.write_bytes(
        page.request.get(f"{server.base}/s/{handle_of('s', store.hostile)}/export/html").body()
    )
    page.goto(export.as_uri())
    scroll, client, wide = page.evaluate(OVERFLOW)
    assert scroll <= client, (width, "export", scroll, wide)
    context.close()


def test_on_a_phone_the_tree_is_a_drawer(
    browser: Any, server: BackgroundServer, store: WebStore
) -> None:
    context = browser.new_context(viewport={"width": 400, "height": 800}, color_scheme="dark")
    page = context.new_page()
    page.goto(server.new_link())
    page.wait_for_url(server.base + "/")
    page.goto(f"{server.base}/s/{handle_of('s', store.demo)}")
    tree, toggle = page.locator("#tree"), page.locator("#tree-toggle")
    assert not tree.is_visible()
    # The conversation takes the width.
    box = page.locator("#entries").bounding_box()
    assert box is not None and box["width"] > 360
    toggle.click()
    tree.locator(f"button[data-id='{store.ids['a3']}']").wait_for(state="visible")
    assert toggle.get_attribute("aria-expanded") == "true"
    tree.locator(f"button[data-id='{store.ids['a3']}']").click()
    page.wait_for_url(f"**?leaf={store.ids['a3']}")
    page.wait_for_function(
        "() => !document.getElementById('session').classList.contains('tree-open')"
    )
    assert shown_ids(page) == path_ids(store.demo, store.ids["a3"])
    # Dark mode kept: a dark page, light text.
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(17, 20, 24)"
    # Tables are cards: each value labelled, no header row.
    page.goto(server.base + "/sessions")
    row = page.locator("#sessions tbody tr").first
    assert row.evaluate("e => getComputedStyle(e).display") == "block"
    labels = row.locator("td[data-label]").evaluate_all(
        "tds => tds.map(td => getComputedStyle(td, '::before').content)"
    )
    assert '"Messages"' in labels and '"Cost"' in labels
    context.close()
    # At a laptop's width the tree is beside the path and the toggle hidden.
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(server.new_link())
    page.wait_for_url(server.base + "/")
    page.goto(f"{server.base}/s/{handle_of('s', store.demo)}")
    assert page.locator("#tree").is_visible()
    assert not page.locator("#tree-toggle").is_visible()
    context.close()


def test_the_tree_reads_like_the_cli_and_a_hit_opens_in_its_branch(
    page: Any, server: BackgroundServer, store: WebStore
) -> None:
    h = handle_of("s", store.demo)
    page.goto(f"{server.base}/s/{h}?leaf={store.ids['a3']}")

    def dot(entry: str) -> str:
        return str(
            page.locator(f"#tree button[data-id='{entry}'] .dot").evaluate(
                "e => getComputedStyle(e, '::before').content"
            )
        )

    # The two branches after the question: ● the shown one, ○ the other (as `tree` draws).
    heads = page.locator("#tree button:has(.dot)")
    assert heads.count() == 2
    assert dot(store.ids["a1"]) == '"● "'
    assert dot(store.ids["bs"]) == '"○ "'
    assert "⑂ 2" in page.locator(f"#tree button[data-id='{store.ids['q']}']").inner_text()
    # The picker: each tip by its own text and time.
    options = page.locator("#leaf-picker option").all_inner_texts()
    assert any(o.startswith("assistant: Pinned python3.11 in .ci/run. · 20") for o in options)
    assert all(o.endswith(tuple(store.ids.values())) for o in options)
    # A search hit in the middle of a branch: the whole branch, the hit scrolled to.
    page.goto(f"{server.base}/search?q=images+ship+Python")
    page.locator("section.hits li a").first.click()
    page.wait_for_url("**?at=*")
    hit = page.locator("#entries article.hit")
    hit.wait_for()
    assert hit.get_attribute("data-id") == store.ids["a2"]
    assert shown_ids(page) == path_ids(store.demo, store.ids["a3"])  # to the branch's tip
    assert hit.evaluate(
        "e => { const r = e.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }"
    )


def test_the_live_view_grows_the_tree_and_follows_the_agent(
    page: Any, server: BackgroundServer, store: WebStore
) -> None:
    page.goto(f"{server.base}/s/{handle_of('s', store.live)}")
    page.wait_for_function("() => document.getElementById('live').textContent === 'live'")
    with SessionManager.open(store.live) as sm:
        first = sm.get_branch()[0]["id"]
        # The agent goes on from the first entry: a new branch, not the shown path.
        sm.branch(first)
        other = sm.append_message(user("a new branch, written live"))
        sm.flush()
        page.locator(f"#tree button[data-id='{other}']").wait_for()
        page.locator("#notice").get_by_text("on other branches").wait_for()
        # Following the agent: the next entry elsewhere is shown, its branch and all.
        page.locator("#follow").check()
        sm.branch(first)
        third = sm.append_message(user("and a third branch, followed"))
        sm.flush()
        page.locator("#entries").get_by_text("and a third branch, followed").wait_for()
        page.wait_for_url(f"**?leaf={third}")
    assert shown_ids(page) == path_ids(store.live, third)
    assert page.locator(f"#tree button[data-id='{third}']").count() == 1


def test_every_store_found_in_one_app(browser: Any, tmp_path: Path) -> None:
    """`serve` with no store named: the sessions of a pi and a Claude Code store in one
    list, each with its store; a click opens the Claude Code session from its store;
    the store filter and search cover both."""
    from sessiontree.store import find_stores

    source = REAL_FILES / "foreign" / "claude" / CLAUDE_FIXTURE
    if not source.exists():
        unavailable(f"fixture {source} is missing")
    home = tmp_path / "home"
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        for name in AGENT_VARIABLES:
            mp.delenv(name, raising=False)
        found = build_home(home, source)
        stores = [f.open() for f in find_stores()]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(WATCH)
    context.set_default_timeout(10_000)
    try:
        with BackgroundServer(stores) as server:
            p = context.new_page()
            errors: list[str] = []
            p.on("pageerror", lambda exc: errors.append(str(exc)))
            p.goto(server.new_link())
            p.wait_for_url(server.base + "/")
            assert p.locator("#stores tr[data-store]").count() == 2
            p.get_by_role("link", name="all sessions").click()
            p.wait_for_url("**/sessions")
            rows = p.locator("#sessions tbody tr")
            assert rows.count() == 3
            badges = p.locator("#sessions tbody a.store").all_inner_texts()
            assert sorted(badges) == ["claude", "pi", "pi"]
            claude = p.locator(f"tr[data-handle='{handle_of('s', found.claude_session)}']")
            assert claude.locator("a.store").inner_text() == "claude"
            claude.locator("td.title a").click()
            p.wait_for_url(f"**/s/{handle_of('s', found.claude_session)}")
            assert CLAUDE_ID in p.locator(".meta").first.inner_text()
            assert p.locator(".meta span.store").inner_text() == "claude"
            assert p.locator("#entries article.entry").count() > 0
            p.goto(server.base + "/sessions")
            p.locator("#sessions tbody a.store", has_text="claude").click()
            p.wait_for_url("**/sessions?store=claude")
            assert p.locator("#sessions tbody tr").count() == 1
            p.goto(server.base + "/search?q=zanzibar")
            assert p.locator("section.hits").count() == 1
            assert p.locator("section.hits span.store").inner_text() == "pi"
            # the search form's filters and the store key apply together
            p.goto(server.base + "/search?q=zanzib.r&regex=1&store=pi")
            assert p.locator("section.hits span.store").inner_text() == "pi"
            assert p.locator("input[name=store]").get_attribute("value") == "pi"
            p.goto(server.base + "/search?q=zanzibar&store=claude")
            assert p.locator("section.hits").count() == 0
            p.goto(server.base + "/usage")  # all time: the presets, heatmap, a row per store
            assert p.locator("#table-stores").count() == 1
            assert p.locator("#heatmap").count() == 1
            p.goto(server.base + "/usage?range=30d")  # the per-store table over those days
            assert p.locator("#table-stores").count() == 1
            # a phone's width: the Store column is a labelled cell of each card, and
            # no page of several stores scrolls sideways
            p.set_viewport_size({"width": 400, "height": 800})
            for url in ("/", "/sessions", "/search?q=zanzibar", "/usage"):
                p.goto(server.base + url)
                scroll, client, wide = p.evaluate(OVERFLOW)
                assert scroll <= client, (url, scroll, wide)
            p.goto(server.base + "/sessions")
            assert p.locator("#sessions td[data-label='Store']").count() == 3
            assert errors == []
            assert p.evaluate("window.__violations") == []
    finally:
        context.close()
        for store in stores:
            store.close()


# ---------------------------------------------------------------------- a 1 GB session

SERVE_CHILD = r"""
import json, sys
from sessiontree.storage import FileSessionStorage
from sessiontree.web.server import BackgroundServer
with BackgroundServer(FileSessionStorage(), sys.argv[1]) as server:
    print(json.dumps({"base": server.base, "cookies": server.login_cookies()}), flush=True)
    sys.stdin.read()
"""
GIGABYTE_ENTRIES = 100_000
GIGABYTE_TEXT = 10_700  # characters per message: about 1.0 GiB in all


def peak_memory(pid: int) -> int:
    """A process's peak resident memory (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_a_gigabyte_session_page_reads_what_it_shows(
    browser: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A 1 GB session's page: the server (its own process) loads it index first and
    reads what the page shows, so its memory stays within 0.35 GB; the page shows the
    leaf's message, the tree's branches, and earlier entries when asked for.
    (How long the page takes is measured by `benchmarks/bench_web.py --gigabyte`.)"""
    import json
    import subprocess
    import sys

    from tests.web_support import write_wide_session

    agent = tmp_path_factory.mktemp("gigabyte") / "agent"
    branches = ((GIGABYTE_ENTRIES - 500, GIGABYTE_ENTRIES - 2000), (GIGABYTE_ENTRIES - 300, 1000))
    path = write_wide_session(
        agent, GIGABYTE_ENTRIES, GIGABYTE_TEXT, branches=branches, name="gigabyte"
    )
    assert Path(path).stat().st_size >= 1 << 30
    child = subprocess.Popen(
        [sys.executable, "-c", SERVE_CHILD, str(agent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready = json.loads(child.stdout.readline())
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(60_000)
        context.add_cookies(
            [{"name": k, "value": v, "url": ready["base"]} for k, v in ready["cookies"].items()]
        )
        page = context.new_page()
        page.goto(ready["base"] + "/")  # as a person arrives: the listing first
        page.goto(ready["base"] + "/s/" + handle_of("s", path))
        last = page.locator("#entries > article:last-child")
        assert f"message {GIGABYTE_ENTRIES - 1} " in last.inner_text()
        assert last.is_visible()
        assert len(shown_ids(page)) == PATH_CHUNK
        assert page.locator("#tree button").count() < 60  # the shape, not 100,000 rows
        assert "A big session (1," in page.locator("#load-note").inner_text()
        # Earlier entries: one more chunk when asked.
        page.locator("#earlier").click()
        page.wait_for_function(
            f"() => document.querySelectorAll('#entries article').length === {2 * PATH_CHUNK}"
        )
        # Another branch's tip: its end, not its whole path.
        tip = f"{GIGABYTE_ENTRIES - 301:08x}"
        page.select_option("#leaf-picker", tip)
        page.wait_for_url(f"**?leaf={tip}")
        page.locator("#entries").get_by_text(f"message {GIGABYTE_ENTRIES - 301} ").wait_for()
        assert len(shown_ids(page)) == PATH_CHUNK
        context.close()
        assert peak_memory(child.pid) <= 0.35 * (1 << 30)
    finally:
        child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
        Path(path).unlink()


def test_pi16_entries_show_their_details_and_fit_a_phone(browser: Any, tmp_path: Path) -> None:
    """pi 1.6's `usage` and `context_edit` entries and system messages show what they hold
    on the session page and in the exported page, and at 400 px nothing scrolls sideways,
    even with unbroken names and notes (the sample pi 1.6.0 wrote, and a copy made hostile)."""
    import json as json_module

    from tests.conftest import FIXTURES

    sample = FIXTURES / "pi16" / "usage-sample.jsonl"
    agent = tmp_path / "agent"
    project = agent / "sessions" / "--work-demo--"
    project.mkdir(parents=True)
    kept = project / "2026-12-06T19-50-36-276Z_usage-sample.pi16.jsonl"
    kept.write_bytes(sample.read_bytes())
    long = "x" * 400
    lines = [json_module.loads(line) for line in sample.read_text().splitlines()]
    for line in lines:
        message = line.get("message", {})
        if message.get("role") == "system":
            message["sections"] = {long: long}
            message["toolsAdded"] = [{"name": long}]
        if message.get("role") == "toolResult":
            message["nestedCalls"] = [{"toolName": long}]
            message["addedToolNames"] = [long]
        if message.get("role") == "assistant":
            message["rawStopReason"] = long
        if line["type"] == "usage":
            line["note"] = long
            line["kind"] = long
        if line["type"] == "context_edit":
            line["replacement"] = {"content": long}
    lines[0]["id"] = "hostile.pi16"
    hostile = project / "2026-12-06T19-50-36-277Z_hostile.pi16.jsonl"
    hostile.write_text("".join(json_module.dumps(x) + "\n" for x in lines))
    with BackgroundServer(FileSessionStorage(), str(agent), poll_seconds=0.05) as server:
        context = browser.new_context(viewport={"width": 400, "height": 800})
        page = context.new_page()
        page.goto(server.new_link())
        page.wait_for_url(server.base + "/")
        page.goto(f"{server.base}/s/{handle_of('s', str(kept))}?leaf=e7873f73")
        entries = page.locator("#entries")
        text = entries.inner_text()
        assert "cache_warm · anthropic/claude-sonnet-4-5 · 40,000 tokens" in text
        assert "7b12337a replaced: Read notes.txt (edited)" in text
        assert "section: identity" in text and "tools added: read" in text
        assert "nested calls: grep" in text
        for path in (kept, hostile):
            url = f"{server.base}/s/{handle_of('s', str(path))}"
            page.goto(url + "?leaf=e7873f73")
            page.locator("#entries details").first.wait_for()
            for details in page.locator("#entries details").all():
                details.evaluate("d => d.open = true")
            scroll, client, wide = page.evaluate(OVERFLOW)
            assert scroll <= client, (path.name, scroll, wide)
            export = tmp_path / f"{path.stem}.html"
            export.write_bytes(page.request.get(f"{url}/export/html").body())
            page.goto(export.as_uri())
            for details in page.locator("article.entry details").all():
                details.evaluate("d => d.open = true")
            scroll, client, wide = page.evaluate(OVERFLOW)
            assert scroll <= client, (path.name, "export", scroll, wide)
        context.close()


@pytest.mark.parametrize("width", [1280, 400])
def test_the_exported_page_has_no_empty_band_under_its_header(
    browser: Any, server: BackgroundServer, store: WebStore, width: int, tmp_path: Path
) -> None:
    """The exported page's header is as tall as its title and its line of facts (plus its
    padding): a grid's auto rows once split the window's spare height, an empty band of
    about 160 px under the header of a short session."""
    context = browser.new_context(viewport={"width": width, "height": 800})
    page = context.new_page()
    page.goto(server.new_link())
    page.wait_for_url(server.base + "/")
    export = tmp_path / "export.html"
    export.write_bytes(
        page.request.get(f"{server.base}/s/{handle_of('s', store.demo)}/export/html").body()
    )
    page.goto(export.as_uri())
    band = page.evaluate(
        """() => { const h = document.querySelector('body.export > header');
        const r = h.getBoundingClientRect(), last = h.lastElementChild.getBoundingClientRect();
        return r.bottom - last.bottom; }"""
    )
    assert 0 <= band <= 24, (width, band)
