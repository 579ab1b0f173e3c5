"""What a value typed on the command line becomes before a command gets it, without pydantic.

Typer (0.29, as pinned here) turns each parameter's text into its annotated type through a
pydantic `TypeAdapter`, built for every parameter a command line goes through, even one
left out: importing pydantic and building those adapters was a third of a `sessiontree
list`'s start-up. The commands take only text, flags, whole numbers and numbers with a
least or greatest value, a choice of an `Enum`, and lists of text; each parameter whose
annotation is one of those gets a converter of its own here (`use_plain_coercion`), in
typer's slot for it, and typer's adapter is never built. Its mistakes are said in the
CLI's words ("not a whole number"), which `app.py` puts in its one error line.

A parameter of any other kind (a path, a date, a parser of its own) keeps typer's; a
test checks that no command has one. An older typer, without that slot, converts with
click's types, and nothing here is used.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from typer import BadParameter
from typer._coercion import RuntimeParam
from typer._param_types import coerce_cli_choice

__all__ = ["plain_coercion", "use_plain_coercion"]

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"", "0", "off", "f", "false", "n", "no"})
"""The words a flag's value may be (from the environment), as typer reads them."""


def _shown(bound: float) -> str:
    """A least or greatest value as people write it: 600, not 600.0."""
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _number(text: str, kind: type[int] | type[float]) -> int | float:
    """`text` read as a whole number (`1.0` too) or a number, blanks around and `_`
    between digits allowed; ValueError, in the CLI's words, for other text."""
    try:
        if not text.isascii():  # int() and float() would read other scripts' digits too
            raise ValueError
        if kind is float:
            number = float(text)
            if math.isnan(number):
                raise ValueError
            return number
        try:
            return int(text)
        except ValueError:
            whole = float(text)
            if not whole.is_integer():
                raise
            return int(whole)
    except ValueError:
        raise ValueError("not a whole number" if kind is int else "not a number") from None


@dataclass(frozen=True)
class _PlainParam(RuntimeParam):
    """Converts one parameter's value (typer has taken out no value and a list's
    mistakes): `kind` is what the annotation says, the bounds are the option's."""

    kind: str
    least: float | None = None
    greatest: float | None = None

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        if self.kind == "list":
            items = value if isinstance(value, list | tuple) else [value]
            return [str(item) for item in items]
        try:
            return self._convert(value)
        except ValueError as exc:
            raise BadParameter(str(exc), ctx=ctx, param=param) from None

    def _convert(self, value: Any) -> Any:
        kind = self.kind
        if kind == "str":
            return str(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            word = str(value).strip().lower()
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
            raise ValueError("not true or false")
        if kind == "choice":
            try:
                return coerce_cli_choice(
                    value,
                    choices=tuple(self.annotation),
                    case_sensitive=self.parameter_info.case_sensitive,
                )
            except ValueError:
                shown = ", ".join(str(member.value) for member in self.annotation)
                raise ValueError(f"{value!r} is not one of {shown}") from None
        number = _number(str(value), int if kind == "int" else float)
        if self.least is not None and number < self.least:
            raise ValueError(f"should be greater than or equal to {_shown(self.least)}")
        if self.greatest is not None and number > self.greatest:
            raise ValueError(f"should be less than or equal to {_shown(self.greatest)}")
        return number


_KINDS: dict[Any, str] = {str: "str", bool: "bool", int: "int", float: "float", list[str]: "list"}


def plain_coercion(param: Any) -> RuntimeParam | None:
    """The converter of typer parameter `param`, if its annotation and options are of the
    kinds above (else None: typer's own)."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:
        return None
    annotation, info = descriptor.annotation, descriptor.parameter_info
    if info.parser is not None or getattr(info, "click_type", None) is not None or info.clamp:
        return None
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        kind: str | None = "choice"
    else:
        kind = _KINDS.get(annotation)
    if kind is None or (kind not in ("int", "float") and (info.min, info.max) != (None, None)):
        return None
    return _PlainParam(info, annotation, kind, info.min, info.max)


def use_plain_coercion(params: list[Any]) -> None:
    """Give each of `params` that typer would convert with pydantic its plain converter."""
    for param in params:
        if getattr(param, "_runtime_param", False) is None:  # typer's empty slot
            param._runtime_param = plain_coercion(param)
