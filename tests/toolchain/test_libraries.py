"""Third-party libraries (`tbgen add library`): the decisions (pure), and each kind of generated
cmake/libraries/<name>.cmake configured, built and linked by real CMake in a tiny project that includes it the
way the generated CMakeLists.txt does (no Triton sources needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from triton_backend_gen.errors import UsageError
from triton_backend_gen.toolchain import libraries
from triton_backend_gen.toolchain.cmake import cmake_executable
from triton_backend_gen.toolchain.libraries import FIND_PACKAGE, PKG_CONFIG, library_cmake, library_spec


# --------------------------------------------------------------------------- decisions
@pytest.mark.parametrize("name", ["jsoncpp", "opencv_dnn", "opencv-dnn", "Torch", "c++fmt"])
def test_good_library_names(name):
    assert libraries.validate_library_name(name) == name


@pytest.mark.parametrize("name", ["", "9lives", "../x", "a/b", "x.cmake", "has space", "x" * 65])
def test_bad_library_names_exit_2_with_an_example(name):
    with pytest.raises(UsageError) as err:
        library_spec(name, pkg_config="fmt")
    assert err.value.exit_code == 2
    assert "tbgen add library" in err.value.hint


def test_one_source_exactly():
    with pytest.raises(UsageError, match="Say where fmt comes from"):
        library_spec("fmt")
    with pytest.raises(UsageError, match="--find-package and --pkg-config are two sources"):
        library_spec("fmt", find_package="fmt", pkg_config="fmt")
    with pytest.raises(UsageError, match="--components and --target go with --find-package"):
        library_spec("fmt", pkg_config="fmt", components=["core"])


def test_find_package_defaults_to_the_pkg_pkg_target_and_splits_components():
    spec = library_spec(
        "opencv", find_package="OpenCV", components=["core,dnn", "imgproc core"], target="opencv_dnn"
    )
    assert (spec.source, spec.package, spec.components, spec.target) == (
        FIND_PACKAGE,
        "OpenCV",
        ("core", "dnn", "imgproc"),
        "opencv_dnn",
    )
    assert library_spec("fmt", find_package="fmt").target == "fmt::fmt"
    with pytest.raises(UsageError, match="not a CMake target"):
        library_spec("fmt", find_package="fmt", target="fmt fmt")


def test_variables_are_upper_case_identifiers():
    assert library_spec("opencv-dnn", pkg_config="opencv4").variable == "OPENCV_DNN"


def test_a_prefix_library_is_the_name_or_the_only_library_there():
    assert (
        libraries.prefix_library("tiny", Path("/p"), ["libtiny.so", "libtiny.so.1", "libother.a"]) == "tiny"
    )
    assert libraries.prefix_library("libtiny", Path("/p"), ["libtiny.so.1.2"]) == "tiny"
    assert libraries.prefix_library("mylib", Path("/p"), ["libreal.so", "cmake"]) == "real"
    with pytest.raises(UsageError, match=r"no libx\.so or libx\.a \(it has: liba, libb\)"):
        libraries.prefix_library("x", Path("/p"), ["liba.so", "libb.a"])


def test_a_prefix_header_is_the_name_or_the_first_header():
    assert libraries.prefix_header("tiny", Path("/p"), ["other.h", "tiny.hpp"]) == "tiny.hpp"
    assert libraries.prefix_header("json", Path("/p"), ["json", "zz.h"]) == "json"  # a directory of headers
    assert libraries.prefix_header("mylib", Path("/p"), ["b.h", "a.h", "docs"]) == "a.h"
    with pytest.raises(UsageError, match="is empty"):
        libraries.prefix_header("x", Path("/p"), [])


def test_each_file_finds_the_library_and_links_it_to_the_backend_target():
    for spec, lines in [
        (
            library_spec("fmt", find_package="fmt", components=["core"]),
            [
                "find_package(fmt REQUIRED COMPONENTS core)",
                'set(FMT_TARGET "fmt::fmt")',
                "target_link_libraries(${BACKEND_TARGET} PRIVATE ${FMT_TARGET})",
            ],
        ),
        (
            library_spec("fmt", pkg_config="fmt"),
            [
                "pkg_check_modules(FMT REQUIRED IMPORTED_TARGET fmt)",
                "target_link_libraries(${BACKEND_TARGET} PRIVATE PkgConfig::FMT)",
            ],
        ),
        (
            library_spec(
                "tiny", path=Path("/opt/tiny"), include_listing=["tiny.h"], lib_listing=["libtiny.so"]
            ),
            [
                'set(TINY_ROOT "/opt/tiny" CACHE PATH',
                "find_path(TINY_INCLUDE_DIR NAMES tiny.h",
                "find_library(TINY_LIBRARY NAMES tiny",
                "target_include_directories(${BACKEND_TARGET} SYSTEM PRIVATE",
                "target_link_libraries(${BACKEND_TARGET} PRIVATE ${TINY_LIBRARY})",
            ],
        ),
    ]:
        text = library_cmake(spec)
        assert text.startswith(f"# {spec.name}: ") and "tbgen never rewrites it" in text
        for line in lines:
            assert line in text, (spec.source, line)


def test_library_files_are_sorted_and_only_cmake(tmp_path):
    directory = tmp_path / "cmake" / "libraries"
    directory.mkdir(parents=True)
    for name in ("zlib.cmake", "torch.cmake", "README.md"):
        (directory / name).write_text("")
    assert [p.name for p in libraries.library_files(tmp_path)] == ["torch.cmake", "zlib.cmake"]
    assert libraries.library_files(tmp_path / "none") == []


# --------------------------------------------------------------------------- real CMake
TINY_PROJECT = """cmake_minimum_required(VERSION 3.18)
project(consumer LANGUAGES CXX)
set(BACKEND_TARGET consumer)
add_library(${BACKEND_TARGET} SHARED consumer.cc)
target_compile_options(${BACKEND_TARGET} PRIVATE -Wall -Wextra -Werror)
# As the generated CMakeLists.txt does:
file(GLOB BACKEND_LIBRARY_FILES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cmake/libraries/*.cmake)
list(SORT BACKEND_LIBRARY_FILES)
foreach(library_file IN LISTS BACKEND_LIBRARY_FILES)
  include(${library_file})
endforeach()
"""


def build_consumer(root: Path, spec, source: str) -> subprocess.CompletedProcess:
    (root / "cmake" / "libraries").mkdir(parents=True)
    (root / "cmake" / "libraries" / f"{spec.name}.cmake").write_text(library_cmake(spec))
    (root / "CMakeLists.txt").write_text(TINY_PROJECT)
    (root / "consumer.cc").write_text(source)
    cmake = cmake_executable()
    configured = subprocess.run(
        [cmake, "-S", str(root), "-B", str(root / "build")], capture_output=True, text=True
    )
    if configured.returncode != 0:
        return configured
    return subprocess.run([cmake, "--build", str(root / "build")], capture_output=True, text=True)


def needed(library: Path) -> str:
    return subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout


FMT_USE = (
    '#include <fmt/format.h>\nint consumer_answer() { return static_cast<int>(fmt::format("{}", '
    "42).size()); }\n"
)


@pytest.fixture
def system_fmt():
    if shutil.which(cmake_executable()) is None or shutil.which("c++") is None:
        pytest.skip("cmake and a C++ compiler are needed")
    if not Path("/usr/include/fmt/format.h").is_file():
        pytest.skip(
            "Debian's libfmt-dev is not installed (apt-get install libspdlog-dev brings it; "
            "scripts/setup does)"
        )


@pytest.mark.parametrize("source", [FIND_PACKAGE, PKG_CONFIG])
def test_find_package_and_pkg_config_files_link_a_real_library(tmp_path, system_fmt, source):
    if source == PKG_CONFIG and shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is not installed")
    spec = library_spec("fmt", **{("find_package" if source == FIND_PACKAGE else "pkg_config"): "fmt"})
    built = build_consumer(tmp_path, spec, FMT_USE)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "libfmt.so" in needed(tmp_path / "build" / "libconsumer.so")


def test_a_wrong_target_name_says_which_variable_to_set(tmp_path, system_fmt):
    spec = library_spec("fmt", find_package="fmt", target="fmt::nope")
    built = build_consumer(tmp_path, spec, FMT_USE)
    assert built.returncode != 0
    assert "defines no target fmt::nope; set FMT_TARGET in" in built.stderr.replace("\n", " ")


def test_a_path_file_links_a_library_from_a_prefix_with_system_headers(tmp_path):
    if shutil.which(cmake_executable()) is None or shutil.which("c++") is None:
        pytest.skip("cmake and a C++ compiler are needed")
    prefix = tmp_path / "prefix"
    (prefix / "include").mkdir(parents=True)
    (prefix / "lib").mkdir()
    # A header that -Wextra -Werror would reject in the backend's own code: it must come in as a SYSTEM
    # header.
    (prefix / "include" / "tiny.h").write_text(
        "inline int tiny_unused(int unused) { return 7; }\nint tiny();\n"
    )
    (tmp_path / "tiny.cc").write_text("int tiny() { return 7; }\n")
    subprocess.run(
        ["c++", "-shared", "-fPIC", "-o", str(prefix / "lib" / "libtiny.so"), str(tmp_path / "tiny.cc")],
        check=True,
    )
    spec = library_spec("tiny", path=prefix, include_listing=["tiny.h"], lib_listing=["libtiny.so"])
    built = build_consumer(
        tmp_path / "consumer", spec, "#include <tiny.h>\nint consumer_answer() { return tiny(); }\n"
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "libtiny.so" in needed(tmp_path / "consumer" / "build" / "libconsumer.so")
