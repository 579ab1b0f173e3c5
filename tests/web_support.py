"""A store for the web app's tests, and what they share (browser, hostile text)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from sessiontree import SessionManager
from sessiontree.format import serialize_entry
from sessiontree.layout import encode_session_dir_name
from tests.helpers import assistant, user

CHROMIUM = os.environ.get("SESSIONTREE_CHROMIUM", "/usr/bin/chromium")
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

HOSTILE = '</script><script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
"""Text that would run script if a page took it for markup."""
HOSTILE_ID = '"><img src=x onerror=window.pwned=3>'
LONG_TEXT_CHARS = 50_000
LONG_PATH = 400


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A valid PNG: the left half one colour, the right half noise (so that it is
    big enough to go to the blob store)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    seed = 12345
    rows = []
    for _ in range(height):
        noise = bytearray()
        for _ in range((width - width // 2) * 3):
            seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
            noise.append(seed >> 16 & 0xFF)
        rows.append(b"\x00" + bytes(rgb) * (width // 2) + bytes(noise))
    raw = zlib.compress(b"".join(rows))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")


@dataclass
class WebStore:
    agent: Path
    demo: str
    ids: dict[str, str]
    other: str
    copy: str
    long: str
    hostile: str
    live: str
    image: bytes
    sessions: list[str] = field(default_factory=list)


def _session_dir(agent: Path, cwd: str) -> str:
    return str(agent / "sessions" / encode_session_dir_name(cwd))


def _ts(n: int) -> int:
    return 1_767_225_600_000 + n * 60_000


def build_store(agent: Path) -> WebStore:
    """Sessions in three projects: a branched one with labels, a compaction, a branch
    summary and an image; a plain one and a copy of it (same id) elsewhere; a long
    one (400 entries, a 50,000-character tool output); a hostile one; one to append to.
    Needs PI_CODING_AGENT_DIR = `agent` (blobs go to its `blobs/`)."""
    agent.mkdir(parents=True, exist_ok=True)
    ids: dict[str, str] = {}
    image = png(96, 64, (220, 38, 38))
    import base64

    with SessionManager.create("/work/app", _session_dir(agent, "/work/app")) as sm:
        sm.set_session_name("CI fails on Python version")
        sm.append_model_change("anthropic/claude-sonnet-4-5")
        ids["q"] = sm.append_message(
            {**user("Why does the build fail on CI only?"), "timestamp": _ts(1)}
        )
        ids["a1"] = sm.append_message(
            assistant(
                "Let me look at the CI log.",
                content=[
                    {"type": "thinking", "thinking": "Probably the Python version."},
                    {"type": "text", "text": "Let me look at the CI log."},
                    {
                        "type": "toolCall",
                        "id": "t1",
                        "name": "bash",
                        "arguments": {"command": "cat ci.log"},
                    },
                ],
                timestamp=_ts(2),
            )
        )
        ids["r1"] = sm.append_message(
            {
                "role": "toolResult",
                "toolCallId": "t1",
                "toolName": "bash",
                "content": [{"type": "text", "text": "error: python3.12 not found"}],
                "isError": True,
                "timestamp": _ts(3),
            }
        )
        ids["img"] = sm.append_message(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Here is the dashboard:"},
                    {
                        "type": "image",
                        "data": base64.b64encode(image).decode(),
                        "mimeType": "image/png",
                    },
                ],
                "timestamp": _ts(4),
            }
        )
        ids["a2"] = sm.append_message(
            assistant("CI images ship Python 3.11; pin the version.", timestamp=_ts(5))
        )
        sm.append_label_change(ids["a2"], "diagnosis")
        ids["c"] = sm.append_compaction("CI python mismatch found", "mismatch", ids["a2"], 12000)
        ids["a3"] = sm.append_message(assistant("Pinned python3.11 in .ci/run.", timestamp=_ts(6)))
        ids["bs"] = sm.branch_with_summary(
            ids["q"], "Tried reading the CI log; found a version mismatch."
        )
        ids["b1"] = sm.append_message(
            assistant(
                "Alternatively we could install 3.12 in the image.",
                model="gpt-5",
                provider="openai",
                timestamp=_ts(7),
            )
        )
        demo = str(sm.get_session_file())

    with SessionManager.create("/work/site", _session_dir(agent, "/work/site")) as sm:
        sm.append_message({**user("Why is the homepage slow?"), "timestamp": _ts(10)})
        sm.append_message(assistant("The hero image is 9 MB.", timestamp=_ts(11)))
        other = str(sm.get_session_file())
    # A copy under another project: the same session id at another path.
    copy_dir = Path(_session_dir(agent, "/work/site-copy"))
    copy_dir.mkdir(parents=True)
    copy = str(copy_dir / Path(other).name)
    shutil.copyfile(other, copy)

    with SessionManager.create("/work/long", _session_dir(agent, "/work/long")) as sm:
        sm.set_session_name("A long session")
        for n in range(LONG_PATH // 2 - 1):
            sm.append_message({**user(f"question number {n}"), "timestamp": _ts(20)})
            sm.append_message(assistant(f"answer number {n}", timestamp=_ts(20)))
        sm.append_message(
            {
                "role": "toolResult",
                "toolCallId": "t",
                "toolName": "read",
                "content": [{"type": "text", "text": "x" * (LONG_TEXT_CHARS - 3) + "END"}],
                "isError": False,
                "timestamp": _ts(21),
            }
        )
        sm.append_message(assistant("the last answer", timestamp=_ts(21)))
        long = str(sm.get_session_file())

    hostile = write_hostile(agent)

    with SessionManager.create("/work/live", _session_dir(agent, "/work/live")) as sm:
        sm.set_session_name("Live session")
        sm.append_message({**user("start of the live session"), "timestamp": _ts(30)})
        sm.append_message(assistant("ready", timestamp=_ts(30)))
        live = str(sm.get_session_file())

    return WebStore(
        agent,
        demo,
        ids,
        other,
        copy,
        long,
        hostile,
        live,
        image,
        [demo, other, copy, long, hostile, live],
    )


def write_hostile(agent: Path) -> str:
    """A session whose every string is markup, written as raw lines (ids included)."""
    cwd = "/work/<b>hostile</b>"
    directory = Path(_session_dir(agent, cwd))
    directory.mkdir(parents=True)
    path = directory / "2026-01-02T00-00-00-000Z_hostile.jsonl"
    usage = assistant()["usage"]
    lines: list[dict[str, Any]] = [
        {
            "type": "session",
            "version": 3,
            "id": "hostile",
            "timestamp": "2026-01-02T00:00:00.000Z",
            "cwd": cwd,
            "title": HOSTILE,
        },
        {
            "type": "model_change",
            "id": "m1",
            "parentId": None,
            "timestamp": "2026-01-02T00:00:01.000Z",
            "model": HOSTILE,
        },
        {
            "type": "message",
            "id": HOSTILE_ID,
            "parentId": "m1",
            "timestamp": "2026-01-02T00:00:02.000Z",
            "message": {"role": "user", "content": HOSTILE, "timestamp": 1767312002000},
        },
        {
            "type": "message",
            "id": "a1",
            "parentId": HOSTILE_ID,
            "timestamp": "2026-01-02T00:00:03.000Z",
            "message": {
                "role": "assistant",
                "provider": HOSTILE,
                "model": HOSTILE,
                "usage": usage,
                "timestamp": 1767312003000,
                "stopReason": "toolUse",
                "content": [
                    {"type": "thinking", "thinking": HOSTILE},
                    {"type": "text", "text": HOSTILE},
                    {
                        "type": "toolCall",
                        "id": "t",
                        "name": HOSTILE,
                        "arguments": {HOSTILE: HOSTILE},
                    },
                    {
                        "type": "image",
                        "mimeType": 'image/png" onerror="window.pwned=4',
                        "data": "iVBORw0KGgo=",
                    },
                    {
                        "type": "image",
                        "mimeType": "image/svg+xml",
                        "data": "PHN2ZyBvbmxvYWQ9ImFsZXJ0KDEpIi8+",
                    },
                    {
                        "type": "image",
                        "mimeType": "image/png",
                        "data": "blob:sha256:../../../etc/passwd",
                    },
                    {"type": HOSTILE},
                ],
            },
        },
        {
            "type": "message",
            "id": "r1",
            "parentId": "a1",
            "timestamp": "2026-01-02T00:00:04.000Z",
            "message": {
                "role": "toolResult",
                "toolCallId": "t",
                "toolName": HOSTILE,
                "content": [{"type": "text", "text": HOSTILE}],
                "isError": False,
                "timestamp": 1767312004000,
            },
        },
        {
            "type": "label",
            "id": "l1",
            "parentId": "r1",
            "timestamp": "2026-01-02T00:00:05.000Z",
            "targetId": HOSTILE_ID,
            "label": HOSTILE,
        },
        {
            "type": "custom_message",
            "id": "x1",
            "parentId": "l1",
            "timestamp": "2026-01-02T00:00:06.000Z",
            "customType": HOSTILE,
            "content": HOSTILE,
            "display": True,
        },
        {
            "type": "compaction",
            "id": "c1",
            "parentId": "x1",
            "timestamp": "2026-01-02T00:00:07.000Z",
            "summary": HOSTILE,
            "firstKeptEntryId": HOSTILE_ID,
            "tokensBefore": 5,
        },
        {
            "type": "message",
            "id": "u2",
            "parentId": "c1",
            "timestamp": "2026-01-02T00:00:08.000Z",
            "message": {
                "role": "user",
                "content": "the hostile session ends here",
                "timestamp": 1767312008000,
            },
        },
    ]
    path.write_text("".join(serialize_entry(line) + "\n" for line in lines))
    return str(path)


def fingerprint(agent: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under the agent dir but `cache/`: bytes and mtime."""
    out = {}
    for root, _dirs, files in os.walk(agent):
        rel = os.path.relpath(root, agent)
        if rel == "cache" or rel.startswith("cache" + os.sep):
            continue
        for name in files:
            path = os.path.join(root, name)
            out[os.path.relpath(path, agent)] = (Path(path).read_bytes(), os.stat(path).st_mtime_ns)
    return out


class Markup(HTMLParser):
    """Tags, attributes, text and script of a page, as a browser's parser sees them."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def all(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag]

    def urls(self) -> list[str]:
        return [
            str(attrs[name])
            for _, attrs in self.tags
            for name in ("src", "href", "action", "srcset", "poster", "data")
            if attrs.get(name)
        ]

    def handlers(self) -> list[tuple[str, str]]:
        """Event-handler attributes (`on...`) anywhere in the page."""
        return [(tag, name) for tag, attrs in self.tags for name in attrs if name.startswith("on")]

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG, as screenshots are."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 3
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                best = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + best) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, rows


def json_lines(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------- every store found

AGENT_VARIABLES = (
    "PI_CODING_AGENT_DIR",
    "SESSIONTREE_STORE",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "XDG_DATA_HOME",
    "GEMINI_CLI_HOME",
    "COPILOT_HOME",
)
"""The variables that name a store: unset, every store under `$HOME` is found."""
CLAUDE_FIXTURE = "entireio__cli__26__dcd5518fea__0__full.jsonl"
CLAUDE_ID = "aaaaaaaa-1111-2222-3333-444444444444"


@dataclass
class FoundHome:
    """A home with a pi store (a session of its own, one imported from Claude Code) and a
    Claude Code store (the original of that import)."""

    home: Path
    pi: Path
    claude: Path
    pi_session: str
    claude_session: str
    imported: str


def build_home(home: Path, claude_source: Path) -> FoundHome:
    """`home` with ~/.pi/agent and ~/.claude (call with $HOME naming it and no
    variable of `AGENT_VARIABLES` set)."""
    from sessiontree.foreign import import_session, read_claude_session
    from sessiontree.layout import store_parts
    from sessiontree.store import Store

    pi = home / ".pi" / "agent"
    claude = home / ".claude"
    target = claude / "projects" / "-w" / f"{CLAUDE_ID}.jsonl"
    target.parent.mkdir(parents=True)
    shutil.copyfile(claude_source, target)
    project = home / "p"
    project.mkdir()
    with Store(pi).create(project) as sm:
        sm.append_message(user("the word zanzibar"))
        sm.append_message(assistant("zanzibar it is"))
        own = str(sm.get_session_file())
    imported = import_session(read_claude_session(str(target)), store_parts(agent_dir=str(pi)))
    return FoundHome(home, pi, claude, own, str(target), str(imported.path))


def write_wide_session(
    agent: Path,
    entries: int,
    text_chars: int,
    *,
    branches: tuple[tuple[int, int], ...] = (),
    name: str = "wide",
) -> str:
    """A big session written fast, straight as JSONL: `entries` messages of about
    `text_chars` characters each, user and assistant in turn, chained; each
    `(at, back)` of `branches` makes entry `at` a child of entry `back` (a branch);
    a label on entry 5 and a compaction two thirds in. The last line is the leaf."""
    path = Path(_session_dir(agent, "/work/wide")) / f"2026-01-01T00-00-00-000Z_{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    back = dict(branches)
    filler = ("lorem ipsum dolor sit amet " * (text_chars // 27 + 1))[:text_chars]
    header = {
        "type": "session",
        "version": 3,
        "id": f"{name}-session",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/work/wide",
    }
    with open(path, "wb") as f:
        f.write(serialize_entry(header).encode() + b"\n")
        previous: str | None = None
        for n in range(entries):
            entry_id = f"{n:08x}"
            parent = f"{back[n]:08x}" if n in back else previous
            stamp = f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
            if n == 2 * entries // 3:
                entry: dict[str, Any] = {
                    "type": "compaction",
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": stamp,
                    "summary": "what happened so far",
                    "shortSummary": "wide work",
                    "firstKeptEntryId": parent,
                    "tokensBefore": 1000,
                }
            elif n == 6:
                entry = {
                    "type": "label",
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": stamp,
                    "targetId": f"{5:08x}",
                    "label": "checkpoint",
                }
            else:
                role = "user" if n % 2 == 0 else "assistant"
                text = f"message {n} {filler}"
                content: Any = text if role == "user" else [{"type": "text", "text": text}]
                entry = {
                    "type": "message",
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": stamp,
                    "message": {"role": role, "content": content, "timestamp": 1767225600000 + n},
                }
            f.write(serialize_entry(entry).encode() + b"\n")
            previous = entry_id
    return str(path)
