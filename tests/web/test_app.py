"""`sessiontree serve` through HTTP: a real uvicorn server on loopback, driven by httpx.

The browser tests (tests/web/test_app_browser.py) click through the same app; these check each
route's answers and the security promises one by one.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import html
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from sessiontree import SessionManager
from sessiontree.export import export_markdown
from sessiontree.format import message_text
from sessiontree.maintenance import check_session
from sessiontree.reports import store_stats
from sessiontree.storage import FileSessionStorage
from tests.conftest import REPO_ROOT, require_module
from tests.helpers import assistant, user
from tests.web_support import (
    HOSTILE,
    HOSTILE_ID,
    LONG_PATH,
    LONG_TEXT_CHARS,
    Markup,
    WebStore,
    build_store,
    fingerprint,
)

httpx = require_module("httpx")
require_module("starlette")
require_module("uvicorn")

from sessiontree.layout import store_parts  # noqa: E402
from sessiontree.web import sessions as web_sessions  # noqa: E402
from sessiontree.web.app import PAGE_ROWS  # noqa: E402
from sessiontree.web.data import handle_of  # noqa: E402
from sessiontree.web.security import CSP, host_allowed  # noqa: E402
from sessiontree.web.server import BackgroundServer  # noqa: E402
from sessiontree.web.sessions import PATH_CHUNK, TEXT_LIMIT, Tail  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> WebStore:
    agent = tmp_path_factory.mktemp("web") / "agent"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PI_CODING_AGENT_DIR", str(agent))
        return build_store(agent)


@pytest.fixture(scope="module")
def server(store: WebStore) -> Iterator[BackgroundServer]:
    with BackgroundServer(FileSessionStorage(), str(store.agent), poll_seconds=0.05) as s:
        yield s


@pytest.fixture()
def client(server: BackgroundServer) -> Iterator[Any]:
    with httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=30) as c:
        yield c


def page(client: Any, url: str, status: int = 200) -> Markup:
    r = client.get(url)
    assert r.status_code == status, (url, r.status_code, r.text[:300])
    return Markup(r.text)


def raw_get(
    server: BackgroundServer, target: str, cookie: bool = False
) -> tuple[int, dict[str, str]]:
    """GET exactly `target` (httpx would read `//host/...` as another host, and
    resolve `..`)."""
    import socket

    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        jar = "".join(f"Cookie: {k}={v}\r\n" for k, v in server.login_cookies().items())
        request = (
            f"GET {target} HTTP/1.1\r\nHost: {server.host}:{server.port}\r\n"
            + (jar if cookie else "")
            + "Connection: close\r\n\r\n"
        )
        sock.sendall(request.encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(head[0].split()[1]), headers


def handle(path: str) -> str:
    return handle_of("s", path)


def articles(doc: Markup) -> list[dict[str, str | None]]:
    return doc.all("article")


# ---------------------------------------------------------------------------- the gate


ROUTES = [
    "/",
    "/sessions",
    "/search?q=python",
    "/usage",
    "/s/{h}",
    "/s/{h}/path?leaf=x",
    "/s/{h}/text?entry=x&block=0",
    "/s/{h}/img/0?entry=x",
    "/s/{h}/events?from=0",
    "/s/{h}/export/md",
    "/blob/" + "0" * 64,
    "/static/app.js",
]


def token_of(link: str) -> str:
    return parse_qs(urlsplit(link).query)["token"][0]


def moved_to(response: Any) -> str:
    """Where the page a link answers moves on to (a meta refresh, not a redirect)."""
    match = re.search(r'http-equiv="refresh" content="0;url=([^"]*)"', response.text)
    assert match is not None, response.text
    return html.unescape(match.group(1))


def test_without_a_link_every_route_is_refused(server: BackgroundServer, store: WebStore) -> None:
    h = handle(store.demo)
    unused = token_of(server.new_link())
    wrong = unused[:-1] + ("A" if unused[-1] != "A" else "B")
    [(name, value)] = server.login_cookies().items()
    with httpx.Client(base_url=server.base, timeout=10) as anonymous:
        for route in ROUTES:
            url = route.format(h=h)
            r = anonymous.get(url)
            assert r.status_code == 403, url
            assert "one of its links" in r.text
            assert "CI fails" not in r.text
            for cookie in (f"{name}={wrong}", f"{name}={unused}", f"{name}={value[:-1]}"):
                # A wrong value, a link's token (a token is no cookie), a cut cookie.
                r = anonymous.get(url, headers={"cookie": cookie})
                assert r.status_code == 403, (url, cookie)
            r = anonymous.get(url + ("&" if "?" in url else "?") + f"token={wrong}")
            assert r.status_code == 403, url
        # Another server's cookie name (another port) is no pass either.
        r = anonymous.get("/", headers={"cookie": f"sessiontree-1={value}"})
        assert r.status_code == 403
        assert anonymous.get("/", headers={"cookie": f"{name}={value}"}).status_code == 200


def test_a_link_works_once_and_becomes_a_cookie_of_its_own(server: BackgroundServer) -> None:
    """The token is exchanged for a session cookie with another random value; the link
    (in the history, the scrollback) then opens nothing for anyone without the cookie."""
    link = server.url.replace("/?", "/sessions?q=site&")  # the printed link
    token = token_of(link)
    with httpx.Client(timeout=10) as first:
        r = first.get(link)
        cookie = r.headers["set-cookie"]
        name, _, rest = cookie.partition("=")
        value = rest.split(";", 1)[0]
        assert name == server.options.cookie == f"sessiontree-{server.port}"
        assert value != token and len(value) >= 40 and token not in cookie
        assert r.status_code == 200
        assert moved_to(r) == "/sessions?q=site"
        assert "CI fails" not in r.text  # the page that moves on shows nothing of the store
        attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
        assert attributes == {"path", "httponly", "samesite"}  # no expiry: a session cookie
        assert "SameSite=Strict" in cookie and "Path=/" in cookie
        assert first.get(server.base + "/sessions?q=site").status_code == 200
        # The same browser opening the link again (its history) just moves on.
        again = first.get(link)
        assert again.status_code == 200 and moved_to(again) == "/sessions?q=site"
        assert "set-cookie" not in again.headers
    with httpx.Client(timeout=10) as second:
        r = second.get(link)
        assert r.status_code == 403 and "set-cookie" not in r.headers
        assert "Each link works once" in r.text and "CI fails" not in r.text
        assert second.get(server.base + "/sessions").status_code == 403
        # The token itself was never a key: nor as a cookie.
        r = second.get(server.base + "/", headers={"cookie": f"{name}={token}"})
        assert r.status_code == 403
    # A path that would be another host (//evil.example) stays on this one.
    status, headers = raw_get(
        server,
        f"//evil.example/x%0d%0aSet-Cookie:%20a=b?{urlencode({'token': token_of(server.new_link())})}",
    )
    assert status == 200 and headers["set-cookie"].startswith(server.options.cookie + "=")
    with httpx.Client(timeout=10) as third:
        r = third.get(server.new_link().replace("/?", "/evil.example/x%0d%0aSet-Cookie:%20a=b?"))
        assert moved_to(r) == "/evil.example/x%0D%0ASet-Cookie%3A%20a%3Db"
        assert r.headers.get_list("set-cookie") == [r.headers["set-cookie"]]


def test_a_link_opened_by_many_at_once_opens_the_store_for_one(server: BackgroundServer) -> None:
    """Two browsers (or a browser and a link previewer) opening the same link at the same
    moment: one gets a cookie, every other one is refused."""
    link = server.new_link()
    start = threading.Barrier(12)
    outcomes: list[tuple[int, str | None]] = []

    def open_it() -> None:
        with httpx.Client(timeout=10) as c:
            start.wait()
            r = c.get(link)
            outcomes.append((r.status_code, r.headers.get("set-cookie")))

    threads = [threading.Thread(target=open_it) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(status for status, _ in outcomes) == [200] + [403] * 11
    assert [cookie is not None for status, cookie in outcomes if status == 200] == [True]


def test_a_browser_with_the_cookie_gets_links_for_other_browsers(
    server: BackgroundServer, client: Any
) -> None:
    doc = page(client, "/")
    assert "/link" in doc.urls()
    r = client.get("/link")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    links = re.findall(r'<code id="link">([^<]*)</code>', r.text)
    assert len(links) == 1
    link = html.unescape(links[0])
    assert link.startswith(server.base + "/?token=")
    assert token_of(link) != token_of(
        html.unescape(re.findall(r'<code id="link">([^<]*)</code>', client.get("/link").text)[0])
    )
    with httpx.Client(timeout=10) as other:
        assert other.get(link).status_code == 200
        assert other.get(server.base + "/").status_code == 200
    with httpx.Client(timeout=10) as third:
        assert third.get(link).status_code == 403
        assert third.get(server.base + "/link").status_code == 403  # no links without the cookie


def test_a_cookie_is_no_key_to_another_server(store: WebStore, server: BackgroundServer) -> None:
    """Each server has its own cookie values and its own address: a cookie one server
    set opens no other, whatever name it is sent under."""
    [(name, value)] = server.login_cookies().items()
    with BackgroundServer(FileSessionStorage(), str(store.agent)) as other:
        assert other.host != server.host  # random addresses of their own
        [(other_name, other_value)] = other.login_cookies().items()
        assert other_name != name
        with httpx.Client(base_url=other.base, timeout=10) as c:
            for cookie in (f"{name}={value}", f"{other_name}={value}"):
                assert c.get("/", headers={"cookie": cookie}).status_code == 403, cookie
            assert c.get("/", headers={"cookie": f"{other_name}={other_value}"}).status_code == 200


def test_the_server_listens_on_a_random_loopback_address(
    store: WebStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessiontree.web import server as web_server

    addresses = set()
    for _ in range(3):
        sock, warning = web_server.listen(None, 0)
        with sock:
            host = sock.getsockname()[0]
        assert warning is None
        assert ipaddress.ip_address(host) in ipaddress.ip_network("127.0.0.0/8")
        assert host != "127.0.0.1"
        addresses.add(host)
    assert len(addresses) > 1
    sock, warning = web_server.listen("127.0.0.1", 0)  # --host still decides
    with sock:
        assert sock.getsockname()[0] == "127.0.0.1" and warning is None
    # Where 127.x.y.z cannot be bound (macOS), 127.0.0.1, said in a warning.
    real_bind = web_server.bind

    def only_the_usual(host: str, port: int) -> Any:
        if host != "127.0.0.1":
            raise OSError(errno.EADDRNOTAVAIL, os.strerror(errno.EADDRNOTAVAIL))
        return real_bind(host, port)

    monkeypatch.setattr(web_server, "bind", only_the_usual)
    sock, warning = web_server.listen(None, 0)
    with sock:
        assert sock.getsockname()[0] == "127.0.0.1"
    assert warning is not None and "127.0.0.1" in warning and "cookie" in warning


def test_the_host_header_is_checked(server: BackgroundServer, client: Any) -> None:
    port = server.port
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io", "", "localhost:x"):
        r = client.get("/", headers={"host": host})
        assert r.status_code in (400, 421), host  # h11 itself refuses an empty Host
        assert "CI fails" not in r.text
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "127.0.0.1", f"[::1]:{port}"):
        assert client.get("/", headers={"host": host}).status_code == 200, host
    assert host_allowed("mybox:8000", ["MyBox"])
    assert not host_allowed("mybox.evil:8000", ["mybox"])
    assert not host_allowed(None)


def test_every_response_has_a_strict_policy_and_nothing_off_the_machine(
    client: Any, store: WebStore
) -> None:
    h = handle(store.demo)
    for url in ("/", "/sessions", "/search?q=python", "/usage", f"/s/{h}", "/nope"):
        r = client.get(url)
        assert r.headers["content-security-policy"] == CSP
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"
        doc = Markup(r.text)
        assert all(u.startswith(("/", "#", "?")) and not u.startswith("//") for u in doc.urls())
        assert doc.handlers() == []
        # One script, ours, from this server; no inline script at all.
        scripts = doc.all("script")
        assert scripts == [{"src": "/static/app.js", "defer": None}], scripts
    assert "'unsafe-inline'" not in CSP and "http" not in CSP
    assert "default-src 'none'" in CSP and "frame-ancestors 'none'" in CSP


# ---------------------------------------------------------------------------- pages


def test_projects_then_sessions(client: Any, store: WebStore) -> None:
    doc = page(client, "/")
    text = doc.all_text
    for cwd in ("/work/app", "/work/site", "/work/long", "/work/live"):
        assert cwd in text
    assert "--work-site-copy--" in text  # the copy's dir (its cwd is /work/site)
    assert "<b>hostile</b>" in text  # a cwd with markup, as text
    links = [a["href"] for a in doc.all("a") if str(a.get("href")).startswith("/sessions?project=")]
    assert len(links) == 6
    project = f"/sessions?project={handle_of('p', os.path.dirname(store.demo))}"
    assert project in links
    doc = page(client, project)
    rows = [a for a in doc.all("a") if str(a.get("href")).startswith("/s/")]
    assert [r["href"] for r in rows] == [f"/s/{handle(store.demo)}"]
    assert "CI fails on Python version" in doc.all_text
    assert "Why does the build fail on CI only?" in doc.all_text  # the first prompt


def _session_order(doc: Markup) -> list[str]:
    return [str(a["href"])[3:] for a in doc.all("a") if str(a.get("href")).startswith("/s/")]


def test_sessions_sort_and_filter(client: Any, store: WebStore) -> None:
    sizes = {handle(p): os.path.getsize(p) for p in store.sessions}
    order = _session_order(page(client, "/sessions?sort=size&order=desc"))
    assert sorted(order) == sorted(sizes)
    assert [sizes[h] for h in order] == sorted(sizes.values(), reverse=True)
    order = _session_order(page(client, "/sessions?sort=size&order=asc"))
    assert [sizes[h] for h in order] == sorted(sizes.values())
    mtimes = {handle(p): os.stat(p).st_mtime_ns for p in store.sessions}
    order = _session_order(page(client, "/sessions"))
    assert [mtimes[h] for h in order] == sorted(mtimes.values(), reverse=True)
    doc = page(client, "/sessions?q=HOMEPAGE")
    assert sorted(_session_order(doc)) == sorted([handle(store.other), handle(store.copy)])
    assert _session_order(page(client, "/sessions?q=no-such-words")) == []
    messages = {handle(store.long): LONG_PATH}
    order = _session_order(page(client, "/sessions?sort=messages&order=desc"))
    assert order[0] == handle(store.long) and messages[order[0]] == LONG_PATH
    page(client, "/sessions?project=nonsense", 404)
    assert PAGE_ROWS >= len(store.sessions)


def test_the_session_page_holds_the_active_path_and_the_tree(client: Any, store: WebStore) -> None:
    h = handle(store.demo)
    doc = page(client, f"/s/{h}")
    with SessionManager.open(store.demo, read_only=True) as sm:
        path = sm.get_branch()
        entries = sm.get_entries()
        tips = {e["id"] for e in entries if not sm.get_children(e["id"])}
    shown = [a["data-id"] for a in articles(doc)]
    assert shown == [e["id"] for e in path]  # only the active path is sent
    # The tree names every entry; the path is marked; the leaf is selected.
    buttons = {b["data-id"]: str(b.get("class")) for b in doc.all("button") if b.get("data-id")}
    assert set(buttons) == {e["id"] for e in entries}
    assert {i for i, c in buttons.items() if "on-path" in c} == {e["id"] for e in path}
    assert [i for i, c in buttons.items() if "selected" in c] == [path[-1]["id"]]
    options = {o["value"] for o in doc.all("option")}
    assert options == tips
    text = doc.all_text
    assert "Tried reading the CI log; found a version mismatch." in text  # branch summary
    assert "Alternatively we could install 3.12 in the image." in text
    assert "in 100 · out 20 · cache read 5 · cache write 1 · $0.3000" in text  # usage
    assert "openai/gpt-5" in text
    # Another branch by ?leaf=: its compaction, label, image, tool call, thinking.
    doc = page(client, f"/s/{h}?leaf={store.ids['a3']}")
    shown = [a["data-id"] for a in articles(doc)]
    with SessionManager.open(store.demo, read_only=True) as sm:
        assert shown == [e["id"] for e in sm.get_branch(store.ids["a3"])]
    text = doc.all_text
    for piece in (
        "CI python mismatch found",
        "diagnosis",
        "tool call: bash",
        '"command": "cat ci.log"',
        "thinking",
        "Probably the Python version.",
        "error: python3.12 not found",
        "tool result · bash (error)",
    ):
        assert piece in text, piece
    assert any(d.get("class") == "thinking" for d in doc.all("details"))
    images = [i["src"] for i in doc.all("img")]
    assert len(images) == 1 and str(images[0]).startswith(f"/s/{h}/img/0?entry=")
    r = client.get(str(images[0]))
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert r.content == store.image
    # An unknown leaf shows the session's own leaf.
    assert [a["data-id"] for a in articles(page(client, f"/s/{h}?leaf=nope"))][-1] == path[-1]["id"]


def test_branch_switching_sends_only_what_changes(client: Any, store: WebStore) -> None:
    h = handle(store.demo)
    ids = store.ids
    r = client.get(f"/s/{h}/path", params={"leaf": ids["a3"], "from": ids["b1"]})
    data = r.json()
    assert r.status_code == 200 and data["leaf"] == ids["a3"]
    assert data["ancestor"] == ids["q"]  # the pages share the path up to the question
    sent = [a["data-id"] for a in articles(Markup(data["html"]))]
    with SessionManager.open(store.demo, read_only=True) as sm:
        path = [e["id"] for e in sm.get_branch(ids["a3"])]
    assert sent == path[path.index(ids["q"]) + 1 :]
    assert data["length"] == len(path) and data["earlier"] == path.index(ids["q"]) + 1
    nav = Markup(data["nav"])
    selected = [b["data-id"] for b in nav.all("button") if "selected" in str(b.get("class"))]
    assert selected == [ids["a3"]]
    # Without a known current leaf the whole path comes.
    data = client.get(f"/s/{h}/path", params={"leaf": ids["a3"]}).json()
    assert data["ancestor"] is None
    assert [a["data-id"] for a in articles(Markup(data["html"]))] == path


def test_long_paths_and_texts_load_on_demand(client: Any, store: WebStore) -> None:
    h = handle(store.long)
    doc = page(client, f"/s/{h}")
    shown = [a["data-id"] for a in articles(doc)]
    with SessionManager.open(store.long, read_only=True) as sm:
        path = sm.get_branch()
    ids = [e["id"] for e in path]
    assert len(ids) == LONG_PATH and len(shown) == PATH_CHUNK
    assert shown == ids[-PATH_CHUNK:]
    earlier = doc.all("div")
    assert any(d.get("data-earlier") == str(LONG_PATH - PATH_CHUNK) for d in earlier)
    # Earlier entries, chunk by chunk, until the root.
    first, collected = shown[0], list(shown)
    while True:
        data = client.get(f"/s/{h}/path", params={"leaf": ids[-1], "before": first}).json()
        chunk = [a["data-id"] for a in articles(Markup(data["html"]))]
        collected = chunk + collected
        assert data["earlier"] == len(ids) - len(collected)
        if not data["earlier"]:
            break
        first = chunk[0]
    assert collected == ids
    # The long tool output is cut, with a button; the whole text comes on demand.
    result = next(
        e for e in path if e["type"] == "message" and e["message"]["role"] == "toolResult"
    )
    r = client.get(f"/s/{h}?leaf={result['id']}")
    assert "x" * TEXT_LIMIT in r.text and "x" * (TEXT_LIMIT + 1) not in r.text
    button = next(b for b in Markup(r.text).all("button") if b.get("class") == "more")
    text = client.get(
        f"/s/{h}/text", params={"entry": result["id"], "block": button["data-block"]}
    ).json()["text"]
    assert len(text) == LONG_TEXT_CHARS and text.endswith("END")
    assert client.get(f"/s/{h}/text", params={"entry": "nope", "block": "0"}).status_code == 404
    assert (
        client.get(f"/s/{h}/text", params={"entry": result["id"], "block": "9"}).status_code == 404
    )


def test_a_big_session_says_in_plain_words_how_its_page_shows_it(
    client: Any, store: WebStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page of a big session says what it shows (the newest entries of one branch,
    the rest on demand) in plain words: no load times, no internals."""
    h = handle(store.long)

    def note() -> str | None:
        r = client.get(f"/s/{h}")
        assert r.status_code == 200
        found = re.search(r'<p class="info" id="load-note">([^<]*)</p>', r.text)
        return found.group(1) if found else None

    assert note() is None  # small: nothing to say
    monkeypatch.setattr(web_sessions, "BIG_NOTE_BYTES", 1)
    text = note()
    assert text is not None
    assert text.startswith("A big session (") and "newest entries of one branch" in text
    for internal in ("index", "memory", " s,", "read every"):
        assert internal not in text


def test_sessions_are_named_by_handles_never_paths(client: Any, store: WebStore) -> None:
    for path in (store.demo, store.demo.lstrip("/"), "..%2F..%2Fetc%2Fpasswd", "../../etc/passwd"):
        assert client.get(f"/s/{path}").status_code == 404
    assert client.get("/s/" + handle_of("s", "/etc/passwd")).status_code == 404
    # The same id at two paths: two handles, each page its own file.
    a, b = handle(store.other), handle(store.copy)
    assert a != b
    for h, path in ((a, store.other), (b, store.copy)):
        doc = page(client, f"/s/{h}")
        assert path in [d.get("data-path") for d in doc.all("div")] or path in doc.all_text
        commands = [str(btn["data-copy"]) for btn in doc.all("button") if btn.get("data-copy")]
        # The id names two sessions: the resume command names the file.
        assert any(c.endswith(f"resume {path}") for c in commands), commands


def test_resume_commands(client: Any, store: WebStore) -> None:
    doc = page(client, f"/s/{handle(store.demo)}")
    commands = [str(b["data-copy"]) for b in doc.all("button") if b.get("data-copy")]
    with SessionManager.open(store.demo, read_only=True) as sm:
        sid = sm.get_session_id()
    assert commands == [f"sessiontree --agent-dir {store.agent} resume {sid}"]


def test_images_and_blobs_are_checked_before_the_store(
    client: Any, store: WebStore, server: BackgroundServer
) -> None:
    digest = hashlib.sha256(store.image).hexdigest()
    h = handle(store.demo)
    r = client.get(f"/blob/{digest}", params={"s": h})
    assert r.status_code == 200 and r.content == store.image
    assert r.headers["content-type"] == "image/png"
    for bad in (
        digest.upper(),
        digest[:-1],
        digest + "0",
        "..",
        "x" * 64,
        "%2e%2e",
        "%2e%2e%2fetc",
        "../../etc/passwd",
        "." * 64,
    ):
        status, _ = raw_get(server, f"/blob/{bad}?s={h}", cookie=True)
        assert status in (400, 404), bad
    assert client.get(f"/blob/{digest.upper()}", params={"s": h}).status_code == 400
    assert client.get(f"/blob/{'0' * 64}", params={"s": h}).status_code == 404
    assert client.get(f"/blob/{digest}", params={"s": "nope"}).status_code == 404
    # A blob that is not an image is not served as one.
    text_blob = store.agent / "blobs" / hashlib.sha256(b"<script>alert(1)</script>").hexdigest()
    text_blob.write_bytes(b"<script>alert(1)</script>")
    assert client.get(f"/blob/{text_blob.name}", params={"s": h}).status_code == 404
    # Image numbers and entries come from the loaded session.
    assert client.get(f"/s/{h}/img/5", params={"entry": store.ids["img"]}).status_code == 404
    assert client.get(f"/s/{h}/img/x", params={"entry": store.ids["img"]}).status_code == 404
    assert client.get(f"/s/{h}/img/0", params={"entry": "nope"}).status_code == 404


def test_a_hostile_session_renders_as_text(client: Any, store: WebStore) -> None:
    h = handle(store.hostile)
    for url in (f"/s/{h}", "/sessions", "/", "/search?q=window.pwned", "/usage"):
        r = client.get(url)
        assert r.status_code == 200, url
        doc = Markup(r.text)
        assert doc.handlers() == [], url
        assert [s.get("src") for s in doc.all("script")] == ["/static/app.js"], url
        assert not [i for i in doc.all("img") if i.get("src") == "x"], url
        assert 'onerror="window' not in r.text and "<img src=x" not in r.text, url
    doc = page(client, f"/s/{h}")
    text = doc.all_text
    assert text.count(HOSTILE) >= 8  # title, model, message, thinking, tool name, ...
    assert HOSTILE_ID in text
    assert [a["data-id"] for a in articles(doc)][1] == HOSTILE_ID
    assert "[image: image/svg+xml]" in text  # an SVG image is named, never shown
    assert "[image missing from the blob store: blob:sha256:../../../etc/passwd]" in text
    # The PNG whose type carries an attribute is an image of ours: escaped src, no handler.
    assert all(str(i["src"]).startswith(f"/s/{h}/img/") for i in doc.all("img"))
    r = client.get(f"/s/{h}/img/1", params={"entry": "a1"})
    assert r.status_code == 404  # SVG is never served
    # The live stream's JSON and the branch endpoint escape the same way.
    r = client.get(f"/s/{h}/path", params={"leaf": "u2"})
    assert not {"<", ">", "&"} & set(r.text)  # escaped in the JSON itself, as export does
    data = r.json()
    assert Markup(data["html"]).handlers() == [] and "<script>" not in data["html"]


def test_exports(client: Any, store: WebStore, tmp_path: Path) -> None:
    h = handle(store.demo)
    r = client.get(f"/s/{h}/export/md", params={"leaf": store.ids["a3"]})
    assert r.status_code == 200
    assert r.headers["content-disposition"].startswith("attachment;")
    with SessionManager.open(store.demo, read_only=True) as sm:
        assert r.text == export_markdown(sm, store.ids["a3"])
    r = client.get(f"/s/{h}/export/html")
    assert r.headers["content-disposition"].startswith("attachment;")
    metas = Markup(r.text).all("meta")
    assert any("default-src 'none'" in str(m.get("content")) for m in metas)
    assert "<article" in r.text
    r = client.get(f"/s/{h}/export/jsonl", params={"leaf": store.ids["b1"]})
    out = tmp_path / "copy.jsonl"
    out.write_bytes(r.content)
    assert check_session(str(out)) == []
    with SessionManager.open(str(out), read_only=True) as copy:
        assert copy.get_leaf_id() == store.ids["b1"]
    assert client.get(f"/s/{h}/export/exe").status_code == 404
    assert client.get(f"/s/{h}/export/md", params={"leaf": "nope"}).status_code == 404


# ---------------------------------------------------------------------------- search, usage


def test_search_finds_entries_and_says_how(client: Any, store: WebStore) -> None:
    doc = page(client, "/search?q=HOMEPAGE")
    links = [a["href"] for a in doc.all("a") if "at=" in str(a.get("href"))]
    assert len(links) == 2  # the session and its copy
    assert {str(link).split("?")[0] for link in links} == {
        f"/s/{handle(store.other)}",
        f"/s/{handle(store.copy)}",
    }
    assert [m for m in doc.text if m.lower() == "homepage"]  # the match is marked
    assert len(doc.all("mark")) == 2
    summary = doc.all_text
    assert "content index" in summary  # the page says how the sessions were searched
    # The hit's link opens the path to the entry.
    hit = page(client, str(links[0]))
    assert "Why is the homepage slow?" in hit.all_text
    assert "Nothing matches." in page(client, "/search?q=zzzz-not-there").all_text
    assert page(client, "/search").all("mark") == []


def test_usage_matches_the_store(client: Any, store: WebStore) -> None:
    expected = store_stats(store.sessions, store_parts())
    doc = page(client, "/usage")
    text = doc.all_text
    assert "Usage is being computed" not in text
    rows = {}
    table = re.search(r'id="table-models".*?</table>', client.get("/usage").text, re.S)
    assert table is not None
    for row in Markup(table.group()).text:
        rows.setdefault("text", []).append(row)
    joined = " ".join(rows["text"])
    for model, totals in expected.by_model.items():
        assert model in joined
        assert f"{totals.input:,}" in joined
    svgs = re.findall(r"<svg.*?</svg>", client.get("/usage").text, re.S)
    assert len(svgs) == 6
    day_rects = re.findall(r"<rect class=\"s0\"", svgs[0])
    days = {d for d in expected.by_day if d != "unknown"}
    assert len(day_rects) == len(days)
    titles = re.findall(r"<title>([^<]*)</title>", svgs[0])
    for day in days:
        cost = expected.by_day[day].cost
        assert any(t.startswith(day) and f"${cost:,.2f}" in t for t in titles), (day, titles)
    # Per project: each cwd with assistant replies has its row.
    project_table = re.search(r'id="table-projects".*?</table>', client.get("/usage").text, re.S)
    assert project_table is not None
    assert "/work/app" in project_table.group() and "/work/site" in project_table.group()


# ---------------------------------------------------------------------------- live


def _events(client: Any, url: str, found: list[dict[str, Any]], stop: threading.Event) -> None:
    with client.stream("GET", url) as r:
        found.append({"event": "open", "type": r.headers["content-type"]})
        event = None
        try:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event:
                    found.append({"event": event, **json.loads(line[6:])})
                    event = None
                if stop.is_set():
                    return
        except httpx.HTTPError:
            if not stop.is_set():  # the test closed the connection: the end
                raise


def test_live_appends_arrive_as_events(server: BackgroundServer, store: WebStore) -> None:
    h = handle(store.live)
    size = os.path.getsize(store.live)
    found: list[dict[str, Any]] = []
    stop = threading.Event()
    with httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=30) as c:
        reader = threading.Thread(
            target=_events, args=(c, f"/s/{h}/events?from={size}", found, stop), daemon=True
        )
        reader.start()
        deadline = time.monotonic() + 10
        while not found and time.monotonic() < deadline:
            time.sleep(0.02)
        assert found[0]["type"].startswith("text/event-stream")
        with SessionManager.open(store.live) as sm:
            leaf = sm.get_leaf_id()
            new = sm.append_message(user("a live question <b>bold?</b>"))
            sm.flush()
            deadline = time.monotonic() + 10
            while len(found) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            later = sm.append_message(assistant("a live answer"))
            sm.flush()
        deadline = time.monotonic() + 10
        while len(found) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
    found = found[1:]
    assert [f["event"] for f in found] == ["entry", "entry"]
    assert [f["id"] for f in found] == [new, later]
    assert found[0]["parentId"] == leaf and found[1]["parentId"] == new
    assert "a live question &lt;b&gt;bold?&lt;/b&gt;" in found[0]["html"]
    # The picker knows a branch by its tip's own text, its time and id.
    assert found[1]["option"].startswith("assistant: a live answer · 20")
    assert found[1]["option"].endswith(f" · {later}")


def test_the_tail_reads_only_appends_and_sees_rewrites(tmp_path: Path) -> None:
    storage = FileSessionStorage()
    path = tmp_path / "s.jsonl"
    head = json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/", "timestamp": "x"})
    path.write_text(head + "\n")
    tail = Tail(storage, str(path), path.stat().st_size)
    assert tail.poll().entries == []
    line = json.dumps({"type": "message", "id": "a", "parentId": None, "message": {}})
    with open(path, "a") as f:
        f.write(line + "\n" + line.replace('"a"', '"b"')[:20])  # one line and a torn one
    assert [e["id"] for e in tail.poll().entries] == ["a"]
    assert tail.poll().entries == []
    with open(path, "a") as f:
        f.write(line.replace('"a"', '"b"')[20:] + "\n")
    assert [e["id"] for e in tail.poll().entries] == ["b"]
    # Bytes before the old end changed: a rewrite, and the tail ends.
    data = path.read_bytes()
    path.write_bytes(data[:-10] + b"X" * 9 + b"\n" + b"{}\n")
    change = tail.poll()
    assert change.rewritten and tail.poll().rewritten
    # Truncated, or replaced by another file: rewrites too.
    for damage in ("truncate", "replace"):
        path.write_text(head + "\n")
        tail = Tail(storage, str(path), path.stat().st_size)
        tail.poll()
        if damage == "truncate":
            path.write_text("")
        else:
            other = tmp_path / "other"
            other.write_text(head + "\n" + line + "\n")
            os.replace(other, path)
        assert tail.poll().rewritten, damage


# ---------------------------------------------------------------------------- writes, odd text


def test_the_server_never_writes_to_the_store(store: WebStore, tmp_path: Path) -> None:
    before = fingerprint(store.agent)
    with BackgroundServer(FileSessionStorage(), str(store.agent), poll_seconds=0.05) as s:
        with httpx.Client(base_url=s.base, cookies=s.login_cookies(), timeout=30) as c:
            for path in store.sessions:
                h = handle(path)
                for url in (
                    f"/s/{h}",
                    f"/s/{h}/path?leaf=x",
                    f"/s/{h}/export/jsonl",
                    f"/s/{h}/export/html",
                    f"/s/{h}/export/md",
                ):
                    assert c.get(url).status_code in (200, 404)
                with c.stream("GET", f"/s/{h}/events?from=0") as r:
                    next(r.iter_lines())
            for url in ("/", "/sessions", "/usage", "/search?q=python", "/search?q=ci"):
                assert c.get(url).status_code == 200
    assert fingerprint(store.agent) == before
    written = {p.name for p in (store.agent / "cache").iterdir()}
    assert written <= {
        "sessions-meta.db",
        "content-index.db",
        "sessions-meta.db-journal",
        "content-index.db-journal",
        "sessions-meta.db-wal",
        "sessions-meta.db-shm",
        "content-index.db-wal",
        "content-index.db-shm",
    }


def test_lone_surrogates_and_odd_text_do_not_break_pages(agent_dir: Path) -> None:
    directory = agent_dir / "sessions" / "--odd--"
    directory.mkdir(parents=True)
    path = directory / "2026-01-01T00-00-00-000Z_odd.jsonl"
    path.write_text(
        '{"type":"session","version":3,"id":"odd","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/odd"}\n'
        '{"type":"message","id":"a","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z",'
        '"message":{"role":"user","content":"bad \\ud800 half \\u2028 line","timestamp":1}}\n'
    )
    with BackgroundServer(FileSessionStorage(), str(agent_dir)) as s:
        with httpx.Client(base_url=s.base, cookies=s.login_cookies()) as c:
            r = c.get(f"/s/{handle(str(path))}")
            assert r.status_code == 200
            assert "bad \ufffd half \u2028 line" in r.text
            data = c.get(f"/s/{handle(str(path))}/path", params={"leaf": "a"}).json()
            assert "bad" in data["html"]
            assert c.get("/sessions").status_code == 200
            assert c.get("/search", params={"q": "half"}).status_code == 200


def test_an_empty_store(agent_dir: Path) -> None:
    with BackgroundServer(FileSessionStorage(), str(agent_dir)) as s:
        with httpx.Client(base_url=s.base, cookies=s.login_cookies()) as c:
            assert "No sessions in this store." in c.get("/").text
            assert "No session matches." in c.get("/sessions").text
            assert "No usage recorded." in c.get("/usage").text
            assert c.get("/search?q=x").status_code == 200


# ---------------------------------------------------------------------------- the command


class Serving:
    """`sessiontree serve ...` in a subprocess: its printed lines, then Ctrl-C."""

    def __init__(self, agent: Path, *args: str, env: dict[str, str] | None = None) -> None:
        environment = dict(os.environ, PI_CODING_AGENT_DIR=str(agent), PYTHONUNBUFFERED="1")
        environment.update(env or {})
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "sessiontree"), "serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            cwd=REPO_ROOT,
            text=True,
        )
        assert self.proc.stdout is not None
        self.lines = [self.proc.stdout.readline() for _ in range(3)]
        self.url = self.lines[1].strip()
        self.base = self.url.split("?", 1)[0]

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        _out, err = self.proc.communicate(timeout=20)
        assert self.proc.returncode == 0, err
        assert "Traceback" not in err
        return err


LINK = r"http://(127\.\d+\.\d+\.\d+):\d+/\?token=[A-Za-z0-9_-]{32}"


def test_serve_prints_a_link_and_serves_until_interrupted(store: WebStore) -> None:
    serving = Serving(store.agent, "--port", "0")
    try:
        assert serving.lines[0].startswith(f"Serving {store.agent} read-only at")
        match = re.fullmatch(LINK, serving.url)
        assert match is not None, serving.url
        # A random loopback address of its own by default (a host no other server is on).
        assert match.group(1) != "127.0.0.1"
        assert "works once" in serving.lines[2] and "/link" in serving.lines[2]
        with httpx.Client(timeout=10) as c:
            assert moved_to(c.get(serving.url.replace("/?", "/sessions?"))) == "/sessions"
            assert "CI fails on Python version" in c.get(serving.base + "sessions").text
        with httpx.Client(timeout=10) as c:
            assert c.get(serving.url).status_code == 403  # used once already
            assert c.get(serving.base).status_code == 403
    finally:
        serving.stop()
    serving = Serving(store.agent, "--host", "127.0.0.1")  # --host still decides
    try:
        match = re.fullmatch(LINK, serving.url)
        assert match is not None and match.group(1) == "127.0.0.1", serving.url
        with httpx.Client(timeout=10) as c:
            assert c.get(serving.url).status_code == 200
    finally:
        serving.stop()


def test_serve_on_every_address_prints_a_link_on_a_loopback_address_of_its_own(
    store: WebStore,
) -> None:
    """`--host 0.0.0.0` answers on every address, 127/8 too: the printed link names a
    random one of those, so the cookie the browser gets is sent to no other local server
    (on 127.0.0.1 it would go to every one the person visits), as without `--host`."""
    serving = Serving(store.agent, "--host", "0.0.0.0")
    try:
        match = re.fullmatch(LINK, serving.url)
        assert match is not None, serving.url
        assert match.group(1) != "127.0.0.1"
        with httpx.Client(timeout=10) as c:
            assert c.get(serving.url).status_code == 200
            assert c.get(serving.base).status_code == 200
    finally:
        err = serving.stop()
    assert "anyone who can reach it" in err  # the network warning stays


BROWSER_STUB = """#!{python}
import json, os, stat, sys
record = {{"argv": sys.argv, "pid": os.getpid()}}
with open("/proc/self/cmdline", "rb") as f:
    record["cmdline"] = f.read().decode("utf-8", "replace")
target = sys.argv[1]
if target.startswith("file://"):
    from urllib.parse import unquote, urlsplit
    path = unquote(urlsplit(target).path)
    record["path"] = path
    record["mode"] = stat.S_IMODE(os.lstat(path).st_mode)
    record["dir_mode"] = stat.S_IMODE(os.lstat(os.path.dirname(path)).st_mode)
    record["regular"] = stat.S_ISREG(os.lstat(path).st_mode)
    record["owner"] = os.lstat(path).st_uid
    with open(path, encoding="utf-8") as f:
        record["content"] = f.read()
with open({record!r} + ".tmp", "w") as f:
    json.dump(record, f)
os.replace({record!r} + ".tmp", {record!r})
"""


def test_serve_open_gives_the_browser_a_private_file_not_the_link(
    store: WebStore, tmp_path: Path
) -> None:
    """`--open`: the browser's command line (which every local user can read in `ps`)
    holds no token; the file it is given is 0600 in a 0700 dir, moves on to a one-time
    link, and is gone once that link is used."""
    record = tmp_path / "browser.json"
    stub = tmp_path / "browser"
    stub.write_text(BROWSER_STUB.format(python=sys.executable, record=str(record)))
    stub.chmod(0o755)
    serving = Serving(store.agent, "--open", env={"BROWSER": str(stub)})
    try:
        deadline = time.monotonic() + 20
        while not record.exists():
            assert time.monotonic() < deadline, "the browser was not started"
            time.sleep(0.05)
        seen = json.loads(record.read_text())
        printed = token_of(serving.url)
        assert seen["argv"][1].startswith("file://")
        assert "token" not in seen["cmdline"] and printed not in seen["cmdline"]
        assert seen["regular"] and seen["owner"] == os.getuid()
        assert seen["mode"] == 0o600 and seen["dir_mode"] == 0o700
        target = moved_to(types.SimpleNamespace(text=seen["content"]))
        assert target.startswith(serving.base + "?token=")
        token = token_of(target)
        assert token != printed and token not in seen["cmdline"]
        assert Path(seen["path"]).exists()
        with httpx.Client(timeout=10) as browser:
            assert browser.get(target).status_code == 200
            assert "CI fails on Python version" in browser.get(serving.base + "sessions").text
        # Used: the file and its dir are gone, and the link opens nothing any more.
        deadline = time.monotonic() + 10
        while Path(seen["path"]).parent.exists():
            assert time.monotonic() < deadline, "the file outlived its link"
            time.sleep(0.05)
        with httpx.Client(timeout=10) as other:
            assert other.get(target).status_code == 403
            # The printed link is another one, good once too.
            assert other.get(serving.url).status_code == 200
            assert other.get(serving.base).status_code == 200
    finally:
        serving.stop()


def test_an_unopened_browser_file_goes_and_its_link_with_it(store: WebStore) -> None:
    from sessiontree.web.server import BrowserFile

    with BackgroundServer(FileSessionStorage(), str(store.agent)) as server:
        unused = BrowserFile(server.options, server.base + "/", seconds=0.2)
        target = moved_to(types.SimpleNamespace(text=Path(unused.path).read_text()))
        deadline = time.monotonic() + 10
        while os.path.exists(unused.directory):
            assert time.monotonic() < deadline, "the file outlived its time"
            time.sleep(0.05)
        with httpx.Client(timeout=10) as c:
            assert c.get(target).status_code == 403
        removed = BrowserFile(server.options, server.base + "/", seconds=60)
        target = moved_to(types.SimpleNamespace(text=Path(removed.path).read_text()))
        removed.remove()  # as `serve` does when it stops
        assert not os.path.exists(removed.directory)
        with httpx.Client(timeout=10) as c:
            assert c.get(target).status_code == 403


def test_serve_without_the_web_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from sessiontree.cli import app

    monkeypatch.setitem(sys.modules, "sessiontree.web.server", None)
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 1
    assert "pip install 'sessiontree[web]'" in result.stderr


def test_serve_refuses_a_port_in_use(store: WebStore) -> None:
    import socket

    from typer.testing import CliRunner

    from sessiontree.cli import app

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--host", "127.0.0.1", "--port", str(port)])
    finally:
        taken.close()
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_export_html_is_drawn_by_the_shared_templates(store: WebStore) -> None:
    from sessiontree.export import export_html

    with SessionManager.open(store.demo, read_only=True) as sm:
        page_text = export_html(sm)
        doc = Markup(page_text)
        # The same macro draws the export's entries and the app's.
        assert len(articles(doc)) == len(sm.get_entries())
        for entry in sm.get_branch():
            if entry["type"] == "message":
                for line in message_text(entry["message"], tools=False).split("\n"):
                    if line and line != "[image]":
                        assert line in doc.all_text
        assert any(str(u).startswith("data:image/png;base64,") for u in doc.urls())
        png = base64.b64decode(
            next(str(u) for u in doc.urls() if str(u).startswith("data:image/png"))[22:]
        )
        assert png == store.image


def test_a_database_store(store: WebStore, tmp_path: Path) -> None:
    """With `--store postgresql://...` the app reads the database and nothing on the host."""
    import shutil

    from sessiontree.maintenance import import_files
    from tests.pg_support import pg_storage

    agent = tmp_path / "agent"
    shutil.copytree(store.agent, agent, ignore=shutil.ignore_patterns("cache"))
    with pg_storage(root=agent) as storage:
        import_files(str(agent), storage)
        os.rename(agent, tmp_path / "moved")  # from now on only the database has them
        with BackgroundServer(storage, str(agent), poll_seconds=0.05) as s:
            with httpx.Client(base_url=s.base, cookies=s.login_cookies(), timeout=30) as c:
                assert "/work/app" in c.get("/").text
                demo = store.demo.replace(str(store.agent), str(agent))
                doc = Markup(c.get(f"/s/{handle(demo)}?leaf={store.ids['img']}").text)
                assert "Here is the dashboard:" in doc.all_text
                image = c.get(str(doc.all("img")[0]["src"]))
                assert image.status_code == 200 and image.content == store.image
                digest = hashlib.sha256(store.image).hexdigest()
                blob = c.get(f"/blob/{digest}", params={"s": handle(demo)})
                assert blob.content == store.image
                hits = Markup(c.get("/search?q=homepage").text)
                assert len(hits.all("mark")) == 2
                assert "anthropic/claude-sonnet-4-5" in c.get("/usage").text
                live = store.live.replace(str(store.agent), str(agent))
                found: list[dict[str, Any]] = []
                stop = threading.Event()
                size = storage.stat(live).size
                reader = threading.Thread(
                    target=_events,
                    args=(c, f"/s/{handle(live)}/events?from={size}", found, stop),
                    daemon=True,
                )
                reader.start()
                with SessionManager.open(live, storage=storage) as sm:
                    new = sm.append_message(user("appended to the database"))
                    sm.flush()
                deadline = time.monotonic() + 10
                while len(found) < 2 and time.monotonic() < deadline:
                    time.sleep(0.05)
                stop.set()
                assert [f.get("id") for f in found[1:]] == [new]
    assert not agent.exists()  # nothing was written on this host


def test_a_session_that_went_bad_is_reported_not_a_traceback(agent_dir: Path) -> None:
    with SessionManager.create("/bad", str(agent_dir / "sessions" / "--bad--")) as sm:
        sm.append_message(user("soon gone"))
        sm.append_message(assistant("yes"))
        path = str(sm.get_session_file())
    with BackgroundServer(FileSessionStorage(), str(agent_dir)) as s:
        with httpx.Client(base_url=s.base, cookies=s.login_cookies()) as c:
            assert c.get("/sessions").status_code == 200  # listed while it was good
            Path(path).write_text("not a session\n")
            r = c.get(f"/s/{handle(path)}")
            assert r.status_code == 500 and "Unreadable" in r.text and path in r.text
            assert "Traceback" not in r.text
            os.unlink(path)
            r = c.get(f"/s/{handle(path)}/path", headers={"accept": "application/json"})
            assert r.status_code == 500 and path in r.json()["error"]


# ---------------------------------------------------------------------------- the environment


def test_two_stores_served_at_once_each_use_their_own_agent_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each app works on the agent dir it was given, whatever `$PI_CODING_AGENT_DIR`
    says while it serves, and no request changes the environment:
    the server's thread pool shares it with every other thread of the process."""
    from concurrent.futures import ThreadPoolExecutor

    from sessiontree import BlobStore
    from sessiontree.layout import encode_session_dir_name
    from tests.web_support import png

    one, two = tmp_path / "one", tmp_path / "two"
    image = png(64, 48, (1, 2, 3))
    digest = hashlib.sha256(image).hexdigest()
    sessions = {}
    for agent, words in ((one, "first store"), (two, "second store")):
        directory = agent / "sessions" / encode_session_dir_name("/work/app")
        # Both name the image; only `one` has it (`two` has no blobs/ of its own).
        with SessionManager.create(
            "/work/app", str(directory), blob_store=BlobStore(str(one / "blobs"))
        ) as sm:
            sm.append_message(user(words))
            sm.append_message(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "data": base64.b64encode(image).decode(),
                            "mimeType": "image/png",
                        }
                    ],
                    "timestamp": 1,
                }
            )
            sm.append_message(assistant(f"answer from the {words}"))
            sessions[agent] = str(sm.get_session_file())
    assert (one / "blobs" / digest).exists() and not (two / "blobs").exists()
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(one))
    with (
        BackgroundServer(FileSessionStorage(), str(one)) as first,
        BackgroundServer(FileSessionStorage(), str(two)) as second,
        httpx.Client(base_url=first.base, timeout=30) as a,
        httpx.Client(base_url=second.base, timeout=30) as b,
    ):
        a.get(first.url)  # each follows its printed link, as a browser does
        b.get(second.url)
        assert a.get("/").status_code == b.get("/").status_code == 200

        def fetch(n: int) -> None:
            client, agent = (a, one) if n % 2 == 0 else (b, two)
            h = handle(sessions[agent])
            if n % 4 < 2:
                r = client.get(f"/blob/{digest}", params={"s": h})
                # `two` has no such blob: never the one in `one` (the environment's).
                assert r.status_code == (200 if agent == one else 404), (n, r.status_code)
            else:
                text = client.get(f"/s/{h}").text
                assert ("--agent-dir" in text) and (str(agent) in text), n
                other = two if agent == one else one
                assert f"answer from the {'second' if other == two else 'first'}" not in text

        seen: set[str | None] = set()
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                seen.add(os.environ.get("PI_CODING_AGENT_DIR"))

        watcher = threading.Thread(target=sample)
        watcher.start()
        try:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(fetch, range(120)))
        finally:
            stop.set()
            watcher.join()
        assert seen == {str(one)}  # no request took the variable away, even for a moment
        # Whatever the environment says meanwhile (set, unset, the other store).
        stop.clear()

        def toggle() -> None:
            values = [str(one), None, str(two)]
            n = 0
            while not stop.is_set():
                value = values[n % 3]
                if value is None:
                    os.environ.pop("PI_CODING_AGENT_DIR", None)
                else:
                    os.environ["PI_CODING_AGENT_DIR"] = value
                n += 1
                time.sleep(0.001)

        toggler = threading.Thread(target=toggle)
        toggler.start()
        try:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(fetch, range(120)))
        finally:
            stop.set()
            toggler.join()


def test_a_foreign_session_is_live_without_a_false_rewrite(tmp_path: Path) -> None:
    """Claude Code and Codex sessions: the page's offset counts the bytes the tail reads
    (the pi-format view), so an unchanged file is no "rewritten" file, and an append to
    the transcript arrives as an entry."""
    from sessiontree import Store
    from tests import foreign_support as fs
    from tests.conftest import REAL_FILES, unavailable

    foreign = REAL_FILES / "foreign"
    if not foreign.is_dir():
        unavailable(f"real files {foreign} are missing")
    claude, codex, placed = fs.layout(foreign, tmp_path / "stores")
    name = "kvsankar__agent-history__tests__fixtures__real_sessions__claude__session-01.jsonl"
    for home, target in ((claude, placed[name]), (codex, None)):
        with BackgroundServer(Store(str(home)), poll_seconds=0.05) as s:
            with httpx.Client(base_url=s.base, cookies=s.login_cookies(), timeout=30) as c:
                if target is None:  # a Codex session: the first one listed
                    first = re.search(r'href="(/s/[^"?]+)"', c.get("/sessions").text)
                    assert first is not None
                    url = first.group(1)
                else:
                    url = f"/s/{handle(str(target))}"
                text = c.get(url).text
                offset = re.search(r'data-offset="(\d+)"', text)
                assert offset is not None
                found: list[dict[str, Any]] = []
                stop = threading.Event()
                reader = threading.Thread(
                    target=_events,
                    args=(c, f"{url}/events?from={offset.group(1)}", found, stop),
                    daemon=True,
                )
                reader.start()
                time.sleep(0.5)  # ten polls of an unchanged file
                assert [f["event"] for f in found] == ["open"], home
                if target is not None:
                    lines = target.read_text().splitlines()
                    last = json.loads(lines[-2])
                    added = {
                        **last,
                        "parentUuid": last["uuid"],
                        "uuid": "11111111-2222-4333-8444-555555555555",
                        "timestamp": "2026-06-05T04:57:00.000Z",
                        "message": {
                            **last["message"],
                            "id": "msg_live",
                            "content": [{"type": "text", "text": "a live reply"}],
                        },
                    }
                    with open(target, "a") as f:
                        f.write(json.dumps(added) + "\n")
                    deadline = time.monotonic() + 10
                    while len(found) < 2 and time.monotonic() < deadline:
                        time.sleep(0.05)
                    assert [f["event"] for f in found[1:]] == ["entry"], found
                    assert "a live reply" in found[1]["html"]
                stop.set()


def test_the_search_form_has_the_cli_filters(client: Any, store: WebStore) -> None:
    """regex (and ?regex=1), role, project, since/until, as `sessiontree search` takes them."""

    def hits(query: str) -> list[str]:
        doc = page(client, "/search?" + query)
        return [str(a["href"]) for a in doc.all("a") if "at=" in str(a.get("href"))]

    assert hits(urlencode({"q": r"pinned python3\.\d+", "regex": "1"}))
    assert not hits(urlencode({"q": r"pinned python3\.\d+"}))  # as text, no match
    users = hits(urlencode({"q": "fail on CI", "role": "user"}))
    assistants = hits(urlencode({"q": "CI images", "role": "assistant"}))
    assert users and assistants and not set(users) & set(assistants)
    assert not hits(urlencode({"q": "python", "since": "2099-01-01"}))
    assert hits(urlencode({"q": "python", "until": "2099-01-01"}))
    demo = handle_of("p", os.path.dirname(store.demo))
    found = hits(urlencode({"q": "python", "project": demo}))
    assert found and all(h.startswith(f"/s/{handle(store.demo)}") for h in found)
    # The form shows what was asked, and a bad value is said, not an empty result.
    doc = page(client, "/search?" + urlencode({"q": "python", "role": "asistant"}))
    assert "Unknown role 'asistant'" in doc.all_text
    doc = page(client, "/search?" + urlencode({"q": "(", "regex": "1"}))
    assert "Bad regular expression" in doc.all_text
    doc = page(client, "/search?" + urlencode({"q": "x", "since": "someday"}))
    assert any(p.get("id") == "search-problem" for p in doc.all("p"))
    doc = page(client, "/search?" + urlencode({"q": "python", "regex": "1", "role": "user"}))
    assert any(i.get("name") == "regex" and "checked" in i for i in doc.all("input"))
    assert any(o.get("value") == "user" and "selected" in o for o in doc.all("option"))


def test_the_usage_page_names_its_range_and_sums_it(client: Any, store: WebStore) -> None:
    """7d/30d/90d/all presets; the range named; totals, models and projects of the range;
    an activity heatmap of its days."""
    for _ in range(50):
        doc = page(client, "/usage?range=all")
        if "usage-summary" in {a.get("id") for a in doc.all("p")}:
            break
        time.sleep(0.1)
    text = doc.all_text
    # The store's replies are of January 2026 and of the days the live tests wrote on.
    assert re.search(r"All time \(\d{4}-\d\d-\d\d to \d{4}-\d\d-\d\d, UTC\)", text)
    assert [a["href"] for a in doc.all("a") if "range=" in str(a.get("href"))] == [
        "/usage?range=7d",
        "/usage?range=30d",
        "/usage?range=90d",
        "/usage?range=all",
    ]
    cells = [td for td in doc.all("td") if str(td.get("title", "")).startswith("2026-01-01: ")]
    assert len(cells) == 1 and cells[0]["class"] != "l0"
    # The last 7 days leave January out: the totals say so, not only the charts.
    recent = page(client, "/usage?range=7d").all_text
    assert re.search(
        r"The last 7 days \((no replies|\d{4}-\d\d-\d\d to \d{4}-\d\d-\d\d), UTC\)", recent
    )
    replies = [
        int(re.findall(r"([\d,]+) replies · ", t)[0].replace(",", "")) for t in (text, recent)
    ]
    assert replies[1] < replies[0]
    # An unknown range is the whole.
    assert "All time (" in page(client, "/usage?range=forever").all_text


def test_the_usage_charts_follow_the_range_they_name(client: Any, store: WebStore) -> None:
    """All time: every day from the first with replies (January 2026, months before the
    live tests' days) to the last; the last 7 days: seven days up to today, replies or
    not. The heatmap names its weekdays and months and has a legend."""
    for _ in range(50):
        whole = client.get("/usage?range=all").text
        if 'id="usage-summary"' in whole:
            break
        time.sleep(0.1)
    chart = whole.split('id="chart-day-cost"', 1)[1].split("</figure>", 1)[0]
    assert "<title>2026-01-01 · cost: " in chart
    labels = re.findall(r'text-anchor="middle">([\d-]+)</text>', chart)
    assert labels[0] == min(re.findall(r"All time \((\d{4}-\d\d-\d\d)", whole))
    week = client.get("/usage?range=7d").text
    chart = week.split('id="chart-day-cost"', 1)[1].split("</figure>", 1)[0]
    if "No usage recorded" not in chart:
        today = datetime.now(UTC).date()
        days = [(today - timedelta(days=6 - n)).isoformat() for n in range(7)]
        assert re.findall(r'text-anchor="middle">([\d-]+)</text>', chart) == days
    heatmap = Markup(whole)
    assert [t for t in heatmap.all("th") if t.get("class") == "weekday"]
    assert "Mon" in whole.split('id="heatmap"', 1)[1] and ">Jan<" in whole
    assert 'id="heatmap-legend"' in whole


@pytest.mark.parametrize("value", ["9999-12-31", "99999999999999999999d", "9" * 5000 + "d"])
def test_a_search_time_out_of_range_is_said_on_the_page(client: Any, value: str) -> None:
    """These answered 500 (OverflowError, ValueError; the content index's SQLite integers)."""
    for name in ("since", "until"):
        doc = page(client, "/search?" + urlencode({"q": "python", name: value}))
        assert any(p.get("id") == "search-problem" for p in doc.all("p")), name


@pytest.mark.parametrize("query", ["(x+x+)+y", "(a|aa)*b", "(?:\\w+\\s?)*$"])
def test_a_catastrophic_regular_expression_is_refused_not_run(client: Any, query: str) -> None:
    """`?regex=1&q=(x+x+)+y` over a message holding 'y ' and 22 x's held a server thread
    at full CPU for good (Python's `re` cannot be interrupted in a thread): a pattern
    that repeats a repetition or an alternation is refused, the page says why."""
    doc = page(client, "/search?" + urlencode({"q": query, "regex": "1"}))
    problem = [p for p in doc.all("p") if p.get("id") == "search-problem"]
    assert problem and "repeats a group" in doc.all_text
    assert not any(p.get("id") == "search-summary" for p in doc.all("p"))
    # Ordinary patterns still run.
    doc = page(
        client, "/search?" + urlencode({"q": r"(pinned|installed) python3\.\d+", "regex": "1"})
    )
    assert any(p.get("id") == "search-summary" for p in doc.all("p"))


def test_every_web_regular_expression_search_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Polynomial backtracking (`ж*ж*ж*ж*ж*\\d` on a long run of ж: years with `re`) is
    stopped after the web's time limit, and the page says why; ordinary patterns run
    (`ж*ж*ж*ж*ж*щ` too: the engine sees at once that no щ is there)."""
    import sessiontree.web.app as web_app
    from sessiontree.format import serialize_entry

    agent = tmp_path / "agent"
    directory = agent / "sessions" / "--work-slow--"
    directory.mkdir(parents=True)
    header = {
        "type": "session",
        "version": 3,
        "id": "slow",
        "timestamp": "2026-01-01T00:00:00.000Z",
    }
    entry = {
        "type": "message",
        "id": "e1",
        "parentId": None,
        "timestamp": "2026-01-01T00:00:01.000Z",
        "message": {"role": "user", "content": "ж" * 4000 + " and then plain words"},
    }
    (directory / "2026-01-01T00-00-00-000Z_slow.jsonl").write_text(
        serialize_entry({**header, "cwd": "/work/slow"}) + "\n" + serialize_entry(entry) + "\n"
    )
    monkeypatch.setattr(web_app, "REGEX_SECONDS", 0.5)
    with (
        BackgroundServer(FileSessionStorage(), str(agent)) as server,
        httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=60) as c,
    ):
        doc = page(c, "/search?" + urlencode({"q": r"ж*ж*ж*ж*ж*\d", "regex": "1"}))
        problem = [p for p in doc.all("p") if p.get("id") == "search-problem"]
        assert problem and "took more than 0.5 s" in doc.all_text
        doc = page(c, "/search?" + urlencode({"q": "ж*ж*ж*ж*ж*щ", "regex": "1"}))
        assert any(p.get("id") == "search-summary" for p in doc.all("p"))
        doc = page(c, "/search?" + urlencode({"q": r"ж+ and \w+ plain", "regex": "1"}))
        assert any(p.get("id") == "search-summary" for p in doc.all("p"))
        assert "search-problem" not in str(doc.all("p"))


def test_the_usage_page_counts_what_pi16_counts(agent_dir: Path) -> None:
    """The sample pi 1.6.0 wrote (tests/data/pi16): 10,800 in / 1,220 out / 54,000 cache
    read in pi's totals (`tests/reports/test_usage_pi16.py` asks pi); the page said 8,000 / 800 /
    4,000, the assistant replies alone."""
    from tests.conftest import FIXTURES

    directory = agent_dir / "sessions" / "--work-demo--"
    directory.mkdir(parents=True)
    sample = FIXTURES / "pi16" / "usage-sample.jsonl"
    (directory / "2026-12-06T19-50-36-276Z_usage-sample.pi16.jsonl").write_bytes(
        sample.read_bytes()
    )
    with BackgroundServer(FileSessionStorage(), str(agent_dir)) as s:
        with httpx.Client(base_url=s.base, cookies=s.login_cookies(), timeout=30) as c:
            text = page(c, "/usage").all_text
    for figure in ("10,800", "1,220", "54,000", "Tools/summaries"):
        assert figure in text, figure
