"""Commands that locate, change or produce sessions: resume, rename, rm, fork, extract,
migrate, export; and moving a file store into a database and back: import-files,
export-files."""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.text import Text

import sessiontree.cli.common as cli_common
from sessiontree.cli.common import (
    EXIT_AMBIGUOUS,
    EXIT_ERROR,
    EXIT_USAGE,
    CliError,
    JsonOption,
    SessionArg,
    console,
    current_store,
    echo_path,
    emit_json,
    err_console,
    error_text,
    open_read_only,
    open_writable,
    other_stores,
    progress,
    resolve_session,
    select_files,
    write_document,
)
from sessiontree.cli.render import terminal_safe
from sessiontree.errors import AmbiguousSessionError, SessionNotFoundError, SessionTreeError
from sessiontree.export import export_html, export_jsonl, export_markdown, html_size_warning
from sessiontree.format import human_size, shown_title
from sessiontree.layout import agent_dir_of, get_default_session_dir
from sessiontree.maintenance import (
    TransferReport,
)
from sessiontree.session import read_head
from sessiontree.storage import FileSessionStorage, SessionStorage
from sessiontree.store import Store

LeafOption = Annotated[
    str | None, typer.Option("--leaf", help="Entry id ending the path (default: the leaf).")
]


def resume_command(
    arg: Annotated[str, typer.Argument(help="A session-id prefix, file-name prefix or path.")],
) -> None:
    """Exit 1 when nothing matches, 3 when ARG is ambiguous (candidates on stderr).
    With no store named, every store found is looked in, as `show` does (another agent's
    session: its path, which that agent resumes)."""
    try:
        path = _resolve_anywhere(arg)
    except AmbiguousSessionError as exc:
        err_console.print(
            Text(f"sessiontree: {arg!r} matches {len(exc.candidates)} sessions:"), soft_wrap=True
        )
        for candidate in exc.candidates:
            title = shown_title(candidate.title, candidate.first_message, candidate.id, 60)
            err_console.print(Text(f"  {candidate.path}  {title}"), soft_wrap=True)
        raise typer.Exit(EXIT_AMBIGUOUS) from None
    echo_path(path)


def _resolve_anywhere(arg: str) -> str:
    """The session ARG names in this invocation's store, else in the first other store
    found that has it (`other_stores`: none when a store was named)."""
    try:
        return current_store().resolve(arg)
    except SessionNotFoundError:
        for other in other_stores():
            try:
                return other.resolve(arg)
            except SessionNotFoundError:
                continue
        raise CliError(f"no session matches {arg!r}") from None


def rename_command(
    session: SessionArg,
    name: Annotated[str, typer.Argument(help="The new title.", show_default=False)],
) -> None:
    """In pi's store the name is a session_info entry, the one pi shows."""
    path = resolve_session(session)
    with open_writable(path) as sm:
        if not sm.set_session_name(name, "user"):
            if not " ".join(name.split()):
                raise CliError("the name is empty")
        title = sm.get_session_name()
    console.print(Text(f"Renamed {os.path.basename(path)} to {title!r}"))


def rm_command(
    session: SessionArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Also delete a damaged session (no valid header).")
    ] = False,
) -> None:
    """Only session files of the store (under sessions/ or a registered session dir) are
    deleted; a file without a valid session header needs --force. The artifacts dir
    goes only with a file named <timestamp>_<session id>.jsonl.
    """
    path = resolve_session(session)
    store = current_store()
    plan = store.plan_delete(path, force=force)
    if not yes:
        extra = f" and {plan.artifacts}{os.sep}" if plan.artifacts else ""
        what = _what_is_deleted(path)
        try:
            confirmed = typer.confirm(
                terminal_safe(f"Delete {what}: {path}{extra}?"), default=False, err=True
            )
        except typer.Abort:
            confirmed = False
        if not confirmed:
            raise CliError("nothing deleted (not confirmed; --yes skips the question)")
    for removed in store.delete(path, force=force):
        console.print(Text(f"Deleted {removed}"), soft_wrap=True)


def fork_command(
    session: SessionArg,
    cwd: Annotated[
        str | None,
        typer.Option("--cwd", help="Project directory of the fork (default: the session's)."),
    ] = None,
) -> None:
    """The fork goes to this agent dir (its cwd's session dir), its images into this
    agent dir's blob store, wherever the source is.
    """
    path = resolve_session(session)
    with current_store().fork(path, cwd) as sm:
        new_path = sm.get_session_file()
    echo_path(new_path)


def extract_command(
    session: SessionArg,
    leaf: Annotated[
        str, typer.Option("--leaf", help="Entry id ending the path to keep.", show_default=False)
    ],
) -> None:
    """The new session goes beside the source, or, for a source in another agent dir,
    into this one (its cwd's session dir); its images into the blob store of the
    agent dir it is in. The source is only read: it is neither migrated nor locked.
    """
    path = resolve_session(session)
    store = current_store()
    agent = store.agent_dir
    with open_read_only(path) as source:
        directory = os.path.dirname(path)
        home = agent_dir_of(path, agent)
        if home is not None and os.path.realpath(home) != os.path.realpath(agent):
            directory = get_default_session_dir(source.get_cwd(), agent)
        copy = source.persist_copy(
            directory, store.storage, breadcrumb=False, leaf_id=leaf, agent_dir=agent
        )
    with copy:
        new_path = copy.get_session_file()
    echo_path(new_path)


def _utf8(text: str) -> bytes:
    """UTF-8 for a document: a lone surrogate (valid in a JSON string, not in UTF-8)
    becomes U+FFFD, as Node writes such a string."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return fixed.encode("utf-8")


class ExportFormat(StrEnum):
    md = "md"
    html = "html"
    jsonl = "jsonl"


def export_command(
    session: SessionArg,
    fmt: Annotated[
        ExportFormat,
        typer.Option("--format", "-f", help="md, html or jsonl.", case_sensitive=False),
    ] = ExportFormat.md,
    leaf: LeafOption = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write to FILE instead of stdout (-: stdout, even for HTML on a terminal).",
        ),
    ] = None,
) -> None:
    """HTML is never poured into a terminal: without -o it goes to <session id>.html in
    this directory (a number added when that name is taken). A JSONL export written to
    a file (-o) is a session: inside an agent dir's sessions/, the images it refers to
    go into that dir's blob store; anywhere else, it holds them itself (inline, as
    base64: no gc reads it there).
    """
    path = resolve_session(session)
    target = None
    if output is None and fmt is ExportFormat.html and cli_common.stdout_is_terminal():
        output = _free_name(_session_file_stem(path), ".html")
    if output is not None and output != "-":
        target = os.path.abspath(os.path.expanduser(output))
        if os.path.isdir(target):
            raise CliError(f"{output}: is a directory")
    carry = None
    with open_read_only(path) as sm:
        if fmt is ExportFormat.md:
            data = _utf8(export_markdown(sm, leaf))
        elif fmt is ExportFormat.html:
            if (huge := html_size_warning(current_store().storage, path)) is not None:
                err_console.print(Text(f"sessiontree: warning: {huge}"), soft_wrap=True)
            data = _utf8(export_html(sm, leaf))
        else:
            data = export_jsonl(sm, leaf)
            if target is not None:
                agent = current_store().agent_dir
                carry = sm.blob_carry(
                    target, FileSessionStorage(), agent_dir=agent, standalone=True
                )
    if target is None:
        write_document(data)
        return
    _refuse_a_session(target, str(output))
    if carry is not None:
        # The images first (carried and synced, or inline): the file written never
        # names a blob that is not stored.
        data = b"".join(carry.chunks([data], target))
    FileSessionStorage().write_atomic(target, [data])
    if carry is not None:
        carry.report()
    err_console.print(Text(f"Wrote {target} ({len(data):,} bytes)"))


def _what_is_deleted(path: str) -> str:
    """ "'<title>' (12 messages, 1.2 MB)" for rm's question; the size alone for a file
    that cannot be read as a session."""
    store = current_store()
    try:
        size = human_size(store.storage.stat(path).size)
    except (OSError, ValueError):
        size = "unknown size"
    info = next((s for s in store.list(None) if s.path == path), None)
    if info is None:
        return f"the file ({size})"
    title = shown_title(info.title, info.first_message, info.id, 60)
    return f"{title!r} ({info.message_count:,} messages, {size})"


def _session_file_stem(path: str) -> str:
    """A file name for an export of the session at `path`: its id, in safe characters."""
    try:
        head = read_head(path, current_store().storage)
        sid = str(head.get("id") or "") if head is not None else ""
    except (OSError, ValueError):
        sid = ""
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in sid).strip("._")[:80]
    return stem or "session"


def _free_name(stem: str, suffix: str) -> str:
    """`stem + suffix` in the current directory, or `stem-2 + suffix`, ... when taken."""
    name, n = stem + suffix, 1
    while os.path.lexists(name):
        n += 1
        name = f"{stem}-{n}{suffix}"
    return name


def _refuse_a_session(target: str, shown: str) -> None:
    """`export -o` replaces any file but a session (its own source included): a session
    is never overwritten by an export of itself or of another. What is a session is
    what the loader says (`read_head`: a header line of any length)."""
    if not os.path.isfile(target):
        return  # nothing there (a FIFO or device is not read: it could block)
    try:
        header = read_head(target, FileSessionStorage())
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CliError(f"{shown}: {exc}") from None
    if header is not None:
        raise CliError(f"{shown}: is a session file; not overwritten (choose another file)")


def migrate_command(
    paths: Annotated[
        list[str] | None, typer.Argument(help="Session files or prefixes (default: this project).")
    ] = None,
    all_projects: Annotated[bool, typer.Option("--all", "-a", help="Every session file.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would change; write nothing.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    files = select_files(paths, all_projects)
    store = current_store()
    results: list[dict[str, Any]] = []
    failed = 0
    with progress("Migrating", len(files)) as advance:
        for path in files:
            advance(path)
            try:
                result = store.migrate(path, dry_run=dry_run)
            except (SessionTreeError, OSError) as exc:
                failed += 1
                results.append({"path": path, "error": str(exc)})
                continue
            results.append(
                {
                    "path": path,
                    "fromVersion": result.from_version,
                    "toVersion": result.to_version,
                    "needed": result.needed,
                    "written": result.written,
                    "changes": result.changes,
                }
            )
    if as_json:
        emit_json({"dryRun": dry_run, "files": results})
    else:
        needed = [r for r in results if r.get("needed")]
        for r in results:
            if "error" in r:
                err_console.print(Text(f"sessiontree: error: {r['error']}"), soft_wrap=True)
            elif r["needed"]:
                verb = "would migrate" if dry_run else "migrated"
                console.print(
                    Text.assemble(
                        (r["path"], "bold"), f": {verb} v{r['fromVersion']} -> v{r['toVersion']}"
                    ),
                    soft_wrap=True,
                )
                for change in r["changes"]:
                    console.print(Text(f"  - {change}"))
        current = len(results) - len(needed) - failed
        console.print(
            Text(
                f"{len(needed)} file(s) {'to migrate' if dry_run else 'migrated'}, "
                f"{current} already current, {failed} failed",
                style="dim",
            )
        )
    if failed:
        raise typer.Exit(EXIT_ERROR)


def _database_store(command: str) -> Store:
    store = current_store()
    if store.is_files:
        raise CliError(
            f"{command} moves sessions between files and a database: give the database "
            "with --store postgresql://... (or $SESSIONTREE_STORE)",
            EXIT_USAGE,
        )
    return store


def _store_name(storage: SessionStorage) -> str:
    schema = getattr(storage, "schema", None)
    return f"the database (schema {schema})" if isinstance(schema, str) else "the database"


def _transfer_json(agent: str, report: TransferReport) -> dict[str, Any]:
    return {
        "agentDir": agent,
        "dirs": report.dirs,
        "files": report.files,
        "bytes": report.bytes,
        "blobs": report.blobs,
        "skipped": [{"path": path, "reason": why} for path, why in report.skipped],
        "missingBlobs": [{"path": path, "blob": digest} for path, digest in report.missing_blobs],
    }


def _transfer(verb: str, copy: Callable[[TransferReport], object]) -> TransferReport:
    """Run a copy; when it stops, say what it had copied (running it again finishes it)."""
    report = TransferReport()
    try:
        copy(report)
    except BaseException as exc:
        stopped = (
            f"{verb} stopped after copying {_transfer_text(report)}; running it again "
            "finishes it (copied files are replaced, not duplicated)"
        )
        if isinstance(exc, (SessionTreeError, OSError)):
            raise CliError(f"{error_text(exc)}; {stopped}") from None
        err_console.print(Text(f"sessiontree: {stopped}"), soft_wrap=True)
        raise
    return report


def _report_skipped(verb: str, report: TransferReport, as_json: bool) -> None:
    """Exit 1 when a path was not copied, or a copied file refers to a blob neither store
    holds, naming each on stderr (in the JSON with --json)."""
    skipped, missing = report.skipped, report.missing_blobs
    if not skipped and not missing:
        return
    problems = []
    if skipped:
        problems.append(f"{len(skipped)} path(s) not {verb}")
    if missing:
        problems.append(f"{len(missing)} ref(s) to blobs that neither store holds")
    if as_json:
        raise CliError(f"{'; '.join(problems)} (see skipped, missingBlobs)")
    for path, why in skipped:
        err_console.print(Text(f"sessiontree: skipped {path}: {why}"), soft_wrap=True)
    for path, digest in missing:
        err_console.print(
            Text(
                f"sessiontree: {path} refers to blob {digest}, which neither store holds "
                "(copied as it is: the image does not resolve)"
            ),
            soft_wrap=True,
        )
    raise CliError(f"{'; '.join(problems)} (listed above)")


def _transfer_text(report: TransferReport) -> str:
    return (
        f"{report.files} file(s) ({human_size(report.bytes)}) in {report.dirs} dir(s), "
        f"{report.blobs} blob(s)"
    )


def import_files_command(
    source: Annotated[
        str | None,
        typer.Argument(
            metavar="[AGENT_DIR]",
            help="The agent dir whose sessions/ and blobs/ to copy (default: the agent dir).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Files already in the database at the same paths are replaced when that loses
    nothing (they hold the start of the file, or are older and kept as .bak first);
    one changed there since it was copied is skipped and listed (exit 1). A session
    that a live agent is writing, here or there, stops the import (retry once it is
    done). Names that are not UTF-8 or not one plain path component, symlinks, FIFOs
    and devices are skipped and listed (exit 1). Prompt history, breadcrumbs and
    settings stay on this host.
    """
    store = _database_store("import-files")
    storage = store.storage
    agent = os.path.abspath(os.path.expanduser(source)) if source else store.agent_dir
    if not os.path.isdir(agent):
        raise CliError(f"{source or agent}: no such directory")
    report = _transfer("import", lambda report: store.import_files(agent, report))
    if as_json:
        emit_json(_transfer_json(agent, report))
    else:
        console.print(
            Text(f"Imported {_transfer_text(report)} from {agent} into {_store_name(storage)}"),
            soft_wrap=True,
        )
    _report_skipped("imported", report, as_json)


def export_files_command(
    target: Annotated[
        str,
        typer.Argument(
            metavar="AGENT_DIR",
            help="Where to write sessions/ and blobs/ (created if missing).",
            show_default=False,
        ),
    ],
    as_json: JsonOption = False,
) -> None:
    """Files keep their modification times. Files already there at the same paths are
    replaced when that loses nothing (as for import-files); one changed there since it
    was copied (newer than the database's) is skipped and listed (exit 1); others are
    left alone. Nothing is written outside sessions/ and blobs/: a database row whose
    name is not one plain path component, and a symlink where a file would go, are
    skipped and listed (exit 1).
    """
    store = _database_store("export-files")
    storage = store.storage
    agent = os.path.abspath(os.path.expanduser(target))
    if os.path.exists(agent) and not os.path.isdir(agent):
        raise CliError(f"{target}: is not a directory")
    report = _transfer("export", lambda report: store.export_files(agent, report))
    if as_json:
        emit_json(_transfer_json(agent, report))
    else:
        console.print(
            Text(f"Exported {_transfer_text(report)} from {_store_name(storage)} to {agent}"),
            soft_wrap=True,
        )
    _report_skipped("exported", report, as_json)
