"""The `sessiontree` command line: a thin layer over the library."""

from __future__ import annotations

from sessiontree.cli.app import app, main

__all__ = ["app", "main"]
