"""The web app meets a session swapped for a FIFO after the list page showed it: its
page answers at once (an error page naming the file and what it is, never a hang), and the list and
the other sessions' pages still answer."""

from __future__ import annotations

import os
from pathlib import Path

from sessiontree import SessionManager
from sessiontree.storage import FileSessionStorage
from tests.conftest import require_module
from tests.helpers import assistant, user, without_hang

httpx = require_module("httpx")
require_module("starlette")
require_module("uvicorn")

from sessiontree.web.data import handle_of  # noqa: E402
from sessiontree.web.server import BackgroundServer  # noqa: E402


def test_a_session_page_of_a_fifo_answers_without_blocking(agent_dir: Path) -> None:
    paths = []
    for i in range(2):
        with SessionManager.create("/proj") as sm:
            sm.append_message(user(f"hello {i}"))
            sm.append_message(assistant(f"hi {i}"))
            paths.append(sm.get_session_file() or "")
    fifo, other = paths
    with BackgroundServer(FileSessionStorage(), str(agent_dir)) as server:
        with httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=90) as c:
            assert c.get("/").status_code == 200  # listed
            os.unlink(fifo)
            os.mkfifo(fifo)
            page = without_hang(lambda: c.get(f"/s/{handle_of('s', fifo)}"), fifo)
            assert isinstance(page, httpx.Response), page
            assert page.status_code == 500 and "a FIFO, not a regular file" in page.text
            assert without_hang(lambda: c.get("/"), fifo).status_code == 200
            shown = without_hang(lambda: c.get(f"/s/{handle_of('s', other)}"), fifo)
            assert shown.status_code == 200 and "hello 1" in shown.text
