"""The documents say what the code does: README.md and docs/*.md.

Every `>>>` example runs; the command reference in docs/cli.md is what the commands'
`--help` prints (regenerated here, as `scripts/gen_cli_docs.py` writes it); every
relative link and `#anchor` resolves; docs/architecture.md names every package; the
README stays a front page.
"""

from __future__ import annotations

import difflib
import doctest
import importlib.util
import io
import re
import tempfile
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

import sessiontree
from sessiontree.cli.registry import COMMANDS
from tests.conftest import REPO_ROOT, require_module

DOCS = REPO_ROOT / "docs"
DOCUMENTS = [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 150


def _name(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else path.name


def _gen_cli_docs() -> ModuleType:
    """scripts/gen_cli_docs.py, imported (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location(
        "gen_cli_docs", REPO_ROOT / "scripts" / "gen_cli_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- Reading Markdown ----------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A fenced code block: its info string, its first line's number, its text."""

    info: str
    line: int
    text: str


_FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")


def split_markdown(text: str) -> tuple[list[Block], str]:
    """The fenced blocks of `text`, and the text with each block's lines blanked (so that
    line numbers still hold)."""
    blocks: list[Block] = []
    prose: list[str] = []
    fence: str | None = None
    info, start, body = "", 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if fence is None:
            match = _FENCE.match(line)
            if match:
                fence, info, start, body = match[1], match[2].strip(), number + 1, []
                prose.append("")
            else:
                prose.append(line)
        else:
            if line.startswith(fence) and not line[len(fence) :].strip():
                blocks.append(Block(info, start, "\n".join(body) + "\n"))
                fence = None
            else:
                body.append(line)
            prose.append("")
    assert fence is None, "a code block is not closed"
    return blocks, "\n".join(prose)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor of a Markdown document: its headings' (numbered as GitHub numbers
    repeats) and explicit `<a id=...>`/`<a name=...>`."""
    _blocks, prose = split_markdown(text)
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose.splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match[1])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", prose))
    return found


_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(text: str) -> list[str]:
    """The targets of a document's links and images, outside code."""
    _blocks, prose = split_markdown(text)
    prose = re.sub(r"`[^`]*`", "", prose)  # inline code (it may run over a line break)
    return _LINK.findall(prose)


def broken_links(documents: list[Path]) -> tuple[int, list[str]]:
    """How many relative links `documents` hold, and those that do not resolve: a file
    that is not there, or an anchor its Markdown target lacks."""
    checked = 0
    broken: list[str] = []
    for document in documents:
        for target in links(document.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # https:, mailto: ... not ours to check
            checked += 1
            path_part, _, fragment = target.partition("#")
            path = (document.parent / path_part).resolve() if path_part else document
            if not path.exists():
                broken.append(f"{document.name}: {target} (no such file)")
            elif fragment and path.suffix == ".md":
                if fragment not in anchors(path.read_text(encoding="utf-8")):
                    broken.append(f"{document.name}: {target} (no such anchor in {path.name})")
    return checked, broken


# -- The examples run -----------------------------------------------------------------------


def _examples(path: Path) -> list[Block]:
    blocks, _prose = split_markdown(path.read_text(encoding="utf-8"))
    return [b for b in blocks if b.text.lstrip().startswith(">>>")]


def _uses_store(text: str) -> bool:
    return re.search(r"\bStore\b", text) is not None


def run_examples(path: Path) -> list[str]:
    """Run the `>>>` blocks of `path` in order, in one namespace (a page's examples go on
    from each other); the reports of the blocks that failed."""
    parser = doctest.DocTestParser()
    globs: dict[str, object] = {"__name__": "__docs__"}
    failed: list[str] = []
    try:
        for block in _examples(path):
            name = f"{_name(path)}:{block.line}"
            test = parser.get_doctest(block.text, globs, name, str(path), block.line - 1)
            report = io.StringIO()
            result = doctest.DocTestRunner().run(test, out=report.write, clear_globs=False)
            globs = test.globs
            if result.failed:
                failed.append(report.getvalue())
    finally:
        for value in globs.values():
            if type(value).__module__.startswith("sessiontree") and hasattr(value, "close"):
                value.close()
    return failed


@pytest.mark.parametrize("path", [p for p in DOCUMENTS if _examples(p)], ids=_name)
def test_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The examples' temporary dirs go in the test's own (the default store is the test's
    # too: conftest's `agent_dir`).
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert run_examples(path) == []


def test_readme_and_the_library_page_have_examples() -> None:
    for path in (REPO_ROOT / "README.md", DOCS / "library.md"):
        blocks = _examples(path)
        assert any(_uses_store(b.text) for b in blocks), f"{_name(path)}: no Store example"
        assert any(not _uses_store(b.text) for b in blocks), _name(path)
    assert "SessionManager.in_memory(" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def test_the_message_model_has_an_example_that_runs() -> None:
    """The library page shows the message shapes with one example (run above, as every
    `>>>` block is) that records a turn with a tool call, branches, compacts and resumes;
    the README links to it and to the converters."""
    text = (DOCS / "library.md").read_text(encoding="utf-8")
    assert "messages" in anchors(text) and "converters" in anchors(text)
    turn = next(b.text for b in _examples(DOCS / "library.md") if '"toolCall"' in b.text)
    for step in ('"toolResult"', ".branch(", ".append_compaction(", ".continue_recent("):
        assert step in turn, step
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/library.md#messages)" in readme
    assert "](docs/library.md#converters)" in readme and "from_anthropic" in readme


QUICK_STARTS = {"claude-agent-sdk.md": "claude_agent_sdk", "openai-agents.md": "agents"}
"""The pages whose first ```python block is a program to paste (it needs a model, so it
is run below with the model replaced), and the SDK each needs."""


def _quick_start(page: str) -> Block:
    blocks, _prose = split_markdown((DOCS / page).read_text(encoding="utf-8"))
    return next(b for b in blocks if b.info == "python" and not b.text.startswith(">>>"))


def test_every_python_block_is_an_example_that_runs() -> None:
    """A ```python block is written as `>>>` lines, so that the tests above run it, or is
    a quick-start program that the tests below run."""
    for path in DOCUMENTS:
        blocks, _prose = split_markdown(path.read_text(encoding="utf-8"))
        for block in blocks:
            if block.text.lstrip().startswith(">>>"):
                continue
            if block.info.split()[:1] in (["python"], ["pycon"], ["py"]):
                assert path.name in QUICK_STARTS, f"{_name(path)}:{block.line}"
                assert block == _quick_start(path.name), f"{_name(path)}:{block.line}"


@pytest.mark.parametrize("page", sorted(QUICK_STARTS))
def test_a_quick_start_is_a_program_with_an_offline_example(page: str) -> None:
    """Pasted into a file it runs: no `await` outside a function (a SyntaxError of
    Python's), `asyncio.run(main())` at the end; and the page runs the same calls
    without a model in a `>>>` example (run above)."""
    block = _quick_start(page)
    compile(block.text, page, "exec")
    assert block.text.rstrip().endswith("asyncio.run(main())")
    offline = [b.text for b in _examples(DOCS / page)]
    assert any("asyncio.run(main())" in text for text in offline), page


def test_a_top_level_await_is_refused_by_the_check_above() -> None:
    with pytest.raises(SyntaxError):
        compile("import asyncio\nawait asyncio.sleep(0)\n", "page.md", "exec")


def test_the_claude_agent_sdk_quick_start_runs_as_pasted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The program as pasted, `query` replaced by one that sends the transcript lines to
    the session store as the SDK's mirror does (the real one runs the `claude` CLI)."""
    sdk = require_module(QUICK_STARTS["claude-agent-sdk.md"])
    monkeypatch.setenv("HOME", str(tmp_path))
    session_id = "6c0a3b7e-1f0e-4c3a-9d1e-0123456789ab"

    async def query(*, prompt: str, options: object) -> AsyncIterator[str]:
        store = options.session_store
        line = {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": session_id}
        line["message"] = {"role": "user", "content": prompt}
        await store.append({"project_key": "-work-app", "session_id": session_id}, [line])
        yield f"answered {prompt!r}"

    monkeypatch.setattr(sdk, "query", query)
    exec(compile(_quick_start("claude-agent-sdk.md").text, "quick-start", "exec"), {})
    assert capsys.readouterr().out == "answered 'What is 2 + 2?'\n"
    written = tmp_path / "agents" / "claude" / "projects" / "-work-app" / f"{session_id}.jsonl"
    assert "What is 2 + 2?" in written.read_text(encoding="utf-8")


def test_the_openai_agents_quick_start_runs_as_pasted(
    tmp_path: Path,
    agent_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The program as pasted, in the default store (the test's agent dir) and the current
    directory's project, the SDK's default model replaced by its `ScriptedModel`."""
    require_module(QUICK_STARTS["openai-agents.md"])
    from agents.models.multi_provider import MultiProvider
    from agents.testing import ScriptedModel, assistant_message

    model = ScriptedModel()
    model.enqueue([assistant_message("San Francisco.")])
    model.enqueue([assistant_message("California.")])
    monkeypatch.setattr(MultiProvider, "get_model", lambda self, name: model)
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    monkeypatch.chdir(tmp_path)
    exec(compile(_quick_start("openai-agents.md").text, "quick-start", "exec"), {})
    assert capsys.readouterr().out == "San Francisco.\nCalifornia.\n"
    (written,) = agent_dir.glob("sessions/*/conversation_123.jsonl")
    assert "What state is it in?" in written.read_text(encoding="utf-8")


def test_a_failing_example_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\n>>> 1 + 1\n3\n\n```\n\n```python\n>>> x = 2\n>>> x\n2\n\n```\n")
    (report,) = run_examples(page)
    assert "page.md" in report and "Expected:\n    3" in report


# -- The command reference ----------------------------------------------------------------


def test_the_cli_reference_is_what_the_commands_say() -> None:
    gen = _gen_cli_docs()
    document = gen.CLI_DOC.read_text(encoding="utf-8")
    expected = gen.updated(document, gen.reference())
    if expected != document:
        diff = "".join(
            list(
                difflib.unified_diff(
                    document.splitlines(keepends=True),
                    expected.splitlines(keepends=True),
                    "docs/cli.md",
                    "what the commands say",
                )
            )[:60]
        )
        pytest.fail(f"docs/cli.md is out of date; run: {gen.FIX}\n{diff}")


def test_the_cli_reference_has_every_command() -> None:
    gen = _gen_cli_docs()
    generated = gen.reference()
    titles = re.findall(r"^### `sessiontree ?(.*)`$", generated, re.M)
    assert titles[0] == ""  # the root first, then each command in --help order
    assert [t for t in titles[1:] if " " not in t] == list(COMMANDS)
    for period in ("daily", "weekly", "monthly", "session", "project", "blocks"):
        assert f"usage {period}" in titles
    for title in titles:
        assert f"Usage: sessiontree {title}".rstrip() in generated


@pytest.mark.parametrize(
    "environment",
    [
        {"COLUMNS": "37", "TERM": "xterm-256color", "FORCE_COLOR": "1", "NO_COLOR": None},
        {"COLUMNS": "250", "LINES": "5", "CLICOLOR_FORCE": "1", "NO_COLOR": None},
    ],
    ids=["narrow-colour", "wide"],
)
def test_the_cli_reference_does_not_depend_on_the_terminal(
    environment: dict[str, str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = _gen_cli_docs()
    for name, value in gen.ENV.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    plain = gen.reference()
    for name, value in environment.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert gen.reference() == plain
    assert "\x1b" not in plain


def test_the_generator_rewrites_only_between_its_markers(tmp_path: Path) -> None:
    gen = _gen_cli_docs()
    document = f"# Title\n\nprose\n\n{gen.BEGIN}\nold\n{gen.END}\n\nafter\n"
    assert gen.updated(document, "new\n") == (
        f"# Title\n\nprose\n\n{gen.BEGIN}\n\nnew\n\n{gen.END}\n\nafter\n"
    )
    assert gen.updated(gen.updated(document, "x\n"), "x\n") == gen.updated(document, "x\n")
    with pytest.raises(ValueError, match="marker"):
        gen.updated("# no markers\n", "new\n")


# -- Links ----------------------------------------------------------------------------------


def test_every_link_and_anchor_resolves() -> None:
    checked, broken = broken_links(DOCUMENTS)
    assert broken == []
    assert checked >= 40  # the documents link to each other's sections


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text(
        "# Big `Title`, here\n\n## Again\n\n## Again\n\n```\n# not\n```\n"
    )
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#big-title-here) [ok](b.md#again-1) [ok](#local) ![ok](b.md)\n"
        "# Local\n"
        "[bad](b.md#not) [bad](c.md) [bad](#nowhere) `[code](c.md)` [web](https://x.invalid)\n"
    )
    checked, broken = broken_links([page])
    assert checked == 7
    assert broken == [
        "a.md: b.md#not (no such anchor in b.md)",
        "a.md: c.md (no such file)",
        "a.md: #nowhere (no such anchor in a.md)",
    ]


# -- The pages' shapes ----------------------------------------------------------------------


def test_the_readme_is_a_front_page() -> None:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    blocks, _prose = split_markdown(text)
    first = blocks[0].text.splitlines()
    # The two commands for a fresh machine come first: set up and run the demo (at the
    # pinned releases, with what `serve` needs); the tests.
    assert first[0] == (
        "python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e '.[web]'"
        " && .venv/bin/sessiontree demo"
    )
    assert [line.split()[:2] for line in first[1:]] == [["scripts/test", "#"]]
    assert (REPO_ROOT / "constraints.txt").is_file()
    for page in ("cli", "library", "formats", "safety", "architecture", "performance"):
        assert f"](docs/{page}.md" in text, page
    assert "](docs/serve-session.png)" in text


def test_the_architecture_page_names_every_package() -> None:
    """docs/architecture.md's tree shows every package (as `name/`, a top-level one at the
    start of its line) and public module in src/sessiontree, and nothing that is not
    there; a package added or moved is documented there."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    layout = text[text.index("## Layout") :]
    tree = split_markdown(layout)[0][0].text
    words = set(re.findall(r"[A-Za-z_]\w*", tree))
    named = re.findall(r"(?:^|\| )(\w+)/", tree, re.M)  # the top-level packages, in order
    source = Path(sessiontree.__file__).parent
    packages = sorted(p.parent for p in source.rglob("__init__.py") if p.parent != source)
    # A package's name as a word is not enough (`store` is also a module of `foreign`).
    missing = [
        str(p.relative_to(source))
        for p in packages
        if (p.name not in named if p.parent == source else f"{p.name}/" not in tree)
    ]
    for package in packages:
        missing += [
            f"{package.name}/{m.stem}"
            for m in package.glob("*.py")
            if not m.stem.startswith("_") and m.stem not in words
        ]
    missing += [m.stem for m in source.glob("*.py") if m.stem not in {"__init__", *words}]
    assert missing == [], "docs/architecture.md does not name these; add them to its tree"
    assert named and [n for n in named if not (source / n).is_dir()] == []
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = config["tool"]["importlinter"]["contracts"]
    layers = [m.strip() for layer in contract["layers"] for m in layer.split("|")]
    assert [m for m in layers if m.rpartition(".")[2] not in words] == []
    # The tree lists the packages top to bottom, as the contract's layers do.
    short = [m.rpartition(".")[2] for m in layers]
    assert named == [m for m in short if (source / m).is_dir()]
