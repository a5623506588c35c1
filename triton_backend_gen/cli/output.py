"""What the CLI prints, on a terminal and off one (CI logs, pipes, files), and how it ends on an error.

On a terminal Rich lays text and tables out for the window. Off a terminal nothing tbgen prints is wider than
200 columns (or $COLUMNS when that is less): text is wrapped here, at spaces, and a command written in
backticks (`tbgen update --triton-version 24.10`) is never split across lines, so it can be copied as it is.
A list of records (the checks of a test run, doctor's findings) is a table on a terminal and, off it, one line
per record with its long fields wrapped beneath it. User and tool text is never read as Rich markup.

A TbgenError becomes its message and hint on stderr and its exit code (``user_errors``): no traceback for what
the user can fix.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from triton_backend_gen.errors import TbgenError
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.release_note import first_time

MAX_WIDTH = 200  # the widest line tbgen prints off a terminal
_COMMAND = re.compile(r"`[^`\n]+`")
_GLUE = "\x00"  # stands for a space inside a command while text is wrapped


def _width(stream) -> int | None:
    """None on a terminal (Rich follows the window), else MAX_WIDTH or a narrower $COLUMNS."""
    if stream.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return min(int(columns), MAX_WIDTH) if columns.isdigit() and int(columns) > 0 else MAX_WIDTH


console = Console(width=_width(sys.stdout), highlight=False)
err_console = Console(stderr=True, width=_width(sys.stderr), highlight=False)


def on_terminal(target: Console = console) -> bool:
    return target.is_terminal


def wrap(text: str, width: int, indent: str = "", first_indent: str = "") -> list[str]:
    """``text`` wrapped at spaces into lines of at most ``width`` columns (``indent`` before every line but
    the first, ``first_indent`` before it); a `command in backticks` stays on one line, and a word or command
    longer than a line gets a line of its own. Each line of ``text`` starts a new one."""
    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        glued = _COMMAND.sub(lambda match: match.group(0).replace(" ", _GLUE), paragraph)
        wrapped = textwrap.wrap(
            glued,
            width=width,
            initial_indent=first_indent if not lines else indent,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        lines += [line.replace(_GLUE, " ") for line in wrapped] or [indent.rstrip()]
    return lines


def say(text: str, *, style: str = "", label: str = "", target: Console = console) -> None:
    """Print ``text`` (never read as markup) after an optional ``label`` ("note:", "warning:"); ``style``
    colours the label, or the whole text when there is none."""
    if not on_terminal(target):
        for line in wrap(f"{label} {text}" if label else text, target.width, indent="  "):
            target.print(line, markup=False, soft_wrap=True)
    elif label:
        target.print(
            f"[{style}]{escape(label)}[/] {escape(text)}" if style else f"{escape(label)} {escape(text)}"
        )
    else:
        target.print(f"[{style}]{escape(text)}[/]" if style else escape(text))


def note(text: str) -> None:
    say(text, label="note:", style="dim")


def warning(text: str) -> None:
    say(text, label="warning:", style="yellow")


def error(message: str, hint: str = "") -> None:
    """An error on stderr, with the hint that fixes it."""
    say(message, label="error:", style="bold red", target=err_console)
    if hint:
        say(hint, label="hint:", style="dim", target=err_console)


@dataclass(frozen=True)
class Column:
    title: str
    wide: bool = False  # off a terminal: printed beneath the record's line, wrapped, rather than in it
    justify: str = "left"


def records(
    title: str, columns: Sequence[Column], rows: Iterable[Sequence[str]], styles: Sequence[str] = ()
) -> None:
    """Rows of plain text (never markup): a Rich table on a terminal; off it, per row one line of its narrow
    fields joined by two spaces and each wide field wrapped beneath it. ``styles``: a Rich style per row."""
    rows = list(rows)
    if on_terminal():
        _table(title, columns, rows, styles)
        return
    if title:
        say(title)
    for row in rows:
        say("  ".join(cell or "-" for column, cell in zip(columns, row, strict=True) if not column.wide))
        for column, cell in zip(columns, row, strict=True):
            if column.wide and cell:
                for line in wrap(cell, console.width, indent="    ", first_indent="    "):
                    console.print(line, markup=False, soft_wrap=True)


def _table(title: str, columns: Sequence[Column], rows: list[Sequence[str]], styles: Sequence[str]) -> None:
    table = Table(title=escape(title) if title else None, title_justify="left")
    for column in columns:
        table.add_column(column.title, justify=column.justify)  # type: ignore[arg-type]
    for index, row in enumerate(rows):
        table.add_row(*(escape(cell) for cell in row), style=styles[index] if index < len(styles) else None)
    console.print(table)


class user_errors:  # noqa: N801 - used as a statement: `with user_errors():`
    """Turn a TbgenError into a message with its hint and its exit code (no traceback for user mistakes)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            return False
        if isinstance(exc, TbgenError):
            error(exc.message, exc.hint)
            raise typer.Exit(exc.exit_code)
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or SIGTERM/SIGHUP turned into one by the runtime
            err_console.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(getattr(exc, "exit_code", 130))
        return False


def print_findings(findings) -> None:
    """Findings, each after its severity."""
    for finding in findings:
        style = {"error": "red", "warning": "yellow"}.get(finding.severity, "dim")
        say(finding.message, label=f"{finding.severity}:", style=style)


def print_notes(run, project: Project | None, verbose: bool) -> None:
    """A run's warnings and notes (a server or a test report): the release note only the first time it is due
    for the project and pair of releases, unless ``verbose``."""
    for text in run.warnings:
        warning(text)
    for text in run.notes:
        note(text)
    said = run.release_note
    if said is not None and (said.warning or verbose or project is None or first_time(project, said)):
        (warning if said.warning else note)(said.text)
