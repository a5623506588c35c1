"""Commands that build and check: build, check (a built library; with --drift, the project against what tbgen
generates), validate (the model configurations)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from triton_backend_gen.cli.app import app
from triton_backend_gen.cli.options import (
    DockerOption,
    ImageOption,
    SanitizeOption,
    ServerPath,
    check_docker_options,
)
from triton_backend_gen.cli.output import (
    console,
    note,
    on_terminal,
    print_findings,
    say,
    user_errors,
    warning,
)
from triton_backend_gen.cli.scaffolding import check_drift
from triton_backend_gen.commands.check import check as check_library
from triton_backend_gen.discovery import gpus_visible
from triton_backend_gen.errors import UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config import find_configs, validate_tree
from triton_backend_gen.project import load_project, load_project_or_none
from triton_backend_gen.toolchain.build import parse_sanitizers
from triton_backend_gen.toolchain.ensure_built import build_and_check

progress = lazy_module("rich.progress")  # the progress displays: 25 ms of every tbgen start


@app.command()
def build(
    project: Annotated[Path, typer.Argument(help="The project to build.")] = Path("."),
    gpu: Annotated[
        Optional[bool],
        typer.Option("--gpu/--no-gpu", help="Build the CUDA path (default: the project's gpu answer)."),
    ] = None,
    build_type: Annotated[
        str, typer.Option("--build-type", help="Release, Debug or RelWithDebInfo.")
    ] = "Release",
    jobs: Annotated[
        Optional[int], typer.Option("--jobs", "-j", min=1, help="Parallel jobs (default: CPUs).")
    ] = None,
    clean: Annotated[bool, typer.Option("--clean", help="Remove the previous build first.")] = False,
    server: ServerPath = None,
    sanitize: SanitizeOption = None,
    docker: DockerOption = False,
    image: ImageOption = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model", "-m", help="Build what this model needs (nothing for a model of the python backend)."
        ),
    ] = None,
) -> None:
    """Configure, build and install the project's backend (or native extension) and its models' batching
    strategies (batching/), then check the libraries."""
    with user_errors(), _BuildProgress() as shown:
        check_docker_options(docker, image, gpu=False)
        sanitizers = parse_sanitizers(sanitize)
        loaded = load_project(project)
        chosen = loaded.model(model) if model is not None else None
        if chosen is not None and chosen.backend == "python" and not chosen.batch_strategy:
            say(f"Nothing to build for {model}: Triton's python backend serves it.")
            raise typer.Exit(0)
        result = build_and_check(
            loaded,
            gpu=gpu,
            build_type=build_type,
            jobs=jobs,
            clean=clean,
            progress=shown.step,
            server=server,
            sanitize=sanitizers,
            docker=docker,
            image=image,
        )
    for text in result.warnings:
        warning(text)
    for text in result.notes:
        note(text)
    verb = "Built" if result.work_done else "Up to date:"
    if result.artifact is not None:
        say(f"{result.artifact}  ({result.seconds:.1f}s, log: {result.log_file})", label=verb, style="green")
    for library in result.batchers:
        say(f"{library}  (batching strategy of {library.parent.name})", label=verb, style="green")
    if result.artifact is None and not result.batchers:
        raise typer.Exit(0)
    print_findings(result.findings)
    raise typer.Exit(1 if result.errors else 0)


class _BuildProgress:
    """A build's progress: a bar on a terminal; off it, a line at each quarter of the build tool's steps."""

    def __init__(self) -> None:
        columns = (
            progress.TextColumn("[bold]building[/bold]"),
            progress.BarColumn(),
            progress.MofNCompleteColumn(),
            progress.TimeElapsedColumn(),
            progress.TextColumn("{task.description}", markup=False),
        )
        self.bar = progress.Progress(*columns, console=console, transient=True) if on_terminal() else None
        self.task = self.bar.add_task("configuring", total=None) if self.bar is not None else None
        self.said = 0  # quarters said off a terminal

    def __enter__(self):
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc_info)

    def step(self, done: int, total: int, line: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total, description=line[:80])
        elif total and done * 4 // total > self.said:
            self.said = done * 4 // total
            say(f"building: {done}/{total} {line[:120]}")


@app.command()
def check(
    project: Annotated[Path, typer.Argument(help="A built C++ project, or a backend library (.so).")] = Path(
        "."
    ),
    server: ServerPath = None,
    docker: Annotated[
        bool,
        typer.Option(
            "--docker",
            help="Resolve the libraries it needs in a container of the "
            "release's tritonserver image, as the server there loads it.",
        ),
    ] = False,
    image: ImageOption = None,
    drift: Annotated[
        bool,
        typer.Option(
            "--drift",
            help="Instead: which generated files you edited, and whether the "
            "template or the Triton release is behind (exit 1: `tbgen update` is "
            "due).",
        ),
    ] = False,
) -> None:
    """Check a built backend library: its exports, its imports against the server, its dependencies."""
    if drift:
        check_drift(project, docker or server is not None or image is not None)
        return
    with user_errors():
        check_docker_options(docker, image, gpu=False)
        if docker and server is not None:
            raise UsageError(
                "--server names a local server; --docker checks in an image.", "Drop one of them."
            )
        library_file = project.is_file() and project.suffix == ".so"
        report = check_library(
            project if library_file else load_project(project), server=server, docker=docker, image=image
        )
    say(report.subject + (f" against {report.against}" if report.against else ""))
    print_findings(report.findings)
    if report.errors:
        say(f"{len(report.errors)} error(s)", style="red")
        raise typer.Exit(1)
    say("OK", style="green")


@app.command()
def validate(
    path: Annotated[Path, typer.Argument(help="A project, a model repository or one config.pbtxt.")] = Path(
        "."
    ),
) -> None:
    """Validate every config.pbtxt under PATH with Triton's ModelConfig schema and semantic checks."""
    with user_errors():
        if not path.exists():
            raise UsageError(
                f"{path} does not exist.", "Pass a project, a model repository or a config.pbtxt."
            )
        configs = find_configs(path)
        if not configs:
            raise UsageError(
                f"{path} holds no config.pbtxt.", "Pass a project, a model repository or a config.pbtxt."
            )
        project = load_project_or_none(path if path.is_dir() else path.parent)
        findings = validate_tree(path, project, gpus_visible=gpus_visible())
    for finding in findings:
        say(str(finding), style="red" if finding.severity == "error" else "yellow")
    errors = sum(1 for f in findings if f.severity == "error")
    checked = f"{len(configs)} configuration{'s' if len(configs) != 1 else ''} checked under {path}"
    if errors:
        say(f"{errors} error(s); {checked}", style="red")
        raise typer.Exit(1)
    say(f"OK: {checked}", style="green")
