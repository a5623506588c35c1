"""The recommended configuration as a config.pbtxt: its text, the diff against the file, and ``--apply``
(the file rewritten, the old one kept beside it)."""

from __future__ import annotations

import copy
import difflib
import os
from pathlib import Path

from triton_backend_gen.errors import ConfigError, TuneError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config.parsing import parse_text

text_format = lazy_module("google.protobuf.text_format")

BACKUP_SUFFIX = ".before-tune"


def tuned_text(original: str, before, after, change: str) -> str:
    """config.pbtxt ``original`` (whose message is ``before``) with the top-level fields that differ in
    ``after`` rewritten in place, in protobuf's text format (fields it lacked appended, fields ``after``
    lacks removed); everything else, comments included, as it was (a comment on a rewritten field's own
    lines goes with it), under a comment saying what tune changed. Should the result not parse to ``after``
    (a layout the in-place edit does not follow), the whole file is written in text format instead, under the
    original's leading comments."""
    text = original
    for field in sorted(_changed_fields(before, after)):
        text = _replace_field(text, field, _field_text(after, field))
    lines = text.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    header = f"# Tuned by `tbgen tune`: {change}\n"
    tuned = "".join([*lines[:at], header, *lines[at:]])
    try:
        if parse_text(tuned) == after:
            return tuned
    except ConfigError:
        pass
    return "".join([*lines[:at], header]) + text_format.MessageToString(after)


def _changed_fields(before, after) -> list[str]:
    names = {f.name for f, _ in before.ListFields()} | {f.name for f, _ in after.ListFields()}
    return [name for name in names if _field_text(before, name) != _field_text(after, name)]


def _field_text(config, name: str) -> str:
    """``config``'s field ``name`` alone in text format ("" when unset)."""
    only = copy.deepcopy(config)
    for field, _ in only.ListFields():
        if field.name != name:
            only.ClearField(field.name)
    return text_format.MessageToString(only)


def _replace_field(text: str, name: str, replacement: str) -> str:
    """``text`` with every top-level occurrence of field ``name`` removed and ``replacement`` where the first
    was (at the end when there was none)."""
    spans = _spans(text, name)
    if not spans:
        return text + ("" if text.endswith("\n") or not text else "\n") + replacement
    for start, end in reversed(spans[1:]):
        text = text[:start] + text[end:]
    start, end = spans[0]
    return text[:start] + replacement + text[end:]


def _spans(text: str, name: str) -> list[tuple[int, int]]:
    """(start, end) of each top-level occurrence of field ``name`` in protobuf text ``text``: from the start
    of its line (or of its name, when another field precedes it on the line) to the end of the line its value
    closes on (or of its value, when another field follows it there)."""
    spans, depth, i = [], 0, 0
    while i < len(text):
        char = text[i]
        if char == "#":
            i = _line_end(text, i)
        elif char in "\"'":
            i = _string_end(text, i)
        elif char in "{[<":
            depth, i = depth + 1, i + 1
        elif char in "}]>":
            depth, i = depth - 1, i + 1
        elif depth == 0 and (char.isalpha() or char == "_"):
            end = _value_end(text, _word_end(text, i))
            if text[i : _word_end(text, i)] == name:
                spans.append(_whole_lines(text, i, end))
            i = end
        else:
            i += 1
    return spans


def _whole_lines(text: str, start: int, end: int) -> tuple[int, int]:
    """``start``-``end`` widened to whole lines where nothing else (but blanks or a comment) shares them."""
    line_start = text.rfind("\n", 0, start) + 1
    if not text[line_start:start].strip():
        start = line_start
    rest = text[end : _line_end(text, end)]
    if not rest.strip() or rest.strip().startswith("#"):
        end = min(_line_end(text, end) + 1, len(text))
    return start, end


def _value_end(text: str, i: int) -> int:
    """Where the value of the field whose name ends at ``i`` ends (its closing bracket, or its token)."""
    while i < len(text) and text[i] in " \t\n:":
        i += 1
    if i < len(text) and text[i] in "{[<":
        depth = 0
        while i < len(text):
            if text[i] == "#":
                i = _line_end(text, i)
                continue
            if text[i] in "\"'":
                i = _string_end(text, i)
                continue
            depth += {"{": 1, "[": 1, "<": 1, "}": -1, "]": -1, ">": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                return i
        return i
    if i < len(text) and text[i] in "\"'":
        return _string_end(text, i)
    return _word_end(text, i)


def _word_end(text: str, i: int) -> int:
    while i < len(text) and (text[i].isalnum() or text[i] in "_.-+"):
        i += 1
    return i


def _string_end(text: str, i: int) -> int:
    quote, i = text[i], i + 1
    while i < len(text) and text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def config_diff(path: Path, new_text: str) -> str:
    """A unified diff of config.pbtxt at ``path`` against ``new_text``."""
    old = path.read_text().splitlines(keepends=True)
    return "".join(
        difflib.unified_diff(old, new_text.splitlines(keepends=True), str(path), f"{path} (tuned)", n=2)
    )


def apply_config(path: Path, new_text: str) -> Path:
    """Write ``new_text`` to config.pbtxt at ``path`` (its mode kept); the old file is kept beside it under a
    name not yet taken (config.pbtxt.before-tune, then .before-tune.2, ...), which is returned. On failure
    nothing is left changed."""
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    number = 2
    while backup.exists():
        backup = path.with_name(f"{path.name}{BACKUP_SUFFIX}.{number}")
        number += 1
    partial, linked = path.with_name(path.name + ".partial"), False
    try:
        os.link(path, backup)  # the old file under its new name, before the new one replaces it
        linked = True
        partial.write_text(new_text)
        os.chmod(partial, path.stat().st_mode & 0o7777)
        os.replace(partial, path)
    except OSError as err:
        partial.unlink(missing_ok=True)
        if linked:  # config.pbtxt is still the old file: its second name goes
            backup.unlink(missing_ok=True)
        raise TuneError(
            f"Could not write {path}: {err}", f"Your config.pbtxt is unchanged in {path}."
        ) from err
    return backup
