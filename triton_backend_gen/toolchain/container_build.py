"""`tbgen build --docker`: CMake runs in a container of the release's tritonserver image.

The project is mounted read-write at its own path (so paths in errors are the host's), the source cache
read-only at its own path (an offline build when it holds the release); the container runs as the invoking
user into ``<project>/build/docker/<image>/``, installing into ``<project>/build/install/`` as a local build
does. ``build_script`` and ``build_spec`` only decide and are unit-tested.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triton_backend_gen.docker_engine import (
    ROLE_BUILD,
    Mount,
    connect,
    ensure_image,
    orphans,
    remove_containers,
    run_container,
    script_spec,
    tbgen_containers,
)
from triton_backend_gen.errors import BuildError
from triton_backend_gen.project import Project
from triton_backend_gen.toolchain.cmake import (
    LOG_NAME,
    CMakeRun,
    configure_command,
    first_error_line,
    openable,
    progress_of,
    repo_tag_defines,
)
from triton_backend_gen.toolchain.sources import cached_sources

IMAGE_NVCC = "/usr/local/cuda/bin/nvcc"


def build_script(
    project: Project,
    build_dir: Path,
    install_dir: Path,
    *,
    sources: Path | None,
    gpu: bool,
    build_type: str,
    jobs: int | None,
    cuda_architectures: str | None = None,
) -> str:
    """The shell script a build container runs: configure, build and install with the image's own tools
    (Ninja when the image has it, the image's googletest when the cache holds none)."""
    defines = repo_tag_defines(project.release.branch)
    if gpu:
        defines["CMAKE_CUDA_COMPILER"] = IMAGE_NVCC
        if cuda_architectures:
            defines["CMAKE_CUDA_ARCHITECTURES"] = cuda_architectures
    configure = configure_command(
        project.root,
        build_dir,
        triton_sources=sources,
        gpu=gpu,
        build_type=build_type,
        install_prefix=install_dir,
        extra_defines=defines,
        host_tools=False,
    )
    parallel = str(jobs) if jobs else '"$(nproc)"'
    return "\n".join(
        [
            "set -ex",  # each command is echoed into the log
            "command -v ninja >/dev/null 2>&1 && export CMAKE_GENERATOR=Ninja",
            'gtest=""',
            "[ -f /usr/src/googletest/CMakeLists.txt ] && "
            "gtest=-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/usr/src/googletest",
            f"{shlex.join(configure)} $gtest",
            f"cmake --build {shlex.quote(str(build_dir))} --parallel {parallel}",
            f"cmake --install {shlex.quote(str(build_dir))} --prefix {shlex.quote(str(install_dir))}",
        ]
    )


def build_spec(
    image: str, script: str, project: Project, *, sources: Path | None, user: str | None = None
) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` for a build container: the project mounted read-write
    at its own path (so paths in errors are the host's), the source cache read-only at its own path."""
    mounts = [Mount(project.root, project.root, read_only=False)]
    if sources is not None:
        mounts.append(Mount(sources.resolve(), sources.resolve()))
    return script_spec(image, script, mounts, ROLE_BUILD, project.root, working_dir=project.root, user=user)


def build_in_container(
    project: Project,
    image: str,
    *,
    gpu: bool,
    build_type: str,
    jobs: int | None,
    progress: Callable[[int, int, str], None] | None = None,
):
    """``tbgen build --docker`` for a C++ project: CMake runs in ``image`` (offline when the source cache
    holds the release) into <project>/build/docker/<image>, installing into <project>/build/install."""
    release = project.release
    sources = cached_sources(release.branch)
    build_dir = project.docker_build_dir(image)
    install_dir = project.install_dir
    for directory in (build_dir, install_dir):
        directory.mkdir(parents=True, exist_ok=True)  # made here, so owned by the user
    archs = ";".join(release.cuda_architectures) if gpu else None
    script = build_script(
        project,
        build_dir,
        install_dir,
        sources=sources,
        gpu=gpu,
        build_type=build_type,
        jobs=jobs,
        cuda_architectures=archs,
    )
    client = connect()
    ensure_image(client, image)
    remove_containers(orphans(tbgen_containers(client)))
    stepped = False

    def on_line(line: str) -> None:
        nonlocal stepped
        step = progress_of(line)
        if step is not None:
            stepped = True
            if progress is not None:
                progress(step[0], step[1], line)

    log_file = build_dir / LOG_NAME
    status = run_container(client, build_spec(image, script, project, sources=sources), log_file, on_line)
    if status != 0:
        error = first_error_line(log_file.read_text(errors="replace"))
        error = openable(error, build_dir, project.root) if error else f"exit status {status}"
        raise BuildError(
            f"The build in {image} failed: {error}\nFull log: {log_file}",
            "Fix the first error above; the log has the complete compiler and CMake output.",
        )
    return CMakeRun(install_dir=install_dir, log_file=log_file, configured=True, work_done=stepped)
