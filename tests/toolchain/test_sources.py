"""The Triton source cache: `tbgen deps fetch|add|list` for real, offline, from local bare repositories made
from the git mirrors of core, common and backend (file:// organizations), never touching the network."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from triton_backend_gen import versions
from triton_backend_gen.errors import SourcesError
from triton_backend_gen.toolchain import cmake, sources

MIRRORS = Path("/work/.mirror")
BRANCH = "r24.10"
RELEASE = versions.resolve(BRANCH)


def mirror_of(name: str) -> Path:
    return MIRRORS / f"triton-inference-server+{name}" / "repo"


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def organization(tmp_path_factory) -> Path:
    """A directory holding core.git, common.git and backend.git with only the r24.10 branch."""
    absent = [name for name in sources.REPOSITORIES if not mirror_of(name).is_dir()]
    if absent or shutil.which("git") is None:
        pytest.skip(f"needs git and the git mirrors of {', '.join(absent) or 'Triton'} under {MIRRORS}")
    root = tmp_path_factory.mktemp("organization")
    for name in sources.REPOSITORIES:
        git("clone", "--quiet", "--bare", "--single-branch", "--branch", BRANCH, mirror_of(name).as_uri(),
            str(root / f"{name}.git"))
    return root


@pytest.fixture(scope="module")
def googletest_archive(tmp_path_factory) -> Path:
    """A zip of the system's googletest sources under one top folder, as the upstream archives are laid out."""
    system = Path("/usr/src/googletest")
    if not (system / "CMakeLists.txt").is_file():
        pytest.skip("needs googletest's sources in /usr/src/googletest (Debian package googletest)")
    archive = tmp_path_factory.mktemp("googletest") / "googletest.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for path in system.rglob("*"):
            if path.is_file():
                out.write(path, Path("googletest-pinned") / path.relative_to(system))
    return archive


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TBGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(sources.ORGANIZATION_VARIABLE, raising=False)
    return tmp_path / "cache" / "triton-src"


def leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.startswith(".")) if cache.is_dir() else []


def tbgen(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triton_backend_gen", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250", **env}, timeout=300, check=False)


def test_fetch_clones_each_repository_at_the_release_branch(cache, organization, googletest_archive):
    lines: list[str] = []
    entry = sources.fetch_sources(RELEASE, organization=organization.as_uri(),
                                  googletest_url=googletest_archive.as_uri(), progress=lines.append)
    assert entry == cache / BRANCH
    assert sources.cached_sources(BRANCH) == entry and sources.missing_repositories(BRANCH) == []
    for name, expected in sources.EXPECTED_FILES.items():
        assert (entry / name / expected).is_file()
        assert git("rev-parse", "HEAD", cwd=entry / name) == git("-C", str(mirror_of(name)), "rev-parse", BRANCH)
    assert (entry / "googletest" / "CMakeLists.txt").is_file()  # the archive's top folder is stripped
    assert any("cloning core" in line for line in lines)
    assert leftovers(cache) == []
    listed = {e.branch: e for e in sources.list_sources()}
    assert listed[BRANCH].complete
    assert listed[BRANCH].repositories["common"] == git("rev-parse", "HEAD", cwd=entry / "common")
    assert listed[BRANCH].repositories["googletest"] == "archive"


def test_googletest_url_is_the_commit_common_pins(cache, organization):
    entry = sources.fetch_sources(RELEASE, organization=organization.as_uri(), googletest=False)
    url = sources.googletest_archive_url(entry / "common")
    assert url is not None and "googletest" in url and url.endswith(".zip")
    assert not (entry / "googletest").exists()


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
    with pytest.raises(SourcesError, match="already cached") as caught:
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
    listed = tbgen("deps", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert BRANCH in listed.stdout and git("rev-parse", "HEAD", cwd=cache / BRANCH / "core") in listed.stdout
    again = tbgen("deps", "fetch", "--triton-version", "24.10", "--no-googletest", env=env)
    assert again.returncode == 1 and "--force" in again.stderr
    forced = tbgen("deps", "fetch", "--triton-version", "24.10", "--no-googletest", "--force", env=env)
    assert forced.returncode == 0, forced.stderr


def make_checkouts(root: Path, organization: Path) -> Path:
    """core as a git checkout; common and backend as plain trees (git archive), as users may have them."""
    root.mkdir()
    git("clone", "--quiet", "--branch", BRANCH, (organization / "core.git").as_uri(), str(root / "core"))
    for name in ("common", "backend"):
        (root / name).mkdir()
        archive = subprocess.run(["git", "--git-dir", str(organization / f"{name}.git"), "archive", BRANCH],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root / name)], input=archive, check=True)
    return root


def test_add_registers_sources_a_user_has(cache, organization, tmp_path):
    checkouts = make_checkouts(tmp_path / "mine", organization)
    entry = sources.add_sources(checkouts, RELEASE)
    assert sources.cached_sources(BRANCH) == entry
    (listed,) = sources.list_sources()
    assert listed.repositories["core"] == git("rev-parse", "HEAD", cwd=checkouts / "core")
    assert listed.repositories["common"] == listed.repositories["backend"] == "archive"
    assert listed.complete
    shutil.rmtree(checkouts)  # the cache holds its own copy
    assert sources.cached_sources(BRANCH) == entry
    with pytest.raises(SourcesError, match="already cached"):
        sources.add_sources(make_checkouts(tmp_path / "again", organization), RELEASE)


def test_add_via_cli(cache, organization, tmp_path):
    checkouts = make_checkouts(tmp_path / "mine", organization)
    result = tbgen("deps", "add", "--from", str(checkouts), "--triton-version", BRANCH,
                   env={"TBGEN_CACHE_DIR": str(cache.parent)})
    assert result.returncode == 0, result.stderr
    assert sources.cached_sources(BRANCH) == cache / BRANCH


def test_add_refuses_an_incomplete_directory(cache, organization, tmp_path):
    checkouts = make_checkouts(tmp_path / "mine", organization)
    shutil.rmtree(checkouts / "backend")
    with pytest.raises(SourcesError, match="backend_common.h"):
        sources.add_sources(checkouts, RELEASE)
    assert sources.list_sources() == [] and leftovers(cache) == []


def test_add_refuses_sources_of_another_release(cache, organization, tmp_path):
    checkouts = make_checkouts(tmp_path / "mine", organization)
    older = versions.resolve("24.01")  # backend API 1.17; r24.10's core declares 1.19
    assert sources.backend_api_version(checkouts / "core") == RELEASE.backend_api != older.backend_api
    with pytest.raises(SourcesError, match="backend API"):
        sources.add_sources(checkouts, older)
    assert sources.list_sources() == []


def test_list_of_an_empty_cache(cache):
    assert sources.list_sources() == []
