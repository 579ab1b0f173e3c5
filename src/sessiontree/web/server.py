"""Running the app: bind the socket first (so the printed URL has the real port and
works the moment it is printed), then hand it to uvicorn."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
import webbrowser
from collections.abc import Callable, Sequence

import uvicorn

from ..storage.base import SessionStorage
from .app import ServeOptions, create_app
from .security import new_token

__all__ = ["BackgroundServer", "bind", "is_loopback", "serve", "url_for"]


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


def url_for(sock: socket.socket, token: str) -> str:
    """The URL to open: the bound address (loopback for a wildcard bind) and the token."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


def serve(
    storage: SessionStorage,
    agent_dir: str,
    *,
    host: str,
    port: int,
    announce: Callable[[str], None],
    open_browser: bool = False,
    allowed_hosts: Sequence[str] = (),
    use_index: bool = True,
) -> None:
    """Serve until interrupted (Ctrl-C, SIGTERM), then return."""
    sock = bind(host, port)
    token = new_token()
    port = sock.getsockname()[1]
    options = ServeOptions(
        token, f"sessiontree-{port}", allowed_hosts=allowed_hosts, use_index=use_index
    )
    app = create_app(storage, agent_dir, options)
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
    url = url_for(sock, token)
    announce(url)
    if open_browser:
        webbrowser.open(url)  # the socket listens already: the request waits for uvicorn
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn has shut down and re-raised the signal: Ctrl-C is the way to stop
    finally:
        sock.close()
        app.state.routes.close()


class BackgroundServer:
    """The app served from a thread (tests, benchmarks, the screenshot script):
    `with BackgroundServer(storage, agent_dir) as s: s.url` (with the token)."""

    def __init__(
        self,
        storage: SessionStorage,
        agent_dir: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        use_index: bool = True,
        poll_seconds: float | None = None,
    ) -> None:
        self.sock = bind(host, port)
        self.port = int(self.sock.getsockname()[1])
        self.token = new_token()
        self.options = ServeOptions(self.token, f"sessiontree-{self.port}", use_index=use_index)
        if poll_seconds is not None:
            self.options.poll_seconds = poll_seconds
        self.app = create_app(storage, agent_dir, self.options)
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=1,
        )
        self.server = uvicorn.Server(config)
        self.url = url_for(self.sock, self.token)
        self.base = self.url.split("/?", 1)[0]
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

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
