"""`tbgen build` and `tbgen check`: the decisions (pure), the CMake driver on tiny real projects, and real
builds of rendered templates against Triton's cached sources."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import new_project, triton_sources_or_skip
from conftest import run_tbgen as tbgen

from triton_backend_gen import versions
from triton_backend_gen.discovery import gpus_visible
from triton_backend_gen.errors import BuildError, UsageError
from triton_backend_gen.project import load_project
from triton_backend_gen.toolchain import build, cmake, symbols

needs_compiler = pytest.mark.skipif(
    shutil.which("c++") is None or shutil.which("gcc") is None, reason="no C/C++ compiler on PATH"
)


# --------------------------------------------------------------------------- decisions
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[3/10] Building CXX object CMakeFiles/x.dir/x.cc.o", (3, 10)),
        ("[10/10] Linking CXX shared library libx.so", (10, 10)),
        ("[ 42%] Building CXX object x.o", (42, 100)),
        ("[100%] Built target x", (100, 100)),
        ("ninja: no work to do.", None),
        ("[0/2] Re-checking globbed directories...", None),  # cmake/libraries/*.cmake, checked by every build
        ("-- Up-to-date: /x/libx.so", None),
        ("x.cc:3:1: error: [1/2] is not progress here", None),
    ],
)
def test_progress_lines(line, expected):
    assert cmake.progress_of(line) == expected


def test_configure_is_skipped_only_for_a_valid_cache_with_the_same_settings(tmp_path):
    command = ["cmake", "-S", "src", "-B", str(tmp_path), "-DCMAKE_BUILD_TYPE=Release"]
    assert cmake.needs_configure(tmp_path, command)  # nothing there yet
    (tmp_path / "CMakeCache.txt").write_text("")
    (tmp_path / "build.ninja").write_text("")
    assert cmake.needs_configure(tmp_path, command)  # no record of tbgen's last configure
    (tmp_path / cmake.CONFIGURE_STAMP).write_text("\n".join(command) + "\n")
    assert not cmake.needs_configure(tmp_path, command)
    assert cmake.needs_configure(tmp_path, [*command[:-1], "-DCMAKE_BUILD_TYPE=Debug"])
    (tmp_path / "build.ninja").unlink()
    assert cmake.needs_configure(tmp_path, command)


def test_nvcc_version_and_the_architectures_it_gets():
    text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
    assert build.parse_nvcc_version(text) == "13.0"
    defines = build.cuda_defines(Path("/opt/cuda/bin/nvcc"), "13.0")
    assert defines["CMAKE_CUDA_COMPILER"] == "/opt/cuda/bin/nvcc"
    assert defines["CMAKE_CUDA_ARCHITECTURES"].split(";") == list(versions.cuda_architectures_for("13.0"))
    with pytest.raises(BuildError):
        build.parse_nvcc_version("command not found")
    with pytest.raises(UsageError):  # a CUDA the matrix does not cover
        build.cuda_defines(Path("nvcc"), "11.8")


def test_build_types_are_validated():
    for good in build.BUILD_TYPES:
        assert build.validate_build_type(good) == good
    with pytest.raises(UsageError) as caught:
        build.validate_build_type("Fast")
    assert caught.value.exit_code == 2


def test_what_each_project_builds(render_template):
    cpp = load_project(render_template("cpp-backend", project_name="cpp", triton_version="24.10"))
    gpu = load_project(render_template("cpp-backend", project_name="gpu", gpu=True))
    plain = load_project(render_template("python-backend", project_name="plain"))
    native = load_project(render_template("python-backend", project_name="nat", native=True))
    decoupled_py = load_project(render_template("decoupled-backend", project_name="dpy", language="python"))
    assert [build.build_kind(p) for p in (cpp, gpu, plain, native, decoupled_py)] == [
        "cpp",
        "cpp",
        None,
        "native",
        None,
    ]
    spec = native.native
    assert spec.source_dir == native.root / "native" and spec.module == "nat_native"
    assert spec.install_dir == native.models[0].directory / "1"
    assert cpp.library == cpp.root / "build/install/backends/cpp/libtriton_cpp.so"
    # gpu: the project's answer unless given; --no-gpu always allowed; --gpu only where the kernels exist
    assert build.resolve_gpu(gpu, None) is True and build.resolve_gpu(gpu, False) is False
    assert build.resolve_gpu(cpp, None) is False
    with pytest.raises(UsageError, match="without gpu"):
        build.resolve_gpu(cpp, True)


def test_a_python_project_without_native_has_nothing_to_build(render_template):
    project = render_template("python-backend", project_name="plain")
    result = build.build_project(load_project(project))
    assert result.artifact is None and not result.work_done
    assert "nothing to build" in result.notes[0]
    cli = tbgen("build", str(project))
    assert cli.returncode == 0 and "nothing to build" in cli.stdout
    assert not (project / "build").exists()


# --------------------------------------------------------------------------- symbol checks
NM_DEFINED = """\
0000000000000000 A VERS_1.0
000000000000d2a0 T TRITONBACKEND_Initialize
000000000000f420 T TRITONBACKEND_ModelInstanceExecute@@VERS_1.0
0000000000012310 T _ZN6triton7backend9helper_fnEv
0000000000013000 B leaked_global
"""
NM_UNDEFINED = """\
                 U TRITONBACKEND_ApiVersion
                 U TRITONSERVER_ErrorNew
                 U TRITONBACKEND_ModelInstanceReady
                 U memcpy@GLIBC_2.14
                 w __gmon_start__
"""


def test_nm_parsing_and_the_export_rule():
    defined = symbols.parse_nm(NM_DEFINED)
    assert ("T", "TRITONBACKEND_ModelInstanceExecute") in defined  # version suffix dropped
    assert symbols.unexpected_exports(defined) == ["_ZN6triton7backend9helper_fnEv", "leaked_global"]


def test_imports_missing_from_the_server_are_named():
    imported = symbols.parse_nm(NM_UNDEFINED)
    server = {"TRITONBACKEND_ApiVersion", "TRITONSERVER_ErrorNew", "memcpy"}
    assert symbols.missing_api_symbols(imported, server) == ["TRITONBACKEND_ModelInstanceReady"]
    assert symbols.missing_api_symbols(imported, server | {"TRITONBACKEND_ModelInstanceReady"}) == []


@pytest.mark.parametrize("release", ["24.10", "25.11", "25.12", "26.03", "26.04", "26.06", None])
@pytest.mark.parametrize("exported", [True, False])
def test_the_readiness_entry_point_is_said_with_what_it_means_for_the_release(release, exported):
    """One note: whether the library exports TRITONBACKEND_ModelInstanceReady, and whether the release's core
    asks it (from 25.12; the server's own readiness follows from 26.04)."""
    target = versions.resolve(release) if release else None
    names = ["TRITONBACKEND_Initialize", *(["TRITONBACKEND_ModelInstanceReady"] if exported else [])]
    [finding] = symbols.readiness_findings("libtriton_x.so", names, target)
    assert finding.severity == "note"
    verb = "exports" if exported else "does not export"
    assert finding.message.startswith(f"libtriton_x.so {verb} TRITONBACKEND_ModelInstanceReady")
    if target is None:
        return
    assert f"Triton {target.container}" in finding.message
    asks = target.has("instance_ready")
    fits = {(True, True): "asks it on every readiness probe", (True, False): "readiness probes cannot see",
            (False, True): "never calls", (False, False): "as fits"}[(asks, exported)]  # fmt: skip
    assert fits in finding.message, finding.message
    if asks and exported:
        server = "and the server's" if target.has("server_ready_checks_instances") else "the server's from"
        assert server in finding.message


def test_ldd_not_found_lines():
    output = (
        "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibtritonserver.so => not found\n"
        "\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f)\n"
        "\tlibcudart.so.13 => not found\n"
    )
    assert symbols.parse_ldd_missing(output) == ["libtritonserver.so", "libcudart.so.13"]


@pytest.fixture
def crafted_library(tmp_path):
    """A real shared library with one good entry point and one stray export, made with gcc."""
    source = tmp_path / "crafted.c"
    source.write_text(
        "int TRITONBACKEND_Initialize(void *b) { (void)b; return 0; }\n"
        "int helper_that_leaks(void) { return 1; }\n"
    )
    library = tmp_path / "libtriton_crafted.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


@needs_compiler
def test_check_catches_a_stray_export(crafted_library):
    findings = symbols.check_library(crafted_library, None)
    errors = [f.message for f in findings if f.severity == "error"]
    assert len(errors) == 1 and "helper_that_leaks" in errors[0]
    result = tbgen("check", str(crafted_library))
    assert result.returncode == 1
    assert "helper_that_leaks" in result.stdout and "1 error(s)" in result.stdout


# --------------------------------------------------------------------------- the CMake driver, for real
@pytest.fixture
def two_file_project(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(two CXX)\n"
        "add_library(two SHARED a.cc b.cc)\ninstall(TARGETS two LIBRARY DESTINATION lib)\n"
    )
    (source / "a.cc").write_text("int a() { return 1; }\n")
    (source / "b.cc").write_text("int b() { return 2; }\n")
    return source


@needs_compiler
def test_second_build_does_no_work_and_one_touched_file_rebuilds_alone(
    two_file_project, tmp_path, monkeypatch
):
    monkeypatch.setenv("CCACHE_DISABLE", "1")
    build_dir = tmp_path / "build"
    seen = []
    first = cmake.cmake_build(
        two_file_project,
        build_dir,
        triton_sources=None,
        gpu=False,
        progress=lambda done, total, line: seen.append((done, total, line)),
    )
    assert first.configured and first.work_done
    assert (first.install_dir / "lib" / "libtwo.so").is_file()
    assert seen and seen[-1][0] == seen[-1][1]  # the progress reached its total

    second = cmake.cmake_build(two_file_project, build_dir, triton_sources=None, gpu=False)
    assert not second.configured and not second.work_done
    log = second.log_file.read_text()
    assert "--build" in log and " -S " not in log  # no configure step

    os.utime(two_file_project / "b.cc")
    compiled = []
    third = cmake.cmake_build(
        two_file_project,
        build_dir,
        triton_sources=None,
        gpu=False,
        progress=lambda done, total, line: compiled.append(line),
    )
    assert third.work_done and not third.configured
    objects = [line for line in compiled if "Building" in line]
    assert len(objects) == 1 and "b.cc" in objects[0]

    debug = cmake.cmake_build(two_file_project, build_dir, triton_sources=None, gpu=False, build_type="Debug")
    assert debug.configured  # other settings: configured again


# --------------------------------------------------------------------------- real Triton builds


def compiled_sources(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "Building" in line and line.startswith("[")]


@pytest.mark.cpp
@pytest.mark.slow
def test_tbgen_build_cpp_backend(tmp_path, compiler_cache, server_or_skip):
    triton_sources_or_skip("r24.10")
    project = new_project(tmp_path, "cpp-backend")
    library = project / "build/install/backends/proj/libtriton_proj.so"

    first = tbgen("build", str(project))
    assert first.returncode == 0, first.stdout + first.stderr
    assert library.is_file() and "Built" in first.stdout

    second = tbgen("build", str(project))
    assert second.returncode == 0 and "Up to date" in second.stdout
    log = project / "build" / cmake.LOG_NAME
    assert "ninja: no work to do" in log.read_text() and compiled_sources(log) == []

    os.utime(project / "src" / "proj.cc")
    third = tbgen("build", str(project))
    assert third.returncode == 0 and "Built" in third.stdout
    rebuilt = compiled_sources(log)
    assert len(rebuilt) == 1 and "src/proj.cc" in rebuilt[0]

    check = tbgen("check", str(project))
    assert check.returncode == 0 and "OK" in check.stdout, check.stdout
    # 24.10's core asks no backend whether an instance is ready: nothing exported, and the check says so.
    assert "does not export TRITONBACKEND_ModelInstanceReady, as fits Triton 24.10" in check.stdout
    assert not [f for f in symbols.check_library(library, server_or_skip) if f.failed]

    # A Triton tag edited by hand in CMakeLists.txt: tbgen says so, and tbgen.toml's release is what is built.
    cmakelists = project / "CMakeLists.txt"
    cmakelists.write_text(cmakelists.read_text().replace('"r24.10"', '"r25.10"'))
    edited = tbgen("build", str(project))
    assert edited.returncode == 0, edited.stdout + edited.stderr
    assert "TRITON_CORE_REPO_TAG to r25.10" in edited.stdout and "tbgen.toml wins" in edited.stdout
    assert "TRITON_CORE_REPO_TAG:STRING=r24.10" in (project / "build" / "CMakeCache.txt").read_text()


@pytest.mark.cpp
@pytest.mark.slow
def test_a_compile_error_names_file_and_line(tmp_path, compiler_cache):
    triton_sources_or_skip("r24.10")
    project = new_project(tmp_path, "cpp-backend")
    source = project / "src" / "compute.cc"  # the user's file
    lines = source.read_text().splitlines()
    lines.append("this is not C++;")
    source.write_text("\n".join(lines) + "\n")
    result = tbgen("build", str(project))
    assert result.returncode == 1
    message = " ".join(result.stderr.split())
    assert f"compute.cc:{len(lines)}:" in message and "error" in message
    assert str(project / "build" / cmake.LOG_NAME) in message


@pytest.mark.cpp
@pytest.mark.slow
def test_tbgen_test_builds_an_unbuilt_cpp_project_first(tmp_path, compiler_cache, server_or_skip):
    triton_sources_or_skip("r24.10")
    project = new_project(tmp_path, "cpp-backend", "dtype=INT32")
    result = tbgen("test", str(project))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " 0 failed" in result.stdout
    assert (project / "build/install/backends/proj/libtriton_proj.so").is_file()


@pytest.mark.cpp
@pytest.mark.slow
def test_gpu_project_builds_and_passes_on_a_machine_without_a_gpu(tmp_path, compiler_cache, server_or_skip):
    """tbgen new --gpu -> tbgen build --gpu -> tbgen test --instance-kind cpu, as the issue's user runs it."""
    triton_sources_or_skip("r24.10")
    if build.find_nvcc() is None:
        pytest.skip("no nvcc on this machine ($CUDACXX, PATH, /usr/local/cuda)")
    project = new_project(tmp_path, "cpp-backend", "gpu=yes")  # KIND_GPU instances, release 24.10
    result = tbgen("build", str(project), "--gpu")
    assert result.returncode == 0, result.stdout + result.stderr
    cache = (project / "build" / "CMakeCache.txt").read_text()
    nvcc_cuda = build.parse_nvcc_version(
        subprocess.run(
            [str(build.find_nvcc()), "--version"], capture_output=True, text=True, check=True
        ).stdout
    )
    archs = ";".join(versions.cuda_architectures_for(nvcc_cuda))
    assert (
        f"CMAKE_CUDA_ARCHITECTURES:UNINITIALIZED={archs}" in cache
        or f"CMAKE_CUDA_ARCHITECTURES:STRING={archs}" in cache
    )
    release = versions.resolve("24.10")
    if nvcc_cuda.split(".")[0] != release.cuda.split(".")[0]:  # e.g. CUDA 13 here, 12.6 in the 24.10 image
        assert f"ships CUDA {release.cuda}" in result.stdout and "--docker" in result.stdout
        said = next(line for line in result.stdout.splitlines() if f"ships CUDA {release.cuda}" in line)
        assert said.startswith("warning: this nvcc") and "note:" not in said  # one prefix
    config = project / "model_repository" / "add_sub" / "config.pbtxt"
    before = config.read_bytes()
    if not gpus_visible():  # KIND_GPU here: refused up front, naming the flag
        refused = tbgen("test", str(project))
        assert refused.returncode == 1 and "--instance-kind cpu" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    smoke = tbgen("test", str(project), "--instance-kind", "cpu")
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
    assert "KIND_CPU instances" in smoke.stdout and "CUDA path is not exercised" in smoke.stdout
    assert config.read_bytes() == before  # only the run's copy was rewritten


@pytest.mark.slow
def test_native_python_build_then_test_runs_the_native_path(tmp_path, require_pybind11, server_or_skip):
    project = new_project(tmp_path, "python-backend", "native=yes")
    result = tbgen("build", str(project))
    assert result.returncode == 0, result.stdout + result.stderr
    assert list((project / "model_repository/add_sub/1").glob("proj_native*.so"))
    again = tbgen("build", str(project))
    assert again.returncode == 0 and "Up to date" in again.stdout
    smoke = tbgen("test", str(project))
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
    assert "compute path: native" in (project / "build/tbgen/server.log").read_text()


# ------------------------------------------------------------------------ release facts the build warns about
def test_tbgen_toml_wins_over_triton_tags_edited_in_cmakelists(tmp_path):
    project = load_project(new_project(tmp_path, "cpp-backend"))
    assert build.tag_disagreements(project) == []
    cmakelists = project.root / "CMakeLists.txt"
    cmakelists.write_text(
        cmakelists.read_text().replace(
            'set(TRITON_CORE_REPO_TAG "r24.10"', 'set(TRITON_CORE_REPO_TAG "r25.10"'
        )
    )
    (note,) = build.tag_disagreements(project)
    assert (
        "TRITON_CORE_REPO_TAG" in note and "r25.10" in note and "tbgen.toml wins" in note and "r24.10" in note
    )
    defines = cmake.repo_tag_defines(project.release.branch)
    assert defines == {f"TRITON_{repo}_REPO_TAG": "r24.10" for repo in ("COMMON", "CORE", "BACKEND")}


def test_a_cuda_major_the_release_does_not_ship_is_a_warning():
    r2410, r2510 = versions.resolve("24.10"), versions.resolve("25.10")
    (warning,) = build.cuda_major_warnings("13.0", r2410)
    assert "CUDA 13.0" in warning and r2410.cuda in warning and "--docker" in warning and "static" in warning
    assert build.cuda_major_warnings("13.0", r2510) == [] and build.cuda_major_warnings("12.4", r2410) == []
    assert symbols.cuda_runtime_majors(["libc.so.6", "libcudart.so.13", "libcudart.so.12.6"]) == {"13", "12"}


@needs_compiler
def test_check_warns_about_a_cuda_runtime_of_another_major_version(tmp_path):
    (tmp_path / "stub.c").write_text("int cudaStub(void) { return 0; }\n")
    cudart = tmp_path / "libcudart.so.13"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcudart.so.13",
            "-o",
            str(cudart),
            str(tmp_path / "stub.c"),
        ],
        check=True,
    )
    (tmp_path / "backend.c").write_text(
        "int cudaStub(void);\nint TRITONBACKEND_Initialize(void *b) { (void)b; return cudaStub(); }\n"
    )
    library = tmp_path / "libtriton_gpu.so"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-o",
            str(library),
            str(tmp_path / "backend.c"),
            "-Wl,--no-as-needed",
            str(cudart),
        ],
        check=True,
    )
    r2410 = versions.resolve("24.10")
    warnings = [f.message for f in symbols.check_library(library, None, r2410) if f.severity == "warning"]
    assert len(warnings) == 1 and "libcudart.so.13" in warnings[0] and r2410.cuda in warnings[0]
    assert not [
        f for f in symbols.check_library(library, None, versions.resolve("25.10")) if f.severity == "warning"
    ]


@pytest.mark.slow
def test_an_uncached_release_without_network_names_deps_fetch_and_add(tmp_path, monkeypatch):
    """Nothing cached and nowhere to clone from: the error says how to fill the cache, not only CMake's
    words."""
    project = new_project(tmp_path, "cpp-backend")
    empty = tmp_path / "empty-cache"
    organization = (
        tmp_path / "no-organization"
    )  # FetchContent clones from here: nothing there, no network used
    cmakelists = project / "CMakeLists.txt"
    text = cmakelists.read_text()
    start = text.index('set(TRITON_REPO_ORGANIZATION "') + len('set(TRITON_REPO_ORGANIZATION "')
    cmakelists.write_text(text[:start] + f"file://{organization}" + text[text.index('"', start) :])
    result = tbgen("build", str(project), env={"TBGEN_CACHE_DIR": str(empty)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "not in tbgen's cache" in result.stderr
    assert (
        "`tbgen deps fetch --triton-version 24.10`" in result.stderr
        and "`tbgen deps add --help`" in result.stderr
    )
    assert "Traceback" not in result.stderr
