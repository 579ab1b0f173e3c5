"""The gate in front of every request: Host check, one-time links, cookies, headers.

* **Host.** A page of another site can make a browser send requests to this
  server under its own name (DNS rebinding); such requests carry that name in
  `Host`. Only `localhost`, IP literals and the names given with `--allow-host` pass.
* **Links.** The server prints a URL holding a random token (`Keys.new_link`). A
  token works once: the request that brings it gets a session cookie instead
  (HttpOnly, SameSite=Strict, no expiry; its value is another random string, not
  the token) and a page that moves on to the same URL without the token. The
  token is then forgotten, so the URL left in the browser's history, a shell's
  scrollback or a log opens nothing. Later requests need the cookie. A browser
  with the cookie gets more one-time links at `/link` (for another browser).
* **Cookies.** A browser sends a cookie to every port of its host; so the cookie
  is named after the port and is a key to this server only (random per server),
  and `serve` listens on a random address of 127/8 by default, a host no other
  server uses.
* **Headers.** Every response carries a Content-Security-Policy that allows
  nothing from anywhere but this server and no inline script or style, and
  forbids framing, sniffing, referrers and caching.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import logging
import secrets
import threading
from collections.abc import Callable, Iterable
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSP", "Guard", "Keys", "host_allowed"]

log = logging.getLogger("sessiontree")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "cache-control": "no-store",
}
REFUSED = (
    b"<!DOCTYPE html><meta charset=utf-8><title>Refused</title>"
    b"<p>This sessiontree server answers only a browser that opened one of its links "
    b"(the one <code>sessiontree serve</code> printed, with <code>?token=</code>). "
    b"Each link works once: a browser that has opened the store gets a new link "
    b"for another browser at <code>/link</code>; restarting "
    b"<code>sessiontree serve</code> prints a new one too.</p>\n"
)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


class Keys:
    """The one-time link tokens a server handed out and the session cookies they became.

    Only digests are kept; looking one up reveals nothing about other keys.
    Thread-safe (links are made from other threads than the server's).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._links: dict[str, Callable[[], None] | None] = {}
        self._cookies: set[str] = set()

    def new_link(self, on_redeem: Callable[[], None] | None = None) -> str:
        """A new token that opens the store once; `on_redeem` runs when it does."""
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._links[_digest(token)] = on_redeem
        return token

    def revoke(self, token: str) -> bool:
        """Forget an unused token; whether it was still unused."""
        digest = _digest(token)
        with self._lock:
            if digest not in self._links:
                return False
            del self._links[digest]
            return True

    def redeem(self, token: str) -> str | None:
        """A new session cookie value for an unused token (which is used up), else None."""
        digest = _digest(token)
        with self._lock:
            if digest not in self._links:
                return None
            found = self._links.pop(digest)
            cookie = secrets.token_urlsafe(32)
            self._cookies.add(_digest(cookie))
        if found is not None:
            try:
                found()
            except Exception:  # a cleanup's failure must not refuse the user
                log.warning("after a link was opened: cleanup failed", exc_info=True)
        return cookie

    def admits(self, cookie: str) -> bool:
        """Whether `cookie` is the value of a session cookie this server set."""
        with self._lock:
            return _digest(cookie) in self._cookies


def _hostname(host: str) -> str | None:
    """The name part of a Host header (no port; IPv6 without brackets)."""
    host = host.strip().lower()
    if not host:
        return None
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else None
    name, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
    if port and not port.isdigit():
        return None
    return name or None


def host_allowed(host: str | None, extra: Iterable[str] = ()) -> bool:
    """Whether a request's Host header names this machine in a way a rebound DNS
    name cannot: `localhost`, an IP address, or a name the user allowed."""
    if host is None:
        return False
    name = _hostname(host)
    if name is None:
        return False
    if name == "localhost" or name in {e.lower() for e in extra}:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Guard:
    """ASGI middleware: refuse what is not for us, then add the security headers."""

    def __init__(
        self, app: ASGIApp, keys: Keys, cookie: str, allowed_hosts: Iterable[str] = ()
    ) -> None:
        self.app = app
        self.keys = keys
        self.cookie = cookie
        self.allowed_hosts = tuple(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here: the connection is closed unanswered
        headers = Headers(scope=scope)
        if not host_allowed(headers.get("host"), self.allowed_hosts):
            await _plain(
                send,
                421,
                b"Misdirected request: this server answers only to localhost and IP addresses.\n",
            )
            return
        admitted = self._admitted(headers)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), True))
        given = query.get("token")
        if given is not None:
            value = self.keys.redeem(given)
            if value is None and not admitted:  # used up, revoked or never ours
                await _html(send, 403, REFUSED)
                return
            rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
            # One leading slash: `//host/...` would send the browser to another site.
            path = "/" + str(scope.get("path", "/")).lstrip("/")
            location = quote(path, safe="/") + (f"?{rest}" if rest else "")
            cookie = None
            if value is not None:
                cookie = f"{self.cookie}={value}; Path=/; HttpOnly; SameSite=Strict"
            await _moved(send, location, cookie)
            return
        if not admitted:
            await _html(send, 403, REFUSED)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    if name not in out:
                        out[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _admitted(self, headers: Headers) -> bool:
        jar = SimpleCookie()
        try:
            jar.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no cookie
            return False
        morsel = jar.get(self.cookie)
        return morsel is not None and self.keys.admits(morsel.value)


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    base = [(k.encode(), v.encode()) for k, v in HEADERS.items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*base, *headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _plain(send: Send, status: int, body: bytes) -> None:
    await _respond(send, status, body, [(b"content-type", b"text/plain; charset=utf-8")])


async def _html(send: Send, status: int, body: bytes) -> None:
    await _respond(send, status, body, [(b"content-type", b"text/html; charset=utf-8")])


async def _moved(send: Send, location: str, cookie: str | None) -> None:
    """A page that moves on to `location` (on this server) at once, setting `cookie`.

    Not a redirect: Chromium does not send a SameSite=Strict cookie along a redirect
    of a navigation that a file started (the page `serve --open` gives the browser),
    but a page of this server that moves on starts a navigation of its own, which
    carries it.
    """
    target = html.escape(location, quote=True)
    body = (
        '<!DOCTYPE html><meta charset="utf-8"><title>sessiontree</title>'
        f'<meta http-equiv="refresh" content="0;url={target}">'
        f'<p><a href="{target}">Continue to sessiontree</a></p>\n'
    ).encode()
    extra = [(b"content-type", b"text/html; charset=utf-8")]
    if cookie is not None:
        extra.append((b"set-cookie", cookie.encode()))
    await _respond(send, 200, body, extra)
