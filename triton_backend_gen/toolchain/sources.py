"""The Triton source cache: ``${TBGEN_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/tbgen}/triton-src/<rYY.MM>/``
holding ``core``, ``common`` and ``backend`` of one release branch, and ``googletest`` at the commit common's
unit tests ask for (what ``tbgen deps fetch|add`` lay out). Builds that find their
release here run with no network.

``fetch_sources`` clones the three repositories, ``add_sources`` registers trees a user already has
(air-gapped sites), ``list_sources`` reports what is cached. An entry is written into a hidden sibling and
renamed into place, so a failed or interrupted fetch leaves nothing half-written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen import versions
from triton_backend_gen.errors import SourcesError, UsageError
from triton_backend_gen.lazy import lazy_module

urllib_request = lazy_module("urllib.request")  # with http.client: 30 ms of every tbgen start

REPOSITORIES = ("core", "common", "backend")
GOOGLETEST = "googletest"
# Where Triton's repositories live: the default of TRITON_REPO_ORGANIZATION in the generated CMakeLists.txt.
DEFAULT_ORGANIZATION = "https://github.com/triton-inference-server"
ORGANIZATION_VARIABLE = "TRITON_REPO_ORGANIZATION"
# A file each repository must hold, proving it is the right tree (and the headers a backend compiles against).
EXPECTED_FILES = {
    "core": "include/triton/core/tritonbackend.h",
    "common": "include/triton/common/triton_json.h",
    "backend": "include/triton/backend/backend_common.h",
}
# common's src/test/CMakeLists.txt fetches googletest as an archive of one commit.
_GOOGLETEST_URL = re.compile(r"URL\s+(\S*googletest\S*\.zip)")
_API_VERSION = re.compile(r"#define\s+TRITONBACKEND_API_VERSION_(MAJOR|MINOR)\s+(\d+)")
_GIT_TIMEOUT = 600

Progress = Callable[[str], None]


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


def uncached_note(release: versions.Release) -> str | None:
    """What a C++ build of ``release`` needs when its sources are not in the cache (None when they are)."""
    if cached_sources(release.branch) is not None:
        return None
    return (
        f"Triton {release.branch} sources are not in tbgen's cache: CMake clones them, which needs the "
        "network. Offline: fill the cache once, online, with "
        f"`tbgen deps fetch --triton-version {release.container}`, or register a copy you have "
        "(`tbgen deps add --help`)."
    )


@dataclass(frozen=True)
class CachedRelease:
    """One release branch in the cache: each repository's commit, "archive" (a tree without .git) or None."""

    branch: str
    path: Path
    repositories: dict[str, str | None]

    @property
    def complete(self) -> bool:
        return all(self.repositories.get(name) for name in REPOSITORIES)


def list_sources() -> list[CachedRelease]:
    """Every release branch in the cache, oldest first (complete or not)."""
    root = sources_dir()
    if not root.is_dir():
        return []
    entries = []
    for path in sorted(root.iterdir()):
        if path.name.startswith(".") or not path.is_dir():
            continue
        repositories = {name: _revision_of(path / name) for name in (*REPOSITORIES, GOOGLETEST)}
        if repositories[GOOGLETEST] is None:
            del repositories[GOOGLETEST]
        entries.append(CachedRelease(path.name, path, repositories))
    return entries


def default_organization() -> str:
    """$TRITON_REPO_ORGANIZATION, else Triton's own organization."""
    return os.environ.get(ORGANIZATION_VARIABLE) or DEFAULT_ORGANIZATION


def fetch_sources(
    release: versions.Release,
    *,
    organization: str | None = None,
    force: bool = False,
    googletest: bool = True,
    googletest_url: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Clone core, common and backend at ``release``'s branch, and the googletest common's tests ask for,
    into the cache; returns the entry ``<cache>/triton-src/<rYY.MM>``.

    ``organization`` is a URL (or a local directory) holding ``core.git``, ``common.git`` and ``backend.git``;
    ``googletest_url`` replaces the googletest archive URL named in common's CMake (a mirror, or file://);
    ``googletest=False`` skips it (builds then use the system's googletest). A complete entry is kept unless
    ``force``; an incomplete one is replaced."""
    organization = _organization_url(organization or default_organization())
    say = progress or (lambda _line: None)
    branch = release.branch
    with _new_entry(branch, force) as staging:
        for name in REPOSITORIES:
            url = f"{organization}/{name}.git"
            say(f"cloning {name} {branch} from {url}")
            _clone(url, branch, staging / name)
        url = (googletest_url or googletest_archive_url(staging / "common")) if googletest else None
        if url:
            say(f"downloading googletest from {url}")
            _download_archive(url, staging / GOOGLETEST)
    say(f"{branch} -> {sources_dir() / branch}")
    return sources_dir() / branch


def add_sources(directory: Path, release: versions.Release, *, force: bool = False) -> Path:
    """Copy the core, common and backend trees (and googletest, if there) under ``directory`` into the cache
    as ``release``'s entry; returns the entry. The trees are checked for the files a build needs and for the
    release's backend API version."""
    directory = Path(directory)
    problems = [
        f"{directory / name / expected} is missing"
        for name, expected in EXPECTED_FILES.items()
        if not (directory / name / expected).is_file()
    ]
    if problems:
        raise UsageError(
            f"{directory} does not hold Triton's core, common and backend sources: " + "; ".join(problems),
            f"Give a directory with core/, common/ and backend/ checked out at {release.branch}.",
        )
    api = backend_api_version(directory / "core")
    if api is not None and api != release.backend_api:
        raise UsageError(
            f"{directory / 'core'} declares backend API {api[0]}.{api[1]}, but {release.branch} uses "
            f"{release.backend_api[0]}.{release.backend_api[1]}.",
            f"Check out {release.branch} of core, common and backend, or pass the matching --triton-version.",
        )
    with _new_entry(release.branch, force) as staging:
        for name in (*REPOSITORIES, GOOGLETEST):
            if (directory / name).is_dir():
                shutil.copytree(directory / name, staging / name, symlinks=True)
    return sources_dir() / release.branch


def googletest_archive_url(common: Path) -> str | None:
    """The googletest archive that common's unit tests fetch (one pinned commit), or None if it fetches
    none."""
    cmake_file = common / "src" / "test" / "CMakeLists.txt"
    if not cmake_file.is_file():
        return None
    match = _GOOGLETEST_URL.search(cmake_file.read_text(errors="replace"))
    return match.group(1) if match else None


def backend_api_version(core: Path) -> tuple[int, int] | None:
    """TRITONBACKEND_API_VERSION_MAJOR/MINOR of core's tritonbackend.h, or None when it cannot be read."""
    header = core / EXPECTED_FILES["core"]
    if not header.is_file():
        return None
    found = dict(_API_VERSION.findall(header.read_text(errors="replace")))
    if "MAJOR" not in found or "MINOR" not in found:
        return None
    return int(found["MAJOR"]), int(found["MINOR"])


# --- edges ----------------------------------------------------------------------------------------------
class _new_entry:
    """Stage a cache entry in a hidden sibling; on success move it into place, on any failure remove it."""

    def __init__(self, branch: str, force: bool) -> None:
        self.target = sources_dir() / branch
        self.force = force

    def __enter__(self) -> Path:
        if not self.force and cached_sources(self.target.name) is not None:
            raise UsageError(
                f"The sources of {self.target.name} are already cached in {self.target}.",
                "Pass --force to replace them.",
            )
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.staging = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", dir=self.target.parent))
        return self.staging

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            return False
        old = None
        if self.target.exists() or self.target.is_symlink():
            old = self.target.parent / f"{self.staging.name}.old"
            self.target.rename(old)
        self.staging.rename(self.target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return False


def _organization_url(organization: str) -> str:
    """A URL git can clone from: a local directory becomes file://<absolute path>."""
    organization = organization.rstrip("/")
    if "://" not in organization and Path(organization).is_dir():
        return Path(organization).resolve().as_uri()
    return organization


def _clone(url: str, branch: str, destination: Path) -> None:
    command = ["git", "clone", "--quiet", "--depth", "1", "--branch", branch, url, str(destination)]
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=_GIT_TIMEOUT,
            check=False,
        )
    except FileNotFoundError as err:
        raise SourcesError(
            "git is not installed.", "Install it (`apt-get install git`) and fetch again."
        ) from err
    except subprocess.TimeoutExpired as err:
        raise SourcesError(
            f"Cloning {url} took longer than {_GIT_TIMEOUT}s.", "Check the network and retry."
        ) from err
    if result.returncode != 0:
        detail = (
            result.stderr.strip().splitlines()[-1]
            if result.stderr.strip()
            else f"exit status {result.returncode}"
        )
        raise SourcesError(
            f"Cannot clone {branch} of {url}: {detail}",
            f"Check that the repository has a branch {branch}, or point --organization (or "
            f"${ORGANIZATION_VARIABLE}) at a mirror holding core.git, common.git and backend.git.",
        )


def _download_archive(url: str, destination: Path) -> None:
    """Unpack the zip archive at ``url`` into ``destination``, without its single top-level folder."""
    with tempfile.TemporaryDirectory(prefix="tbgen-download-") as scratch:
        archive = Path(scratch) / "archive.zip"
        try:
            with urllib_request.urlopen(url, timeout=_GIT_TIMEOUT) as response, archive.open("wb") as out:
                shutil.copyfileobj(response, out)
            with zipfile.ZipFile(archive) as unpacked:
                unpacked.extractall(Path(scratch) / "tree")
        except (OSError, zipfile.BadZipFile) as err:
            raise SourcesError(
                f"Cannot download googletest from {url}: {err}",
                "Check the network, or pass --googletest-url with a mirror of that archive.",
            ) from err
        tree = Path(scratch) / "tree"
        inside = list(tree.iterdir())
        top = inside[0] if len(inside) == 1 and inside[0].is_dir() else tree
        shutil.move(str(top), str(destination))


def _revision_of(path: Path) -> str | None:
    """The commit a checkout is at, "archive" for a tree without .git, None when there is nothing."""
    if not path.is_dir():
        return None
    if (path / ".git").exists():
        result = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        )
        if result.returncode == 0:
            return result.stdout.strip()
    return "archive" if (path / "CMakeLists.txt").is_file() else None
