"""PostgreSQL for tests: the server that `scripts/pg-start` runs, a fresh schema per test.

Without `SESSIONTREE_TEST_PG` the PostgreSQL tests skip locally, with that reason,
and FAIL under CI (`CI` set): a missing server must never pass silently there.
"""

from __future__ import annotations

import os
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
