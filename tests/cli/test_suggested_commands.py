"""Every command tbgen suggests runs as printed.

tbgen writes each command it suggests (in a hint, a note, a "next:" line, an option's help) in backticks. This
test reads every string of the package that reaches a user (all but docstrings, which are the developers',
except the commands' own docstrings, which are their --help) and README.md's examples, and:

- parses each backticked `tbgen ...` with the CLI's own parser (unknown commands or options, missing arguments
  and values, bad values all fail), a value computed at run time (an f-string field) standing in as "1"; a
  command's bare name (`tbgen add model`) names it rather than suggesting a run, and is only looked up;
- refuses a `tbgen <command>` mention outside backticks (it would escape this check, and a wrapped line could
  split it), and placeholders in capitals (DIR, NAME) inside one: a suggested command is complete.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import typer.main

import triton_backend_gen
from triton_backend_gen.cli import app

# The click that Typer runs (this Typer carries its own copy, whose errors are these).
ClickError = typer.main._click.ClickException
HelpShown = typer.Exit  # what --help raises

PACKAGE = Path(triton_backend_gen.__file__).parent
README = PACKAGE.parent / "README.md"
CLI = typer.main.get_command(app)
COMMANDS = sorted(CLI.commands)  # type: ignore[attr-defined]
_BACKTICKED = re.compile(r"`(tbgen\b[^`]*)`")
_MENTION = re.compile(r"\btbgen (?:" + "|".join(COMMANDS) + r")\b")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_.]*$")  # a whole word in capitals: DIR, NAME, M, YY.MM
_FIELD = "\x00"  # an f-string's or format string's field: a value only known at run time
# Text that names a command without suggesting one, where backticks would be wrong: (file, its start).
NOT_SUGGESTIONS = {
    (
        "triton_backend_gen/commands/update.py",
        "tbgen update (r",
    ),  # the label of conflict markers in your files
}


def _docstrings(tree: ast.AST, keep_commands: bool) -> set[int]:
    """The ids of the docstring constants of ``tree`` (a CLI command's docstring is its help: kept)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                command = (
                    keep_commands
                    and isinstance(node, ast.FunctionDef)
                    and any(
                        isinstance(d, ast.Call)
                        and isinstance(d.func, ast.Attribute)
                        and d.func.attr == "command"
                        for d in node.decorator_list
                    )
                )
                if not command:
                    found.add(id(first.value))
    return found


def user_strings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal of ``path`` that is not a docstring; f-string fields as _FIELD."""
    tree = ast.parse(path.read_text())
    skipped = _docstrings(tree, keep_commands=path.parent.name == "cli")
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skipped.update(id(value) for value in node.values)
            yield (
                node.lineno,
                "".join(v.value if isinstance(v, ast.Constant) else _FIELD for v in node.values),
            )
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            yield node.lineno, re.sub(r"\{[a-z_]*\}", _FIELD, node.value)


def readme_examples() -> Iterator[tuple[int, str]]:
    """README.md's example command lines (indented `tbgen ...` lines, continuations joined); the synopsis
    lines, with [optional] parts and choices, are not examples."""
    lines = README.read_text().splitlines()
    index = 0
    while index < len(lines):
        start, line = index, lines[index]
        while line.endswith("\\") and index + 1 < len(lines):
            index += 1
            line = line[:-1] + " " + lines[index].strip()
        index += 1
        text = line.strip()
        if line.startswith("    ") and text.startswith("tbgen ") and not re.search(r"\[|\||\.\.\.", text):
            for part in re.split(r"&&|;", text.split("  #")[0].split(" # ")[0]):
                if part.strip().startswith("tbgen "):
                    yield start + 1, part.strip()


def _sources() -> Iterator[tuple[str, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, text in user_strings(path):
            yield f"{path.relative_to(PACKAGE.parent)}:{line}", text


def suggested_commands() -> list[tuple[str, str]]:
    found = [(where, match.group(1)) for where, text in _sources() for match in _BACKTICKED.finditer(text)]
    return found + [(f"README.md:{line}", f"`{text}`"[1:-1]) for line, text in readme_examples()]


def with_values(command: str) -> str:
    """``command`` with each field filled: "1" where it is a word or a value, nothing where it is glued to a
    word (an optional suffix: "tbgen env pack{options}", "--triton-version 24.10{project_option}")."""
    glued = lambda index: index > 0 and (command[index - 1].isalnum() or command[index - 1] == _FIELD)  # noqa: E731
    return "".join(
        ("" if glued(index) else "1") if char == _FIELD else char for index, char in enumerate(command)
    )


def parse(command: str) -> None:
    """Parse ``command`` with the CLI's parser as a shell would split it; ClickError when it does not. A bare
    command name (`tbgen add model`, `tbgen deploy`) is only looked up."""
    args = shlex.split(with_values(command))[1:]
    node, name = CLI, "tbgen"
    while hasattr(node, "commands"):  # a group: the next word names its subcommand
        if not args:
            return
        if args[0].startswith("-"):
            raise ClickError(f"`{' '.join([name, *args])}` names no subcommand")
        if args[0] not in node.commands:
            raise ClickError(f"no command {args[0]!r} in `{name}`")
        node, name, args = node.commands[args[0]], f"{name} {args[0]}", args[1:]
    if not args:
        return
    try:
        node.make_context(name, args)
    except HelpShown:  # --help: it runs
        pass


def test_every_suggested_command_parses_as_printed():
    commands = suggested_commands()
    assert len(commands) > 60, "the scan found too few commands: is the backtick convention gone?"
    problems = []
    for where, command in commands:
        if any(_PLACEHOLDER.match(word) for word in shlex.split(with_values(command))):
            problems.append(f"{where}: `{command}` holds a placeholder in capitals")
            continue
        try:
            parse(command)
        except ClickError as err:
            problems.append(f"{where}: `{command.replace(_FIELD, '{...}')}`: {err.format_message()}")
    assert not problems, "\n".join(problems)


def test_every_mention_of_a_command_is_in_backticks():
    problems = []
    for where, text in _sources():
        if (where.split(":")[0], text[:15]) in NOT_SUGGESTIONS:
            continue
        outside = _BACKTICKED.sub("", text)
        for match in _MENTION.finditer(outside):
            problems.append(f"{where}: {match.group(0)!r} outside backticks in {text[:90]!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "command",
    [
        "tbgen new --triton-version 24.10 --answers tbgen.toml",
        "tbgen nothing",
        "tbgen test --no-such-flag",
        "tbgen update --triton-version",
        "tbgen deploy --force",
        "tbgen env pack --model",
        "tbgen bench --duration",
    ],
)
def test_the_parser_check_refuses_what_would_not_run(command):
    with pytest.raises(ClickError):
        parse(command)
