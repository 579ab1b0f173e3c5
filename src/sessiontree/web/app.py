"""The Starlette application of `sessiontree serve`: routes, pages, the live stream.

Every route is a GET and reads; the only files the server may write are the
caches under `<agent dir>/cache` that the reading CLI commands write too (the
listing cache; the content index where this build has one). Sessions and projects
are named by handles the server issued (`data.handle_of`), never by paths; entry
ids, image numbers and blob hashes from a request are looked up in what the
server loaded, or validated (`check_hash`) before the blob store sees them.

Several stores (`serve` with no store named) are served as one: a handle names a
session of one of them (the server knows which; a request never names a store's
path), a store filter (`?store=`) must be one of the keys the server made for them.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

import sessiontree.web.charts as charts
from sessiontree.errors import InvalidBlobRefError, SessionTreeError
from sessiontree.export import (
    asset_text,
    export_html,
    export_jsonl,
    export_markdown,
    html_entry,
    html_environment,
    json_island,
    leaf_choice_text,
    render_markdown,
)
from sessiontree.foreign.storage import ForeignStorage
from sessiontree.format import SEARCH_ROLES, human_size
from sessiontree.layout import default_agent_dir, encode_session_dir_name
from sessiontree.reports import parse_time, time_zone
from sessiontree.search import nested_repeat, regex_time_limit
from sessiontree.session import message_count, session_shown_title
from sessiontree.storage import check_hash
from sessiontree.store import Store
from sessiontree.web.data import Data, SessionRow, Tally, UsageSnapshot, handle_of
from sessiontree.web.security import Guard, Keys
from sessiontree.web.sessions import (
    OpenSession,
    SessionCache,
    Tail,
    branch_around,
    find_image,
    image_bytes,
    image_url_for,
    leaf_choices,
    load_note,
    nav,
    path_ids,
    path_slice,
    prompt_index,
    render_entries,
    sniff_image,
)

__all__ = ["ServeOptions", "create_app"]

PAGE_ROWS = 100
REGEX_SECONDS = 5.0
"""How long a web search may spend matching a regular expression (nothing else stops
one that backtracks without end on the server)."""
SEARCH_LIMIT = 200
POLL_SECONDS = 0.25
_ASSETS = {
    "app.css": "text/css; charset=utf-8",
    "session.css": "text/css; charset=utf-8",
    "highlight.css": "text/css; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
}
_AGENTS = {".xcsh": ("xcsh", "--resume", "id"), ".omp": ("omp", "--resume", "id")}
_AGENTS[".pi"] = ("pi", "--session", "path")


@dataclass(slots=True)
class ServeOptions:
    """What the server needs to know besides the store."""

    cookie: str
    """The session cookie's name (with the port: see `security`)."""
    keys: Keys = field(default_factory=Keys)
    """The one-time links handed out and the cookies they became."""
    allowed_hosts: Sequence[str] = ()
    use_index: bool = True
    poll_seconds: float = POLL_SECONDS


def _utf8(text: str) -> bytes:
    """A lone surrogate (valid in a session's JSON, not in UTF-8) becomes U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return fixed.encode("utf-8")


def _page(template: str, status: int = 200, **context: Any) -> Response:
    body = html_environment().get_template(f"web/{template}").render(**context)
    return Response(_utf8(body), status, media_type="text/html; charset=utf-8")


def _json_bytes(value: object) -> bytes:
    """ASCII JSON with `<`, `>`, `&` escaped (as `export.json_island`): no string in it
    reads as markup wherever it ends up; a lone surrogate stays an escape."""
    return str(json_island(value)).encode("ascii")


def _json(value: object, status: int = 200) -> Response:
    return Response(_json_bytes(value), status, media_type="application/json")


def _not_found(what: str) -> Response:
    return _page("error.html", 404, title="Not found", message=what)


def _when(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M")


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


class _App:
    """The routes, over one store or several."""

    def __init__(self, stores: Store | Sequence[Store], options: ServeOptions) -> None:
        self.options = options
        self.data = Data(stores, use_index=options.use_index)
        self.store = self.data.store
        self.caches = {key: SessionCache(store) for key, store in self.data.stores.items()}

    def close(self) -> None:
        self.data.close()
        for cache in self.caches.values():
            cache.close()

    # ------------------------------------------------------------------ helpers

    def _row(self, request: Request) -> SessionRow | None:
        return self.data.session(request.path_params["handle"])

    def _open(self, row: SessionRow) -> OpenSession:
        cache = self.caches.get(row.store) or next(iter(self.caches.values()))
        return cache.get(row.handle, row.path)

    def _store_filter(self, request: Request) -> tuple[str | None, Response | None]:
        """The store key of `?store=` (None: every store), or the answer to a key the
        server did not make."""
        key = request.query_params.get("store") or None
        if key is not None and key not in self.data.stores:
            return None, _not_found("No such store (the server names stores itself).")
        return key, None

    def _stores(self, counts: dict[str, int] | None = None) -> list[dict[str, Any]]:
        """The stores served, for the pages (with their sessions, when counted)."""
        return [
            {
                "key": key,
                "agent": store.agent,
                "machine": store.machine,
                "location": store.location,
                "sessions": (counts or {}).get(key, 0),
                "skipped": self.data.skipped.get(key),
            }
            for key, store in self.data.stores.items()
        ]

    def _resume(self, row: SessionRow, rows: Sequence[SessionRow]) -> list[dict[str, str]]:
        if self.data.store_of(row).machine is not None:
            return []  # another machine's, shown by a sync: the page says to resume it there
        unique = sum(1 for r in rows if r.id == row.id) == 1
        target = row.id if unique else row.path
        agent_dir = self.data.store_of(row).agent_dir
        prefix = []
        if os.path.abspath(agent_dir) != os.path.abspath(default_agent_dir()):
            prefix = ["--agent-dir", agent_dir]
        commands = [
            {
                "name": "sessiontree",
                "command": shlex.join(["sessiontree", *prefix, "resume", target]),
            }
        ]
        foreign = self._foreign_resume(row)
        if foreign is not None:
            commands.append(foreign)
            return commands
        parent, leaf = os.path.split(os.path.abspath(agent_dir))
        agent = _AGENTS.get(os.path.basename(parent)) if leaf == "agent" else None
        home = os.path.expanduser("~")
        if agent is not None and os.path.dirname(parent) == home:
            program, flag, by = agent
            resume = shlex.join([program, flag, row.id if by == "id" else row.path])
            command = f"cd {shlex.quote(row.cwd)} && {resume}" if row.cwd else resume
            commands.append({"name": program, "command": command})
        return commands

    def _foreign_resume(self, row: SessionRow) -> dict[str, str] | None:
        """The agent's own resume command for a session of its store (in its directory,
        naming a store away from the default location by its variable)."""
        shown = self.data.store_of(row)
        if shown.machine is not None:
            return None  # another machine's, shown by a sync: its agent there resumes it
        storage = shown.storage
        if not isinstance(storage, ForeignStorage) or not storage.store.fs.on_host:
            return None  # a database's transcripts: no agent resumes them from there
        store = storage.store
        home = os.path.expanduser("~")
        value = store.home
        if store.agent == "claude":
            program, args, variable = "claude", ["claude", "--resume", row.id], "CLAUDE_CONFIG_DIR"
            usual = os.path.join(home, ".claude")
        elif store.agent == "codex":
            program, args, variable = "codex", ["codex", "resume", row.id], "CODEX_HOME"
            usual = os.path.join(home, ".codex")
        elif store.agent == "opencode":
            program, args, variable = "opencode", ["opencode", "--session", row.id], "XDG_DATA_HOME"
            usual, value = os.path.join(home, ".local", "share", "opencode"), os.path.dirname(value)
        elif store.agent == "gemini":
            program, args, variable = "gemini", ["gemini", "--resume", row.id], "GEMINI_CLI_HOME"
            usual, value = os.path.join(home, ".gemini"), os.path.dirname(value)
        else:
            program, args, variable = "copilot", ["copilot", "--resume", row.id], "COPILOT_HOME"
            usual = os.path.join(home, ".copilot")
        command = shlex.join(args)
        if os.path.abspath(store.home) != usual:
            command = f"{variable}={shlex.quote(value)} {command}"
        if row.cwd:
            command = f"cd {shlex.quote(row.cwd)} && {command}"
        return {"name": program, "command": command}

    # ------------------------------------------------------------------ pages

    def projects(self, request: Request) -> Response:
        key, refused = self._store_filter(request)
        if refused is not None:
            return refused
        every = self.data.sessions()
        counts: dict[str, int] = {}
        for row in every:
            counts[row.store] = counts.get(row.store, 0) + 1
        rows = [r for r in every if key is None or r.store == key]
        snapshot, _ = self.data.usage()
        groups: dict[str, dict[str, Any]] = {}
        for row in rows:  # newest first: a project's first row names it
            group = groups.get(row.project)
            if group is None:
                group = groups[row.project] = {
                    "handle": handle_of("p", row.project),
                    "store": row.store,
                    "cwd": row.cwd,
                    "dir": os.path.basename(row.project),
                    "cwds": {},  # every project path of its sessions, in order
                    "sessions": 0,
                    "messages": 0,
                    "bytes": 0,
                    "modified": _when(row.modified),
                    "cost": None,
                }
            group["sessions"] += 1
            group["cwds"][row.cwd] = None
            group["messages"] += row.message_count
            group["bytes"] += row.size
        for project, group in groups.items():
            group["size"] = human_size(group["bytes"])
            # The subtitle names the other project paths a store folder holds (Codex
            # files sessions by day, whatever their project), never the folder itself.
            group["also"] = [c for c in group.pop("cwds") if c and c != group["cwd"]]
            # A pi store's folder is named after a project path: shown when it is not
            # the shown path's (a session copied or moved between projects).
            folder = group["dir"]
            pi_folder = folder.startswith("--") and folder.endswith("--")
            group["folder"] = (
                folder
                if pi_folder and folder != encode_session_dir_name(group["cwd"] or "")
                else None
            )
            if snapshot is not None and snapshot.complete:
                tally = snapshot.by_project.get(project)
                group["cost"] = _cost(tally) if tally is not None else "$0"
        return _page(
            "projects.html",
            title="Projects",
            projects=list(groups.values()),
            total=len(rows),
            agent_dir=self.store.agent_dir,
            stores=self._stores(counts) if self.data.several else [],
            store_key=key,
            usage_note=_usage_state(snapshot),
        )

    def sessions(self, request: Request) -> Response:
        store_key, refused = self._store_filter(request)
        if refused is not None:
            return refused
        params = request.query_params
        query = params.get("q", "").strip()
        rows = self.data.sessions(text=query or None, store=store_key)
        project_handle = params.get("project")
        project = self.data.project(project_handle) if project_handle else None
        if project_handle and project is None:
            return _not_found("No such project (the server names projects itself).")
        if project is not None:
            rows = [r for r in rows if r.project == project]
        snapshot, _ = self.data.usage()
        costs = snapshot.by_session if snapshot is not None else {}

        def cost_of(r: SessionRow) -> float:
            tally = costs.get(r.handle)
            return tally.cost if tally is not None else -1.0

        keys: dict[str, Callable[[SessionRow], Any]] = {
            "modified": lambda r: r.modified,
            "created": lambda r: r.created,
            "size": lambda r: r.size,
            "messages": lambda r: r.message_count,
            "cost": cost_of,
            "title": lambda r: r.shown_title.casefold(),
        }
        sort = params.get("sort", "modified")
        sort = sort if sort in keys else "modified"
        order = params.get("order", "asc" if sort == "title" else "desc")
        order = order if order in ("asc", "desc") else "desc"
        rows = sorted(rows, key=keys[sort], reverse=order == "desc")
        page = max(1, _int(params.get("page"), 1))
        pages = max(1, (len(rows) + PAGE_ROWS - 1) // PAGE_ROWS)
        page = min(page, pages)
        shown = rows[(page - 1) * PAGE_ROWS : page * PAGE_ROWS]
        base = {
            k: v for k, v in (("project", project_handle), ("store", store_key), ("q", query)) if v
        }

        def link(**changes: Any) -> str:
            merged = {**base, "sort": sort, "order": order, **changes}
            return "/sessions?" + urlencode({k: v for k, v in merged.items() if v})

        columns = []
        for key, name in (
            ("title", "Title"),
            ("size", "Size"),
            ("messages", "Messages"),
            ("cost", "Cost"),
            ("modified", "Modified"),
        ):
            flip = "asc" if (sort == key and order == "desc") else "desc"
            if sort != key:
                flip = "asc" if key == "title" else "desc"
            mark = ("▲" if order == "asc" else "▼") if sort == key else ""
            columns.append(
                {"key": key, "name": name, "href": link(sort=key, order=flip), "mark": mark}
            )
        items = []
        several = self.data.several
        for r in shown:
            tally = costs.get(r.handle)
            items.append(
                {
                    "handle": r.handle,
                    "title": r.shown_title,
                    "first": r.first_message,
                    "id": r.id,
                    "size": human_size(r.size),
                    "messages": r.message_count,
                    "cost": _cost(tally) if tally is not None else None,
                    "modified": _when(r.modified),
                    "cwd": r.cwd,
                    "store": r.store if several else None,
                }
            )
        return _page(
            "sessions.html",
            title="Sessions",
            project=project,
            project_handle=project_handle,
            store_key=store_key,
            several=several,
            query=query,
            columns=columns,
            sessions=items,
            total=len(rows),
            page=page,
            pages=pages,
            prev=link(page=page - 1) if page > 1 else None,
            next=link(page=page + 1) if page < pages else None,
            usage_note=_usage_state(snapshot),
        )

    def session(self, request: Request) -> Response:
        with self.data.foreground.working():  # background passes step aside meanwhile
            return self._session(request)

    def _session(self, request: Request) -> Response:
        row = self._row(request)
        if row is None:
            return _not_found("No such session (the server names sessions itself).")
        session = self._open(row)
        with session.lock:
            params = request.query_params
            focus = params.get("at") or ""
            around = branch_around(session, focus) if focus and not params.get("leaf") else None
            leaf: dict[str, Any] | None
            if around is not None:
                leaf, part = around
            else:
                leaf = session.leaf(params.get("leaf") or focus or None)
                part = path_slice(session, leaf)
                if focus and params.get("leaf") and focus in part.ids[: part.earlier]:
                    # a prompt of the index, before the path's end: the page from it on
                    part = path_slice(session, leaf, start_at=focus)
            context: dict[str, Any] = {
                "focus": focus if focus in part.ids[part.earlier :] else "",
                "row": row,
                "store": self.data.store_of(row) if self.data.several else None,
                "handle": row.handle,
                "name": session_shown_title(session.sm),
                "leaf_id": leaf.get("id") if leaf is not None else "",
                "part": part,
                "nav": nav(session, leaf, part.ids),
                "options": leaf_choices(session, leaf),
                "entry_count": session.shape().size,
                "tip_count": len(session.tips()),
                "messages": message_count(session.sm),
                # The file's bytes, as `list` says (for another agent's session the page
                # reads a view in pi's format, of another length).
                "size": human_size(row.size if row.size >= 0 else session.mark.size),
                "load_note": load_note(session),
                "offset": session.mark.size,
                "commands": self._resume(row, self.data.rows()),
                "made_on": self.data.store_of(row).machine,
                "exports": [
                    (fmt, f"/s/{row.handle}/export/{fmt}?" + urlencode({"leaf": leaf["id"]}))
                    if leaf is not None
                    else (fmt, f"/s/{row.handle}/export/{fmt}")
                    for fmt in ("md", "html", "jsonl")
                ],
            }
        return _page("session.html", title=context["name"], **context)

    def path(self, request: Request) -> Response:
        with self.data.foreground.working():  # background passes step aside meanwhile
            return self._path(request)

    def _path(self, request: Request) -> Response:
        row = self._row(request)
        if row is None:
            return _json({"error": "no such session"}, 404)
        params = request.query_params
        session = self._open(row)
        with session.lock:
            leaf = session.leaf(params.get("leaf"))
            before = params.get("before")
            if before is not None:
                part = path_slice(session, leaf, before=before)
                return _json(
                    {"html": _articles(part.entries), "earlier": part.earlier, "ancestor": None}
                )
            following = params.get("following")
            if following is not None:
                part = path_slice(session, leaf, following=following)
                return _json({"html": _articles(part.entries), "later": part.later})
            ancestor = None
            current = params.get("from")
            part = path_slice(session, leaf)
            if current and session.sm.get_entry(current) is not None and leaf is not None:
                shown = set(path_ids(session, session.sm.get_entry(current)))
                common = [i for i in part.ids if i in shown]
                if common:
                    ancestor = common[-1]
                    part = path_slice(session, leaf, after=ancestor)
                    if part.earlier != part.ids.index(ancestor) + 1:
                        ancestor = None  # too far back: the page starts over
            items = nav(session, leaf, part.ids)
            macros = html_environment().get_template("_macros.html").module
            return _json(
                {
                    "html": _articles(part.entries),
                    "earlier": part.earlier,
                    "ancestor": ancestor,
                    "leaf": leaf.get("id") if leaf is not None else None,
                    "option": leaf_choice_text(session.sm, leaf) if leaf is not None else None,
                    "length": part.length,
                    "nav": str(macros.tree(items, leaf.get("id") if leaf else None)),  # type: ignore[attr-defined]
                }
            )

    def prompts(self, request: Request) -> Response:
        with self.data.foreground.working():  # background passes step aside meanwhile
            return self._prompts(request)

    def _prompts(self, request: Request) -> Response:
        """The index of the prompts on the path to `leaf`, as HTML for the sidebar."""
        row = self._row(request)
        if row is None:
            return _json({"error": "no such session"}, 404)
        session = self._open(row)
        with session.lock:
            leaf = session.leaf(request.query_params.get("leaf"))
            items, unscanned = prompt_index(session, leaf)
        macros = html_environment().get_template("web/_prompts.html").module
        leaf_id = leaf.get("id") if leaf is not None else ""
        html = macros.prompts(items, row.handle, leaf_id, unscanned)  # type: ignore[attr-defined]
        return _json({"html": str(html), "count": len(items)})

    def text(self, request: Request) -> Response:
        with self.data.foreground.working():  # background passes step aside meanwhile
            return self._text(request)

    def _text(self, request: Request) -> Response:
        row = self._row(request)
        if row is None:
            return _json({"error": "no such session"}, 404)
        session = self._open(row)
        entry_id = request.query_params.get("entry", "")
        index = _int(request.query_params.get("block"), -1)
        with session.lock:
            entry = session.sm.get_entry(entry_id)
            if entry is None:
                return _json({"error": "no such entry"}, 404)
            blocks = html_entry(
                entry, 0, {}, image_src=image_url_for(row.handle), limit=None
            ).blocks
        if not 0 <= index < len(blocks):
            return _json({"error": "no such block"}, 404)
        block = blocks[index]
        if block.kind in ("text", "thinking"):
            return _json({"text": block.text, "html": str(render_markdown(block.text))})
        return _json({"text": block.text})

    def image(self, request: Request) -> Response:
        row = self._row(request)
        if row is None:
            return Response(b"no such session", 404, media_type="text/plain")
        number = _int(request.path_params["number"], -1)
        session = self._open(row)
        with session.lock:
            block = find_image(session, request.query_params.get("entry", ""), number)
        found = image_bytes(block) if block is not None else None
        if found is None:
            return Response(b"no such image", 404, media_type="text/plain")
        data, mime = found
        return Response(data, media_type=mime)

    def blob(self, request: Request) -> Response:
        try:
            digest = check_hash(request.path_params["hash"])
        except InvalidBlobRefError:
            return Response(b"not a blob hash", 400, media_type="text/plain")
        row = self.data.session(request.query_params.get("s", ""))
        if row is None:
            return Response(b"no such session", 404, media_type="text/plain")
        data = self.data.store_of(row).blobs_for(row.path).get(digest)
        mime = sniff_image(data) if data is not None else None
        if data is None or mime is None:
            return Response(b"no such image", 404, media_type="text/plain")
        return Response(data, media_type=mime)

    def export(self, request: Request) -> Response:
        row = self._row(request)
        fmt = request.path_params["fmt"]
        if row is None or fmt not in ("md", "html", "jsonl"):
            return _not_found("No such session or format.")
        session = self._open(row)
        leaf = request.query_params.get("leaf") or None
        with session.lock:
            if leaf is not None and session.sm.get_entry(leaf) is None:
                return _not_found("No such entry.")
            if fmt == "md":
                data, mime = _utf8(export_markdown(session.sm, leaf)), "text/markdown"
            elif fmt == "html":
                data, mime = _utf8(export_html(session.sm, leaf)), "text/html"
            else:
                data, mime = export_jsonl(session.sm, leaf), "application/x-ndjson"
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in row.id)[:80] or "session"
        return Response(
            data,
            media_type=f"{mime}; charset=utf-8",
            headers={"content-disposition": f'attachment; filename="{name}.{fmt}"'},
        )

    def search(self, request: Request) -> Response:
        store_key, refused = self._store_filter(request)
        if refused is not None:
            return refused
        params = request.query_params
        query = params.get("q", "").strip()
        rows = self.data.sessions(store=store_key)
        project_handle = params.get("project") or None
        project = self.data.project(project_handle) if project_handle else None
        if project is not None:
            rows = [r for r in rows if r.project == project]
        regex = params.get("regex") in ("1", "on", "true")
        role = params.get("role") or ""
        since, until = params.get("since", "").strip(), params.get("until", "").strip()
        outcome = None
        problem = ""
        groups: list[dict[str, Any]] = []
        elapsed = 0.0
        tz, _ = time_zone(None)
        try:
            if role and role not in SEARCH_ROLES:
                raise SessionTreeError(
                    f"unknown role {role!r}: the roles are " + ", ".join(SEARCH_ROLES)
                )
            since_ms = parse_time(since, tz) if since else None
            until_ms = parse_time(until, tz, end=True) if until else None
            if regex and nested_repeat(query):
                # Nothing could stop such a search once it runs on the server.
                raise SessionTreeError(
                    f"the regular expression {query!r} repeats a group that repeats or "
                    "has alternatives, which can take hours to match; write it "
                    "without the nesting (e.g. x+ for (x+)+)"
                )
        except SessionTreeError as exc:
            problem = str(exc)
        if query and not problem:
            by_path = {(r.store, r.path): r for r in rows}
            started = time.perf_counter()
            try:
                with regex_time_limit(REGEX_SECONDS):
                    outcome = self.data.search(
                        query,
                        rows,
                        SEARCH_LIMIT,
                        regex=regex,
                        roles=[role] if role else None,
                        since=since_ms,
                        until=until_ms,
                    )
            except SessionTreeError as exc:  # a bad regular expression, or a slow one
                problem = str(exc)
                outcome = None
            elapsed = time.perf_counter() - started
        if outcome is not None:
            index: dict[tuple[str, str], dict[str, Any]] = {}
            for hit in outcome.hits:
                row = by_path.get((hit.store, hit.path))
                if row is None:
                    continue
                group = index.get((hit.store, hit.path))
                if group is None:
                    group = index[(hit.store, hit.path)] = {
                        "row": row,
                        "hits": [],
                        "store": row.store if self.data.several else None,
                    }
                    groups.append(group)
                href = f"/s/{row.handle}"
                if hit.entry_id:  # the hit inside its whole branch, scrolled to
                    href += "?" + urlencode({"at": hit.entry_id})
                group["hits"].append({"hit": hit, "href": href})
        return _page(
            "search.html",
            title="Search",
            query=query,
            project=project,
            project_handle=project_handle,
            store_key=store_key,
            stores=self._stores() if self.data.several else [],
            outcome=outcome,
            groups=groups,
            elapsed=f"{elapsed * 1000:.0f} ms",
            problem=problem,
            regex=regex,
            role=role,
            roles=SEARCH_ROLES,
            since=since,
            until=until,
            projects=sorted(
                {
                    handle_of("p", r.project): r.cwd or r.project for r in self.data.sessions()
                }.items(),
                key=lambda item: item[1],
            ),
        )

    def usage(self, request: Request) -> Response:
        labels = _project_labels(self.data.sessions())
        whole, error = self.data.usage(wait=3.0)
        chosen = request.query_params.get("range", "all")
        if chosen not in _RANGES:
            chosen = "all"
        days = _RANGES[chosen]
        first = last = None  # all time: from the first day with replies to the last
        if days is not None:  # the last N days: up to today, replies or not
            today = datetime.now(UTC)
            first = (today - timedelta(days=days - 1)).strftime("%Y-%m-%d")
            last = today.strftime("%Y-%m-%d")
        snapshot = whole.within(first) if whole is not None else None
        shown = sorted(d for d in (snapshot.by_day if snapshot else {}) if d != "unknown")
        span = f"{shown[0]} to {shown[-1]}" if shown else "no replies"
        name = "All time" if days is None else f"The last {days} days"
        by_store = None
        if snapshot is not None and self.data.several:
            by_store = [
                (f"{key} · {store.location}", snapshot.by_store.get(key, Tally()))
                for key, store in self.data.stores.items()
            ]
        return _page(
            "usage.html",
            title="Usage",
            snapshot=snapshot,
            error=error,
            state=_usage_state(whole),
            range_name=f"{name} ({span}, UTC)",
            ranges=[(key, key if key != "all" else "all", key == chosen) for key in _RANGES],
            heatmap=_heatmap(snapshot, first, last) if snapshot is not None else None,
            by_store=by_store,
            **(_usage_charts(snapshot, labels, first, last) if snapshot is not None else {}),
        )

    def link(self, request: Request) -> Response:
        """A new one-time link, for another browser of the person this one is."""
        base = str(request.base_url).rstrip("/")
        url = f"{base}/?" + urlencode({"token": self.options.keys.new_link()})
        return _page("link.html", title="A link for another browser", url=url)

    def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _ASSETS:
            return Response(b"not found", 404, media_type="text/plain")
        return Response(asset_text(name).encode("utf-8"), media_type=_ASSETS[name])

    # ------------------------------------------------------------------ live

    async def events(self, request: Request) -> Response:
        row = self._row(request)
        if row is None:
            return Response(b"no such session", 404, media_type="text/plain")
        offset = _int(request.query_params.get("from"), -1)
        if offset < 0:
            return Response(b"from= is required", 400, media_type="text/plain")
        tail = Tail(self.data.store_of(row).storage, row.path, offset)
        interval = self.options.poll_seconds
        app = self

        async def stream() -> AsyncIterator[bytes]:
            yield b"retry: 3000\n: following appends\n\n"
            quiet = 0.0
            while True:
                change = await anyio.to_thread.run_sync(tail.poll)
                if change.rewritten:
                    yield b"event: rewritten\ndata: {}\n\n"
                    return
                if change.entries:
                    for payload in await anyio.to_thread.run_sync(
                        app._live_entries, row, change.entries
                    ):
                        yield b"event: entry\ndata: " + payload + b"\n\n"
                    quiet = 0.0
                quiet += interval
                if quiet >= 15:
                    quiet = 0.0
                    yield b": keep-alive\n\n"
                await asyncio.sleep(interval)

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"}
        )

    def _live_entries(self, row: SessionRow, entries: list[dict[str, Any]]) -> list[bytes]:
        session = self._open(row)
        macros = html_environment().get_template("_macros.html").module
        out = []
        with session.lock:
            views = render_entries(session, entries)
            for entry, view in zip(entries, views, strict=True):
                parent = entry.get("parentId")
                payload = {
                    "id": entry["id"],
                    "parentId": parent if isinstance(parent, str) else None,
                    "html": str(macros.entry(view)),  # type: ignore[attr-defined]
                    "option": leaf_choice_text(session.sm, entry),
                }
                out.append(_json_bytes(payload))
        return out


def _articles(entries: Sequence[Any]) -> str:
    macros = html_environment().get_template("_macros.html").module
    return "".join(str(macros.entry(e)) for e in entries)  # type: ignore[attr-defined]


def _usage_state(snapshot: UsageSnapshot | None) -> str | None:
    if snapshot is None:
        return "Usage is being computed."
    if not snapshot.complete:
        done, total = snapshot.sessions_read, snapshot.sessions_total
        return f"Usage read so far: {done:,} of {total:,} sessions."
    return None


def _top(table: dict[str, Tally], most: int = 15) -> list[tuple[str, Tally]]:
    ranked = sorted(table.items(), key=lambda kv: (-kv[1].cost, -kv[1].total_tokens, kv[0]))
    return ranked[:most]


def _token_series(tallies: Sequence[Tally]) -> list[charts.Series]:
    return [
        charts.Series("input", [t.input for t in tallies]),
        charts.Series("output", [t.output for t in tallies]),
        charts.Series("cache read", [t.cache_read for t in tallies]),
        charts.Series("cache write", [t.cache_write for t in tallies]),
    ]


def _short_path(path: str) -> str:
    home = os.path.expanduser("~")
    if path == home or path.startswith(home + os.sep):
        path = "~" + path[len(home) :]
    return path if len(path) <= 34 else "…" + path[-33:]


def _project_labels(rows: Sequence[SessionRow]) -> dict[str, str]:
    """Each session dir's name for people: the cwd of its newest session (and the dir's
    own name when another dir has sessions of the same cwd)."""
    cwd: dict[str, str] = {}
    for row in rows:  # newest first
        cwd.setdefault(row.project, row.cwd or os.path.basename(row.project))
    seen: dict[str, int] = {}
    for name in cwd.values():
        seen[name] = seen.get(name, 0) + 1
    return {
        d: name if seen[name] == 1 else f"{name} ({os.path.basename(d)})" for d, name in cwd.items()
    }


_RANGES: dict[str, int | None] = {"7d": 7, "30d": 30, "90d": 90, "all": None}


def _heatmap(snapshot: UsageSnapshot, first: str | None, last: str | None) -> dict[str, Any] | None:
    """Weeks (columns) of days (rows, Monday first) shaded by cost, as activity heatmaps
    draw them, over the range's days (`charts.day_range`); each week's column headed
    by the month that starts in it. None when no day has replies."""
    days = charts.day_range([d for d in snapshot.by_day if d != "unknown"], first, last)
    if not days:
        return None
    start = date.fromisoformat(days[0])
    end = date.fromisoformat(days[-1])
    start -= timedelta(days=start.weekday())
    top = max((t.cost for t in snapshot.by_day.values()), default=0.0) or 1.0
    weeks: list[list[dict[str, Any]]] = []
    months: list[str] = []
    day = start
    while day <= end:
        key = day.isoformat()
        tally = snapshot.by_day.get(key)
        cost = tally.cost if tally is not None else 0.0
        level = 0 if not tally or tally.messages == 0 else 1 + min(3, int(cost / top * 4))
        if day.weekday() == 0:
            weeks.append([])
            months.append("")
        if day.day == 1 or not months[0]:  # a month starts here (or the first week)
            months[-1] = day.strftime("%b")
        replies = tally.messages if tally is not None else 0
        weeks[-1].append(
            {
                "day": key,
                "level": level,
                "title": f"{key}: {replies:,} replies, "
                + (_cost(tally) if tally is not None else charts.money(0.0)),
            }
        )
        day += timedelta(days=1)
    return {"weeks": weeks, "months": months, "weekdays": ["Mon", "", "Wed", "", "Fri", "", ""]}


def _cost(tally: Tally) -> str:
    """A cost as every page shows it: `~` before it when a reply's cost in it was
    estimated (as the CLI marks it)."""
    return ("~" if tally.estimated_messages > 0 else "") + charts.money(tally.cost)


def _usage_charts(
    snapshot: UsageSnapshot, labels: dict[str, str], first: str | None, last: str | None
) -> dict[str, Any]:
    days = charts.day_range([d for d in snapshot.by_day if d != "unknown"], first, last)
    day_tallies = [snapshot.by_day.get(d, Tally()) for d in days]
    models = _top(snapshot.by_model)
    projects = _top({labels.get(k, k): t for k, t in snapshot.by_project.items()})

    def rows(
        items: list[tuple[str, Tally]], shorten: Callable[[str], str] | None = None
    ) -> dict[str, Any]:
        keys = [k for k, _ in items]
        tallies = [t for _, t in items]
        return {
            "cost": charts.row_chart(
                "Cost",
                keys,
                [charts.Series("cost", [t.cost for t in tallies])],
                charts.money,
                shorten=shorten,
            ),
            "tokens": charts.row_chart(
                "Tokens", keys, _token_series(tallies), charts.tokens, shorten=shorten
            ),
            "table": items,
        }

    return {
        "day_cost": charts.column_chart(
            "Cost per day (UTC)",
            days,
            [charts.Series("cost", [t.cost for t in day_tallies])],
            charts.money,
        ),
        "day_tokens": charts.column_chart(
            "Tokens per day (UTC)", days, _token_series(day_tallies), charts.tokens
        ),
        "day_table": [(d, snapshot.by_day[d]) for d in reversed(days) if d in snapshot.by_day],
        "models": rows(models),
        "projects": rows(projects, _short_path),
        "money": charts.money,
        "tokens": charts.tokens,
    }


async def _unknown_url(request: Request, exc: Exception) -> Response:
    return _not_found("There is no such page here.")


async def _unreadable(request: Request, exc: Exception) -> Response:
    """A session that cannot be read (gone, damaged, not a session): said, not a traceback."""
    message = f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) else str(exc)
    if request.headers.get("accept") == "application/json":
        return _json({"error": message}, 500)
    return _page("error.html", 500, title="Unreadable", message=message)


def create_app(store: Store | Sequence[Store], options: ServeOptions) -> Starlette:
    """The web app over `store` (or several stores, served as one), open to the browsers
    that bring one of `options.keys`' links (see `security`). The caller closes the
    stores once the app is done."""
    routes = _App(store, options)
    app = Starlette(
        routes=[
            Route("/", routes.projects),
            Route("/sessions", routes.sessions),
            Route("/search", routes.search),
            Route("/usage", routes.usage),
            Route("/link", routes.link),
            Route("/s/{handle}", routes.session),
            Route("/s/{handle}/path", routes.path),
            Route("/s/{handle}/text", routes.text),
            Route("/s/{handle}/prompts", routes.prompts),
            Route("/s/{handle}/img/{number}", routes.image),
            Route("/s/{handle}/events", routes.events),
            Route("/s/{handle}/export/{fmt}", routes.export),
            Route("/blob/{hash}", routes.blob),
            Route("/static/{name}", routes.static),
            Route("/favicon.ico", lambda _request: Response(status_code=204)),
        ],
        exception_handlers={
            404: _unknown_url,
            OSError: _unreadable,
            SessionTreeError: _unreadable,
        },
    )
    app.state.routes = routes
    app.add_middleware(
        Guard, keys=options.keys, cookie=options.cookie, allowed_hosts=options.allowed_hosts
    )
    return app
