"""Drive CMake for a generated C++ project: command lines (pure) and one runner (side effects).

``configure_command``, ``build_command``, ``needs_configure`` and ``progress_of`` only decide; ``cmake_build``
runs configure (when needed), build and install, logging everything to ``<build_dir>/tbgen-build.log``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.errors import BuildError
from triton_backend_gen.project import find_project_root

# Triton's repositories as FetchContent names them in the generated CMakeLists.txt.
TRITON_REPOS = ("common", "core", "backend")
# Debian/Ubuntu's googletest sources; Triton's common adds its unit tests and so fetches googletest.
SYSTEM_GOOGLETEST = Path("/usr/src/googletest")
LOG_NAME = "tbgen-build.log"
# The environment variable naming the cmake to use (as Meson reads it too).
CMAKE_VARIABLE = "CMAKE"
# The configure command line of the last successful build: a valid cache for the same settings is reused.
CONFIGURE_STAMP = "tbgen-configure.txt"

# What compilers, linkers, nvcc and CMake print for an error; Ninja's "FAILED: target" only as a fallback.
_ERROR_LINE = re.compile(r"^CMake Error\b|\b(?:fatal )?error\s*:|undefined reference to|^nvcc fatal")
_FAILED_LINE = re.compile(r"^FAILED:")
_NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_PROGRESS = re.compile(r"^\[\s*(\d+)%\]")
_GLOB_CHECK = "Re-checking globbed directories"


def cmake_executable() -> str:
    """The cmake to run: $CMAKE when set (a path, or a name looked up on PATH: a CMake pinned apart from
    tbgen's), else the one installed next to this Python (tbgen's `build` extra), else PATH's."""
    chosen = os.environ.get(CMAKE_VARIABLE, "").strip()
    if chosen:
        return shutil.which(chosen) or chosen
    return tool_on_path("cmake") or "cmake"


def tool_on_path(name: str) -> str | None:
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    return shutil.which(name)


def configure_command(
    source_dir: Path,
    build_dir: Path,
    *,
    triton_sources: Path | None,
    gpu: bool,
    build_type: str = "Release",
    install_prefix: Path | None = None,
    extra_defines: Mapping[str, str] = {},
    host_tools: bool = True,
) -> list[str]:
    """The cmake configure command line for ``source_dir`` into ``build_dir``.

    ``triton_sources`` is a directory holding Triton's ``common``, ``core`` and ``backend`` trees; with
    it the build uses them and never touches the network. ``host_tools=False`` names no tool of this
    machine (plain ``cmake``, no generator, ninja, ccache or system googletest): for a build in a container.
    """
    command = [cmake_executable() if host_tools else "cmake", "-S", str(source_dir), "-B", str(build_dir)]
    ninja = tool_on_path("ninja") if host_tools else None
    if ninja:
        command += ["-G", "Ninja"]
    defines = {"CMAKE_MAKE_PROGRAM": ninja} if ninja else {}
    defines["CMAKE_BUILD_TYPE"] = build_type
    defines["TRITON_ENABLE_GPU"] = "ON" if gpu else "OFF"
    if install_prefix is not None:
        defines["CMAKE_INSTALL_PREFIX"] = str(install_prefix)
    defines |= _source_defines(triton_sources, host_tools) | _launcher_defines(gpu, host_tools)
    # The caller's defines come last (and replace tbgen's own for the same key).
    defines = {key: value for key, value in defines.items() if key not in extra_defines} | dict(extra_defines)
    return command + [f"-D{key}={value}" for key, value in defines.items()]


def _launcher_defines(gpu: bool, host_tools: bool) -> dict[str, str]:
    """ccache as the compiler launcher of each language built (CUDA too with ``gpu``), when this machine has
    it and the build runs here."""
    ccache = tool_on_path("ccache") if host_tools else None
    if not ccache:
        return {}
    languages = ("C", "CXX", "CUDA") if gpu else ("C", "CXX")
    return {f"CMAKE_{language}_COMPILER_LAUNCHER": ccache for language in languages}


def _source_defines(triton_sources: Path | None, host_tools: bool) -> dict[str, str]:
    """The FetchContent defines that point CMake at sources on disk: Triton's repositories (then nothing is
    downloaded) and googletest (googletest_sources), each when there is one."""
    defines = {}
    if triton_sources is not None:
        for repo in TRITON_REPOS:
            defines[f"FETCHCONTENT_SOURCE_DIR_REPO-{repo.upper()}"] = str(Path(triton_sources) / repo)
        defines["FETCHCONTENT_FULLY_DISCONNECTED"] = "ON"
    googletest = googletest_sources(triton_sources, system=host_tools)
    if googletest is not None:
        defines["FETCHCONTENT_SOURCE_DIR_GOOGLETEST"] = str(googletest)
    return defines


def repo_tag_defines(branch: str) -> dict[str, str]:
    """The tags of Triton's repositories for a build of release ``branch`` ("r24.10"): tbgen.toml's release
    wins over the defaults written in CMakeLists.txt (they are CACHE variables, so -D replaces them)."""
    return {f"TRITON_{repo.upper()}_REPO_TAG": branch for repo in TRITON_REPOS}


def googletest_sources(triton_sources: Path | None, *, system: bool = True) -> Path | None:
    """The googletest that Triton's common builds its tests with: the one cached beside ``triton_sources``
    (at the commit common asks for), else the system's, else None (FetchContent downloads it)."""
    candidates = [Path(triton_sources) / "googletest"] if triton_sources is not None else []
    if system:
        candidates.append(SYSTEM_GOOGLETEST)
    return next((path for path in candidates if (path / "CMakeLists.txt").is_file()), None)


def build_command(build_dir: Path, *, jobs: int | None = None, target: str | None = None) -> list[str]:
    """The cmake build command line; ``jobs`` defaults to the number of CPUs."""
    command = [cmake_executable(), "--build", str(build_dir), "--parallel", str(jobs or os.cpu_count() or 1)]
    if target:
        command += ["--target", target]
    return command


def install_command(build_dir: Path, prefix: Path) -> list[str]:
    """The cmake install command line, installing ``build_dir`` under ``prefix``."""
    return [cmake_executable(), "--install", str(build_dir), "--prefix", str(prefix)]


# Where an error is: a compiler's "path:line[:column]:" at the start of a line, CMake's "CMake Error at
# path:line".
_COMPILER_PLACE = re.compile(r"^(?P<path>[^\s:(][^\s:]*):(?P<place>\d+(?::\d+)?:)")
_CMAKE_PLACE = re.compile(
    r"^(?P<head>CMake (?:Error|Warning)(?: \(dev\))? at )(?P<path>[^\s:]+):(?P<place>\d+)"
)


def openable(line: str, build_dir: Path, source_dir: Path) -> str:
    """``line`` with the file it names made openable from where tbgen runs: the compiler runs in ``build_dir``
    (so its "../src/x.cc:12:5:" is relative to that), CMake names files relative to ``source_dir``. The path
    is printed relative to the project's root when tbgen runs there, else absolute."""
    cmake_place = _CMAKE_PLACE.match(line)
    match, base = (cmake_place, source_dir) if cmake_place else (_COMPILER_PLACE.match(line), build_dir)
    if match is None:
        return line
    path = Path(match.group("path"))
    if not path.is_absolute():
        path = Path(os.path.normpath(Path(base).resolve() / path))
    cwd = Path.cwd().resolve()
    at_root = cwd == (find_project_root(source_dir) or Path(source_dir).resolve())
    shown = path.relative_to(cwd) if at_root and cwd in path.parents else path
    return line[: match.start("path")] + str(shown) + line[match.end("path") :]


def first_error_line(log: str) -> str | None:
    """The first line of a configure/build log that reports an error (compiler, linker or CMake)."""
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if _ERROR_LINE.search(line):
            if line.startswith("CMake Error"):
                # "CMake Error at file:line (command):" is followed by the message itself.
                detail = next((rest.strip() for rest in lines[index + 1 :] if rest.strip()), "")
                return f"{line.strip()} {detail}".strip()
            return line.strip()
    return next((line.strip() for line in lines if _FAILED_LINE.search(line)), None)


@dataclass(frozen=True)
class CMakeRun:
    """What one ``cmake_build`` did."""

    install_dir: Path
    log_file: Path
    configured: bool  # CMake's configure step ran (no valid cache for these settings)
    work_done: bool  # anything was configured, compiled or linked (False: the build was up to date)


def progress_of(line: str) -> tuple[int, int] | None:
    """(done, total) from a build tool's progress line: Ninja's "[3/10] ..." or Make's "[ 30%] ...". CMake's
    check of the cmake/libraries/*.cmake glob (CONFIGURE_DEPENDS), which every build runs, is no progress."""
    if _GLOB_CHECK in line:
        return None
    match = _NINJA_PROGRESS.match(line)
    if match:
        return int(match.group(1)), int(match.group(2))
    match = _MAKE_PROGRESS.match(line)
    if match:
        return int(match.group(1)), 100
    return None


def needs_configure(build_dir: Path, command: list[str]) -> bool:
    """Whether ``command`` must run: no CMake cache and build system yet, or other settings than last time.

    (When the cache is valid the build tool itself re-runs CMake if a CMakeLists.txt changed.)"""
    stamp = build_dir / CONFIGURE_STAMP
    generated = (build_dir / "build.ninja").is_file() or (build_dir / "Makefile").is_file()
    if not ((build_dir / "CMakeCache.txt").is_file() and generated and stamp.is_file()):
        return True
    return stamp.read_text() != _stamp_text(command)


def _stamp_text(command: list[str]) -> str:
    return "\n".join(command) + "\n"


def cmake_build(
    source_dir: Path,
    build_dir: Path,
    *,
    triton_sources: Path | None,
    gpu: bool,
    build_type: str = "Release",
    install_dir: Path | None = None,
    jobs: int | None = None,
    extra_defines: Mapping[str, str] = {},
    progress: Callable[[int, int, str], None] | None = None,
) -> CMakeRun:
    """Configure (only when needed), build and install ``source_dir``; the one CMake driver of tbgen.

    Output goes to ``<build_dir>/tbgen-build.log``; ``progress(done, total, line)`` follows the build tool's
    "[n/m]" lines. Raises BuildError naming the first compiler or CMake error and the log."""
    build_dir.mkdir(parents=True, exist_ok=True)
    install_dir = install_dir or build_dir / "install"
    log_path = build_dir / LOG_NAME
    configure = configure_command(
        source_dir,
        build_dir,
        triton_sources=triton_sources,
        gpu=gpu,
        build_type=build_type,
        install_prefix=install_dir,
        extra_defines=extra_defines,
    )
    configured = needs_configure(build_dir, configure)
    steps = [("configure", configure)] if configured else []
    steps += [
        ("build", build_command(build_dir, jobs=jobs)),
        ("install", install_command(build_dir, install_dir)),
    ]
    work_done = configured
    (build_dir / CONFIGURE_STAMP).unlink(missing_ok=True)
    # ccache rewrites paths under the project to relative ones, so copies of a project (CI checkouts, rendered
    # variants) share cache entries.
    env = {"CCACHE_BASEDIR": str(Path(source_dir).resolve()), **os.environ}
    with log_path.open("w") as log:
        for stage, command in steps:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            returncode, stepped = _run_logged(command, log, progress if stage == "build" else None, env)
            work_done = work_done or (stage == "build" and stepped)
            if returncode != 0:
                log.flush()
                error = first_error_line(log_path.read_text(errors="replace"))
                error = openable(error, build_dir, source_dir) if error else f"exit status {returncode}"
                raise BuildError(
                    f"CMake {stage} of {source_dir} failed: {error}\nFull log: {log_path}",
                    "Fix the first error above; the log has the complete compiler and CMake output.",
                )
    (build_dir / CONFIGURE_STAMP).write_text(_stamp_text(configure))
    return CMakeRun(install_dir=install_dir, log_file=log_path, configured=configured, work_done=work_done)


def _run_logged(
    command: list[str], log, progress: Callable[[int, int, str], None] | None, env: Mapping[str, str]
) -> tuple[int, bool]:
    """Run ``command`` with its output appended to ``log``; returns (exit status, whether it made progress
    lines)."""
    process = _start_group(command, subprocess.PIPE, env)
    stepped = False
    with process:
        try:
            for line in process.stdout:
                log.write(line)
                step = progress_of(line)
                if step is not None:
                    stepped = True
                    if progress is not None:
                        progress(step[0], step[1], line.rstrip())
        except BaseException:
            _stop_group(process)
            raise
    return process.returncode, stepped


def run_build_process(command: list[str], out, env: Mapping[str, str]) -> int:
    """Run a build ``command`` with its output into the file ``out``; its exit status. Interrupted (Ctrl-C,
    SIGTERM), the whole build stops: cmake, the build tool and the compilers it runs."""
    process = _start_group(command, out, env)
    try:
        return process.wait()
    except BaseException:
        _stop_group(process)
        raise


def _start_group(command: list[str], stdout, env: Mapping[str, str]) -> subprocess.Popen:
    """``command`` started in a process group of its own (so that _stop_group reaches what it runs)."""
    try:
        return subprocess.Popen(
            command,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            env=dict(env),
            start_new_session=True,
        )
    except FileNotFoundError as err:
        raise BuildError(
            f"cannot run {command[0]}: {err.strerror}",
            "Install CMake (`pip install 'triton-backend-gen[build]'` brings one), or point "
            f"${CMAKE_VARIABLE} at a cmake executable (`tbgen doctor` shows the one used).",
        ) from err


def _stop_group(process: subprocess.Popen) -> None:
    """Stop ``process`` and everything in its process group (cmake --build does not pass signals on)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_cmake_build(
    source_dir: Path,
    build_dir: Path,
    *,
    triton_sources: Path | None,
    gpu: bool,
    build_type: str = "Release",
) -> Path:
    """Configure, build and install ``source_dir``; returns the install directory ``build_dir/install``."""
    return cmake_build(
        source_dir, build_dir, triton_sources=triton_sources, gpu=gpu, build_type=build_type
    ).install_dir
