"""``tbgen test``: build what is out of date, start the project's server, run the smoke suite, stop the
server.

The command sequences the stages (toolchain's build, runtime's server, smoke's suite) and records how long
the models took to load, for `tbgen deploy`'s startup probe; it decides nothing about any of them.
"""

from __future__ import annotations

from pathlib import Path

from triton_backend_gen.errors import UsageError
from triton_backend_gen.project import Project
from triton_backend_gen.runtime import prepare_server
from triton_backend_gen.runtime.load_time import record_load_time
from triton_backend_gen.smoke.suite import SuiteProgress, SuiteReport, run_suite
from triton_backend_gen.toolchain.ensure_built import ensure_built


def run_project_tests(
    project: Project,
    *,
    server: Path | None = None,
    fuzz: int = 0,
    seed: int = 0,
    sanitize: tuple[str, ...] = (),
    docker: bool = False,
    image: str | None = None,
    gpu: bool = False,
    packaged: bool = False,
    instance_kind: str | None = None,
    model: str | None = None,
    progress: SuiteProgress | None = None,
) -> SuiteReport:
    """Smoke-test every model of ``project`` (or ``model``) in a real server, started and stopped here.

    With ``sanitize`` the backend is built with those sanitizers, and any sanitizer report in the server
    log (read after the server stopped) fails the run. With ``docker`` the backend is built and served in a
    container of ``image`` (default: the NGC image of the project's release), with all GPUs when ``gpu``;
    ``packaged`` tests the image of `tbgen package` as it is (nothing built, nothing mounted);
    ``instance_kind`` ("cpu", "gpu") serves a copy of the models with instances of that kind."""
    check_test_options(
        sanitize=sanitize, docker=docker, gpu=gpu, packaged=packaged, instance_kind=instance_kind
    )
    project.model(model)  # UsageError for a model the project does not have, before anything runs
    progress = progress or SuiteProgress()
    if not packaged:
        if project.is_cpp or project.native is not None:
            progress.phase("building what changed")
        ensure_built(project, server, sanitize, docker=docker, image=image)
    triton = prepare_server(
        project,
        server=server,
        docker=docker or packaged,
        image=image,
        gpu=gpu,
        mount=not packaged,
        instance_kind=instance_kind,
    )
    return run_suite(
        project,
        triton,
        model=model,
        fuzz=fuzz,
        seed=seed,
        progress=progress,
        on_ready=lambda seconds: record_load_time(project, seconds, triton.describe()),
    )


def check_test_options(
    *, sanitize: tuple[str, ...], docker: bool, gpu: bool, packaged: bool, instance_kind: str | None
) -> None:
    """UsageError for option combinations a test run cannot honour."""
    if docker and sanitize:
        raise UsageError(
            "--sanitize runs with a local server; it cannot be combined with --docker.",
            "Drop one of --sanitize and --docker.",
        )
    if gpu and not docker:
        raise UsageError(
            "--gpu asks a container for the GPUs; a local server sees this machine's GPUs already.",
            "Add --docker, or drop --gpu.",
        )
    if packaged and instance_kind:
        raise UsageError(
            "--instance-kind rewrites a copy of the project's models; a packaged image serves its own.",
            "Drop --instance-kind, or test the project with --docker instead of --packaged.",
        )
