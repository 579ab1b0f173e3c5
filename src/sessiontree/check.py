"""Deprecated alias of `sessiontree.maintenance` (the consistency checker).

This path goes in the next release."""

import warnings

from sessiontree.maintenance import Finding, check_session, repair_session

__all__ = ["Finding", "check_session", "repair_session"]

warnings.warn(
    "sessiontree.check is deprecated: import from sessiontree.maintenance",
    DeprecationWarning,
    stacklevel=2,
)
