"""The release matrix: spellings, errors, internal consistency, and agreement with Triton's own sources.

The cross-checks read the real headers and CMakeLists of each rYY.MM branch from git mirrors of
core/common/backend/server when they are on this machine, and from tbgen's source cache when it holds
a branch; each skips with the reason when its source is absent.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import source_cache_dir

from triton_backend_gen.errors import UnknownReleaseError, UsageError
from triton_backend_gen.versions import (
    RELEASES,
    cuda_architectures_for,
    newest,
    resolve,
)

MIRRORS = Path("/work/.mirror")
SAMPLE = sorted({RELEASES[0], resolve("24.10"), resolve("25.07"), newest()}, key=lambda r: r.container)


def _month_index(container: str) -> int:
    year, month = container.split(".")
    return int(year) * 12 + int(month) - 1


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


# --- reading Triton's sources ------------------------------------------------------------------------
def _mirror(repo: str) -> Path:
    return MIRRORS / f"triton-inference-server+{repo}" / "repo"


def _git_show(repo: str, branch: str, path: str) -> str | None:
    """``path`` on ``branch`` of the mirror of ``repo``, or None when the mirror lacks the branch."""
    result = subprocess.run(
        ["git", "-C", str(_mirror(repo)), "show", f"refs/heads/{branch}:{path}"],
        capture_output=True,
        text=True,
    )
    return result.stdout if result.returncode == 0 else None


def _mirror_or_skip(repo: str) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed, so the Triton mirrors cannot be read")
    if not (_mirror(repo) / "HEAD").is_file():
        pytest.skip(f"no git mirror of triton-inference-server/{repo} at {_mirror(repo)}")


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


@pytest.mark.parametrize(
    "bad", ["23.12", "r99.01", "2.99.0", "v2.51", "24.1", "latest", "main", "", "r24.10-py3"]
)
def test_unknown_release_is_a_usage_error_listing_the_known_ones(bad):
    with pytest.raises(UnknownReleaseError) as caught:
        resolve(bad)
    error = caught.value
    assert isinstance(error, UsageError) and error.exit_code == 2
    assert f"'{bad.strip()}'" in error.message
    for release in RELEASES:
        assert f"{release.container} ({release.server_version})" in error.hint
    assert f"newest: {newest().container}" in error.hint


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
    for previous, current in zip(RELEASES, RELEASES[1:]):
        major0, minor0, patch0 = _version_tuple(previous.server_version)
        major, minor, patch = _version_tuple(current.server_version)
        assert major == major0 == 2
        next_minor = (minor, patch) == (minor0 + 1, 0)
        patch_release = (minor, patch) == (minor0, patch0 + 1)
        assert next_minor or patch_release, f"{previous.container} -> {current.container}"
    assert len({release.server_version for release in RELEASES}) == len(RELEASES)


def test_versions_never_go_backwards():
    for previous, current in zip(RELEASES, RELEASES[1:]):
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
@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.container)
def test_api_versions_match_the_core_headers(release):
    _mirror_or_skip("core")
    backend_h = _git_show("core", release.branch, "include/triton/core/tritonbackend.h")
    server_h = _git_show("core", release.branch, "include/triton/core/tritonserver.h")
    if backend_h is None or server_h is None:
        pytest.skip(f"the core mirror has no {release.branch} branch")
    assert _api_version(backend_h, "TRITONBACKEND") == release.backend_api
    assert _api_version(server_h, "TRITONSERVER") == release.server_api


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.container)
def test_min_cmake_is_the_highest_minimum_of_backend_core_and_common(release):
    minimums = []
    for repo in ("backend", "core", "common"):
        _mirror_or_skip(repo)
        text = _git_show(repo, release.branch, "CMakeLists.txt")
        if text is None:
            pytest.skip(f"the {repo} mirror has no {release.branch} branch")
        minimums.append(_cmake_minimum(text))
    assert _highest(minimums) == release.min_cmake


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.container)
def test_server_version_and_python_match_the_server_repository(release):
    _mirror_or_skip("server")
    triton_version = _git_show("server", release.branch, "TRITON_VERSION")
    build_py = _git_show("server", release.branch, "build.py")
    if triton_version is None or build_py is None:
        pytest.skip(f"the server mirror has no {release.branch} branch")
    assert triton_version.strip() == release.server_version
    assert f'"{release.container}"' in build_py  # the triton container of build.py's version map
    ubuntu = re.search(r'base_image = "ubuntu:(\d+\.\d+)"', build_py).group(1)
    assert release.python == {"22.04": "3.10", "24.04": "3.12"}[ubuntu]  # each Ubuntu's python3


def test_newest_release_has_branches_in_core_common_and_backend():
    for repo in ("core", "common", "backend"):
        _mirror_or_skip(repo)
        branch = newest().branch
        assert _git_show(repo, branch, "CMakeLists.txt") is not None, f"the {repo} mirror lacks {branch}"


def test_cached_sources_agree_with_the_matrix():
    cache = source_cache_dir()
    branches = sorted(p for p in cache.glob("r[0-9][0-9].[0-9][0-9]") if (p / "core").is_dir())
    if not branches:
        pytest.skip(f"no Triton sources cached in {cache}")
    for root in branches:
        release = resolve(root.name)
        headers = root / "core" / "include" / "triton" / "core"
        assert _api_version((headers / "tritonbackend.h").read_text(), "TRITONBACKEND") == release.backend_api
        assert _api_version((headers / "tritonserver.h").read_text(), "TRITONSERVER") == release.server_api
        minimums = [
            _cmake_minimum((root / repo / "CMakeLists.txt").read_text()) for repo in ("backend", "core", "common")
        ]
        assert _highest(minimums) == release.min_cmake, root.name

