"""``tbgen build``: compile a project's C++ backend, or a python project's pybind11 extension.

    C++ project (language = "cpp")   <project>/build (CMake), installed into <project>/build/install:
                                     backends/<backend>/libtriton_<backend>.so
    python project with [native]     <project>/build/native (CMake), the module installed into [native].install_dir
    python project without [native]  nothing to build

Triton's sources come from tbgen's source cache when it holds the project's release (an offline build),
else CMake's FetchContent clones them. A build whose cache is valid is not configured again, so a second
build with nothing changed does no work. After a C++ build the library is checked (toolchain.symbols).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen import versions
from triton_backend_gen.errors import BuildError, UsageError
from triton_backend_gen.project import PROJECT_FILE, Project, load_project
from triton_backend_gen.toolchain.cmake import cmake_build
from triton_backend_gen.toolchain.sources import cached_sources

BUILD_TYPES = ("Release", "Debug", "RelWithDebInfo")
SANITIZERS = ("address", "undefined")
# GCC's sanitizer instrumentation makes -Wmaybe-uninitialized report false positives (also in Triton's own
# sources, which build with -Werror); the plain build keeps that warning.
_SANITIZER_CXX_FLAGS = "-fno-omit-frame-pointer -g -Wno-maybe-uninitialized"
RUNTIME_DIR = "tbgen"  # build/tbgen belongs to the runtime (server logs, backend tree); --clean keeps it

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class NativeSpec:
    """The [native] table of a python project's tbgen.toml."""

    source_dir: Path
    module: str
    install_dir: Path


@dataclass(frozen=True)
class BuildResult:
    project: Project
    artifact: Path | None  # the backend library or the native module; None when there is nothing to build
    seconds: float
    work_done: bool
    log_file: Path | None = None
    findings: tuple = ()  # toolchain.symbols.Finding, for C++ libraries
    notes: tuple[str, ...] = ()

    @property
    def errors(self) -> list:
        return [f for f in self.findings if f.severity == "error"]


def build_kind(project: Project) -> str | None:
    """What ``tbgen build`` compiles for ``project``: "cpp", "native", or None (nothing)."""
    if project.language == "cpp":
        return "cpp"
    return "native" if native_spec(project) is not None else None


def native_spec(project: Project) -> NativeSpec | None:
    """The project's [native] table, or None when it has no native extension."""
    table = project.native
    if not table:
        return None
    try:
        return NativeSpec(project.root / table["source_dir"], table["module"], project.root / table["install_dir"])
    except KeyError as err:
        raise BuildError(f"{project.root / PROJECT_FILE}: [native] lacks {err}.",
                         "It needs source_dir, module and install_dir (see docs/templates.md).") from err


def library_path(project: Project) -> Path:
    """Where a C++ project's installed backend library is."""
    return project.root / "build" / "install" / "backends" / project.backend / f"libtriton_{project.backend}.so"


def resolve_gpu(project: Project, gpu: bool | None) -> bool:
    """The GPU setting of a build: tbgen.toml's unless given; --gpu needs a project generated with gpu."""
    if gpu is None:
        return project.gpu
    if gpu and not project.gpu:
        raise UsageError(
            f"{project.name} was generated without gpu: it has no CUDA kernel sources to build with --gpu.",
            "Build without --gpu, or render the project again with `tbgen new --gpu --force`.",
        )
    return gpu


def parse_sanitizers(text: str | None) -> tuple[str, ...]:
    """("address", "undefined") from "address,undefined"; empty for None or ""."""
    names = tuple(dict.fromkeys(part.strip() for part in (text or "").split(",") if part.strip()))
    unknown = [name for name in names if name not in SANITIZERS]
    if unknown:
        raise UsageError(f"Unknown sanitizer '{unknown[0]}'.", f"Use a comma-separated list of: {', '.join(SANITIZERS)}.")
    return names


def sanitizer_defines(sanitizers: tuple[str, ...]) -> dict[str, str]:
    """CMake defines that instrument every C and C++ file and link the sanitizer runtimes."""
    if not sanitizers:
        return {}
    flag = "-fsanitize=" + ",".join(sanitizers)
    compile_flags = f"{flag} {_SANITIZER_CXX_FLAGS}"
    return {"CMAKE_C_FLAGS": compile_flags, "CMAKE_CXX_FLAGS": compile_flags,
            "CMAKE_SHARED_LINKER_FLAGS": flag, "CMAKE_MODULE_LINKER_FLAGS": flag}


def validate_build_type(build_type: str) -> str:
    if build_type not in BUILD_TYPES:
        raise UsageError(f"Unknown build type '{build_type}'.", f"Use one of: {', '.join(BUILD_TYPES)}.")
    return build_type


def parse_nvcc_version(text: str) -> str:
    """"13.0" from ``nvcc --version`` output ("Cuda compilation tools, release 13.0, V13.0.88")."""
    match = re.search(r"release (\d+\.\d+)", text)
    if match is None:
        raise BuildError("Could not read the CUDA version from `nvcc --version`.", f"It printed:\n{text.strip()}")
    return match.group(1)


CUDA_ROOTS = (Path("/usr/local/cuda"),)


def find_nvcc() -> Path | None:
    """The nvcc CMake would use: $CUDACXX, PATH, then <root>/bin/nvcc of each of CUDA_ROOTS."""
    for candidate in (os.environ.get("CUDACXX"), shutil.which("nvcc"), *(root / "bin" / "nvcc" for root in CUDA_ROOTS)):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def cuda_defines(nvcc: Path, version: str) -> dict[str, str]:
    """CMake defines of a GPU build with the nvcc at ``nvcc`` of CUDA ``version``."""
    return {
        "CMAKE_CUDA_COMPILER": str(nvcc),
        "CMAKE_CUDA_ARCHITECTURES": ";".join(versions.cuda_architectures_for(version)),
    }


def build_project(
    path: Path,
    *,
    gpu: bool | None = None,
    build_type: str = "Release",
    jobs: int | None = None,
    clean: bool = False,
    progress: Progress | None = None,
    server: Path | None = None,
    check: bool = True,
    sanitize: tuple[str, ...] = (),
    docker: bool = False,
    image: str | None = None,
) -> BuildResult:
    """Build the project at ``path`` (see the module docstring); ``check`` runs tbgen check on a C++ library.

    ``sanitize`` (C++ only) builds in <project>/build/sanitize with those sanitizers and installs that library;
    the runtime preloads the sanitizer runtimes whenever it serves such a library. ``docker`` builds a C++
    backend in a container of ``image`` (default: the NGC image of the project's release)."""
    validate_build_type(build_type)
    project = load_project(path)
    kind = build_kind(project)
    gpu = resolve_gpu(project, gpu)
    started = time.monotonic()
    if sanitize and kind != "cpp":
        raise UsageError(f"--sanitize builds C++ backends; {project.name} is a python project.",
                         "Drop --sanitize, or use it on a cpp-backend or decoupled-backend (C++) project.")
    if docker and (sanitize or kind == "native"):
        what = "--sanitize builds" if sanitize else "native Python extensions"
        raise UsageError(f"--docker does not run {what}: they are built for this machine's server and Python.",
                         "Drop --docker for this build.")
    if kind is None:
        note = f"{project.name} is a python project without a native extension: nothing to build."
        return BuildResult(project, None, 0.0, False, notes=(note,))
    if kind == "native":
        return _build_native(project, native_spec(project), build_type, jobs, clean, progress, started)
    if docker:
        return _build_in_container(project, image, gpu, build_type, jobs, clean, progress, started)

    build_dir = project.root / "build"
    if clean:
        _clean_build_dir(build_dir)
    install_dir = build_dir / "install"
    if sanitize:
        build_dir = build_dir / "sanitize"
    notes = []
    release = versions.resolve(project.triton_version)
    sources = cached_sources(release.branch)
    if sources is None:
        notes.append(f"Triton {release.branch} sources are not cached: CMake fetches them (needs the network).")
    defines = sanitizer_defines(sanitize)
    if gpu:
        nvcc = find_nvcc()
        if nvcc is None:
            raise BuildError("--gpu needs CUDA's nvcc, and none was found ($CUDACXX, PATH, /usr/local/cuda).",
                             "Install the CUDA toolkit, or build without --gpu.")
        defines |= cuda_defines(nvcc, parse_nvcc_version(_output_of([str(nvcc), "--version"])))
    run = cmake_build(project.root, build_dir, triton_sources=sources, gpu=gpu, build_type=build_type,
                      install_dir=install_dir, jobs=jobs, extra_defines=defines, progress=progress)
    library = library_path(project)
    if not library.is_file():
        raise BuildError(f"The build succeeded but did not install {library}.", f"See the log: {run.log_file}")
    findings: tuple = ()
    if check:
        from triton_backend_gen.toolchain.symbols import check_library, server_for_check

        install, server_notes = server_for_check(server)
        findings = tuple(check_library(library, install)) + tuple(server_notes)
    return BuildResult(project, library, time.monotonic() - started, run.work_done, run.log_file, findings,
                       tuple(notes))


def _build_in_container(project: Project, image: str | None, gpu: bool, build_type: str, jobs: int | None,
                        clean: bool, progress: Progress | None, started: float) -> BuildResult:
    from triton_backend_gen.runtime.container import build_in_container, default_image

    image = image or default_image(project.triton_version)
    if clean:
        shutil.rmtree(project.root / "build" / "docker", ignore_errors=True)
    run = build_in_container(project, image, gpu=gpu, build_type=build_type, jobs=jobs, progress=progress)
    library = library_path(project)
    if not library.is_file():
        raise BuildError(f"The build succeeded but did not install {library}.", f"See the log: {run.log_file}")
    note = f"built in {image}; `tbgen check` compares with a local server, so it was not run"
    return BuildResult(project, library, time.monotonic() - started, run.work_done, run.log_file, notes=(note,))


def _build_native(project: Project, spec: NativeSpec, build_type: str, jobs: int | None, clean: bool,
                  progress: Progress | None, started: float) -> BuildResult:
    """The pybind11 extension, built for this Python (the one whose stub tbgen runs the models with)."""
    build_dir = project.root / "build" / "native"
    if clean and build_dir.exists():
        shutil.rmtree(build_dir)
    defines = {
        "Python_EXECUTABLE": sys.executable,
        "NATIVE_MODULE_DIR": str(spec.install_dir),
        "CMAKE_EXPORT_COMPILE_COMMANDS": "ON",
    }
    run = cmake_build(spec.source_dir, build_dir, triton_sources=None, gpu=False, build_type=build_type,
                      install_dir=spec.install_dir, jobs=jobs, extra_defines=defines, progress=progress)
    modules = sorted(spec.install_dir.glob(f"{spec.module}*.so"))
    if not modules:
        raise BuildError(f"The build succeeded but installed no {spec.module}*.so into {spec.install_dir}.",
                         f"See the log: {run.log_file}")
    return BuildResult(project, modules[0], time.monotonic() - started, run.work_done, run.log_file)


def _clean_build_dir(build_dir: Path) -> None:
    """Remove everything CMake made under ``build_dir`` (the runtime's build/tbgen stays)."""
    if not build_dir.is_dir():
        return
    for entry in build_dir.iterdir():
        if entry.name == RUNTIME_DIR:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _output_of(command: list[str]) -> str:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except OSError as err:
        raise BuildError(f"cannot run {command[0]}: {err}") from err
    return result.stdout + result.stderr
