"""The CMake driver's decisions: configure/build/install command lines and error extraction."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from triton_backend_gen.errors import BuildError
from triton_backend_gen.toolchain import cmake


def defines(command: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in command if arg.startswith("-D"))


def fake_tool(directory: Path, name: str) -> Path:
    tool = directory / name
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """PATH holding only a fake cmake (and whatever a test adds); nothing beside the interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(bin_dir, "cmake")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-venv" / "python"))
    return bin_dir


def test_configure_offline_uses_the_cached_sources(tmp_path, bare_path):
    sources = tmp_path / "triton-src" / "r24.10"
    command = cmake.configure_command(
        tmp_path / "proj", tmp_path / "proj" / "build", triton_sources=sources, gpu=False
    )
    assert command[:5] == [
        str(bare_path / "cmake"),
        "-S",
        str(tmp_path / "proj"),
        "-B",
        str(tmp_path / "proj" / "build"),
    ]
    found = defines(command)
    for repo in ("common", "core", "backend"):
        assert found[f"FETCHCONTENT_SOURCE_DIR_REPO-{repo.upper()}"] == str(sources / repo)
    assert found["FETCHCONTENT_FULLY_DISCONNECTED"] == "ON"
    assert found["TRITON_ENABLE_GPU"] == "OFF"
    assert found["CMAKE_BUILD_TYPE"] == "Release"


def test_configure_online_leaves_fetchcontent_alone(tmp_path, bare_path):
    found = defines(
        cmake.configure_command(
            tmp_path,
            tmp_path / "b",
            triton_sources=None,
            gpu=True,
            build_type="Debug",
            install_prefix=tmp_path / "inst",
        )
    )
    assert not any(key.startswith("FETCHCONTENT_SOURCE_DIR_REPO") for key in found)
    assert "FETCHCONTENT_FULLY_DISCONNECTED" not in found
    assert found["TRITON_ENABLE_GPU"] == "ON"
    assert found["CMAKE_BUILD_TYPE"] == "Debug"
    assert found["CMAKE_INSTALL_PREFIX"] == str(tmp_path / "inst")


def test_configure_without_ninja_or_ccache_uses_cmake_defaults(tmp_path, bare_path):
    command = cmake.configure_command(tmp_path, tmp_path / "b", triton_sources=None, gpu=True)
    assert "-G" not in command
    assert not any("COMPILER_LAUNCHER" in key for key in defines(command))


def test_configure_picks_ninja_and_ccache_from_path(tmp_path, bare_path):
    ninja = fake_tool(bare_path, "ninja")
    ccache = fake_tool(bare_path, "ccache")
    command = cmake.configure_command(tmp_path, tmp_path / "b", triton_sources=None, gpu=True)
    assert command[command.index("-G") + 1] == "Ninja"
    found = defines(command)
    assert found["CMAKE_MAKE_PROGRAM"] == str(ninja)
    for language in ("C", "CXX", "CUDA"):
        assert found[f"CMAKE_{language}_COMPILER_LAUNCHER"] == str(ccache)
    cpu_only = defines(cmake.configure_command(tmp_path, tmp_path / "b", triton_sources=None, gpu=False))
    assert "CMAKE_CUDA_COMPILER_LAUNCHER" not in cpu_only


def test_configure_prefers_the_cmake_beside_python(tmp_path, bare_path, monkeypatch):
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    venv_cmake = fake_tool(venv_bin, "cmake")
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    assert cmake.configure_command(tmp_path, tmp_path / "b", triton_sources=None, gpu=False)[0] == str(
        venv_cmake
    )


def test_googletest_comes_from_the_system_sources_when_present(tmp_path, bare_path, monkeypatch):
    googletest = tmp_path / "googletest"
    monkeypatch.setattr(cmake, "SYSTEM_GOOGLETEST", googletest)
    assert "FETCHCONTENT_SOURCE_DIR_GOOGLETEST" not in defines(
        cmake.configure_command(tmp_path, tmp_path / "b", triton_sources=None, gpu=False)
    )
    googletest.mkdir()
    (googletest / "CMakeLists.txt").write_text("")
    found = defines(cmake.configure_command(tmp_path, tmp_path / "b", triton_sources=None, gpu=False))
    assert found["FETCHCONTENT_SOURCE_DIR_GOOGLETEST"] == str(googletest)


def test_extra_defines_come_last_and_win(tmp_path, bare_path):
    command = cmake.configure_command(
        tmp_path,
        tmp_path / "b",
        triton_sources=None,
        gpu=False,
        extra_defines={"TRITON_ENABLE_STATS": "OFF", "CMAKE_BUILD_TYPE": "Debug"},
    )
    assert command[-1] == "-DCMAKE_BUILD_TYPE=Debug"
    assert defines(command)["TRITON_ENABLE_STATS"] == "OFF"


def test_build_and_install_commands(tmp_path, bare_path):
    build = tmp_path / "build"
    assert cmake.build_command(build, jobs=3) == [
        str(bare_path / "cmake"),
        "--build",
        str(build),
        "--parallel",
        "3",
    ]
    assert cmake.build_command(build, target="install")[-2:] == ["--target", "install"]
    assert cmake.build_command(build)[4] == str(os.cpu_count() or 1)
    assert cmake.install_command(build, tmp_path / "inst") == [
        str(bare_path / "cmake"),
        "--install",
        str(build),
        "--prefix",
        str(tmp_path / "inst"),
    ]


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (
            "[1/3] Building CXX object a.o\n/p/src/x.cc:12:5: error: 'foo' was not declared\nmore\n",
            "/p/src/x.cc:12:5: error: 'foo' was not declared",
        ),
        (
            "-- Configuring\nCMake Error at CMakeLists.txt:40 (find_package):\n\n"
            "  Could not find RapidJSON\n",
            "CMake Error at CMakeLists.txt:40 (find_package): Could not find RapidJSON",
        ),
        (
            "x.cc:1:10: fatal error: triton/core/tritonbackend.h: No such file or directory\n",
            "x.cc:1:10: fatal error: triton/core/tritonbackend.h: No such file or directory",
        ),
        (
            "/usr/bin/ld: a.o: in function `f':\na.cc:(.text+0x5): undefined reference to `g'\n",
            "a.cc:(.text+0x5): undefined reference to `g'",
        ),
        (
            "nvcc fatal   : Unsupported gpu architecture 'compute_53'\n",
            "nvcc fatal   : Unsupported gpu architecture 'compute_53'",
        ),
        (
            "FAILED: CMakeFiles/x.dir/x.cc.o\nninja: build stopped: subcommand failed.\n",
            "FAILED: CMakeFiles/x.dir/x.cc.o",
        ),
        ("-- Configuring done\n-- Generating done\n", None),
        ("warning: unused variable 'errors_seen' [-Wunused-variable]\n", None),
    ],
)
def test_first_error_line(log, expected):
    assert cmake.first_error_line(log) == expected


def test_run_cmake_build_reports_the_first_error_and_the_log(tmp_path):
    """A real CMake run over a project with a compile error (uses this machine's cmake and compiler)."""
    if cmake.shutil.which("c++") is None:
        pytest.skip("no C++ compiler on PATH")
    source = tmp_path / "broken"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(broken CXX)\nadd_library(broken SHARED broken.cc)\n"
    )
    (source / "broken.cc").write_text("int f() { return undeclared_name; }\n")
    with pytest.raises(BuildError) as caught:
        cmake.run_cmake_build(source, tmp_path / "build", triton_sources=None, gpu=False)
    message = caught.value.message
    assert "broken.cc:1" in message and "undeclared_name" in message
    assert str(tmp_path / "build" / cmake.LOG_NAME) in message
    assert (tmp_path / "build" / cmake.LOG_NAME).is_file()


def test_error_places_open_from_where_tbgen_runs(tmp_path, monkeypatch):
    """The compiler runs in the build tree, so its places are relative to it; CMake's are relative to the
    sources. Both are printed relative to the project's root when tbgen runs there, else absolute."""
    project = tmp_path / "proj"
    build = project / "build"
    (project / "tbgen.toml").parent.mkdir()
    (project / "tbgen.toml").write_text("")
    compiler = "../src/cppf.cc:287:25: error: 'x' was not declared in this scope"
    cmake_error = "CMake Error at CMakeLists.txt:40 (find_package): Could not find RapidJSON"
    monkeypatch.chdir(project)
    assert (
        cmake.openable(compiler, build, project)
        == "src/cppf.cc:287:25: error: 'x' was not declared in this scope"
    )
    assert cmake.openable(cmake_error, build, project).startswith("CMake Error at CMakeLists.txt:40 (")
    native = (
        "../../native/src/ext.cc:3:1: error: e"  # a python project's extension: its sources are in native/
    )
    assert cmake.openable(native, build / "native", project / "native") == "native/src/ext.cc:3:1: error: e"
    monkeypatch.chdir(tmp_path)
    assert cmake.openable(compiler, build, project).startswith(f"{project}/src/cppf.cc:287:25: error:")
    assert cmake.openable(cmake_error, build, project).startswith(
        f"CMake Error at {project}/CMakeLists.txt:40 ("
    )
    assert (
        cmake.openable("/usr/include/x.h:3:1: error: y", build, project) == "/usr/include/x.h:3:1: error: y"
    )
    for untouched in (
        "nvcc fatal   : Unsupported gpu architecture 'compute_53'",
        "FAILED: CMakeFiles/x.dir/x.cc.o",
        "a.cc:(.text+0x5): undefined reference to `g'",
    ):
        assert cmake.openable(untouched, build, project) == untouched
