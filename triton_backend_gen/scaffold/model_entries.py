"""tbgen.toml's ``[[models]]`` entries as text: the one place that adds, edits and removes them.

tbgen.toml is edited as text so that the user's comments and layout survive. An entry's block is its
``[[models]]`` header, its lines, its sub-tables (``[[models.inputs]]``, ``[[models.outputs]]``,
``[models.parameters]``) and the blank lines after them, up to the next table (and the comment lines written
right above that table, which belong to it). ``tbgen new`` writes the entries before ``[answers]`` and any
other table; new entries go right after the last entry, so the file keeps that order, and removing an entry
that was added gives back the text from before it was added.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from triton_backend_gen.errors import ScaffoldError
from triton_backend_gen.project import TOMLError, model_tables, toml_tables

_HEADER = re.compile(r"^[ \t]*(\[\[?)[ \t]*([^\[\]#]+?)[ \t]*\]\]?[ \t]*(?:#.*)?$")
_MODELS = "models"


@dataclass(frozen=True)
class _Block:
    """Lines ``start`` to ``end`` (exclusive) of an entry: its header to the next table's first line."""

    name: str
    start: int
    end: int


def entry(
    name: str,
    *,
    decoupled: bool = False,
    pattern: str = "",
    reference: str,
    python: bool = True,
    calls: tuple[str, ...] = (),
    metrics: tuple[str, ...] = (),
) -> str:
    """A [[models]] entry; ``python``: served by Triton's python backend (``backend = "python"``); ``calls``:
    the models a composed model sends requests to; ``metrics``: the custom metric families it publishes."""
    lines = ["[[models]]", f'name = "{name}"', f"decoupled = {'true' if decoupled else 'false'}"]
    if metrics:
        lines.append(f"metrics = {json.dumps(list(metrics))}")
    if pattern:
        lines.append(f'pattern = "{pattern}"')
    if calls:
        lines.append(f"calls = {json.dumps(list(calls))}")
    if python and pattern != "ensemble":
        lines.append('backend = "python"')
    lines.append(f'reference = "{reference}"')
    return "\n".join(lines) + "\n"


def add_entries(text: str, entries: list[str], *, first: bool = False) -> str:
    """``text`` with ``entries`` after its last [[models]] entry (``first``: the first of them before its
    first entry), each block separated from the next by one blank line."""
    blocks = _blocks(text.splitlines(keepends=True))
    if first and blocks and entries:
        text = _insert(text, blocks[0].start, entries[0])
        entries = entries[1:]
        blocks = _blocks(text.splitlines(keepends=True))
    if not entries:
        return text
    return _insert(text, blocks[-1].end if blocks else None, "\n".join(entries))


def _insert(text: str, at: int | None, blocks: str) -> str:
    """``text`` with ``blocks`` (entries, each ending in a newline) at line ``at`` (None: at the end), a blank
    line before them and, when something follows, after them."""
    lines = text.splitlines(keepends=True)
    at = len(lines) if at is None else at
    head, tail = "".join(lines[:at]), "".join(lines[at:])
    head = head.rstrip("\n") + "\n\n" if head.strip() else ""
    return head + blocks + ("\n" + tail if tail else "")


def remove_entries(text: str, names: Iterable[str]) -> str:
    """``text`` without the [[models]] entries of ``names`` (each with its sub-tables)."""
    names = set(names)
    lines = text.splitlines(keepends=True)
    for block in reversed(_blocks(lines)):
        if block.name in names:
            del lines[block.start : block.end]
    result = "".join(lines)
    return result.rstrip("\n") + "\n" if result.strip() else ""


def entry_text(text: str, name: str) -> str | None:
    """The block of the [[models]] entry of ``name`` in ``text`` (None when it has none)."""
    lines = text.splitlines(keepends=True)
    block = next((b for b in _blocks(lines) if b.name == name), None)
    return None if block is None else "".join(lines[block.start : block.end]).rstrip("\n")


def set_entry_line(text: str, model: str, line: str) -> str:
    """``text`` with ``line`` added to the [[models]] entry of ``model``, right after its name."""
    named = f'name = "{model}"\n'
    if named not in text:
        raise ScaffoldError(f"tbgen.toml has no [[models]] entry for {model}.", "This is a bug in tbgen.")
    return text.replace(named, f"{named}{line}\n", 1)


def checked(text: str, names: list[str], where: str) -> str:
    """``text`` when it is TOML listing the models ``names`` in that order; ScaffoldError otherwise (an edit
    that a layout tbgen does not expect would have garbled)."""
    try:
        found = [str(m.get("name")) for m in model_tables(text)]
    except TOMLError as err:
        raise ScaffoldError(
            f"Editing the [[models]] entries of {where} would leave it unreadable: {err}.",
            "Edit its [[models]] entries by hand; tbgen left the file as it was.",
        ) from err
    if found != names:
        raise ScaffoldError(
            f"Editing the [[models]] entries of {where} would list {', '.join(found)} instead of "
            f"{', '.join(names)}.",
            "Edit its [[models]] entries by hand; tbgen left the file as it was.",
        )
    return text


def _blocks(lines: list[str]) -> list[_Block]:
    """The [[models]] entries of ``lines``, in order."""
    headers = [(i, _table(match)) for i, line in enumerate(lines) if (match := _HEADER.match(line))]
    blocks = []
    for index, (start, (array, key)) in enumerate(headers):
        if not (array and key == _MODELS):
            continue
        following = [i for i, (a, k) in headers[index + 1 :] if not k.startswith(_MODELS + ".")]
        end = _attached_comments_start(lines, following[0]) if following else len(lines)
        blocks.append(_Block(_entry_name(lines[start:end]), start, end))
    return blocks


def _table(match: re.Match[str]) -> tuple[bool, str]:
    """(whether the header is an array of tables, its dotted key without quotes or spaces)."""
    key = ".".join(part.strip().strip("\"'") for part in match.group(2).split("."))
    return match.group(1) == "[[", key


def _attached_comments_start(lines: list[str], header: int) -> int:
    """Where the comment lines written right above line ``header`` begin (``header`` when there are none)."""
    start = header
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return start


def _entry_name(lines: list[str]) -> str:
    """The ``name`` of the entry whose block is ``lines`` ("" when it has none)."""
    for line in lines[1:]:
        if _HEADER.match(line):
            break
        key, sep, value = line.partition("=")
        if sep and key.strip() == "name":
            try:
                return str(toml_tables(f"name = {value.strip()}")["name"])
            except TOMLError:
                return ""
    return ""
