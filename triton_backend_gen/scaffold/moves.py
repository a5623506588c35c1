"""Moving the user's logic out of a file that became generated plumbing, when `tbgen update` takes a project
to the layout where the user's code has files of its own (template 0.3.0).

Before, the user's logic sat inside one big file between markers (C++ `// ===... YOUR LOGIC ===...` to a
`// ===...` line; Python `# ---- Your computation ---...` to a `# ---...` line). Now that file is generated
plumbing and the logic lives in a file of the user's own between `// ---- Your logic ----` and
`// ---- End of your logic ----` (`#` in Python). ``plan_moves`` finds, for each edited old file, the new
user file that takes its block, and merges the user's block into it (a 3-way merge: the block as generated,
the user's, the new file's); the old file then counts as unedited there, so the plumbing around it is
replaced or merged as usual. A block it cannot place is left where it was: the file's 3-way merge then keeps
the user's edit (in conflict markers where tbgen changed the same lines).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from triton_backend_gen.scaffold.layout import is_generated
from triton_backend_gen.scaffold.record import GeneratedFile

# (start, end) of the old layout's logic block: the end is the first line after the start that matches.
OLD_MARKERS = (
    (re.compile(r"^// =+ YOUR LOGIC =+$"), re.compile(r"^// =+$")),
    (re.compile(r"^# -+ Your computation -+$"), re.compile(r"^# -+$")),
    # python-backend's native extension: its element function, now native/src/compute.cc
    (re.compile(r"^// -+ Your computation\b.*-+$"), re.compile(r"^// -+$")),
)
NEW_MARKERS = (
    re.compile(r"^(//|#) ---- Your logic ----$"),
    re.compile(r"^(//|#) ---- End of your logic ----$"),
)

Merge = Callable[[bytes, bytes, bytes], tuple[bytes | None, int]]


@dataclass(frozen=True)
class Move:
    source: str  # the old file, now generated plumbing
    target: str  # the user's new file that takes the block
    target_data: bytes  # the new user file with the user's block merged in
    source_yours: bytes  # the user's old file with the block as generated: the edits left outside it
    conflicts: int  # conflicts marked in target_data


def find_block(lines: list[str], markers: tuple[re.Pattern, re.Pattern]) -> tuple[int, int] | None:
    """(first, end) line indexes of the lines strictly between the first start marker and the end marker
    after it; None when the markers are not there."""
    start, end = markers
    first = next((i for i, line in enumerate(lines) if start.match(line)), None)
    if first is None:
        return None
    last = next((i for i in range(first + 1, len(lines)) if end.match(lines[i])), None)
    return None if last is None else (first + 1, last)


def _old_block(text: str) -> tuple[int, int] | None:
    lines = text.splitlines(keepends=True)
    stripped = [line.rstrip("\n") for line in lines]
    for markers in OLD_MARKERS:
        found = find_block(stripped, markers)
        if found is not None:
            return found
    return None


def _block(text: str, span: tuple[int, int]) -> str:
    return "".join(text.splitlines(keepends=True)[span[0] : span[1]])


def _replace_block(text: str, span: tuple[int, int], block: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[: span[0]]) + block + "".join(lines[span[1] :])


def plan_moves(
    yours: Mapping[str, bytes],
    base: Mapping[str, GeneratedFile],
    new: Mapping[str, GeneratedFile],
    merge: Merge,
    present: Callable[[str], bool] = lambda path: False,
) -> list[Move]:
    """The moves of the user's logic that updating from ``base`` to ``new`` makes, for the user's files
    ``yours`` (path: bytes, of the files of ``base``); ``present`` says whether a path is taken in the
    project already (a file of the user's own there is never a target: it is merged as usual)."""
    targets = [
        path
        for path in new
        if path not in base and not present(path) and _new_block(new[path].data) is not None
    ]
    moves = []
    for path, data in yours.items():
        old = base.get(path)
        fresh = new.get(path)
        if (
            old is None
            or fresh is None
            or data == old.data
            or not is_generated(fresh.data.decode(errors="replace"))
        ):
            continue
        move = _plan_move(path, data, old.data, targets, new, merge)
        if move is not None:
            moves.append(move)
            targets.remove(move.target)
    return moves


def _new_block(data: bytes) -> tuple[int, int] | None:
    text = data.decode(errors="replace")
    return find_block([line.rstrip("\n") for line in text.splitlines(keepends=True)], NEW_MARKERS)


def _plan_move(
    path: str, yours: bytes, base: bytes, targets: list[str], new: Mapping[str, GeneratedFile], merge: Merge
) -> Move | None:
    """The move of the logic block of ``path`` (the user's ``yours``, generated as ``base``) into the first of
    ``targets`` in the same directory; None when either side has no block or the block is unedited."""
    yours_text, base_text = yours.decode(errors="replace"), base.decode(errors="replace")
    yours_span, base_span = _old_block(yours_text), _old_block(base_text)
    if yours_span is None or base_span is None:
        return None
    yours_block, base_block = _block(yours_text, yours_span), _block(base_text, base_span)
    if yours_block == base_block:
        return None
    folder = PurePosixPath(path).parent
    target = next((t for t in targets if PurePosixPath(t).parent == folder), None)
    if target is None:
        return None
    target_text = new[target].data.decode(errors="replace")
    target_span = _new_block(new[target].data)
    lead, theirs, trail = _blank_edges(_block(target_text, target_span))
    # Blank lines at a block's edges are layout: merged without them, so that tbgen's new spacing next to
    # the user's first or last line is no conflict; the new file's spacing is kept.
    merged, conflicts = merge(
        _blank_edges(yours_block)[1].encode(), _blank_edges(base_block)[1].encode(), theirs.encode()
    )
    if merged is None:
        return None
    block = lead + merged.decode(errors="replace") + trail
    return Move(
        path,
        target,
        _replace_block(target_text, target_span, block).encode(),
        _replace_block(yours_text, yours_span, base_block).encode(),
        conflicts,
    )


def _blank_edges(block: str) -> tuple[str, str, str]:
    """``block`` as (its leading blank lines, the lines between, its trailing blank lines)."""
    lines = block.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    last = next((i for i in range(len(lines), first, -1) if lines[i - 1].strip()), first)
    return "".join(lines[:first]), "".join(lines[first:last]), "".join(lines[last:])
