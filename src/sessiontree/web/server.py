"""Running the app: bind the socket first (so the printed URL has the real port and
works the moment it is printed), then hand it to uvicorn.

By default the server listens on a random address of 127/8 (Linux answers all of
them on the loopback device): a browser sends a cookie to every port of its host,
and no other local server is on that host. Where such an address cannot be bound
(macOS has only 127.0.0.1), it falls back to 127.0.0.1 and says so. A wildcard
bind (`--host 0.0.0.0`) answers on those addresses too: its link names one of them.

`--open` never puts the link on a command line (every local user can read those):
the browser is given a file, private to the user, that moves on to the link.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
import webbrowser
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

import uvicorn

from sessiontree.storage import SessionStorage
from sessiontree.store import Store
from sessiontree.web.app import ServeOptions, create_app

__all__ = [
    "BROWSER_FILE_SECONDS",
    "BackgroundServer",
    "BrowserFile",
    "bind",
    "is_loopback",
    "link_host",
    "listen",
    "random_loopback",
    "serve",
    "url_for",
]

BROWSER_FILE_SECONDS = 120.0
"""How long the file `--open` gives the browser lives (and its link works) unopened."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port` (0: a free port)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def random_loopback() -> str:
    """A random address of 127.0.0.0/8 other than 127.0.0.1 (and no .0 or .255 end)."""
    while True:
        address = (
            f"127.{secrets.randbelow(256)}.{secrets.randbelow(256)}.{1 + secrets.randbelow(254)}"
        )
        if address != "127.0.0.1":
            return address


def listen(host: str | None, port: int) -> tuple[socket.socket, str | None]:
    """A listening socket on `host` (None: a random loopback address) and a warning
    when the random address could not be had (the socket is then on 127.0.0.1)."""
    if host is not None:
        return bind(host, port), None
    address = random_loopback()
    try:
        return bind(address, port), None
    except OSError as exc:
        sock = bind("127.0.0.1", port)
        warning = (
            f"cannot listen on a loopback address of its own here ({address}: "
            f"{exc.strerror or exc}); listening on 127.0.0.1, where the browser also sends "
            "this server's cookie to the other local servers it visits"
        )
        return sock, warning


def _answers(address: str, port: int) -> bool:
    """Whether a connection to `address`:`port` is taken (by our listening socket)."""
    try:
        socket.create_connection((address, port), timeout=1).close()
    except OSError:
        return False
    return True


def link_host(sock: socket.socket) -> str:
    """The address the printed link names: the bound one; for a wildcard bind (which
    answers on every local address) a random loopback address of its own where one
    reaches the socket (Linux answers all of 127/8), so no other local server gets the
    cookie, else 127.0.0.1 (IPv6: ::1)."""
    host, port = sock.getsockname()[:2]
    if host == "::":
        return "::1"
    if host != "0.0.0.0":
        return str(host)
    address = random_loopback()
    return address if _answers(address, port) else "127.0.0.1"


def url_for(sock: socket.socket, token: str | None = None, host: str | None = None) -> str:
    """The URL to open: `host` (default: `link_host`) and the bound port, with `token`."""
    port = sock.getsockname()[1]
    if host is None:
        host = link_host(sock)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token is not None else "")


class BrowserFile:
    """A file for the browser that moves on to a one-time link: the link is in the file
    (0600, in a new 0700 dir), never on the browser's command line.

    The file goes when the link is used, after `seconds`, or with `remove()`; its link
    stops working with it.
    """

    def __init__(self, options: ServeOptions, base: str, seconds: float) -> None:
        self._lock = threading.Lock()
        self.directory = tempfile.mkdtemp(prefix="sessiontree-open-")  # 0700
        self.path = os.path.join(self.directory, "open.html")
        self._keys = options.keys
        self._token = options.keys.new_link(on_redeem=self._forget)
        target = escape(base + "?token=" + self._token, quote=True)
        page = (
            '<!DOCTYPE html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
            f'<meta http-equiv="refresh" content="0;url={target}"><title>sessiontree</title>'
            f'<p><a href="{target}">Open sessiontree</a></p>\n'
        )
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            fd = os.open(self.path, flags, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(page)
        except BaseException:
            self.remove()
            raise
        self._timer = threading.Timer(seconds, self.remove)
        self._timer.daemon = True
        self._timer.start()

    @property
    def url(self) -> str:
        return Path(self.path).as_uri()

    def _forget(self) -> None:
        """The link was used: the file has done its work."""
        self._delete()

    def remove(self) -> None:
        """Remove the file and make its link useless (if still unused)."""
        self._keys.revoke(self._token)
        self._delete()

    def _delete(self) -> None:
        timer = getattr(self, "_timer", None)
        if timer is not None:
            timer.cancel()
        with self._lock:
            shutil.rmtree(self.directory, ignore_errors=True)


def _open_browser(options: ServeOptions, base: str, warn: Callable[[str], None]) -> BrowserFile:
    """Open the app in the default browser through a `BrowserFile`.

    From a thread: a `$BROWSER` command may not return before the browser does, and
    the server must answer it meanwhile.
    """
    page = BrowserFile(options, base, BROWSER_FILE_SECONDS)

    def run() -> None:
        if not webbrowser.open(page.url):
            page.remove()
            warn("no browser could be started; open the link above")

    threading.Thread(target=run, name="sessiontree-open", daemon=True).start()
    return page


def serve(
    store: Store | Sequence[Store],
    *,
    host: str | None,
    port: int,
    announce: Callable[[str], None],
    warn: Callable[[str], None],
    open_browser: bool = False,
    allowed_hosts: Sequence[str] = (),
    use_index: bool = True,
) -> None:
    """Serve `store` (or several stores, as one) until interrupted (Ctrl-C, SIGTERM),
    then return.

    `host` None: a random loopback address. `announce` gets the printed one-time
    link, `warn` what the user should know (a fallback address, no browser).
    """
    sock, warning = listen(host, port)
    if warning is not None:
        warn(warning)
    port = sock.getsockname()[1]
    options = ServeOptions(f"sessiontree-{port}", allowed_hosts=allowed_hosts, use_index=use_index)
    app = create_app(store, options)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    opened = None
    try:
        shown = link_host(sock)
        announce(url_for(sock, options.keys.new_link(), shown))
        if open_browser:
            # The socket listens already: the browser's request waits for uvicorn.
            opened = _open_browser(options, url_for(sock, host=shown), warn)
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn has shut down and re-raised the signal: Ctrl-C is the way to stop
    finally:
        sock.close()
        app.state.routes.close()
        if opened is not None:
            opened.remove()


class BackgroundServer:
    """The app served from a thread (tests, benchmarks, the screenshot script):
    `with BackgroundServer(store) as s: s.url` (a one-time link); `s.new_link()` makes
    another, `s.login_cookies()` a browser's cookie outright. Given a storage and its
    agent dir instead of a `Store`, it serves `Store(agent_dir, storage=storage)`; given
    several stores, it serves them as one."""

    def __init__(
        self,
        store: Store | Sequence[Store] | SessionStorage,
        agent_dir: str | None = None,
        *,
        host: str | None = None,
        port: int = 0,
        use_index: bool = True,
        poll_seconds: float | None = None,
    ) -> None:
        self.sock, self.warning = listen(host, port)
        self.host = str(self.sock.getsockname()[0])
        self.port = int(self.sock.getsockname()[1])
        self.options = ServeOptions(f"sessiontree-{self.port}", use_index=use_index)
        if poll_seconds is not None:
            self.options.poll_seconds = poll_seconds
        if isinstance(store, Store):
            stores = [store]
        elif isinstance(store, Sequence):
            stores = list(store)
        else:
            stores = [Store(agent_dir, storage=store)]
        self.store = stores[0]
        self.stores = stores
        self.app = create_app(stores, self.options)
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=1,
        )
        self.server = uvicorn.Server(config)
        self.link_host = link_host(self.sock)
        self.base = url_for(self.sock, host=self.link_host).rstrip("/")
        self.url = self.new_link()
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def new_link(self) -> str:
        """A new one-time link (as `serve` prints)."""
        return url_for(self.sock, self.options.keys.new_link(), self.link_host)

    def login_cookies(self) -> dict[str, str]:
        """The cookie a browser gets for a link, without the round trip."""
        value = self.options.keys.redeem(self.options.keys.new_link())
        assert value is not None
        return {self.options.cookie: value}

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the web server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
        self.app.state.routes.close()
