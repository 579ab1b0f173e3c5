"""The global options, before or after the command, and the classes commands are built with.

`--agent-dir`, `--store` and `--agent` say which store a command works on. Every level
of the command line takes them: `sessiontree --agent-dir X list`, `sessiontree list
--agent-dir X` and `sessiontree usage daily --agent-dir X` mean the same. As each level
starts, its values move out of its parameters into the record the nested contexts share
(`ctx.meta`); the command, as it starts, settles them: a value typed at two levels must
be the same at both (else a usage error), one typed beats `$SESSIONTREE_STORE`. Then the
store of the invocation is chosen: one `Store` (`common.begin_invocation`).

Light on purpose: `sessiontree --help` imports this module and no command.
"""

from __future__ import annotations

import enum
import os
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from sessiontree._version import __version__
from sessiontree.cli.errors import EXIT_USAGE, CliError

__all__ = ["STORE_ENV", "Command", "GlobalOptions", "Group", "settle_global_options"]

STORE_ENV = "SESSIONTREE_STORE"
"""`sessiontree.store.STORE_ENV`, written here too (a test keeps the two equal) so
that listing the commands imports no store code."""

AgentDirOption = Annotated[
    str | None,
    typer.Option(
        "--agent-dir",
        metavar="DIR",
        help="The agent's store (default: $PI_CODING_AGENT_DIR, else ~/.xcsh/agent); "
        "e.g. ~/.pi/agent or ~/.omp/agent.",
        show_default=False,
    ),
]
StoreOption = Annotated[
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
]
AgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent",
        metavar="NAME",
        help="Use an agent's default store: claude, codex, opencode, gemini, copilot "
        "(read-only; claude with --store: the Claude Code transcripts a database "
        "holds), pi, omp or xcsh.",
        show_default=False,
    ),
]

_FLAGS = {"agent_dir": "--agent-dir", "store": "--store", "agent": "--agent"}
"""Each global option's parameter name and flag."""

_GIVEN = "sessiontree.cli.global_options"
"""The key in `ctx.meta` (shared by nested contexts) of the values each level was given."""


def _global_options(
    agent_dir: AgentDirOption = None, store: StoreOption = None, agent: AgentOption = None
) -> None:
    """The options `sessiontree` takes before the command (a template: never run)."""


def _after_command_options(
    agent_dir: Annotated[
        str | None,
        typer.Option(
            "--agent-dir",
            metavar="DIR",
            help="The agent's store (as before the command).",
            show_default=False,
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            metavar="URL",
            help="Sessions in a database (as before the command).",
            show_default=False,
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            metavar="NAME",
            help="Use an agent's default store (as before the command).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """The same options after a command or group's name (a template: never run). The
    environment is read once, before the command."""


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"sessiontree {__version__}")
        raise typer.Exit()


def _version_option(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version (sessiontree X.Y.Z) and exit.",
            is_eager=True,
            expose_value=False,
            callback=_show_version,
        ),
    ] = False,
) -> None:
    """The option only `sessiontree` itself takes (a template: never run)."""


def _params(template: Callable[..., None]) -> list[Any]:
    """Fresh parameters for the options of `template`, built by typer as for any command."""
    builder = typer.Typer(add_completion=False, rich_markup_mode=None)
    builder.command()(template)
    return list(typer.main.get_command(builder).params)


@dataclass(frozen=True)
class _Given:
    name: str
    value: str
    typed: bool  # on the command line (else from the environment)
    level: str  # the command or group it followed; "" for `sessiontree` itself


def _gather(ctx: Any) -> None:
    """Move this level's global options out of its parameters (the function behind the
    command does not take them) into the record the nested contexts share."""
    given: list[_Given] = ctx.meta.setdefault(_GIVEN, [])
    level = "" if ctx.parent is None else ctx.info_name or ""
    for name in _FLAGS:
        value = ctx.params.pop(name, None)
        source = ctx.get_parameter_source(name)
        if value is None or source is None:
            continue
        given.append(_Given(name, value, source.name == "COMMANDLINE", level))


@dataclass(frozen=True)
class GlobalOptions:
    """The global options of one invocation, settled across the levels."""

    agent_dir: str | None = None
    store: str | None = None
    agent: str | None = None


def _where(given: _Given) -> str:
    return "before the command" if not given.level else f"after `{given.level}`"


def _meaning(name: str, value: str) -> str:
    """What a value names, so that two spellings of one store are the same value."""
    if name == "agent_dir":
        return os.path.abspath(os.path.expanduser(value))
    if name == "store":
        from sessiontree.storage import file_store_dir

        try:
            files = file_store_dir(value)
        except ValueError:  # an unsupported scheme (InvalidStoreError): reported when it opens
            return value
        return value if files is None else files
    return value


def settle_global_options(ctx: Any) -> GlobalOptions:
    """The global options the levels of `ctx` were given: the typed value (the same at
    every level that has one), else the environment's. Raises CliError (usage) when two
    levels were typed different values."""
    given: list[_Given] = ctx.meta.get(_GIVEN, [])
    chosen: dict[str, str | None] = {}
    for name, flag in _FLAGS.items():
        values = [g for g in given if g.name == name]
        typed = [g for g in values if g.typed]
        for other in typed[1:]:
            if _meaning(name, typed[0].value) != _meaning(name, other.value):
                raise CliError(
                    f"{flag} is given {typed[0].value!r} {_where(typed[0])} and "
                    f"{other.value!r} {_where(other)}; give it once",
                    EXIT_USAGE,
                )
        pick = typed[0] if typed else values[0] if values else None
        chosen[name] = pick.value if pick is not None else None
    return GlobalOptions(**chosen)


def _start_invocation(ctx: Any) -> None:
    """Choose the store of this invocation from the settled global options: one `Store`,
    which every command works on."""
    options = settle_global_options(ctx)
    root = ctx.find_root()
    agent_dir = options.agent_dir
    if agent_dir is not None:
        agent_dir = os.path.abspath(os.path.expanduser(agent_dir))
    url = options.store or None
    if url is not None:
        from sessiontree.storage import file_store_dir

        files = file_store_dir(url)  # InvalidStoreError for an unsupported scheme
        if files is not None:
            if agent_dir is not None and agent_dir != files:
                raise CliError(
                    f"--store names the files of {files} but --agent-dir says {agent_dir}",
                    EXIT_USAGE,
                )
            agent_dir, url = files, None
    from sessiontree.cli.common import begin_invocation

    if options.agent is None and agent_dir is not None and url is None:
        from sessiontree.archive import is_archive

        if is_archive(agent_dir):
            stores = _archive_stores(agent_dir, root.invoked_subcommand)
            begin_invocation(root, stores[0], others=stores[1:])
            return
    if options.agent is not None or agent_dir is not None:
        # Another agent's store (Claude Code, Codex, ...) is read through its own storage.
        from sessiontree.cli.foreign_stores import agent_store

        store = agent_store(options.agent, agent_dir, url, root.invoked_subcommand)
    else:
        from sessiontree.store import Store

        # The environment is read here, once (through `Store()`), and never written.
        store = Store(url) if url is not None else Store()
        if store.found_by_default:
            begin_invocation(root, store, found=True)
            return
    begin_invocation(root, store)


_METAVARS = {"session": "SESSION", "since": "DATE", "until": "DATE", "leaf": "ENTRY"}


def _plain_metavar(param: Any) -> str | None:
    """A placeholder people read (SESSION, N, DATE, md|html|jsonl) for a parameter that
    names none, instead of the toolkit's `<int range>` or `{session}`."""
    name = str(getattr(param, "name", "") or "")
    if name in _METAVARS:
        return _METAVARS[name]
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is list and args:
        annotation = args[0]
    elif args:
        annotation = args[0]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "|".join(str(member.value) for member in annotation)
    if annotation in (int, float):
        return "N"
    if annotation is str:
        return name.upper() or None
    return None


def _plain_coercion(params: list[Any]) -> None:
    """Convert the parameters' values without pydantic (`coercion.py`), where typer has
    the slot for it (an older typer, without it, converts with click's types)."""
    if any(getattr(param, "_runtime_param", False) is None for param in params):
        from sessiontree.cli.coercion import use_plain_coercion

        use_plain_coercion(params)


def _name_placeholders(params: list[Any]) -> None:
    for param in params:
        if getattr(param, "metavar", None) is None and not getattr(param, "is_flag", False):
            param.metavar = _plain_metavar(param)
        if getattr(param, "param_type_name", "") == "argument" and param.metavar:
            # `SESSION` in the usage line (`[TEXT]` when optional), not `{session}`, and
            # no `<str>` after it in the list of arguments.
            shown = str(param.metavar)
            usage = shown if param.required else f"[{shown}]"
            param._usage_display_name = lambda usage=usage: usage
            param.display_type_rich = lambda ctx=None: None


def _archive_stores(archive: str, command: str | None) -> list[Any]:
    """The stores an archive holds, read from its view (`archive.archive_view`); a
    command that writes is refused (the archive is only read: `restore` writes)."""
    from sessiontree.archive import ArchiveError, archive_view
    from sessiontree.cli.registry import only_reads, reading_commands
    from sessiontree.store import Store

    if command is not None and not only_reads(command):
        raise CliError(
            f"`{command}` does not work on an archive, which is only read here "
            f"({', '.join(reading_commands())}); `sessiontree restore` writes "
            "its sessions back",
            EXIT_USAGE,
        )
    try:
        views = archive_view(archive)
    except ArchiveError as exc:
        raise CliError(str(exc)) from None
    if not views:
        raise CliError(f"{archive}: the archive holds no session yet")
    return [Store(view.home, agent=view.agent) for view in views]


class Command(TyperCommand):
    """A command: takes the global options after its name too, and starts the invocation's
    store from them before it runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_params(_after_command_options))
        _name_placeholders(self.params)
        _plain_coercion(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        """`--help`, built on first use: converted as the other parameters are."""
        option = super().get_help_option(ctx)
        _plain_coercion([option] if option is not None else [])
        return option

    def invoke(self, ctx: Any) -> Any:
        _gather(ctx)
        _start_invocation(ctx)
        return super().invoke(ctx)


class Group(TyperGroup):
    """A group of commands (`usage`, and `sessiontree` itself through its subclass): takes
    the global options too."""

    takes_version: ClassVar[bool] = False
    """Whether it is `sessiontree` itself: the global options in full, and `--version`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.takes_version:  # the root
            self.params.extend(_params(_global_options) + _params(_version_option))
        else:
            self.params.extend(_params(_after_command_options))
        _plain_coercion(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        """`--help`, built on first use: converted as the other parameters are."""
        option = super().get_help_option(ctx)
        _plain_coercion([option] if option is not None else [])
        return option

    def invoke(self, ctx: Any) -> Any:
        _gather(ctx)
        return super().invoke(ctx)
