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

_EXTRA_PACKAGES = _CLI_PACKAGES | {
    "jinja2",
    "markupsafe",
    "markdown_it",
    "mdurl",
    "pygments",
    "genai_prices",
}
"""Every package of the `cli` extra a command may import as it loads."""

try:
    from sessiontree.cli.app import app
    from sessiontree.cli.app import main as _run

    def main() -> None:
        """Console-script entry point. A command that draws with a part of the extra
        missing (typer installed on its own) says what to install, no traceback."""
        try:
            _run()
        except ModuleNotFoundError as exc:
            if exc.name not in _EXTRA_PACKAGES:
                raise
            said = str(exc) if CLI_EXTRA in str(exc) else f"{exc.name} is missing: {CLI_EXTRA}"
            sys.stderr.write(f"sessiontree: {said}\n")
            raise SystemExit(1) from None

except ModuleNotFoundError as exc:
    if exc.name not in _CLI_PACKAGES:
        raise

    def main() -> None:
        """Console-script entry point without the extra: says what to install."""
        sys.stderr.write(f"sessiontree: the command line is not installed: {CLI_EXTRA}\n")
        raise SystemExit(1)


__all__ = ["CLI_EXTRA", "app", "main"]
