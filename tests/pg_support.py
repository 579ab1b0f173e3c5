"""PostgreSQL for tests: the server that `scripts/pg-start` runs, a fresh schema per test.

Without `SESSIONTREE_TEST_PG` the PostgreSQL tests skip locally, with that reason,
and FAIL under CI (`CI` set): a missing server must never pass silently there.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

PG_ENV = "SESSIONTREE_TEST_PG"


def pg_url() -> str:
    """The test server's URL; skips (locally) or fails (CI) when there is none."""
    url = os.environ.get(PG_ENV)
    problem = None
    if not url:
        problem = f'{PG_ENV} is not set: run `eval "$(scripts/pg-start)"` first'
    else:
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
        except ImportError:
            problem = "psycopg is not installed: pip install -e '.[postgres]'"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL tests cannot run in CI: {problem}", pytrace=False)
        pytest.skip(f"no PostgreSQL: {problem}")
    assert url is not None
    return url


def drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def fresh_schema() -> Iterator[tuple[str, str]]:
    """(url, schema): a schema name no one uses, dropped (with its tables) afterwards."""
    from sessiontree.storage.postgres import new_schema_name

    url = pg_url()
    schema = new_schema_name("st_test")
    try:
        yield url, schema
    finally:
        drop_schema(url, schema)


@contextmanager
def pg_storage(root: str | Path | None = None, **kwargs: Any) -> Iterator[Any]:
    """A `PostgresSessionStorage` on a fresh schema, closed and dropped afterwards."""
    from sessiontree.storage.postgres import PostgresSessionStorage

    with fresh_schema() as (url, schema):
        kwargs.setdefault("max_size", 4)
        storage = PostgresSessionStorage(
            url, schema=schema, root=str(root) if root is not None else None, **kwargs
        )
        try:
            yield storage
        finally:
            storage.close()


# -- a server of one's own: restarts, outages, cut connections ------------------------------

PG_START = Path(__file__).resolve().parents[1] / "scripts" / "pg-start"


class PrivateServer:
    """A throwaway PostgreSQL server that a test may restart or stop (`scripts/pg-start`)."""

    def __init__(self, state_dir: str, url: str) -> None:
        self.state_dir = state_dir
        self.url = url

    def _run(self, *args: str) -> None:
        env = {**os.environ, "SESSIONTREE_PG_DIR": self.state_dir}
        done = subprocess.run(
            [str(PG_START), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"pg-start {' '.join(args)} failed: {done.stderr.decode()}")

    def restart(self, mode: str = "fast") -> None:
        """`pg_ctl restart`: every connection dies; `immediate` is a crash and recovery."""
        self._run("restart", mode)

    def halt(self) -> None:
        """Stop the server, keeping its data: it refuses connections until `resume`."""
        self._run("halt")

    def resume(self) -> None:
        self._run("resume")

    def stop(self) -> None:
        """Stop it for good and remove its data."""
        self._run("stop")


@contextmanager
def private_server() -> Iterator[PrivateServer]:
    """A PostgreSQL server of one's own, for tests that restart or stop the server.

    Never the shared test server: other tests and other processes use that one.
    Skips (locally) or fails (CI) like every PostgreSQL test when there is no
    PostgreSQL; started by `scripts/pg-start` in a fresh directory under the temp
    dir (not pytest's: the `postgres` user must reach it when run as root).
    """
    pg_url()
    state = os.path.join(tempfile.gettempdir(), f"sessiontree-private-pg-{secrets.token_hex(6)}")
    env = {**os.environ, "SESSIONTREE_PG_DIR": state}
    done = subprocess.run(
        [str(PG_START)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=300,
        check=False,
    )
    if done.returncode:
        shutil.rmtree(state, ignore_errors=True)
        problem = f"scripts/pg-start could not start a server: {done.stderr.decode()[-2000:]}"
        if os.environ.get("CI"):
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    (line,) = [ln for ln in done.stdout.decode().splitlines() if ln.startswith("export ")]
    url = shlex.split(line)[1].split("=", 1)[1]
    server = PrivateServer(state, url)
    try:
        yield server
    finally:
        server.stop()


class CuttingProxy:
    """A TCP relay to PostgreSQL that can cut one connection at a chosen moment.

    `arm(marker, when)`: the next client message containing `marker` is
    - `"before"`: dropped, and the connection closed (the server never sees it);
    - `"after"`: delivered, and the connection closed once the server's answer is
      complete (its ReadyForQuery), which the client never gets: the statement
      ran and committed, but the client cannot know.
    Then the proxy relays faithfully again. `cuts` counts the connections cut.
    """

    _READY = b"Z\x00\x00\x00\x05"  # ReadyForQuery: the server is done with a query

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self._when = "before"
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self.cuts = 0
        self._closing = False
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def url(self, url: str) -> str:
        """`url` with its host and port replaced by the proxy's."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(url, host="127.0.0.1", port=str(self.port))

    def arm(self, marker: bytes, when: str) -> None:
        assert when in ("before", "after")
        with self._lock:
            self._marker, self._when = marker, when

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closing:
                    client.close()
                    server.close()
                    return
                self._sockets += [client, server]
                state = {"cut_on_reply": False}
                for args in ((client, server, True, state), (server, client, False, state)):
                    thread = threading.Thread(target=self._pump, args=args, daemon=True)
                    self._threads.append(thread)
                    thread.start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, upstream: bool, state: dict[str, bool]
    ) -> None:
        cut = False
        try:
            while data := src.recv(65536):
                if upstream:
                    with self._lock:
                        hit = self._marker is not None and self._marker in data
                        when = self._when
                        if hit:
                            self._marker = None
                    if hit and when == "before":
                        cut = True
                        break
                    if hit:
                        state["cut_on_reply"] = True
                elif state["cut_on_reply"] and self._READY in data:
                    cut = True
                    break
                dst.sendall(data)
        except OSError:
            pass
        if cut:
            with self._lock:
                self.cuts += 1
        for sock in (src, dst):  # either side ending ends the relay of both
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            self._closing = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._listener.close()
        self._accepter.join(5)
        assert not self._accepter.is_alive()
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(5)
        for sock in self._sockets:
            sock.close()
