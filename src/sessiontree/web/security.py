"""The gate in front of every request: Host check, token, security headers.

* **Host.** A page of another site can make a browser send requests to
  127.0.0.1 under its own name (DNS rebinding); such requests carry that name in
  `Host`. Only `localhost`, IP literals and the names given with `--allow-host` pass.
* **Token.** The server makes a random token and prints the URL holding it. A
  request with `?token=<it>` gets it as an HttpOnly, SameSite=Strict cookie and is
  redirected to the same URL without it (the token leaves the address bar and the
  history); later requests need that cookie. Anything else is refused (403).
* **Headers.** Every response carries a Content-Security-Policy that allows
  nothing from anywhere but this server and no inline script or style, and
  forbids framing, sniffing, referrers and caching.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Iterable
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSP", "Guard", "host_allowed", "new_token"]

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
    b"<p>This sessiontree server answers only the link it printed when it started "
    b"(the one with <code>?token=</code>).</p>\n"
)


def new_token() -> str:
    return secrets.token_urlsafe(24)


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
        self, app: ASGIApp, token: str, cookie: str, allowed_hosts: Iterable[str] = ()
    ) -> None:
        self.app = app
        self.token = token
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
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), True))
        given = query.get("token")
        if given is not None:
            if not secrets.compare_digest(given.encode(), self.token.encode()):
                await _html(send, 403, REFUSED)
                return
            rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
            # One leading slash: `//host/...` would send the browser to another site.
            path = "/" + str(scope.get("path", "/")).lstrip("/")
            location = quote(path, safe="/") + (f"?{rest}" if rest else "")
            cookie = f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict"
            await _redirect(send, location, cookie)
            return
        jar = SimpleCookie()
        try:
            jar.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no cookie
            jar = SimpleCookie()
        morsel = jar.get(self.cookie)
        if morsel is None or not secrets.compare_digest(morsel.value.encode(), self.token.encode()):
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


async def _redirect(send: Send, location: str, cookie: str) -> None:
    await _respond(
        send,
        303,
        b"",
        [(b"location", location.encode("latin-1", "replace")), (b"set-cookie", cookie.encode())],
    )
