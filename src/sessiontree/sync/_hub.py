"""A hub: the shared place machines sync through, a dir or a PostgreSQL database, both
through the session storage (`FileSessionStorage`, `PostgresSessionStorage`).

Layout (paths relative to the hub's root; docs/sync.md says it for users):

- `sessiontree-hub.json`: the mark (`{"format": "sessiontree-hub", "version": 1}`);
- `machines/<machine>/owner.json`: the id of the machine that syncs under that name;
- `machines/<machine>/journal.jsonl`: one line per growth of that machine's logs
  (`{"log": <path>, "size": N}`), so that a round reads only what grew;
- `machines/<machine>/status.json`: what its last round that changed anything did;
- `sessions/<agent>/<project dir>/<session file stem>/<machine>.jsonl`: the lines of
  the session that machine put in the hub, as in its file;
- `blobs/<sha256>`: the blobs those lines name.

Every file but the blobs has one writer, the machine it is named after; every name read
from the hub is checked (`_names`) before it is used.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sessiontree.errors import SessionTreeError
from sessiontree.storage import (
    FileSessionStorage,
    HostFilesystem,
    SessionStorage,
    close_storage,
    directory_tree,
    read_range,
    redact_url,
    write_whole,
)
from sessiontree.sync._model import HubError, MachineNameTakenError, NotAHubError
from sessiontree.sync._names import (
    SYNCED_AGENTS,
    check_machine_name,
    is_project_dir_name,
    is_session_file_name,
)

__all__ = ["HUB_VERSION", "MARK", "Hub", "LogPath", "hub_label", "is_hub_url", "opened_hub"]

HUB_VERSION: Final = 1
MARK: Final = "sessiontree-hub.json"
_PG_ROOT: Final = "/sessiontree-hub"
"""The root a hub in PostgreSQL keeps its files under (its keys are relative to it)."""
_PG_SCHEMA: Final = "sessiontree_hub"
"""The schema a hub URL without one uses: not a store's (`sessiontree`), whose
`sessions/` would otherwise be the hub's."""
_SHA256_HEX: Final = frozenset("0123456789abcdef")


def is_hub_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def hub_label(location: str) -> str:
    """The hub as messages name it: a dir's absolute path, a URL without its password."""
    if is_hub_url(location):
        return redact_url(location)
    return os.path.abspath(os.path.expanduser(location))


@dataclass(frozen=True, slots=True)
class LogPath:
    """A session log's place in the hub, its names checked."""

    agent: str
    project: str
    stem: str
    machine: str

    @property
    def session_dir(self) -> str:
        return f"sessions/{self.agent}/{self.project}/{self.stem}"

    @property
    def rel(self) -> str:
        return f"{self.session_dir}/{self.machine}.jsonl"

    @property
    def session(self) -> tuple[str, str, str]:
        """(agent, project dir, session file name): the session, whoever wrote it."""
        return self.agent, self.project, self.stem + ".jsonl"

    @staticmethod
    def parse(rel: object) -> LogPath | None:
        """The log a hub path names; None unless every part is a name we use."""
        if not isinstance(rel, str):
            return None
        parts = rel.split("/")
        if len(parts) != 5 or parts[0] != "sessions" or not parts[4].endswith(".jsonl"):
            return None
        _, agent, project, stem, leaf = parts
        machine = leaf[: -len(".jsonl")]
        if agent not in SYNCED_AGENTS or not is_project_dir_name(project):
            return None
        if not is_session_file_name(stem + ".jsonl"):
            return None
        try:
            check_machine_name(machine)
        except ValueError:
            return None
        return LogPath(agent, project, stem, machine)


class Hub:
    """A hub's files under one root; `rel` paths are relative to it. Every failure of
    the hub's storage is a `HubError` naming the hub."""

    def __init__(self, storage: SessionStorage, root: str, label: str) -> None:
        self.storage = storage
        self.root = root
        self.label = label
        self.local = storage.host_path(root) if isinstance(storage, HostFilesystem) else None
        """The dir, for a hub of this host's files."""
        self.wrote = False
        """Whether this round wrote to the hub (then it can be written)."""

    def path(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/")) if rel else self.root

    def _symlinked(self, rel: str) -> str | None:
        """The first part of `rel` that is a symlink in a dir hub (None: none is).
        Another machine may plant one to send this machine's reads and writes out of
        the hub; the hub's own dir may be a link (the user's choice)."""
        if self.local is None or not rel:
            return None
        current = self.local
        for part in rel.split("/"):
            current = os.path.join(current, part)
            try:
                if stat.S_ISLNK(os.lstat(current).st_mode):
                    return current
            except FileNotFoundError:
                return None
            except NotADirectoryError:
                return None
        return None

    def _refuse_link(self, rel: str) -> None:
        """HubError when `rel` would be written through a symlink in the hub."""
        link = self._symlinked(rel)
        if link is not None:
            raise HubError(
                f"{self.label}: {link} is a symlink; nothing is written through one"
                " (another machine's, or the hub's files moved?)"
            )

    @contextmanager
    def io(self, doing: str) -> Iterator[None]:
        """Say which hub failed, and how, for every storage error inside."""
        try:
            yield
        except HubError:
            raise
        except OSError as exc:
            raise HubError(f"{self.label}: cannot {doing}: {_why(exc)}") from exc
        except SessionTreeError as exc:
            raise HubError(f"{self.label}: cannot {doing}: {exc}") from exc

    # -- reading and writing files ------------------------------------------------------

    def size(self, rel: str) -> int:
        """The file's size; 0 when it is missing."""
        if self._symlinked(rel):
            return 0
        with self.io(f"read {rel}"):
            try:
                return self.storage.stat(self.path(rel)).size
            except FileNotFoundError:
                return 0

    def read(self, rel: str, offset: int = 0, end: int | None = None) -> bytes:
        """The bytes from `offset` to `end` (default, or past it: the end); b"" when
        missing."""
        if self._symlinked(rel):
            return b""  # as if missing: a link another machine planted is not read
        with self.io(f"read {rel}"):
            try:
                # a size another machine's journal claims is a bound, never an amount
                # to read: the file says how much there is
                size = self.storage.stat(self.path(rel)).size
                end = size if end is None else min(end, size)
                if end <= offset:
                    return b""
                return read_range(self.storage, self.path(rel), offset, end - offset)
            except FileNotFoundError:
                return b""

    def write(self, rel: str, data: bytes) -> None:
        """Replace the file, all or nothing."""
        self._refuse_link(rel)
        with self.io(f"write {rel}"):
            self.storage.ensure_dir(os.path.dirname(self.path(rel)))
            write_whole(self.storage, self.path(rel), [data])
        self.wrote = True

    def append(
        self, rel: str, data: bytes, *, durable: bool = True, known: int | None = None
    ) -> int:
        """Append whole lines (`data` ends in `\\n`) to a file this machine alone writes;
        its size after. A torn last line (a write cut short) is ended first, so that the
        lines appended now stay lines of their own. `durable=False`: not fsync'ed (the
        caller's `Barrier` makes it durable with others). `known`: the size this machine
        left the file at, trusted in a database (whose writes are whole or not at all:
        no look first); a dir's file is looked at all the same."""
        self._refuse_link(rel)
        with self.io(f"write {rel}"):
            path = self.path(rel)
            if known is not None and self.local is None:
                size = known
            else:
                try:
                    size = self.storage.stat(path).size
                except FileNotFoundError:
                    self.storage.ensure_dir(os.path.dirname(path))
                    size = 0
                if size and read_range(self.storage, path, size - 1, 1) != b"\n":
                    data = b"\n" + data
            writer = self.storage.open_writer(path, "a")
            try:
                writer.write_line(data.decode("utf-8"))
                writer.flush()
                if durable:
                    writer.fsync()
            finally:
                writer.close()
        self.wrote = True
        return size + len(data)

    def check_writable(self, machine: str) -> None:
        """Before the first local write of a round: HubError unless the hub takes a write
        (a read-only hub must change nothing here). A round that wrote to it already, or
        has nothing to write here, writes nothing for this."""
        if self.wrote:
            return
        rel = f"machines/{machine}/.probe"
        self.write(rel, b"")
        with self.io(f"write {rel}"):
            self.storage.unlink(self.path(rel))

    def list_dirs(self, rel: str) -> list[str]:
        if self._symlinked(rel):
            return []
        with self.io(f"list {rel or 'the hub'}"):
            tree = directory_tree(self.storage, "a hub")
            return sorted(os.path.basename(p) for p in tree.list_dirs(self.path(rel)))

    def list_files(self, rel: str, pattern: str = "*") -> list[str]:
        if self._symlinked(rel):
            return []
        with self.io(f"list {rel or 'the hub'}"):
            try:
                found = self.storage.list_files(self.path(rel), pattern)
            except FileNotFoundError:
                return []
            return sorted(os.path.basename(p) for p in found)

    # -- the mark and the machines ------------------------------------------------------

    def prepare(self) -> None:
        """Refuse what is not a hub (a non-empty dir or database without the mark, or a
        newer hub); mark a new one."""
        with self.io("read the hub"):
            if self.local is not None and os.path.isdir(self.local):
                if not os.access(self.local, os.W_OK | os.X_OK):
                    raise HubError(f"{self.label}: not writable; nothing was synced")
            marked = self.read(MARK)
            if not marked:
                held = self.list_files("") + self.list_dirs("")
                held = [n for n in held if not n.startswith(f".{MARK}")]  # a first sync's temp
                if held:
                    raise NotAHubError(
                        f"{self.label}: not a sessiontree hub ({MARK} missing) and not empty;"
                        " give an empty or new dir"
                    )
                body = {"format": "sessiontree-hub", "version": HUB_VERSION}
                self.write(MARK, json.dumps(body).encode())
                return
        try:
            mark = json.loads(marked)
        except ValueError:
            mark = None
        if not isinstance(mark, dict) or mark.get("format") != "sessiontree-hub":
            raise NotAHubError(f"{self.label}: {MARK} is not a hub's mark")
        version = mark.get("version")
        if not isinstance(version, int) or version > HUB_VERSION:
            raise NotAHubError(
                f"{self.label}: a hub of version {version!r}; this sessiontree reads version "
                f"{HUB_VERSION} (upgrade it)"
            )

    def claim(self, machine: str, machine_id: str) -> None:
        """Make `machine` this machine's name in the hub (its id in `owner.json`), or
        refuse a name another machine syncs under."""
        rel = f"machines/{machine}/owner.json"
        data = self.read(rel)
        if data:
            try:
                owner = json.loads(data).get("machineId")
            except (ValueError, AttributeError):
                owner = None
            if owner == machine_id:
                return
            raise MachineNameTakenError(
                f"{self.label}: machine name {machine!r} is already used by another machine;"
                " pass --machine NAME"
            )
        self.write(rel, json.dumps({"machineId": machine_id}).encode())

    def machines(self) -> list[str]:
        """The machine names of the hub's `machines/` (a name not ours to use is left out)."""
        names = []
        for name in self.list_dirs("machines"):
            try:
                names.append(check_machine_name(name))
            except ValueError:
                continue
        return names

    # -- blobs --------------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        with self.io(f"read blobs/{digest}"):
            return self.storage.exists(self.path(f"blobs/{digest}"))

    def put_blob(self, digest: str, data: bytes) -> None:
        self.write(f"blobs/{digest}", data)

    def get_blob(self, digest: str) -> bytes | None:
        """The blob's bytes if the hub has it and they hash to its name (else None)."""
        if len(digest) != 64 or not _SHA256_HEX.issuperset(digest):
            return None
        data = self.read(f"blobs/{digest}")
        if not data or hashlib.sha256(data).hexdigest() != digest:
            return None
        return data

    def close(self) -> None:
        close_storage(self.storage)


def _why(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the hub is full; nothing more was written locally"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "the hub is read-only (permission denied)"
    return exc.strerror or str(exc)


def _with_schema(url: str) -> str:
    """The URL with `schema=sessiontree_hub` when it names none."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key == "schema" for key, _ in query):
        return url
    query.append(("schema", _PG_SCHEMA))
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def opened_hub(location: str) -> Iterator[Hub]:
    """The hub at a dir or a `postgresql://` URL (schema `sessiontree_hub` unless the URL
    names one), released on exit."""
    label = hub_label(location)
    if is_hub_url(location):
        from sessiontree.storage import open_storage

        try:
            storage = open_storage(_with_schema(location), agent_dir=_PG_ROOT)
        except (OSError, SessionTreeError) as exc:
            raise HubError(f"{label}: cannot open the hub: {exc}") from exc
        hub = Hub(storage, _PG_ROOT, label)
    else:
        hub = Hub(FileSessionStorage(), label, label)
    try:
        yield hub
    finally:
        hub.close()
