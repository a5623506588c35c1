"""Shared fixtures: rendering templates and locating Triton's source cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = REPO_ROOT / "templates"


def source_cache_dir() -> Path:
    """tbgen's cache of Triton sources, as tbgen and ../shared/tools/triton-sources lay it out."""
    base = os.environ.get("TBGEN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tbgen"
    )
    return Path(base) / "triton-src"


def triton_sources_or_skip(branch: str) -> Path:
    """The cached core/common/backend sources of ``branch`` (e.g. "r24.10"), or skip the test saying why."""
    root = source_cache_dir() / branch
    missing = [name for name in ("core", "common", "backend") if not (root / name / "CMakeLists.txt").is_file()]
    if missing:
        pytest.skip(
            f"Triton sources for {branch} are not in {root} (missing: {', '.join(missing)}); "
            "fill the cache with `tbgen deps` or ../shared/tools/triton-sources to run this test"
        )
    return root


@pytest.fixture
def render_template(tmp_path):
    """Render ``templates/<name>`` with the given answers into tmp_path; returns the project directory.

    Uses tbgen's own rendering path (answers validated, atomic write)."""

    def render(name: str, **answers) -> Path:
        from triton_backend_gen.scaffold import render_new_project

        project_name = answers.pop("project_name", "my-backend")
        return render_new_project(name, tmp_path / project_name, answers)

    return render


@pytest.fixture(scope="session")
def compiler_cache(tmp_path_factory):
    """ccache for every C++ build of the session, kept between runs beside the source cache, so Triton's own
    libraries are compiled once rather than for every rendered variant."""
    if shutil.which("ccache") is None:
        yield None
        return
    with pytest.MonkeyPatch.context() as patch:
        if "CCACHE_DIR" not in os.environ:
            patch.setenv("CCACHE_DIR", str(source_cache_dir().parent / "ccache"))
        # Paths under pytest's temporary root are hashed relative to the build directory, so the same
        # Triton sources compiled in different projects and sessions hit the cache.
        patch.setenv("CCACHE_BASEDIR", str(tmp_path_factory.getbasetemp().parent))
        yield os.environ["CCACHE_DIR"]
