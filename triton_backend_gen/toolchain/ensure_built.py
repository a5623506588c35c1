"""A backend that is built and loads: `tbgen build`'s build-and-check, and the "build if the sources changed"
step before every command that runs the project (test, bench, package, dev).

A local C++ build's library is checked against a tritonserver (its exports, its imports against the server's
libtritonserver, its dependencies: toolchain.symbols); which server is found here, through discovery.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from triton_backend_gen.discovery import ServerInstall, find_tritonserver
from triton_backend_gen.errors import BuildError, ServerError
from triton_backend_gen.findings import NOTE, Finding
from triton_backend_gen.project import Project
from triton_backend_gen.toolchain.build import (
    BuildResult,
    Progress,
    build_batching,
    build_kind,
    build_project,
)
from triton_backend_gen.toolchain.symbols import check_batch_strategy, check_library


def build_and_check(
    project: Project,
    *,
    server: Path | None = None,
    gpu: bool | None = None,
    build_type: str = "Release",
    jobs: int | None = None,
    clean: bool = False,
    progress: Progress | None = None,
    sanitize: tuple[str, ...] = (),
    docker: bool = False,
    image: str | None = None,
) -> BuildResult:
    """Build ``project``; a local C++ build's library is then checked against ``server`` (or the server tbgen
    finds), its findings in the result."""
    result = build_project(
        project,
        gpu=gpu,
        build_type=build_type,
        jobs=jobs,
        clean=clean,
        progress=progress,
        sanitize=sanitize,
        docker=docker,
        image=image,
    )
    checks_backend = build_kind(project) == "cpp" and not docker and result.artifact is not None
    if not checks_backend and not result.batchers:
        return result
    install, notes = server_for_check(server)
    findings = [*check_library(result.artifact, install, project.release)] if checks_backend else []
    findings += batch_strategy_findings(project, install)
    return dataclasses.replace(result, findings=(*findings, *notes))


def batch_strategy_findings(project: Project, install: ServerInstall | None) -> list[Finding]:
    """The check of each model's batching strategy (toolchain.symbols.check_batch_strategy); an error for a
    model whose strategy is not built."""
    findings = []
    for model in project.batched_models:
        library = model.batch_strategy_library
        if library.is_file():
            findings += check_batch_strategy(library, install, model.name)
        else:
            findings.append(
                Finding(
                    "error",
                    f"{model.name}'s batching strategy is not built ({library} is missing): "
                    f"run `tbgen build{project.path_argument()}`",
                )
            )
    return findings


def ensure_built(
    project: Project,
    server: Path | None,
    sanitize: tuple[str, ...] = (),
    *,
    docker: bool = False,
    image: str | None = None,
) -> None:
    """Bring the project's build up to date before a run (a no-op check, about a second, when it is).

    C++ projects are always built (they cannot run otherwise). A python project's native extension is rebuilt
    once it has been built (so edits to it are tested); never built, the model runs its numpy fallback."""
    kind = build_kind(project)
    if kind != "cpp" and (docker or not (project.native_build_dir / "CMakeCache.txt").is_file()):
        kind = None  # a native extension is built for this machine's Python, and only once asked for
    if kind is None and not project.batched_models:
        return
    if kind is None:
        result = build_and_check_batching(project, server)
    else:
        result = build_and_check(project, server=server, sanitize=sanitize, docker=docker, image=image)
    errors = [f.message for f in result.errors]
    if errors:
        raise BuildError(
            "The built library would not load: " + "; ".join(errors),
            f"Run `tbgen check {project.root}` for the details.",
        )


def build_and_check_batching(project: Project, server: Path | None) -> BuildResult:
    """Only the models' batching strategies built (batching/), and checked."""
    run = build_batching(project)
    install, notes = server_for_check(server)
    findings = (*batch_strategy_findings(project, install), *notes)
    libraries = tuple(model.batch_strategy_library for model in project.batched_models)
    return BuildResult(project, None, 0.0, bool(run and run.work_done), findings=findings, batchers=libraries)


def server_for_check(explicit: Path | None) -> tuple[ServerInstall | None, list[Finding]]:
    """The server to check against: ``explicit`` (an error when unusable), else the first found, else None
    with a note saying the server part is skipped."""
    if explicit is not None:
        return find_tritonserver(explicit), []
    try:
        return find_tritonserver(), []
    except ServerError:
        return None, [
            Finding(
                NOTE,
                "no tritonserver found: the library's imports were not checked "
                "against a server (pass --server PATH)",
            )
        ]
