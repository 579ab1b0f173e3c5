"""The typer app: global options, error handling, and command registration.

Each command parses arguments, calls the library, renders the result (rich for
people, `--json` for scripts). Errors a user can cause (unknown session, bad
file, failed write) become one line on stderr and a documented exit code,
never a traceback; see `common.py` for the codes.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import tempfile
from typing import Annotated, Any

import typer
from rich.text import Text
from typer.core import TyperGroup

from ..errors import AmbiguousSessionError, SessionTreeError
from ..stores import STORE_ENV, file_store_dir
from . import (
    commands_foreign,
    commands_inspect,
    commands_integrity,
    commands_manage,
    commands_serve,
    commands_usage,
)
from .common import (
    EXIT_AMBIGUOUS,
    EXIT_ERROR,
    EXIT_USAGE,
    CliError,
    ambiguous_message,
    begin_invocation,
    console,
    emit_json,
    err_console,
    error_text,
)
from .demo import build_demo_session
from .render import TreeOptions, preview, render_tree

__all__ = ["app", "main", "preview", "render_tree"]


def _error(message: str, code: int) -> typer.Exit:
    # One line, whatever the message (a database driver's may span several).
    message = " ".join(part.strip() for part in message.splitlines() if part.strip())
    err_console.print(Text(f"sessiontree: error: {message}"), soft_wrap=True)
    return typer.Exit(code)


class _Group(TyperGroup):
    """Turns user errors raised by any command into one stderr line and an exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as exc:
            raise _error(exc.message, exc.code) from None
        except AmbiguousSessionError as exc:
            raise _error(ambiguous_message(exc.arg, exc.candidates), EXIT_AMBIGUOUS) from None
        except SessionTreeError as exc:
            raise _error(str(exc), EXIT_ERROR) from None
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise  # the reader went away (`| head`): the toolkit exits quietly
            raise _error(error_text(exc), EXIT_ERROR) from None


app = typer.Typer(
    name="sessiontree",
    cls=_Group,
    help="Inspect, search, export, repair and migrate coding-agent session stores.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root(
    ctx: typer.Context,
    agent_dir: Annotated[
        str | None,
        typer.Option(
            "--agent-dir",
            metavar="DIR",
            help="The agent's store (default: $PI_CODING_AGENT_DIR, else ~/.xcsh/agent); "
            "e.g. ~/.pi/agent or ~/.omp/agent.",
            show_default=False,
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            metavar="URL",
            envvar=STORE_ENV,
            help="Sessions in a database: postgresql://user@host/db[?schema=NAME] "
            "(default schema sessiontree); paths map to the agent dir. A path means "
            "that agent dir's files (as --agent-dir).",
            show_default=False,
            show_envvar=True,
        ),
    ] = None,
    agent: commands_foreign.AgentOption = None,
) -> None:
    """Inspect, search, export, repair and migrate coding-agent session stores."""
    if agent_dir is not None:
        agent_dir = os.path.abspath(os.path.expanduser(agent_dir))
    url = store or None
    foreign = None
    if agent is not None or agent_dir is not None:
        # Another agent's store (Claude Code, Codex) is read through its own storage.
        agent_dir, foreign = commands_foreign.resolve_agent(
            agent, agent_dir, ctx.invoked_subcommand, database=url is not None
        )
    if url is not None:
        files = file_store_dir(url)  # SessionTreeError for an unsupported scheme
        if files is not None:
            if agent_dir is not None and agent_dir != files:
                raise CliError(
                    f"--store names the files of {files} but --agent-dir says {agent_dir}",
                    EXIT_USAGE,
                )
            agent_dir, url = files, None
    # The agent dir goes to the library as `agent_dir=` (blobs, breadcrumbs, session
    # dirs), never through the environment: None is `$PI_CODING_AGENT_DIR` or the default.
    begin_invocation(ctx, url, foreign, agent_dir)


@app.command()
def demo(
    as_json: Annotated[bool, typer.Option("--json", help="Print the context as JSON.")] = False,
    keep: Annotated[
        bool, typer.Option(help="Keep the temporary agent dir and print its path.")
    ] = False,
) -> None:
    """Build a branched demo session in a temporary agent dir and show it."""
    tmp = tempfile.mkdtemp(prefix="sessiontree-demo-")
    agent_dir = os.path.join(tmp, "agent")
    try:
        with build_demo_session(agent_dir, os.path.join(tmp, "project")) as sm:
            ctx = sm.build_session_context()
            if as_json:
                emit_json(
                    {
                        "sessionFile": sm.get_session_file(),
                        "leafId": sm.get_leaf_id(),
                        "context": {
                            "messages": ctx.messages,
                            "thinkingLevel": ctx.thinking_level,
                            "models": ctx.models,
                        },
                    }
                )
                return
            console.print(
                Text.assemble(
                    ("Session ", "bold"),
                    sm.get_session_name() or "",
                    f"  ({sm.get_session_file()})",
                ),
                soft_wrap=True,
            )
            title = Text(sm.get_session_id(), style="bold")
            console.print(render_tree(sm, title, TreeOptions()))
            console.print(
                Text.assemble(
                    ("\nContext at leaf ", "bold"),
                    (str(sm.get_leaf_id()), "bold"),
                    f" (thinking {ctx.thinking_level}, models {json.dumps(ctx.models)})",
                )
            )
            for message in ctx.messages:
                console.print(Text(f"  • {preview({'type': 'message', 'message': message}, 100)}"))
            stats = sm.get_usage_statistics()
            blob_dir = os.path.join(agent_dir, "blobs")
            blobs = (
                [n for n in os.listdir(blob_dir) if "." not in n] if os.path.isdir(blob_dir) else []
            )
            console.print(
                f"\nTokens in {stats.input} / out {stats.output}, cost ${stats.cost:.4f}; "
                f"{len(blobs)} image(s) in the blob store"
                + ("" if keep else " (temporary agent dir, removed now; --keep keeps it)"),
                markup=False,
                soft_wrap=True,
            )
    finally:
        if keep:
            console.print(f"Kept {tmp}", markup=False, soft_wrap=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


commands_inspect.register(app)
commands_manage.register(app)
commands_integrity.register(app)
commands_usage.register(app)
commands_serve.register(app)
commands_foreign.register(app)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly, like other CLI tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(141) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
