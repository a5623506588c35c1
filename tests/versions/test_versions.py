"""The release matrix: spellings, errors, internal consistency, and agreement with Triton's own sources.

The cross-checks read the real headers and CMakeLists of each rYY.MM branch from whatever Triton sources are
at hand, never from a place this file knows: tbgen's source cache (core, common and backend of the releases
that `tbgen deps fetch|add` or CI put there, found with tbgen's own lookup), and a local organization
directory in $TRITON_REPO_ORGANIZATION holding git repositories <name>.git (or <name>) with the release
branches (server included), as a site's mirror would. Each check runs once per release whose sources are at
hand, and skips, saying how to provide them, when there are none.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from triton_backend_gen.errors import UnknownReleaseError, UsageError
from triton_backend_gen.toolchain import sources
from triton_backend_gen.versions import (
    FEATURES,
    RELEASES,
    cuda_architectures_for,
    newest,
    release_changes,
    resolve,
)

SAMPLE = sorted({RELEASES[0], resolve("24.10"), resolve("25.07"), newest()}, key=lambda r: r.container)


def _month_index(container: str) -> int:
    year, month = container.split(".")
    return int(year) * 12 + int(month) - 1


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


# --- reading Triton's sources ------------------------------------------------------------------------
def _organization() -> Path | None:
    """The local directory $TRITON_REPO_ORGANIZATION names (a path or a file:// URL), or None."""
    value = os.environ.get(sources.ORGANIZATION_VARIABLE, "").strip()
    if value.startswith("file://"):
        value = urllib.parse.unquote(urllib.parse.urlparse(value).path)
    elif "://" in value:
        return None
    path = Path(value) if value else None
    return path if path is not None and path.is_dir() and shutil.which("git") else None


ORGANIZATION = _organization()


def _git_show(repo: str, branch: str, path: str) -> str | None:
    """``path`` on ``branch`` of ``repo`` in the organization directory, or None when it is not there."""
    if ORGANIZATION is None:
        return None
    for git_dir in (ORGANIZATION / f"{repo}.git", ORGANIZATION / repo):
        if not git_dir.is_dir():
            continue
        for ref in (f"refs/heads/{branch}", f"refs/remotes/origin/{branch}", f"refs/tags/{branch}"):
            result = subprocess.run(
                [
                    "git",
                    "--git-dir" if git_dir.suffix == ".git" else "-C",
                    str(git_dir),
                    "show",
                    f"{ref}:{path}",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode == 0:
                return result.stdout
    return None


def _read(repo: str, branch: str, path: str) -> str | None:
    """``path`` of ``repo`` at ``branch``: from tbgen's source cache, else from the organization directory."""
    cached = sources.cached_sources(branch) if repo in sources.REPOSITORIES else None
    if cached is not None and (cached / repo / path).is_file():
        return (cached / repo / path).read_text(errors="replace")
    return _git_show(repo, branch, path)


def _at_hand(*repos: str, probe: str = "CMakeLists.txt") -> list:
    """The releases whose ``repos`` all have ``probe`` at hand."""
    return [release for release in RELEASES if all(_read(repo, release.branch, probe) for repo in repos)]


def _releases_with(*repos: str, probe: str = "CMakeLists.txt") -> list:
    """One pytest parameter per release whose ``repos`` are all at hand, or one skipped parameter saying
    why."""
    found = _at_hand(*repos, probe=probe)
    if found:
        return [pytest.param(release, id=release.container) for release in found]
    return [pytest.param(None, id="no-sources", marks=pytest.mark.skip(reason=_none_at_hand(*repos)))]


def _none_at_hand(*repos: str) -> str:
    organization = (
        f"set ${sources.ORGANIZATION_VARIABLE} to a directory holding "
        f"{', '.join(repo + '.git' for repo in repos)} with the release branches"
    )
    if set(repos) <= set(sources.REPOSITORIES):
        return (
            f"no Triton sources of {', '.join(repos)} at hand: tbgen's source cache "
            f"({sources.sources_dir()}) is empty; fill it with `tbgen deps fetch --triton-version 24.10` "
            f"(or `tbgen deps add`), or {organization}"
        )
    return (
        f"the {'/'.join(repos)} repository is not at hand (tbgen's cache holds core/common/backend only): "
        f"{organization}"
    )


def _api_version(header_text: str, prefix: str) -> tuple[int, int]:
    def define(name: str) -> int:
        match = re.search(rf"#define\s+{prefix}_API_VERSION_{name}\s+(\d+)", header_text)
        assert match, f"{prefix}_API_VERSION_{name} not found in the header"
        return int(match.group(1))

    return define("MAJOR"), define("MINOR")


def _cmake_minimum(cmakelists_text: str) -> str:
    match = re.search(r"cmake_minimum_required\s*\(\s*VERSION\s+([\d.]+)", cmakelists_text, re.IGNORECASE)
    assert match, "no cmake_minimum_required in CMakeLists.txt"
    return match.group(1)


def _highest(versions_: list[str]) -> str:
    return max(versions_, key=_version_tuple)


# --- resolve -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("release", SAMPLE, ids=lambda r: r.container)
def test_resolve_accepts_container_branch_and_server_version(release):
    spellings = [
        release.container,
        release.branch,
        release.server_version,
        f"v{release.server_version}",
        f"  {release.branch.upper()}\n",
        f"\t{release.container} ",
        f" V{release.server_version}",
    ]
    for spelling in spellings:
        assert resolve(spelling) is release, spelling


@pytest.mark.parametrize("bad", ["23.12", "3.0.0", "v2.51", "24.1", "latest", "main", "", "r24.10-py3"])
def test_unknown_release_is_a_usage_error_listing_the_known_ones(bad):
    with pytest.raises(UnknownReleaseError) as caught:
        resolve(bad)
    error = caught.value
    assert isinstance(error, UsageError) and error.exit_code == 2
    assert f"'{bad.strip()}'" in error.message
    for release in RELEASES:
        assert f"{release.container} ({release.server_version})" in error.hint
    assert f"newest: {newest().container}" in error.hint


@pytest.mark.parametrize(
    ("newer", "branch"), [("r99.01", "r99.01"), ("26.09", "r26.09"), ("2.75.0", "r26.11")]
)
def test_a_release_newer_than_the_matrix_says_what_is_known_and_how_to_build_against_it(newer, branch):
    with pytest.raises(UnknownReleaseError) as caught:
        resolve(newer)
    error = caught.value
    assert f"'{newer}' is newer" in error.message and f"to {newest().container}" in error.message
    assert f"--triton-version {newest().container}" in error.hint
    for repo in ("COMMON", "CORE", "BACKEND"):
        assert f"-DTRITON_{repo}_REPO_TAG={branch}" in error.hint


def test_newest_is_the_last_release_and_the_default_spellings_reach_it():
    assert newest() is RELEASES[-1]
    assert resolve(newest().branch) is newest()


def test_branch_and_image_follow_the_container():
    for release in RELEASES:
        assert release.branch == "r" + release.container
        assert release.image == f"nvcr.io/nvidia/tritonserver:{release.container}-py3"


# --- internal consistency ------------------------------------------------------------------------------
def test_releases_start_at_24_01_and_are_monthly_without_gaps():
    assert RELEASES[0].container == "24.01"
    months = [_month_index(release.container) for release in RELEASES]
    assert months == list(range(months[0], months[0] + len(RELEASES)))


def test_server_version_moves_one_minor_per_month_or_one_patch():
    for previous, current in zip(RELEASES, RELEASES[1:], strict=False):
        major0, minor0, patch0 = _version_tuple(previous.server_version)
        major, minor, patch = _version_tuple(current.server_version)
        assert major == major0 == 2
        next_minor = (minor, patch) == (minor0 + 1, 0)
        patch_release = (minor, patch) == (minor0, patch0 + 1)
        assert next_minor or patch_release, f"{previous.container} -> {current.container}"
    assert len({release.server_version for release in RELEASES}) == len(RELEASES)


def test_versions_never_go_backwards():
    for previous, current in zip(RELEASES, RELEASES[1:], strict=False):
        assert current.backend_api >= previous.backend_api
        assert current.server_api >= previous.server_api
        assert _version_tuple(current.cuda) >= _version_tuple(previous.cuda)
        assert _version_tuple(current.min_cmake) >= _version_tuple(previous.min_cmake)
        assert _version_tuple(current.python) >= _version_tuple(previous.python)


def test_each_release_builds_for_the_architectures_of_its_cuda():
    for release in RELEASES:
        assert release.cuda_architectures == cuda_architectures_for(release.cuda)
        assert release.cuda_architectures[0] == "75"
        numbers = [int(arch) for arch in release.cuda_architectures]
        assert numbers == sorted(set(numbers))


# --- cuda_architectures_for ----------------------------------------------------------------------------
def test_cuda_architectures_follow_what_each_cuda_adds_and_drops():
    before_blackwell = cuda_architectures_for("12.6.2")
    blackwell = cuda_architectures_for("12.8")
    cuda13 = cuda_architectures_for("13.0.88")
    assert {"75", "80", "86", "89", "90"} <= set(before_blackwell)
    assert not {"100", "101", "110", "120"} & set(before_blackwell)
    assert {"100", "101", "120"} <= set(blackwell) and set(before_blackwell) < set(blackwell)
    assert {"100", "110", "120"} <= set(cuda13) and "101" not in cuda13
    assert cuda_architectures_for("v13.1") == cuda13
    assert cuda_architectures_for("12.9.1") == blackwell


@pytest.mark.parametrize("bad", ["11.8", "10.2.89", "14.0", "twelve", "12", ""])
def test_unsupported_or_malformed_cuda_is_a_usage_error(bad):
    with pytest.raises(UsageError) as caught:
        cuda_architectures_for(bad)
    assert caught.value.hint


def _find_nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def test_architectures_for_the_local_nvcc_are_ones_it_accepts():
    nvcc = _find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc is not installed (not on PATH, /usr/local/cuda/bin or /usr/local/bin)")
    banner = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    version = re.search(r"release (\d+\.\d+)", banner).group(1)
    listing = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, check=True).stdout
    accepted = {int(match) for match in re.findall(r"compute_(\d+)", listing)}
    chosen = [int(arch) for arch in cuda_architectures_for(version)]
    assert set(chosen) <= accepted, f"nvcc {version} rejects {sorted(set(chosen) - accepted)}"
    # Nothing older than Turing is chosen, and Turing itself is chosen whenever this nvcc can build it.
    assert min(chosen) == 75 and 75 in accepted


# --- agreement with Triton's sources ----------------------------------------------------------------------
@pytest.mark.parametrize("release", _releases_with("core", probe="include/triton/core/tritonbackend.h"))
def test_api_versions_match_the_core_headers(release):
    backend_h = _read("core", release.branch, "include/triton/core/tritonbackend.h")
    server_h = _read("core", release.branch, "include/triton/core/tritonserver.h")
    assert backend_h is not None and server_h is not None, f"core {release.branch} lacks its headers"
    assert _api_version(backend_h, "TRITONBACKEND") == release.backend_api
    assert _api_version(server_h, "TRITONSERVER") == release.server_api


@pytest.mark.parametrize("release", _releases_with("backend", "core", "common"))
def test_min_cmake_is_the_highest_minimum_of_backend_core_and_common(release):
    minimums = [
        _cmake_minimum(_read(repo, release.branch, "CMakeLists.txt"))
        for repo in ("backend", "core", "common")
    ]
    assert _highest(minimums) == release.min_cmake


@pytest.mark.parametrize("release", _releases_with("server", probe="TRITON_VERSION"))
def test_server_version_and_python_match_the_server_repository(release):
    triton_version = _read("server", release.branch, "TRITON_VERSION")
    build_py = _read("server", release.branch, "build.py")
    assert triton_version is not None and build_py is not None, f"server {release.branch} lacks build.py"
    assert triton_version.strip() == release.server_version
    assert f'"{release.container}"' in build_py  # the triton container of build.py's version map
    ubuntu = re.search(r'base_image = "ubuntu:(\d+\.\d+)"', build_py).group(1)
    assert release.python == {"22.04": "3.10", "24.04": "3.12"}[ubuntu]  # each Ubuntu's python3


# Each feature of versions.FEATURES, told apart in the sources of its repository: (repo, path, marker).
FEATURE_MARKERS = {
    "checked_counts": (
        "backend",
        "include/triton/backend/backend_common.h",
        "TRITONSERVER_Error* GetElementCount(",
    ),
    "instance_ready": ("core", "include/triton/core/tritonbackend.h", "TRITONBACKEND_ModelInstanceReady("),
    "server_ready_checks_instances": ("core", "src/server.cc", "readiness evaluation"),
    "confined_batch_strategy_path": ("core", "src/backend_model.cc", "escapes model repository"),
    "python_instance_ready": ("python_backend", "src/python_be.cc", "TRITONBACKEND_ModelInstanceReady("),
    "python_is_ready": ("python_backend", "src/pb_stub.cc", '"is_ready"'),
    "secure_env_extraction": ("python_backend", "src/pb_env.cc", "ARCHIVE_EXTRACT_SECURE_SYMLINKS"),
}


def _feature_cases():
    for feature, (repo, path, _) in FEATURE_MARKERS.items():
        for param in _releases_with(repo, probe=path):
            yield pytest.param(feature, param.values[0], id=f"{feature}-{param.id}", marks=param.marks)


def test_every_feature_has_a_marker_in_triton_sources():
    assert set(FEATURE_MARKERS) == set(FEATURES)


@pytest.mark.parametrize(("feature", "release"), list(_feature_cases()))
def test_a_release_has_a_feature_exactly_when_its_sources_do(feature, release):
    """Where the sources of a release are at hand, the marker of each feature is in them exactly from the
    feature's first release (r26.06's backend here is its r26.02 branch; the backend's feature is older)."""
    repo, path, marker = FEATURE_MARKERS[feature]
    text = _read(repo, release.branch, path)
    assert text is not None
    assert (marker in text) == release.has(feature), (feature, release.container, FEATURES[feature].since)


def test_tbgen_versions_lists_every_release_with_what_is_new_in_it():
    result = subprocess.run(
        [sys.executable, "-m", "triton_backend_gen", "versions"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "250"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if re.match(r"\d{2}\.\d{2}\s", line)}
    assert list(rows) == [release.container for release in RELEASES]
    assert list(rows)[0] == "24.01" and list(rows)[-1] == "26.08"
    for release in RELEASES:
        assert release.server_version in rows[release.container] and release.cuda in rows[release.container]
        for feature in FEATURES.values():
            if feature.since == release.container:
                assert feature.what in rows[release.container], (release.container, feature.what)


@pytest.mark.parametrize(("old", "new"), [("24.10", "26.06"), ("26.02", "26.08")])
def test_the_release_change_table_names_every_fact_and_feature_a_move_crosses(old, new):
    """`tbgen update` prints release_changes: every fact that differs and every feature one side has."""
    before, after = resolve(old), resolve(new)
    changes = {change.what: change for change in release_changes(before, after)}
    for key, feature in FEATURES.items():
        crossed = before.has(key) != after.has(key)
        assert (f"{feature.what} (since {feature.since})" in changes) == crossed, key
    assert ("CUDA" in changes) == (before.cuda != after.cuda)
    assert ("CMake minimum" in changes) == (before.min_cmake != after.min_cmake)
    assert all(change.action for change in changes.values())
