"""The result of one of a project's unit tests (its computation against reference.py, with no server)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UnitResult:
    name: str  # what was tested, e.g. "add_sub: compute(batch 4, seed 1) matches reference.compute"
    passed: bool
    detail: str  # on failure the first difference (or the error, with a path an editor opens); else a summary
    seconds: float
