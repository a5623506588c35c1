"""The CMake tbgen runs ($CMAKE chooses one), and generated projects under the CMake Triton pins and under
CMake 4.

Triton's core, common and backend ask cmake_minimum_required 3.17/3.18 up to r25.07 and 3.31.8 from r25.08;
Triton's build images run CMake 4 with CMAKE_POLICY_VERSION_MINIMUM=3.5 from r25.08. The pinned CMake 3.31
(scripts/setup installs it into tbgen's cache) configures the default cpp-backend, unit tests included, at
every cached release; the venv's CMake 4 builds it at r26.02 (the suite builds the other releases already)
with a googletest that asks cmake_minimum_required(VERSION 2.8.12), as googletest 1.11 (Ubuntu 22.04's
/usr/src/googletest) does: CMake 4 refuses that unless the project sets the policy minimum for it."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import REQUIRE_SOURCES, source_cache_dir, triton_sources_or_skip

from triton_backend_gen import versions
from triton_backend_gen.commands import doctor
from triton_backend_gen.errors import BuildError
from triton_backend_gen.scaffold import render_new_project
from triton_backend_gen.toolchain import cmake

# The releases whose sources the cache holds in CI (tests/conftest.py, .ci/run).
RELEASES = ("24.10", "25.10", "26.02", "26.06")
BUILT_WITH_CMAKE_4 = "26.02"
# The highest minimum of the matrix (3.31.8): the pinned CMake is of that series, in tbgen's cache at
# cmake-<major.minor>/ (scripts/setup: `pip install --target`, whose binary lies in cmake/data/bin/).
HIGHEST_MINIMUM = max((release.min_cmake for release in versions.RELEASES), key=versions.version_tuple)
PINNED_SERIES = ".".join(HIGHEST_MINIMUM.split(".")[:2])
# What googletest 1.11 asks (release-1.11.0's CMakeLists.txt and googletest/CMakeLists.txt).
OLD_GOOGLETEST_MINIMUM = "2.8.12"
_MINIMUM_CALL = re.compile(r"cmake_minimum_required\s*\(\s*VERSION\s+[0-9.]+\s*\)")
# A CMake warning or error about a file of the project (CMake names those relative to the source directory).
_OWN_WARNING = re.compile(r"^CMake (?:Deprecation )?(?:Warning|Error)(?: \(\w+\))? at (?!/)", re.M)


def fake_cmake(directory: Path, version: str) -> Path:
    tool = directory / "cmake"
    tool.write_text(f"#!/bin/sh\necho 'cmake version {version}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def cmake_version(executable: str) -> tuple[int, ...]:
    output = subprocess.run([executable, "--version"], capture_output=True, text=True, check=True).stdout
    return versions.version_tuple(output.split()[2])


def targets(build_dir: Path) -> str:
    """The target directories CMake generated in ``build_dir`` (one line each, with Ninja or Makefiles)."""
    return (build_dir / "CMakeFiles" / "TargetDirectories.txt").read_text()


def pinned_cmake_or_skip() -> str:
    """The pinned CMake 3.31 in tbgen's cache, or skip saying how to install it (fail in CI)."""
    executable = source_cache_dir().parent / f"cmake-{PINNED_SERIES}" / "cmake" / "data" / "bin" / "cmake"
    if not os.access(executable, os.X_OK):
        reason = f"no pinned CMake {PINNED_SERIES} at {executable}; scripts/setup installs it"
        if os.environ.get(REQUIRE_SOURCES):
            pytest.fail(f"{reason} (${REQUIRE_SOURCES} is set)")
        pytest.skip(reason)
    found = cmake_version(str(executable))
    assert found[:2] == versions.version_tuple(PINNED_SERIES) and found >= versions.version_tuple(
        HIGHEST_MINIMUM
    ), f"{executable} is {found}, not a {PINNED_SERIES} at or above {HIGHEST_MINIMUM}"
    return str(executable)


# --- choosing the cmake -------------------------------------------------------------------------------------
def test_cmake_names_the_cmake_tbgen_runs_before_the_venvs_and_paths(tmp_path, monkeypatch):
    chosen = fake_cmake(tmp_path, "3.31.10")
    monkeypatch.setenv("CMAKE", str(chosen))
    assert cmake.cmake_executable() == str(chosen)
    assert cmake.configure_command(tmp_path, tmp_path / "b", triton_sources=None, gpu=False)[0] == str(chosen)
    assert cmake.build_command(tmp_path / "b")[0] == str(chosen)
    # A name is looked up on PATH.
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CMAKE", "cmake")
    assert cmake.cmake_executable() == str(chosen)
    monkeypatch.setenv("CMAKE", "")
    assert cmake.cmake_executable() == cmake.tool_on_path("cmake")


def test_a_cmake_that_cannot_run_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("CMAKE", str(tmp_path / "no-such-cmake"))
    with pytest.raises(BuildError) as raised:
        cmake.cmake_build(tmp_path, tmp_path / "build", triton_sources=None, gpu=False)
    assert "no-such-cmake" in raised.value.message and "$CMAKE" in raised.value.hint


def test_doctor_shows_the_chosen_cmake_against_the_release_minimum(tmp_path, monkeypatch):
    monkeypatch.setenv("CMAKE", str(fake_cmake(tmp_path, "3.30.5")))
    old, new = versions.resolve("24.10"), versions.resolve("26.06")
    fits = doctor.check_cmake(old)
    assert fits.status == doctor.OK and f"3.30.5 at {tmp_path / 'cmake'} (from $CMAKE)" in fits.found
    too_old = doctor.check_cmake(new)
    assert too_old.status == doctor.FAIL and f">= {new.min_cmake}" in too_old.found
    assert "$CMAKE" in too_old.fix and new.min_cmake in too_old.fix
    monkeypatch.setenv("CMAKE", str(tmp_path / "missing"))
    missing = doctor.check_cmake(old)
    assert missing.status == doctor.FAIL and "missing (from $CMAKE): not found" in missing.found


# --- generated projects under CMake 3.31 and CMake 4 --------------------------------------------------------
@pytest.fixture(scope="module")
def default_projects(tmp_path_factory):
    """One default cpp-backend project per release, rendered once for every test of this module."""
    root = tmp_path_factory.mktemp("cmake-versions")
    rendered: dict[str, Path] = {}

    def project(release: str) -> Path:
        if release not in rendered:
            name = f"cmake-{release.replace('.', '-')}"
            rendered[release] = render_new_project("cpp-backend", root / name, {"triton_version": release})
        return rendered[release]

    return project


def configure_log(project: Path, build_dir: Path, sources: Path, branch: str) -> str:
    """Configure ``project`` as `tbgen build` does (tbgen's configure command line, $CMAKE's cmake)."""
    command = cmake.configure_command(
        project, build_dir, triton_sources=sources, gpu=False, extra_defines=cmake.repo_tag_defines(branch)
    )
    result = subprocess.run(command, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    return log


@pytest.mark.slow
@pytest.mark.cpp
@pytest.mark.parametrize("container", RELEASES)
def test_the_pinned_cmake_configures_the_default_project_with_its_unit_tests(
    container, default_projects, monkeypatch
):
    release = versions.resolve(container)
    sources = triton_sources_or_skip(release.branch)
    monkeypatch.setenv("CMAKE", pinned_cmake_or_skip())
    project = default_projects(container)
    build_dir = project / "build-pinned-cmake"
    log = configure_log(project, build_dir, sources, release.branch)
    # The unit tests of src/compute.cc are in (so googletest configured) ...
    assert f"/{project.name.replace('-', '_')}_unit_tests.dir" in targets(build_dir)
    # ... and the project's own CMake is clean under this CMake: CMake names a file of the project relatively
    # (Triton's repositories and googletest, outside it, may warn: they are not the user's).
    assert not _OWN_WARNING.search(log), log


def old_googletest(destination: Path, sources: Path) -> Path:
    """The googletest tbgen would use, copied to ``destination`` with the cmake_minimum_required of
    googletest 1.11 (2.8.12); skip when there is none."""
    found = cmake.googletest_sources(sources)
    if found is None:
        pytest.skip("no googletest sources (sudo apt-get install googletest, or `tbgen deps fetch`)")
    shutil.copytree(found, destination, dirs_exist_ok=True)
    for listfile in (destination / "CMakeLists.txt", destination / "googletest" / "CMakeLists.txt"):
        text = listfile.read_text()
        listfile.write_text(
            _MINIMUM_CALL.sub(f"cmake_minimum_required(VERSION {OLD_GOOGLETEST_MINIMUM})", text)
        )
    return destination


@pytest.mark.slow
@pytest.mark.cpp
def test_cmake_4_builds_the_default_project_with_a_googletest_asking_for_cmake_2(
    default_projects, monkeypatch, compiler_cache
):
    monkeypatch.delenv("CMAKE", raising=False)
    if cmake_version(cmake.cmake_executable())[0] < 4:
        pytest.skip(f"{cmake.cmake_executable()} is not a CMake 4 (pip install 'cmake>=4')")
    release = versions.resolve(BUILT_WITH_CMAKE_4)
    sources = triton_sources_or_skip(release.branch)
    project = default_projects(BUILT_WITH_CMAKE_4)
    # Inside the project, so that ccache (CCACHE_BASEDIR is the project) reuses googletest's objects.
    googletest = old_googletest(project / "old-googletest", sources)
    # The user's CMake, included after Triton's repositories: the policy minimum is no longer set there.
    probe = project / "cmake" / "libraries" / "policy_probe.cmake"
    probe.parent.mkdir(exist_ok=True)
    probe.write_text('message(STATUS "policy minimum for the user: [${CMAKE_POLICY_VERSION_MINIMUM}]")\n')
    run = cmake.cmake_build(
        project,
        project / "build",
        triton_sources=sources,
        gpu=False,
        extra_defines={
            **cmake.repo_tag_defines(release.branch),
            "FETCHCONTENT_SOURCE_DIR_GOOGLETEST": str(googletest),
        },
    )
    name = project.name.replace("-", "_")
    assert (run.install_dir / "backends" / name / f"libtriton_{name}.so").is_file()
    assert (project / "build" / f"{name}_unit_tests").is_file()
    log = run.log_file.read_text()
    # The policy minimum reached googletest (no deprecation warning) and CMP0077 NEW its options (no gmock,
    # googletest not installed beside the backend); the user's CMake sees neither the minimum nor a warning.
    assert "policy minimum for the user: []" in log and not _OWN_WARNING.search(log), log
    assert "Compatibility with CMake" not in log and "CMP0077" not in log, log
    assert "/gmock.dir" not in targets(project / "build")
    assert not list(run.install_dir.rglob("*gtest*"))
