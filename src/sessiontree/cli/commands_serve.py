"""`sessiontree serve`: the read-only web app (the optional `web` extra)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.text import Text

from sessiontree.cli.common import (
    EXIT_USAGE,
    CliError,
    all_stores,
    console,
    err_console,
)
from sessiontree.store import made_by

INSTALL_HINT = "sessiontree serve needs the web extra: pip install 'sessiontree[web]'"


def serve_command(
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="TCP port (0: any free port).")
    ] = 0,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="Address to listen on (default: a random loopback address 127.x.y.z, "
            "whose cookies no other local server gets). Anything but loopback lets other "
            "machines reach the app (they still need a link).",
            show_default=False,
        ),
    ] = None,
    open_browser: Annotated[
        bool,
        typer.Option(
            "--open",
            help="Open the app in the default browser (through a private file: the link "
            "is never on a command line).",
        ),
    ] = False,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            metavar="NAME",
            help="Also answer requests for this host name (besides localhost and IP "
            "addresses), e.g. the machine's name when listening on all addresses.",
        ),
    ] = None,
    no_index: Annotated[
        bool, typer.Option("--no-index", help="Search and usage without the content index.")
    ] = False,
) -> None:
    """Read-only. It prints a link with a random token that works once: the browser that
    opens it gets a session cookie; everything else is refused. That browser finds a
    link for another one at /link.

    With no --agent, --agent-dir or --store (and no $SESSIONTREE_STORE or
    $PI_CODING_AGENT_DIR), every agent store found on this machine is served, each
    session marked with its store (`sessiontree stores` lists them).
    """
    try:
        from sessiontree.web.server import is_loopback, serve
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        raise CliError(f"{INSTALL_HINT} ({missing} is missing)") from None
    if host is not None and not host:
        raise CliError("--host must not be empty", EXIT_USAGE)
    if host is not None and not is_loopback(host):
        err_console.print(
            Text(
                f"sessiontree: warning: listening on {host}: anyone who can reach it and "
                "has the link can read every session"
            ),
            soft_wrap=True,
        )
    # No store named: every store found is served (an archive: every store of its view).
    stores = list(all_stores(existing=True).values())
    served = stores[0] if len(stores) == 1 else stores

    def announce(url: str) -> None:
        if len(stores) == 1:
            console.print(Text(f"Serving {stores[0].agent_dir} read-only at"), soft_wrap=True)
        else:
            console.print(Text(f"Serving {len(stores)} stores read-only:"), soft_wrap=True)
            for one in stores:
                shown = f"  {made_by(one.agent, one.machine)}: {one.location}"
                console.print(Text(shown), soft_wrap=True)
            console.print(Text("at"), soft_wrap=True)
        console.print(Text(url), soft_wrap=True)
        console.print(
            Text("(the link works once; /link there makes one for another browser; Ctrl-C stops)"),
            soft_wrap=True,
        )
        sys.stdout.flush()

    def warn(message: str) -> None:
        err_console.print(Text(f"sessiontree: warning: {message}"), soft_wrap=True)

    try:
        serve(
            served,
            host=host,
            port=port,
            announce=announce,
            warn=warn,
            open_browser=open_browser,
            allowed_hosts=allow_host or (),
            use_index=not no_index,
        )
    except OSError as exc:
        where = host if host is not None else "a loopback address"
        raise CliError(f"cannot listen on {where}:{port}: {exc.strerror or exc}") from None
