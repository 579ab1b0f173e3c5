"""The "not given" sentinel (JavaScript's `undefined`)."""

from __future__ import annotations

from typing import Final, TypeVar, Union


class UnsetType:
    """Type of `UNSET`; keys holding it are omitted when serialized, like JS `undefined`."""

    __slots__ = ()
    _instance: UnsetType | None = None

    def __new__(cls) -> UnsetType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNSET"


UNSET: Final = UnsetType()
"""Marks an argument as not given; never stored inside an entry."""

T = TypeVar("T")
Maybe = Union[T, UnsetType]  # noqa: UP007  (a generic alias needs Union)
