"""Updating a project: a 3-way merge of the project (yours), the record of what tbgen generated (the base)
and a new rendering (tbgen's), file by file, and applying it all or nothing.

``plan_update`` decides, for every file tbgen generated then or generates now:

    you never touched it             -> replaced by tbgen's new version ("replaced")
    you edited it, tbgen changed it  -> tbgen's change merged around your edits with git's merge-file
                                        ("merged"), or conflict markers where both changed the same lines
                                        ("conflict")
    you edited it, tbgen did not     -> kept as it is
    you deleted it                   -> stays deleted (listed when tbgen changed it: "deleted by you")
    tbgen no longer generates it     -> kept (listed: "no longer generated")
    new in the template              -> added ("added"); where a file of yours is already there, merged
                                        with an empty base
    your logic in a file that is now generated plumbing (an older layout) -> the logic block moved into
                                        the new file of yours that takes it ("your logic moved here",
                                        scaffold.moves); the plumbing around it as above

A merged or conflicting file that tbgen generates (its header says so) is an edit of generated plumbing: it
is kept, and the note names the file of yours where such code belongs.

``apply_update`` writes the plan and the new record with SIGINT/SIGTERM/SIGHUP only recorded; if one arrives,
or anything fails, every file is put back as it was before the signal is delivered.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from triton_backend_gen.errors import ScaffoldError, UsageError
from triton_backend_gen.scaffold.layout import is_generated
from triton_backend_gen.scaffold.moves import Move, plan_moves
from triton_backend_gen.scaffold.record import (
    RECORD_FILE,
    GeneratedFile,
    Record,
    pack,
    partial_of,
    replace_file,
)
from triton_backend_gen.signals import raise_received, signals_recorded

REPLACED, MERGED, CONFLICT, ADDED = "replaced", "merged", "conflict", "added"
MOVED = "your logic moved here"
# A generated file's header names the user's file: "... put your code in src/compute.cc, which is yours."
_YOURS = re.compile(r"put your code in (\S+), which is yours")
DELETED_BY_YOU, NO_LONGER_GENERATED = "deleted by you", "no longer generated"


@dataclass(frozen=True)
class Change:
    path: str  # relative POSIX path
    action: str
    result: GeneratedFile | None = None  # what is written (None: nothing)
    note: str = ""


@dataclass(frozen=True)
class Labels:
    """How the three sides are named in conflict markers."""

    yours: str
    base: str
    theirs: str


def plan_update(
    root: Path, base: Mapping[str, GeneratedFile], new: Mapping[str, GeneratedFile], labels: Labels
) -> list[Change]:
    """What updating the project at ``root`` from ``base`` (as generated) to ``new`` (as tbgen generates it
    now) does to each file; files that stay as they are are left out."""
    paths = sorted(set(base) | set(new))
    on_disk = {path: _read(root / path) for path in paths}  # each file read once
    yours = {path: data for path in base if (data := on_disk[path]) is not None}
    moves = {
        m.source: m
        for m in plan_moves(
            yours,
            base,
            new,
            lambda y, b, t: merge_text(y, b, t, labels),
            lambda path: (root / path).exists() or (root / path).is_symlink(),
        )
    }
    targets = {m.target: m for m in moves.values()}
    changes = []
    for path in paths:
        if path in targets:
            move = targets[path]
            action, note = (
                (CONFLICT, f"{move.conflicts} conflict(s) marked; ") if move.conflicts else (MOVED, "")
            )
            changes.append(
                Change(path, action, GeneratedFile(move.target_data), note + f"from {move.source}")
            )
            continue
        source = moves.get(path)
        data = source.source_yours if source else on_disk[path]
        change = _plan_file(root / path, path, base.get(path), new.get(path), labels, data)
        if change is not None:
            changes.append(_with_notes(change, source, new.get(path)))
    return changes


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() and not path.is_symlink() else None


def _with_notes(change: Change, move: Move | None, new: GeneratedFile | None) -> Change:
    """``change`` with what a person must know: where its logic went; that an edit of a generated file was
    kept, and where such code belongs."""
    notes = [change.note] if change.note else []
    if move is not None:
        notes.append(f"your logic moved to {move.target}")
    if change.action in (MERGED, CONFLICT) and new is not None:
        text = new.data.decode(errors="replace")
        if is_generated(text):
            found = _YOURS.search(text)
            notes.append(
                "your edit of a generated file, kept"
                + (f"; your code belongs in {found.group(1)}" if found else "")
            )
    return replace(change, note="; ".join(notes))


def _plan_file(
    current: Path,
    path: str,
    base: GeneratedFile | None,
    new: GeneratedFile | None,
    labels: Labels,
    yours: bytes | None,
) -> Change | None:
    """What updating does to the file at ``current`` (``path`` relative to the root; ``yours``: its content,
    read once by the caller, or with its logic moved out; None when no regular file is there); None:
    nothing."""
    if new is None:
        return _plan_no_longer_generated(path, yours, base)
    if yours is None:
        return _plan_missing(current, path, base, new)
    return _plan_present(path, yours, base, new, labels)


def _plan_no_longer_generated(path: str, yours: bytes | None, base: GeneratedFile | None) -> Change | None:
    """A file tbgen generates no more: listed when it is there as tbgen generated it, else left alone."""
    if yours is not None and base is not None and yours == base.data:
        return Change(path, NO_LONGER_GENERATED, note="kept; delete it if nothing of yours uses it")
    return None


def _plan_missing(current: Path, path: str, base: GeneratedFile | None, new: GeneratedFile) -> Change | None:
    """A file tbgen generates that the project lacks: added when it is new in the template; a deletion of
    yours stays, listed when tbgen changed the file; a conflict when a directory or link of yours is in its
    place."""
    if current.exists() or current.is_symlink():
        return Change(path, CONFLICT, note="a directory or link of yours is where tbgen writes a file")
    if base is None:
        return Change(path, ADDED, new)
    if base.data != new.data:
        return Change(path, DELETED_BY_YOU, note="tbgen changed it; it stays deleted")
    return None


def _plan_present(
    path: str, yours: bytes, base: GeneratedFile | None, new: GeneratedFile, labels: Labels
) -> Change | None:
    """A file the project has and tbgen generates: replaced when you never touched it, kept when tbgen did not
    change it, else merged."""
    if yours == new.data:
        return None
    if base is not None and yours == base.data:
        return Change(path, REPLACED, new)
    if base is not None and base.data == new.data:
        return None  # your edit; tbgen has nothing new here
    return _plan_merge(path, yours, base, new, labels)


def _plan_merge(
    path: str, yours: bytes, base: GeneratedFile | None, new: GeneratedFile, labels: Labels
) -> Change:
    """Your version and tbgen's new one, both changed: merged by git merge-file (an empty base for a file new
    in the template), conflicts marked; a conflict, yours kept, for a file that is not text."""
    merged, conflicts = merge_text(yours, base.data if base is not None else b"", new.data, labels)
    if merged is None:
        return Change(path, CONFLICT, note="not text: yours is kept; compare it with tbgen's by hand")
    result = GeneratedFile(merged, new.executable)
    if conflicts:
        return Change(path, CONFLICT, result, f"{conflicts} conflict(s) marked")
    return Change(path, MERGED, result)


def merge_text(yours: bytes, base: bytes, theirs: bytes, labels: Labels) -> tuple[bytes | None, int]:
    """git merge-file of the three versions: (the merged bytes, the number of conflicts); (None, 0) for a file
    that is not text."""
    if any(b"\0" in data for data in (yours, base, theirs)):
        return None, 0
    git = shutil.which("git")
    if git is None:
        raise UsageError(
            "`tbgen update` merges your edits with `git merge-file`, and git is not on PATH.",
            "Install git (Debian/Ubuntu: apt-get install git), then run `tbgen update` again.",
        )
    with tempfile.TemporaryDirectory(prefix="tbgen-merge-") as scratch:
        paths = []
        for name, data in (("yours", yours), ("base", base), ("theirs", theirs)):
            path = Path(scratch, name)
            path.write_bytes(data)
            paths.append(str(path))
        result = subprocess.run(
            [git, "merge-file", "-p", "-L", labels.yours, "-L", labels.base, "-L", labels.theirs, *paths],
            capture_output=True,
            check=False,
        )
    if result.returncode < 0 or result.returncode > 127:
        raise UsageError(
            f"git merge-file failed: {result.stderr.decode(errors='replace').strip()}",
            "Check that git works (git --version), then run `tbgen update` again.",
        )
    return result.stdout, result.returncode


def apply_update(root: Path, changes: list[Change], record: Record) -> None:
    """Write every change and the new generation record under ``root``, all or nothing."""
    writes = [(Path(root) / c.path, c.result) for c in changes if c.result is not None]
    writes.append((Path(root) / RECORD_FILE, GeneratedFile(pack(record))))
    journal: list[tuple[Path, bytes | None, int]] = []
    created: list[Path] = []
    with signals_recorded() as received:
        try:
            for path, file in writes:
                created += _make_parents(path.parent)
                journal.append(
                    (path, path.read_bytes(), path.stat().st_mode) if path.exists() else (path, None, 0)
                )
                replace_file(path, file)
        except OSError as err:
            _roll_back(journal, created)
            raise ScaffoldError(
                f"Cannot write {err.filename or root}: {err.strerror or err}; the project is as it was.",
                "Free space or fix the permissions, then run `tbgen update` again.",
            ) from err
        except BaseException:
            _roll_back(journal, created)
            raise
        if received:
            _roll_back(journal, created)
    raise_received(received)  # a signal that came while writing, delivered to a project as it was before


def _make_parents(directory: Path) -> list[Path]:
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        path.mkdir()
    return list(reversed(missing))


def _roll_back(journal: list[tuple[Path, bytes | None, int]], created: list[Path]) -> None:
    for path, data, mode in reversed(journal):
        partial_of(path).unlink(missing_ok=True)
        if data is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(data)
            os.chmod(path, mode)
    for directory in reversed(created):
        try:
            directory.rmdir()
        except OSError:
            pass
