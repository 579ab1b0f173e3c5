"""The values typed on the command line, converted without pydantic: every parameter of
every command, and what each kind takes and refuses."""

from __future__ import annotations

import enum
from typing import Annotated, Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from sessiontree.cli import app
from sessiontree.cli.app import load_command
from sessiontree.cli.coercion import plain_coercion
from sessiontree.cli.registry import COMMANDS

runner = CliRunner()


def every_parameter() -> list[tuple[str, Any]]:
    """(where, parameter) of the root, every command and group, and their --help."""
    found: list[tuple[str, Any]] = []

    def walk(command: Any, path: str) -> None:
        ctx = command.make_context(path, [], resilient_parsing=True)
        found.extend((f"{path} {p.name}", p) for p in command.get_params(ctx))
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, f"{path} {name}")

    walk(get_command(app), "sessiontree")
    for name in COMMANDS:
        walk(load_command(name), f"sessiontree {name}")
    return found


def test_no_parameter_is_left_to_typers_pydantic_coercion() -> None:
    parameters = every_parameter()
    assert len(parameters) > 100
    left = [where for where, p in parameters if type(p._runtime_param).__name__ != "_PlainParam"]
    assert left == []


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


def converter(annotation: Any, **options: Any) -> Any:
    """The converter of an option `annotation` with typer `options` (min, max, ...)."""
    import typer

    def template(value: Any = None) -> None:
        """A template."""

    # Set here, not as strings: the annotation is a value of this call.
    template.__annotations__ = {
        "value": Annotated[annotation, typer.Option("--value", **options)],
        "return": None,
    }

    builder = typer.Typer(add_completion=False)
    builder.command()(template)
    (param,) = [p for p in get_command(builder).params if p.name == "value"]
    return plain_coercion(param)


def convert(annotation: Any, value: Any, **options: Any) -> Any:
    return converter(annotation, **options)._convert(value)


def mistake(annotation: Any, value: Any, **options: Any) -> str:
    """What the converter says of a value it refuses."""
    with pytest.raises(ValueError) as raised:
        convert(annotation, value, **options)
    return str(raised.value)


@pytest.mark.parametrize(
    ("text", "number"),
    [("12", 12), (" 12 ", 12), ("+3", 3), ("-4", -4), ("1_000", 1000), ("007", 7), ("2.0", 2)],
)
def test_a_whole_number_is_read_as_python_writes_it(text: str, number: int) -> None:
    assert convert(int, text) == number and type(convert(int, text)) is int


@pytest.mark.parametrize("text", ["many", "", " ", "1.5", "0x10", "١٢", "inf", "12abc"])
def test_other_text_is_not_a_whole_number(text: str) -> None:
    assert mistake(int, text) == "not a whole number"


def test_a_number_and_its_bounds_are_said_as_people_write_them() -> None:
    assert convert(float, "0.25", min=0.1) == 0.25
    assert convert(float, "1e3") == 1000.0
    for text in ("x", "nan", "١"):
        assert mistake(float, text) == "not a number"
    assert mistake(float, "0.01", min=0.1) == "should be greater than or equal to 0.1"
    assert mistake(float, "1", min=600.0) == "should be greater than or equal to 600"
    assert mistake(int, "1001", min=1, max=1000) == "should be less than or equal to 1000"
    assert convert(int, "1000", min=1, max=1000) == 1000


def test_a_flag_from_the_environment_takes_typers_words() -> None:
    for word in ("1", "on", "T", "true", "y", "Yes"):
        assert convert(bool, word) is True
    for word in ("", "0", "off", "f", "False", "n", "no"):
        assert convert(bool, word) is False
    assert convert(bool, True) is True
    assert mistake(bool, "maybe") == "not true or false"


def test_a_choice_is_a_member_named_by_its_value() -> None:
    assert convert(Colour, "red") is Colour.RED
    assert convert(Colour, Colour.GREEN) is Colour.GREEN
    assert convert(Colour, "RED", case_sensitive=False) is Colour.RED
    assert mistake(Colour, "blue") == "'blue' is not one of red, green"


def test_kinds_not_converted_here_are_left_to_typer() -> None:
    from datetime import datetime
    from pathlib import Path

    assert converter(str) is not None and converter(list[str]) is not None
    assert converter(Path) is None and converter(datetime) is None
    assert converter(int, clamp=True, min=1) is None
    assert converter(str, parser=str.upper) is None


def test_a_bad_value_is_one_line_in_the_clis_words() -> None:
    result = runner.invoke(app, ["archive", "--watch", "--interval", "x"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "sessiontree: error: --interval: not a number (see sessiontree archive --help)"
    )
    result = runner.invoke(app, ["serve", "--port", "70000"])
    assert result.exit_code == 2 and "--port: should be less than or equal to 65535" in (
        result.stderr
    )
