"""The adapters when PostgreSQL's connection dies mid-batch: before the server got the
append, or after it committed without the client hearing. The batch is stored once,
whether the storage's own retry carries it or the caller adds it again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import require_module
from tests.pg_support import CuttingProxy, drop_schema, pg_url

require_module("claude_agent_sdk")
require_module("agents")


@pytest.fixture
def cut_location() -> Iterator[tuple[str, CuttingProxy]]:
    from psycopg.conninfo import conninfo_to_dict

    from sessiontree.storage.postgres import new_schema_name

    url = pg_url()
    params = conninfo_to_dict(url)
    proxy = CuttingProxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    schema = new_schema_name("st_cut")
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[0] + "@" if "@" in parts.netloc else ""
    query = f"{parts.query}&schema={schema}" if parts.query else f"schema={schema}"
    through = urlunsplit(parts._replace(netloc=f"{netloc}127.0.0.1:{proxy.port}", query=query))
    try:
        yield through, proxy
    finally:
        proxy.close()
        drop_schema(url, schema)


def _again_until_done(call: Any) -> None:
    """The caller's retry: the SDK's mirror retries a failed batch (3 attempts)."""
    for attempt in range(3):
        try:
            asyncio.run(call())
            return
        except OSError:
            if attempt == 2:
                raise


@pytest.mark.parametrize("when", ["before", "after"])
def test_claude_batch_cut_mid_append_lands_once(
    cut_location: tuple[str, CuttingProxy], when: str
) -> None:
    from sessiontree.integrations.claude_agent_sdk import SessionTreeStore

    location, proxy = cut_location
    store = SessionTreeStore(location)
    key: Any = {"project_key": "p", "session_id": "s"}
    asyncio.run(store.append(key, [{"type": "user", "uuid": "u0"}]))
    batch = [
        {"type": "user", "uuid": f"u{i}", "text": "CUT-HERE" if i == 2 else "x"}
        for i in range(1, 5)
    ]
    proxy.arm(b"CUT-HERE", when)
    _again_until_done(lambda: store.append(key, batch))
    assert proxy.cuts == 1
    loaded = asyncio.run(store.load(key)) or []
    assert [e["uuid"] for e in loaded] == ["u0", "u1", "u2", "u3", "u4"]
    store.close()


@pytest.mark.parametrize("when", ["before", "after"])
def test_openai_batch_cut_mid_add_lands_once(
    cut_location: tuple[str, CuttingProxy], when: str
) -> None:
    from sessiontree.integrations.openai_agents import SessionTreeSession

    location, proxy = cut_location
    session = SessionTreeSession("s", location, cwd="/work/proj")
    asyncio.run(session.add_items([{"role": "user", "content": "first"}]))
    batch: list[Any] = [
        {"role": "user", "content": "CUT-HERE" if i == 2 else f"m{i}"} for i in range(1, 5)
    ]
    proxy.arm(b"CUT-HERE", when)
    _again_until_done(lambda: session.add_items(batch))
    assert proxy.cuts == 1
    items = asyncio.run(session.get_items())
    assert items == [{"role": "user", "content": "first"}, *batch]
    session.close()
