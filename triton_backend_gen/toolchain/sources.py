"""The Triton source cache: ``${TBGEN_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/tbgen}/triton-src/<rYY.MM>/``
holding ``core``, ``common`` and ``backend`` of one release branch (what ../shared/tools/triton-sources and,
later, ``tbgen deps`` lay out). Builds that find their release here run with no network."""

from __future__ import annotations

import os
from pathlib import Path

REPOSITORIES = ("core", "common", "backend")


def cache_dir() -> Path:
    base = os.environ.get("TBGEN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tbgen"
    )
    return Path(base)


def sources_dir() -> Path:
    return cache_dir() / "triton-src"


def missing_repositories(branch: str) -> list[str]:
    """The repositories of ``branch`` (e.g. "r24.10") that the cache lacks."""
    root = sources_dir() / branch
    return [name for name in REPOSITORIES if not (root / name / "CMakeLists.txt").is_file()]


def cached_sources(branch: str) -> Path | None:
    """The cached sources of ``branch``, or None when any of the three repositories is missing."""
    return None if missing_repositories(branch) else sources_dir() / branch
