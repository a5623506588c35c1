"""Drive CMake for a generated C++ project: command lines (pure) and one runner (side effects).

``configure_command`` and ``build_command`` only decide; ``run_cmake_build`` runs configure, build and
install, logging everything to ``<build_dir>/tbgen-build.log``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from triton_backend_gen.errors import BuildError

# Triton's repositories as FetchContent names them in the generated CMakeLists.txt.
TRITON_REPOS = ("common", "core", "backend")
# Debian/Ubuntu's googletest sources; Triton's common adds its unit tests and so fetches googletest.
SYSTEM_GOOGLETEST = Path("/usr/src/googletest")
LOG_NAME = "tbgen-build.log"

# What compilers, linkers, nvcc and CMake print for an error; Ninja's "FAILED: target" only as a fallback.
_ERROR_LINE = re.compile(r"^CMake Error\b|\b(?:fatal )?error\s*:|undefined reference to|^nvcc fatal")
_FAILED_LINE = re.compile(r"^FAILED:")


def cmake_executable() -> str:
    """The cmake to run: the one installed next to this Python (tbgen's `build` extra) or else PATH's."""
    beside_python = Path(sys.executable).parent / "cmake"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    return shutil.which("cmake") or "cmake"


def _on_path(name: str) -> str | None:
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
) -> list[str]:
    """The cmake configure command line for ``source_dir`` into ``build_dir``.

    ``triton_sources`` is a directory holding Triton's ``common``, ``core`` and ``backend`` trees; with
    it the build uses them and never touches the network.
    """
    command = [cmake_executable(), "-S", str(source_dir), "-B", str(build_dir)]
    defines: dict[str, str] = {}
    ninja = _on_path("ninja")
    if ninja:
        command += ["-G", "Ninja"]
        defines["CMAKE_MAKE_PROGRAM"] = ninja
    defines["CMAKE_BUILD_TYPE"] = build_type
    defines["TRITON_ENABLE_GPU"] = "ON" if gpu else "OFF"
    if install_prefix is not None:
        defines["CMAKE_INSTALL_PREFIX"] = str(install_prefix)
    if triton_sources is not None:
        for repo in TRITON_REPOS:
            defines[f"FETCHCONTENT_SOURCE_DIR_REPO-{repo.upper()}"] = str(Path(triton_sources) / repo)
        defines["FETCHCONTENT_FULLY_DISCONNECTED"] = "ON"
    if (SYSTEM_GOOGLETEST / "CMakeLists.txt").is_file():
        defines["FETCHCONTENT_SOURCE_DIR_GOOGLETEST"] = str(SYSTEM_GOOGLETEST)
    ccache = _on_path("ccache")
    if ccache:
        languages = ("C", "CXX", "CUDA") if gpu else ("C", "CXX")
        for language in languages:
            defines[f"CMAKE_{language}_COMPILER_LAUNCHER"] = ccache
    # The caller's defines come last (and replace tbgen's own for the same key).
    for key in extra_defines:
        defines.pop(key, None)
    defines.update(extra_defines)
    return command + [f"-D{key}={value}" for key, value in defines.items()]


def build_command(build_dir: Path, *, jobs: int | None = None, target: str | None = None) -> list[str]:
    """The cmake build command line; ``jobs`` defaults to the number of CPUs."""
    command = [cmake_executable(), "--build", str(build_dir), "--parallel", str(jobs or os.cpu_count() or 1)]
    if target:
        command += ["--target", target]
    return command


def install_command(build_dir: Path, prefix: Path) -> list[str]:
    """The cmake install command line, installing ``build_dir`` under ``prefix``."""
    return [cmake_executable(), "--install", str(build_dir), "--prefix", str(prefix)]


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


def run_cmake_build(
    source_dir: Path,
    build_dir: Path,
    *,
    triton_sources: Path | None,
    gpu: bool,
    build_type: str = "Release",
) -> Path:
    """Configure, build and install ``source_dir``; returns the install directory ``build_dir/install``."""
    build_dir.mkdir(parents=True, exist_ok=True)
    install_dir = build_dir / "install"
    log_path = build_dir / LOG_NAME
    steps = [
        ("configure", configure_command(source_dir, build_dir, triton_sources=triton_sources, gpu=gpu,
                                        build_type=build_type, install_prefix=install_dir)),
        ("build", build_command(build_dir)),
        ("install", install_command(build_dir, install_dir)),
    ]
    with log_path.open("w") as log:
        for stage, command in steps:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            try:
                result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
            except FileNotFoundError as err:
                raise BuildError(
                    f"cannot run {command[0]}: {err.strerror}",
                    "Install CMake >= 3.21 (`pip install 'triton-backend-gen[build]'` brings one).",
                ) from err
            if result.returncode != 0:
                log.flush()
                error = first_error_line(log_path.read_text(errors="replace")) or f"exit status {result.returncode}"
                raise BuildError(
                    f"CMake {stage} of {source_dir} failed: {error}\nFull log: {log_path}",
                    "Fix the first error above; the log has the complete compiler and CMake output.",
                )
    return install_dir
