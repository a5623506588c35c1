"""The Triton source cache: `tbgen deps fetch|add|list` for real, offline, from a local organization (a
directory of bare repositories core.git, common.git and backend.git) that the tests build themselves, never
touching the network nor any directory outside pytest's own temporary ones.

The repositories hold what tbgen looks at (CMakeLists.txt, the headers it checks for, core's backend API
version and the googletest archive common's tests pin), on a release branch r24.10 and on a default branch
`main` whose files differ, so that a clone at the wrong branch is caught. Whether the real sources of each
release agree with tbgen's release matrix is tests/versions' business.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from triton_backend_gen import versions
from triton_backend_gen.errors import SourcesError, UsageError
from triton_backend_gen.toolchain import cmake, sources

BRANCH = "r24.10"
RELEASE = versions.resolve(BRANCH)
OTHER_API = (RELEASE.backend_api[0], RELEASE.backend_api[1] + 7)  # what the default branch `main` declares

if shutil.which("git") is None:
    pytest.skip("git is not installed (apt-get install git)", allow_module_level=True)


def git(*args: str, cwd: Path | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "tbgen tests",
        "GIT_AUTHOR_EMAIL": "tests@tbgen.invalid",
        "GIT_COMMITTER_NAME": "tbgen tests",
        "GIT_COMMITTER_EMAIL": "tests@tbgen.invalid",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=env
    ).stdout.strip()


def backend_header(api: tuple[int, int]) -> str:
    return (
        f"#pragma once\n#define TRITONBACKEND_API_VERSION_MAJOR {api[0]}\n"
        f"#define TRITONBACKEND_API_VERSION_MINOR {api[1]}\n"
    )


def repository_files(name: str, api: tuple[int, int], googletest_url: str) -> dict[str, str]:
    """The files of one stand-in repository: its CMakeLists.txt and the file tbgen checks each one for."""
    files = {
        "CMakeLists.txt": f"cmake_minimum_required(VERSION {RELEASE.min_cmake})\nproject({name})\n",
        "LICENSE": "stand-in for tests\n",
    }
    if name == "core":
        files[sources.EXPECTED_FILES["core"]] = backend_header(api)
    elif name == "common":
        files[sources.EXPECTED_FILES["common"]] = "#pragma once\n"
        # common's unit tests fetch googletest as the archive of one pinned commit.
        files["src/test/CMakeLists.txt"] = (
            f"FetchContent_Declare(\n  googletest\n  URL {googletest_url}\n)\n"
            "FetchContent_MakeAvailable(googletest)\n"
        )
    else:
        files[sources.EXPECTED_FILES[name]] = "#pragma once\n"
    return files


def commit_tree(work: Path, files: dict[str, str], message: str) -> None:
    for path in work.iterdir():
        if path.name != ".git":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for relative, text in files.items():
        (work / relative).parent.mkdir(parents=True, exist_ok=True)
        (work / relative).write_text(text)
    git("add", "--all", cwd=work)
    git("commit", "--quiet", "-m", message, cwd=work)


def googletest_zip(path: Path, top: str) -> Path:
    """A zip of googletest-like sources under one top folder, as the upstream archives are laid out; its
    ORIGIN file names the archive."""
    with zipfile.ZipFile(path, "w") as out:
        out.writestr(f"{top}/CMakeLists.txt", "project(googletest-distribution)\n")
        out.writestr(f"{top}/googletest/include/gtest/gtest.h", "#pragma once\n")
        out.writestr(f"{top}/ORIGIN", f"{path.name}\n")
    return path


@pytest.fixture(scope="module")
def googletest_archive(tmp_path_factory) -> Path:
    """The googletest archive common's r24.10 pins (a file:// URL in its src/test/CMakeLists.txt)."""
    return googletest_zip(
        tmp_path_factory.mktemp("googletest") / "googletest-pinned.zip", "googletest-pinned"
    )


@pytest.fixture(scope="module")
def googletest_mirror(tmp_path_factory) -> Path:
    """Another copy of that archive, as a site's mirror would serve it (--googletest-url)."""
    return googletest_zip(tmp_path_factory.mktemp("mirror") / "googletest-mirror.zip", "googletest-mirror")


@pytest.fixture(scope="module")
def organization(tmp_path_factory, googletest_archive) -> Path:
    """A directory holding core.git, common.git and backend.git: branch r24.10 with the release's files, and a
    default branch `main` that declares another backend API and pins no googletest."""
    root = tmp_path_factory.mktemp("organization")
    for name in sources.REPOSITORIES:
        work = tmp_path_factory.mktemp(f"{name}-work")
        git("init", "--quiet", "--initial-branch", "main", str(work))
        commit_tree(work, repository_files(name, RELEASE.backend_api, googletest_archive.as_uri()), "release")
        git("branch", BRANCH, cwd=work)
        development = repository_files(name, OTHER_API, googletest_archive.as_uri())
        development.pop("src/test/CMakeLists.txt", None)
        commit_tree(work, {**development, "NEWER": "main moved on\n"}, "development")
        git("clone", "--quiet", "--bare", str(work), str(root / f"{name}.git"))
    return root


def branch_head(organization: Path, name: str, branch: str = BRANCH) -> str:
    return git("--git-dir", str(organization / f"{name}.git"), "rev-parse", f"refs/heads/{branch}")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TBGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(sources.ORGANIZATION_VARIABLE, raising=False)
    return tmp_path / "cache" / "triton-src"


def leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.startswith(".")) if cache.is_dir() else []


def tbgen(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "triton_backend_gen", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "250", **env},
        timeout=300,
        check=False,
    )


def test_the_stand_in_organization_has_the_release_branch_and_another_default(organization):
    for name in sources.REPOSITORIES:
        bare = organization / f"{name}.git"
        assert git("--git-dir", str(bare), "symbolic-ref", "HEAD") == "refs/heads/main"
        assert branch_head(organization, name) != branch_head(organization, name, "main")


def test_fetch_clones_each_repository_at_the_release_branch(cache, organization, googletest_mirror):
    lines: list[str] = []
    entry = sources.fetch_sources(
        RELEASE,
        organization=organization.as_uri(),
        googletest_url=googletest_mirror.as_uri(),
        progress=lines.append,
    )
    assert entry == cache / BRANCH
    assert sources.cached_sources(BRANCH) == entry and sources.missing_repositories(BRANCH) == []
    for name, expected in sources.EXPECTED_FILES.items():
        assert (entry / name / expected).is_file()
        assert git("rev-parse", "HEAD", cwd=entry / name) == branch_head(organization, name)
        assert not (entry / name / "NEWER").exists()  # the release branch, not the default one
    assert sources.backend_api_version(entry / "core") == RELEASE.backend_api
    # --googletest-url wins over the archive common pins, and the archive's top folder is stripped.
    assert (entry / "googletest" / "CMakeLists.txt").is_file()
    assert (entry / "googletest" / "ORIGIN").read_text() == "googletest-mirror.zip\n"
    assert any("cloning core" in line for line in lines)
    assert any(googletest_mirror.as_uri() in line for line in lines)
    assert leftovers(cache) == []
    listed = {e.branch: e for e in sources.list_sources()}
    assert listed[BRANCH].complete
    assert listed[BRANCH].repositories["common"] == git("rev-parse", "HEAD", cwd=entry / "common")
    assert listed[BRANCH].repositories["googletest"] == "archive"


def test_googletest_url_is_the_commit_common_pins(cache, organization, googletest_archive):
    entry = sources.fetch_sources(RELEASE, organization=organization.as_uri(), googletest=False)
    url = sources.googletest_archive_url(entry / "common")
    assert url == googletest_archive.as_uri()
    assert url is not None and "googletest" in url and url.endswith(".zip")
    assert not (entry / "googletest").exists()


def test_fetch_downloads_the_googletest_common_pins(cache, organization):
    entry = sources.fetch_sources(RELEASE, organization=organization.as_uri())
    assert (entry / "googletest" / "ORIGIN").read_text() == "googletest-pinned.zip\n"
    assert (entry / "googletest" / "googletest" / "include" / "gtest" / "gtest.h").is_file()
    assert sources.list_sources()[0].repositories["googletest"] == "archive"


def test_a_common_without_a_pinned_googletest_fetches_none(tmp_path):
    (tmp_path / "src" / "test").mkdir(parents=True)
    assert sources.googletest_archive_url(tmp_path) is None
    (tmp_path / "src" / "test" / "CMakeLists.txt").write_text("add_executable(t t.cc)\n")
    assert sources.googletest_archive_url(tmp_path) is None


def test_an_unreachable_googletest_fails_the_fetch_and_leaves_nothing(cache, organization, tmp_path):
    absent = (tmp_path / "nowhere" / "googletest.zip").as_uri()
    with pytest.raises(SourcesError, match="googletest") as caught:
        sources.fetch_sources(RELEASE, organization=organization.as_uri(), googletest_url=absent)
    assert "--googletest-url" in caught.value.hint
    assert not (cache / BRANCH).exists() and leftovers(cache) == []


def test_builds_prefer_the_cached_googletest(tmp_path):
    entry = tmp_path / BRANCH
    assert cmake.googletest_sources(entry) in (None, cmake.SYSTEM_GOOGLETEST)
    (entry / "googletest").mkdir(parents=True)
    (entry / "googletest" / "CMakeLists.txt").write_text("")
    command = cmake.configure_command(tmp_path / "p", tmp_path / "b", triton_sources=entry, gpu=False)
    assert f"-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST={entry / 'googletest'}" in command


def test_a_failed_fetch_leaves_nothing(cache, organization):
    missing = versions.resolve("25.10")  # the bare repositories hold r24.10 only
    with pytest.raises(SourcesError, match="r25.10") as caught:
        sources.fetch_sources(missing, organization=organization.as_uri(), googletest=False)
    assert "--organization" in caught.value.hint
    assert not (cache / "r25.10").exists()
    assert leftovers(cache) == []
    assert sources.list_sources() == []


def test_a_cached_release_is_kept_unless_forced(cache, organization):
    entry = sources.fetch_sources(RELEASE, organization=organization.as_uri(), googletest=False)
    marker = entry / "core" / "user-file"
    marker.write_text("kept")
    with pytest.raises(UsageError, match="already cached") as caught:
        sources.fetch_sources(RELEASE, organization=organization.as_uri(), googletest=False)
    assert "--force" in caught.value.hint
    assert marker.read_text() == "kept"
    sources.fetch_sources(RELEASE, organization=organization.as_uri(), googletest=False, force=True)
    assert not marker.exists() and sources.cached_sources(BRANCH) == entry
    assert leftovers(cache) == []


def test_deps_cli_fetch_list_and_refusal(cache, organization):
    # A plain directory in $TRITON_REPO_ORGANIZATION, as a mirror on an air-gapped site would be given.
    env = {"TBGEN_CACHE_DIR": str(cache.parent), sources.ORGANIZATION_VARIABLE: str(organization)}
    fetched = tbgen("deps", "fetch", "--triton-version", "24.10", "--no-googletest", env=env)
    assert fetched.returncode == 0, fetched.stderr
    assert f"{BRANCH} in {cache / BRANCH}" in fetched.stdout
    assert git("rev-parse", "HEAD", cwd=cache / BRANCH / "core") == branch_head(organization, "core")
    listed = tbgen("deps", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert BRANCH in listed.stdout and git("rev-parse", "HEAD", cwd=cache / BRANCH / "core") in listed.stdout
    again = tbgen("deps", "fetch", "--triton-version", "24.10", "--no-googletest", env=env)
    assert again.returncode == 2 and "--force" in again.stderr  # a usage error: the release is cached
    forced = tbgen("deps", "fetch", "--triton-version", "24.10", "--no-googletest", "--force", env=env)
    assert forced.returncode == 0, forced.stderr


def test_deps_cli_fetch_from_a_file_url_organization(cache, organization, googletest_mirror):
    env = {"TBGEN_CACHE_DIR": str(cache.parent)}
    fetched = tbgen(
        "deps",
        "fetch",
        "--triton-version",
        BRANCH,
        "--organization",
        organization.as_uri(),
        "--googletest-url",
        googletest_mirror.as_uri(),
        env=env,
    )
    assert fetched.returncode == 0, fetched.stderr
    assert f"cloning core {BRANCH} from {organization.as_uri()}/core.git" in fetched.stdout
    for name in sources.REPOSITORIES:
        assert git("rev-parse", "HEAD", cwd=cache / BRANCH / name) == branch_head(organization, name)
    assert (cache / BRANCH / "googletest" / "ORIGIN").read_text() == "googletest-mirror.zip\n"
    listed = tbgen("deps", "list", env=env)
    assert listed.returncode == 0 and "archive" in listed.stdout and "yes" in listed.stdout


def test_deps_cli_fetch_of_a_branch_the_organization_lacks(cache, organization):
    result = tbgen(
        "deps",
        "fetch",
        "--triton-version",
        "25.10",
        "--organization",
        organization.as_uri(),
        "--no-googletest",
        env={"TBGEN_CACHE_DIR": str(cache.parent)},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "r25.10" in result.stderr and "--organization" in result.stderr and "Traceback" not in result.stderr
    )
    assert not (cache / "r25.10").exists() and leftovers(cache) == []


def make_checkouts(root: Path, organization: Path) -> Path:
    """core as a git checkout; common and backend as plain trees (git archive), as users may have them."""
    root.mkdir()
    git("clone", "--quiet", "--branch", BRANCH, (organization / "core.git").as_uri(), str(root / "core"))
    for name in ("common", "backend"):
        (root / name).mkdir()
        archive = subprocess.run(
            ["git", "--git-dir", str(organization / f"{name}.git"), "archive", BRANCH],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(root / name)], input=archive, check=True)
    return root


def test_add_registers_sources_a_user_has(cache, organization, tmp_path):
    checkouts = make_checkouts(tmp_path / "mine", organization)
    entry = sources.add_sources(checkouts, RELEASE)
    assert sources.cached_sources(BRANCH) == entry
    (listed,) = sources.list_sources()
    assert listed.repositories["core"] == git("rev-parse", "HEAD", cwd=checkouts / "core")
    assert listed.repositories["core"] == branch_head(organization, "core")
    assert listed.repositories["common"] == listed.repositories["backend"] == "archive"
    assert listed.complete
    shutil.rmtree(checkouts)  # the cache holds its own copy
    assert sources.cached_sources(BRANCH) == entry
    with pytest.raises(UsageError, match="already cached"):
        sources.add_sources(make_checkouts(tmp_path / "again", organization), RELEASE)


def test_add_via_cli(cache, organization, tmp_path):
    checkouts = make_checkouts(tmp_path / "mine", organization)
    result = tbgen(
        "deps",
        "add",
        "--from",
        str(checkouts),
        "--triton-version",
        BRANCH,
        env={"TBGEN_CACHE_DIR": str(cache.parent)},
    )
    assert result.returncode == 0, result.stderr
    assert sources.cached_sources(BRANCH) == cache / BRANCH


def test_add_refuses_an_incomplete_directory(cache, organization, tmp_path):
    checkouts = make_checkouts(tmp_path / "mine", organization)
    shutil.rmtree(checkouts / "backend")
    with pytest.raises(UsageError, match="backend_common.h"):
        sources.add_sources(checkouts, RELEASE)
    assert sources.list_sources() == [] and leftovers(cache) == []


def test_add_refuses_sources_of_another_release(cache, organization, tmp_path):
    checkouts = make_checkouts(tmp_path / "mine", organization)
    older = versions.resolve("24.01")  # backend API 1.17; r24.10's core declares 1.19
    assert sources.backend_api_version(checkouts / "core") == RELEASE.backend_api != older.backend_api
    with pytest.raises(UsageError, match="backend API"):
        sources.add_sources(checkouts, older)
    assert sources.list_sources() == []


def test_list_of_an_empty_cache(cache):
    assert sources.list_sources() == []
