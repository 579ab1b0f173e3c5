"""The `sessiontree` command line: a thin layer over the library.

It is the `cli` extra's (typer, rich and what the exports and reports draw with):
without it, `sessiontree` says which extra to install and exits 1, no traceback.
"""

from __future__ import annotations

import sys

CLI_EXTRA = "pip install 'sessiontree[cli]'"
"""What installs the command line, as messages name it."""

_CLI_PACKAGES = frozenset({"typer", "click", "rich"})
"""The packages the command line starts with (the `cli` extra's; typer needs the others)."""

try:
    from sessiontree.cli.app import app, main
except ModuleNotFoundError as exc:
    if exc.name not in _CLI_PACKAGES:
        raise

    def main() -> None:
        """Console-script entry point without the extra: says what to install."""
        sys.stderr.write(f"sessiontree: the command line is not installed: {CLI_EXTRA}\n")
        raise SystemExit(1)


__all__ = ["CLI_EXTRA", "app", "main"]
