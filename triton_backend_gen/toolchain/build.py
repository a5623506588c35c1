"""``tbgen build``: compile a project's C++ backend, or a python project's pybind11 extension.

    C++ project (language = "cpp")   <project>/build (CMake), installed into <project>/build/install:
                                     backends/<backend>/libtriton_<backend>.so
    python project with [native]     <project>/build/native (CMake), the module installed into
    [native].install_dir python project without [native]  nothing to build
    models with a batch_strategy     <project>/build/batching (CMake, batching/), each installed as
                                     <model directory>/batchstrategy.so (any project)

Triton's sources come from tbgen's source cache when it holds the project's release (an offline build),
else CMake's FetchContent clones them. A build whose cache is valid is not configured again, so a second
build with nothing changed does no work. Checking the built library against a server is
toolchain.ensure_built's, which combines this stage with toolchain.symbols.
"""

from __future__ import annotations

import dataclasses
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
from triton_backend_gen.docker_engine import default_image
from triton_backend_gen.errors import BuildError, UsageError
from triton_backend_gen.findings import Finding
from triton_backend_gen.project import BackendKind, NativeSpec, Project
from triton_backend_gen.toolchain.cmake import CMakeRun, cmake_build, repo_tag_defines
from triton_backend_gen.toolchain.container_build import build_in_container
from triton_backend_gen.toolchain.sources import cached_sources, uncached_note

BUILD_TYPES = ("Release", "Debug", "RelWithDebInfo")
SANITIZERS = ("address", "undefined")
# GCC's sanitizer instrumentation makes -Wmaybe-uninitialized report false positives (also in Triton's own
# sources, which build with -Werror); the plain build keeps that warning.
_SANITIZER_CXX_FLAGS = "-fno-omit-frame-pointer -g -Wno-maybe-uninitialized"
_REPO_TAG = re.compile(r'^\s*set\(\s*TRITON_(COMMON|CORE|BACKEND)_REPO_TAG\s+"?([^"\s)]+)', re.MULTILINE)

Progress = Callable[[int, int, str], None]
_UNCACHED_HINT = (
    "Triton's {branch} sources are not in tbgen's cache, and CMake could not clone them (no network?). "
    "Fill the cache once: `tbgen deps fetch --triton-version {release}` (online, or with "
    "--organization naming a mirror), or register the core/, common/ and backend/ you have "
    "(`tbgen deps add --help`)."
)


@dataclass(frozen=True)
class BuildResult:
    project: Project
    artifact: Path | None  # the backend library or the native module; None when there is nothing to build
    seconds: float
    work_done: bool
    log_file: Path | None = None
    findings: tuple[Finding, ...] = ()  # the library's check (toolchain.symbols), for C++ libraries
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # what may break where the backend runs (a CUDA the release does not ship)
    batchers: tuple[
        Path, ...
    ] = ()  # the models' batching strategies installed (<model dir>/batchstrategy.so)

    @property
    def errors(self) -> list:
        return [f for f in self.findings if f.failed]


def build_kind(project: Project) -> str | None:
    """What ``tbgen build`` compiles for ``project``: "cpp", "native", or None (nothing)."""
    if project.kind is BackendKind.CPP:
        return "cpp"
    return "native" if project.native is not None else None


def resolve_gpu(project: Project, gpu: bool | None) -> bool:
    """The GPU setting of a build: tbgen.toml's unless given; --gpu needs a project generated with gpu."""
    if gpu is None:
        return project.gpu
    if gpu and not project.gpu:
        raise UsageError(
            f"{project.name} was generated without gpu: it has no CUDA kernel sources to build with --gpu.",
            "Build without --gpu, or give the project CUDA kernels with `tbgen update --set "
            f"gpu=yes{project.project_option()}`.",
        )
    return gpu


def parse_sanitizers(text: str | None) -> tuple[str, ...]:
    """("address", "undefined") from "address,undefined"; empty for None or ""."""
    names = tuple(dict.fromkeys(part.strip() for part in (text or "").split(",") if part.strip()))
    unknown = [name for name in names if name not in SANITIZERS]
    if unknown:
        raise UsageError(
            f"Unknown sanitizer '{unknown[0]}'.", f"Use a comma-separated list of: {', '.join(SANITIZERS)}."
        )
    return names


def sanitizer_defines(sanitizers: tuple[str, ...]) -> dict[str, str]:
    """CMake defines that instrument every C and C++ file and link the sanitizer runtimes."""
    if not sanitizers:
        return {}
    flag = "-fsanitize=" + ",".join(sanitizers)
    compile_flags = f"{flag} {_SANITIZER_CXX_FLAGS}"
    return {
        "CMAKE_C_FLAGS": compile_flags,
        "CMAKE_CXX_FLAGS": compile_flags,
        "CMAKE_SHARED_LINKER_FLAGS": flag,
        "CMAKE_MODULE_LINKER_FLAGS": flag,
    }


def validate_build_type(build_type: str) -> str:
    if build_type not in BUILD_TYPES:
        raise UsageError(f"Unknown build type '{build_type}'.", f"Use one of: {', '.join(BUILD_TYPES)}.")
    return build_type


def parse_nvcc_version(text: str) -> str:
    """ "13.0" from ``nvcc --version`` output ("Cuda compilation tools, release 13.0, V13.0.88")."""
    match = re.search(r"release (\d+\.\d+)", text)
    if match is None:
        raise BuildError(
            "Could not read the CUDA version from `nvcc --version`.", f"It printed:\n{text.strip()}"
        )
    return match.group(1)


CUDA_ROOTS = (Path("/usr/local/cuda"),)


def find_nvcc() -> Path | None:
    """The nvcc CMake would use: $CUDACXX, PATH, then <root>/bin/nvcc of each of CUDA_ROOTS."""
    for candidate in (
        os.environ.get("CUDACXX"),
        shutil.which("nvcc"),
        *(root / "bin" / "nvcc" for root in CUDA_ROOTS),
    ):
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
    project: Project,
    *,
    gpu: bool | None = None,
    build_type: str = "Release",
    jobs: int | None = None,
    clean: bool = False,
    progress: Progress | None = None,
    sanitize: tuple[str, ...] = (),
    docker: bool = False,
    image: str | None = None,
) -> BuildResult:
    """Build ``project`` (see the module docstring), then its models' batching strategies (build_batching).

    ``sanitize`` (C++ only) builds in <project>/build/sanitize with those sanitizers and installs that
    library; the runtime preloads the sanitizer runtimes whenever it serves such a library. ``docker`` builds
    a C++ backend in a container of ``image`` (default: the NGC image of the project's release)."""
    validate_build_type(build_type)
    kind = build_kind(project)
    gpu = resolve_gpu(project, gpu)
    check_build_options(project, kind, sanitize, docker)
    started = time.monotonic()
    if kind is None:
        note = f"{project.name} is a python project without a native extension: nothing to build."
        result = BuildResult(project, None, 0.0, False, notes=() if project.batched_models else (note,))
    elif kind == "native":
        result = _build_native(project, build_type, jobs, clean, progress, started)
    elif docker:
        notes = tag_disagreements(project)
        result = _build_in_container(project, image, gpu, build_type, jobs, clean, progress, started, notes)
    else:
        result = _build_cpp(project, gpu, build_type, jobs, clean, progress, sanitize)
    batching = build_batching(project, build_type=build_type, jobs=jobs, clean=clean, progress=progress)
    if batching is None:
        return result
    return dataclasses.replace(
        result,
        seconds=time.monotonic() - started,
        work_done=result.work_done or batching.work_done,
        log_file=result.log_file or batching.log_file,
        batchers=tuple(model.batch_strategy_library for model in project.batched_models),
    )


def _build_cpp(
    project: Project,
    gpu: bool,
    build_type: str,
    jobs: int | None,
    clean: bool,
    progress: Progress | None,
    sanitize: tuple[str, ...],
) -> BuildResult:
    """The C++ backend, built here (into build/, or build/sanitize with ``sanitize``)."""
    started = time.monotonic()
    notes = tag_disagreements(project)
    if clean:
        _clean_build_dir(project)
    sources = cached_sources(project.release.branch)
    uncached = uncached_note(project.release)
    if uncached:
        notes.append(uncached)
    defines = sanitizer_defines(sanitize) | repo_tag_defines(project.release.branch)
    warnings: list[str] = []
    if gpu:
        defines |= _gpu_defines(project.release, warnings)
    build_dir = project.sanitize_build_dir if sanitize else project.build_dir
    run = _cmake_build_cpp(project, build_dir, sources, gpu, build_type, jobs, defines, progress)
    return BuildResult(
        project,
        project.library,
        time.monotonic() - started,
        run.work_done,
        run.log_file,
        notes=tuple(notes),
        warnings=tuple(warnings),
    )


def build_batching(
    project: Project,
    *,
    build_type: str = "Release",
    jobs: int | None = None,
    clean: bool = False,
    progress: Progress | None = None,
) -> CMakeRun | None:
    """The batching strategies of the project's models: batching/ (a CMake project of its own, one library
    per model directory in it) built into build/batching and installed as <model directory>/batchstrategy.so,
    where Triton looks for it (and where r26.06+ requires it). None when no model has a strategy. Built here
    also for a python project (the C++ toolchain is then needed: `tbgen doctor` says so) and for --docker
    (the library needs nothing but the server's own API)."""
    models = project.batched_models
    if not models:
        return None
    if not (project.batching_dir / "CMakeLists.txt").is_file():
        raise BuildError(
            f"tbgen.toml gives {', '.join(m.name for m in models)} a batch_strategy, and "
            f"{project.batching_dir / 'CMakeLists.txt'} is missing.",
            "Restore batching/ from version control, or remove batch_strategy from those [[models]] entries.",
        )
    if clean:
        shutil.rmtree(project.batching_build_dir, ignore_errors=True)
    defines = repo_tag_defines(project.release.branch) | {
        "BATCHING_MODEL_REPOSITORY": str(project.model_repository),
        # only the models tbgen.toml gives a strategy: a directory left of a removed model builds nothing
        "BATCHING_MODELS": ";".join(model.name for model in models),
    }
    sources = cached_sources(project.release.branch)
    try:
        run = cmake_build(
            project.batching_dir,
            project.batching_build_dir,
            triton_sources=sources,
            gpu=False,
            build_type=build_type,
            jobs=jobs,
            extra_defines=defines,
            progress=progress,
        )
    except BuildError as err:
        raise _uncached_error(project, sources, err) from err
    missing = [model.name for model in models if not model.batch_strategy_library.is_file()]
    if missing:
        raise BuildError(
            f"The build of batching/ succeeded but installed no batchstrategy.so for {', '.join(missing)}.",
            f"Each of them needs batching/<model>/batcher.cc; see the log: {run.log_file}",
        )
    return run


def check_build_options(project: Project, kind: str | None, sanitize: tuple[str, ...], docker: bool) -> None:
    """UsageError for option combinations a build of ``kind`` cannot honour."""
    if sanitize and kind != "cpp":
        raise UsageError(
            f"--sanitize builds C++ backends; {project.name} is a python project.",
            "Drop --sanitize, or use it on a cpp-backend or decoupled-backend (C++) project.",
        )
    if docker and (sanitize or kind == "native"):
        what = "--sanitize builds" if sanitize else "native Python extensions"
        raise UsageError(
            f"--docker does not run {what}: they are built for this machine's server and Python.",
            "Drop --docker for this build.",
        )


def _gpu_defines(release: versions.Release, warnings: list[str]) -> dict[str, str]:
    """The CUDA defines of a local --gpu build (and, in ``warnings``, a CUDA the release's image does not
    ship)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise BuildError(
            "--gpu needs CUDA's nvcc, and none was found ($CUDACXX, PATH, /usr/local/cuda).",
            "Install the CUDA toolkit, or build without --gpu.",
        )
    cuda = parse_nvcc_version(_output_of([str(nvcc), "--version"]))
    warnings += cuda_major_warnings(cuda, release)
    return cuda_defines(nvcc, cuda)


def _cmake_build_cpp(
    project: Project,
    build_dir: Path,
    sources: Path | None,
    gpu: bool,
    build_type: str,
    jobs: int | None,
    defines: dict[str, str],
    progress: Progress | None,
) -> CMakeRun:
    """CMake configure, build and install of the C++ backend; an uncached release that cannot be cloned is
    reported with the commands that fill the cache."""
    try:
        run = cmake_build(
            project.root,
            build_dir,
            triton_sources=sources,
            gpu=gpu,
            build_type=build_type,
            install_dir=project.install_dir,
            jobs=jobs,
            extra_defines=defines,
            progress=progress,
        )
    except BuildError as err:
        raise _uncached_error(project, sources, err) from err
    if not project.library.is_file():
        raise BuildError(
            f"The build succeeded but did not install {project.library}.", f"See the log: {run.log_file}"
        )
    return run


def _uncached_error(project: Project, sources: Path | None, err: BuildError) -> BuildError:
    """``err``, with the commands that fill the source cache when it is CMake failing to clone Triton's
    sources of a release the cache lacks."""
    if sources is None and "clone" in err.message.lower():
        hint = _UNCACHED_HINT.format(branch=project.release.branch, release=project.release.container)
        return BuildError(err.message, hint)
    return err


def tag_disagreements(project: Project) -> list[str]:
    """A note for each Triton tag in CMakeLists.txt that is not the release tbgen.toml names (edited by
    hand)."""
    cmakelists = project.root / "CMakeLists.txt"
    text = cmakelists.read_text(errors="replace") if cmakelists.is_file() else ""
    wanted = project.release.branch
    return [
        f"CMakeLists.txt sets TRITON_{repo}_REPO_TAG to {tag}, but tbgen.toml targets Triton "
        f"{project.release.container}: tbgen builds with {wanted} (tbgen.toml wins, passed as -D). To move "
        f"the project to {tag} instead: {_update_to(tag, project)} (it keeps your edits)."
        for repo, tag in _REPO_TAG.findall(text)
        if tag != wanted
    ]


def _update_to(tag: str, project: Project) -> str:
    """The command that moves ``project`` to the release of branch ``tag``, or how to find one."""
    try:
        release = versions.resolve(tag)
    except UsageError:
        return f"`tbgen update` with --triton-version and a release `tbgen versions` lists ({tag} is none)"
    return f"`tbgen update --triton-version {release.container}{project.project_option()}`"


def cuda_major_warnings(cuda: str, release: versions.Release) -> list[str]:
    """A warning when the CUDA of this machine's nvcc is not the major version ``release``'s image ships."""
    if cuda.split(".")[0] == release.cuda.split(".")[0]:
        return []
    return [
        f"this nvcc is CUDA {cuda}, but Triton {release.container}'s image ships CUDA {release.cuda}: "
        f"a library linked against CUDA {cuda.split('.')[0]}'s runtime will not load there. Build in the "
        "release's container (`tbgen build --docker`), or avoid the dependency (e.g. link cudart "
        "statically)."
    ]


def _build_in_container(
    project: Project,
    image: str | None,
    gpu: bool,
    build_type: str,
    jobs: int | None,
    clean: bool,
    progress: Progress | None,
    started: float,
    notes: list[str],
) -> BuildResult:
    image = image or default_image(project.release)
    if clean:
        shutil.rmtree(project.build_dir / "docker", ignore_errors=True)
    run = build_in_container(project, image, gpu=gpu, build_type=build_type, jobs=jobs, progress=progress)
    if not project.library.is_file():
        raise BuildError(
            f"The build succeeded but did not install {project.library}.", f"See the log: {run.log_file}"
        )
    notes = [*notes, f"built in {image}; `tbgen check` compares with a local server, so it was not run"]
    return BuildResult(
        project, project.library, time.monotonic() - started, run.work_done, run.log_file, notes=tuple(notes)
    )


def _build_native(
    project: Project,
    build_type: str,
    jobs: int | None,
    clean: bool,
    progress: Progress | None,
    started: float,
) -> BuildResult:
    """The pybind11 extension, built for this Python (the one whose stub tbgen runs the models with)."""
    spec: NativeSpec = project.native
    build_dir = project.native_build_dir
    if clean and build_dir.exists():
        shutil.rmtree(build_dir)
    defines = {
        "Python_EXECUTABLE": sys.executable,
        "NATIVE_MODULE_DIR": str(spec.install_dir),
        "CMAKE_EXPORT_COMPILE_COMMANDS": "ON",
    }
    run = cmake_build(
        spec.source_dir,
        build_dir,
        triton_sources=None,
        gpu=False,
        build_type=build_type,
        install_dir=spec.install_dir,
        jobs=jobs,
        extra_defines=defines,
        progress=progress,
    )
    modules = sorted(spec.install_dir.glob(f"{spec.module}*.so"))
    if not modules:
        raise BuildError(
            f"The build succeeded but installed no {spec.module}*.so into {spec.install_dir}.",
            f"See the log: {run.log_file}",
        )
    return BuildResult(project, modules[0], time.monotonic() - started, run.work_done, run.log_file)


def _clean_build_dir(project: Project) -> None:
    """Remove everything CMake made under the build directory (the runtime's build/tbgen stays)."""
    if not project.build_dir.is_dir():
        return
    for entry in project.build_dir.iterdir():
        if entry == project.runtime_dir:
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
