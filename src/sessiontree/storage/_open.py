"""Choosing a storage backend from a location: an agent dir's path (or `file:` URL)
is its files (`FileSessionStorage`); a `postgresql://` (or `postgres://`) URL a
database (`PostgresSessionStorage`), whose `schema` query parameter picks the schema
(default `sessiontree`) and whose other parameters go to libpq. The location is always
given: which one is the default is `Store()`'s to say."""

from __future__ import annotations

import os
from typing import Final
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from sessiontree.errors import InvalidStoreError
from sessiontree.storage._base import SessionStorage
from sessiontree.storage._file import FileSessionStorage

__all__ = ["close_storage", "file_store_dir", "open_storage", "redact_url"]

_PG_SCHEMES: Final = ("postgresql", "postgres")


def _scheme(target: str) -> str:
    return urlsplit(target).scheme.lower() if "://" in target or target.startswith("file:") else ""


def _unsupported(target: str) -> InvalidStoreError:
    return InvalidStoreError(
        f"unsupported store {redact_url(target)!r}: use a path or a postgresql:// URL"
    )


def file_store_dir(url_or_path: str) -> str | None:
    """The agent dir a path or `file:` URL names (absolute, `~` expanded); None for a
    PostgreSQL URL.

    Raises:
        InvalidStoreError: an unsupported URL scheme.
    """
    scheme = _scheme(url_or_path)
    if scheme == "":
        return os.path.abspath(os.path.expanduser(url_or_path))
    if scheme == "file":
        return os.path.abspath(os.path.expanduser(unquote(urlsplit(url_or_path).path)))
    if scheme in _PG_SCHEMES:
        return None
    raise _unsupported(url_or_path)


def open_storage(url_or_path: str, *, agent_dir: str) -> SessionStorage:
    """The storage a URL or path names.

    A path (or `file:` URL) names the agent dir of a file store: the caller keeps
    using it as its `agent_dir`. A PostgreSQL URL opens (and migrates) the
    database; its paths are relative to `agent_dir`. Close what this returns with
    `close_storage`.

    Raises:
        BackendUnavailableError: psycopg is not installed (the message says what to install).
        InvalidStoreError: an unsupported URL scheme.
        SessionTreeError: the database cannot be used.
    """
    scheme = _scheme(url_or_path)
    if scheme in ("", "file"):
        return FileSessionStorage()
    if scheme not in _PG_SCHEMES:
        raise _unsupported(url_or_path)
    from sessiontree.storage.postgres import PostgresSessionStorage

    conninfo, schema = _split_schema(url_or_path)
    return PostgresSessionStorage(conninfo, schema=schema or "sessiontree", root=agent_dir)


def close_storage(storage: SessionStorage) -> None:
    """Release what `open_storage` opened (a database pool); files need nothing."""
    close = getattr(storage, "close", None)
    if callable(close):
        close()


def _split_schema(url: str) -> tuple[str, str | None]:
    """The URL without its `schema` query parameter, and that parameter."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def redact_url(url: str) -> str:
    """A URL without its password (`user:***@`, and `password=***` in its query, where
    libpq takes one too), for messages, reprs and `Store.location`."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    netloc = f"{user}:***@{hostport}" if at and colon else parts.netloc
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key == "password" for key, _ in pairs):
            query = urlencode([(k, "***" if k == "password" else v) for k, v in pairs], safe="*")
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))
