"""tbgen's command line: one small function per command, each calling one stage function.

Heavy modules (cookiecutter, protobuf, tritonclient, docker) are imported inside the commands that need them,
so ``tbgen --help`` starts fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console

from triton_backend_gen import __version__
from triton_backend_gen.errors import TbgenError

if TYPE_CHECKING:
    from triton_backend_gen.errors import AnswerError
    from triton_backend_gen.scaffold.templates import Option

app = typer.Typer(
    name="tbgen",
    help="Scaffold, build and test custom backends for NVIDIA Triton Inference Server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
templates_app = typer.Typer(help="List and check tbgen's project templates.", no_args_is_help=True)
app.add_typer(templates_app, name="templates")
deps_app = typer.Typer(help="Triton's core/common/backend sources in tbgen's cache (for offline builds).",
                       no_args_is_help=True)
app.add_typer(deps_app, name="deps")

console = Console()
err_console = Console(stderr=True)


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"tbgen {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Scaffold, build and test custom backends for NVIDIA Triton Inference Server."""


class RichPrompter:
    """Asks for answers on a terminal with Rich prompts."""

    def ask(self, option: Option, default: Any) -> Any:
        from rich.prompt import Confirm, Prompt

        if option.kind is bool:
            return Confirm.ask(option.help, default=bool(default), console=console)
        if option.choices:
            return Prompt.ask(option.help, choices=list(option.choices), default=str(default), console=console)
        return Prompt.ask(option.help, default=str(default), console=console)

    def show_error(self, error: AnswerError) -> None:
        console.print(f"[red]{error.message}[/red] {error.hint}")


@app.command()
def new(
    path: Annotated[Path, typer.Argument(help="Project directory to create; its name is the project name.")],
    template: Annotated[
        Optional[str], typer.Option("--template", "-t", help="cpp-backend, python-backend or decoupled-backend.")
    ] = None,
    set_: Annotated[
        Optional[list[str]], typer.Option("--set", help="Set any answer: --set key=value (repeatable).")
    ] = None,
    gpu: Annotated[Optional[bool], typer.Option("--gpu/--no-gpu", help="CUDA kernels (cpp-backend).")] = None,
    triton_version: Annotated[
        Optional[str], typer.Option("--triton-version", help="Target release: 24.10, r24.10 or 2.51.0.")
    ] = None,
    backend_name: Annotated[Optional[str], typer.Option("--backend-name", help="Backend name.")] = None,
    model_name: Annotated[Optional[str], typer.Option("--model-name", help="Name of the example model.")] = None,
    answers_file: Annotated[
        Optional[Path], typer.Option("--answers", help="Answers from a file: a project's tbgen.toml, or TOML/JSON.")
    ] = None,
    no_input: Annotated[bool, typer.Option("--no-input", help="Never prompt; take defaults.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Render into an existing directory, overwriting template files only.")
    ] = False,
) -> None:
    """Create a backend project from a template."""
    from triton_backend_gen.scaffold import read_answers_file, render_new_project
    from triton_backend_gen.scaffold.answers import parse_set_options

    with _user_errors():
        given: dict[str, Any] = read_answers_file(answers_file) if answers_file else {}
        flags = {"gpu": gpu, "triton_version": triton_version, "backend_name": backend_name, "model_name": model_name}
        given.update({key: value for key, value in flags.items() if value is not None})
        given.update(parse_set_options(set_ or []))
        interactive = not no_input and sys.stdin.isatty()
        template = template or given.pop("template", None) or _ask_template(interactive)
        given.pop("template", None)
        prompter = RichPrompter() if interactive else None
        project = render_new_project(template, path, given, force=force, prompter=prompter)
    console.print(f"[green]Created[/green] {project} from [bold]{template}[/bold]")
    console.print(f"Next: cd {path} and read README.md")


def _ask_template(interactive: bool) -> str:
    from triton_backend_gen.scaffold import list_templates

    names = [t.name for t in list_templates()]
    if not interactive:
        return "cpp-backend"
    from rich.prompt import Prompt

    return Prompt.ask("Template", choices=names, default="cpp-backend", console=console)


@templates_app.command("list")
def templates_list() -> None:
    """Show the templates, their options and defaults."""
    from rich.table import Table

    from triton_backend_gen.scaffold import list_templates

    for spec in list_templates():
        table = Table(title=f"{spec.name} {spec.version}: {spec.description}", title_justify="left")
        table.add_column("option")
        table.add_column("default")
        table.add_column("choices / type")
        for option in spec.options:
            choices = ", ".join(option.choices) if option.choices else option.kind.__name__
            table.add_row(option.key, str(option.default), choices)
        console.print(table)


@templates_app.command("check")
def templates_check(
    template: Annotated[
        Optional[list[str]], typer.Option("--template", "-t", help="Only these templates (repeatable).")
    ] = None,
    build: Annotated[bool, typer.Option("--build", help="Also build each variant that has something to build "
                                        "(C++ from the Triton source cache, native Python extensions).")] = False,
    smoke: Annotated[bool, typer.Option("--smoke", help="Also build and run the smoke suite on each variant in a "
                                        "real server.")] = False,
    triton_version: Annotated[
        Optional[list[str]], typer.Option("--triton-version", help="Render the matrix for these releases "
                                          "(repeatable; default: the server's with --smoke, else the newest).")
    ] = None,
) -> None:
    """Render every template over its option matrix and check the results."""
    from rich.markup import escape

    from triton_backend_gen import versions as matrix
    from triton_backend_gen.template_check import check_templates

    with _user_errors():
        releases = [matrix.resolve(v).container for v in triton_version or []]
        report = check_templates(template or None, build=build, smoke=smoke, releases=releases,
                                 progress=lambda line: console.print(line, markup=False, highlight=False))
    for skipped in report.skipped:
        console.print(f"[yellow]SKIP[/yellow] {escape(skipped)}", highlight=False)
    for failure in report.failures:
        console.print(f"[red]FAIL[/red] {escape(failure)}", highlight=False)
    colour = "red" if report.failures else "green"
    console.print(f"[{colour}]{report.variants} variants, {report.files} files, {len(report.failures)} failures"
                  f"{f', {len(report.skipped)} not built' if report.skipped else ''}[/]")
    raise typer.Exit(1 if report.failures else 0)


@app.command()
def versions() -> None:
    """Show the supported Triton releases and what each implies."""
    from rich.table import Table

    from triton_backend_gen import versions as matrix

    table = Table(title="Triton releases (newest is the default)", title_justify="left")
    for column in ("release", "branch", "server", "python", "CUDA", "backend API", "server API", "CUDA archs", "CMake"):
        table.add_column(column)
    for r in matrix.RELEASES:
        table.add_row(
            r.container, r.branch, r.server_version, r.python, r.cuda,
            "%d.%d" % r.backend_api, "%d.%d" % r.server_api, ";".join(r.cuda_architectures), f">= {r.min_cmake}",
        )
    console.print(table)


@app.command()
def validate(
    path: Annotated[Path, typer.Argument(help="A project, a model repository or one config.pbtxt.")] = Path("."),
) -> None:
    """Validate every config.pbtxt under PATH with Triton's ModelConfig schema and semantic checks."""
    from triton_backend_gen.model_config import validate_tree
    from triton_backend_gen.runtime.discovery import gpus_visible

    with _user_errors():
        if not path.exists():
            from triton_backend_gen.errors import UsageError

            raise UsageError(f"{path} does not exist.", "Pass a project, a model repository or a config.pbtxt.")
        findings = validate_tree(path, gpus_visible=gpus_visible())
    for finding in findings:
        colour = "red" if finding.severity == "error" else "yellow"
        console.print(f"[{colour}]{finding}[/]", highlight=False)
    errors = sum(1 for f in findings if f.severity == "error")
    if errors:
        console.print(f"[red]{errors} error(s)[/red]")
        raise typer.Exit(1)
    console.print(f"[green]OK[/green] {path}")


ServerPath = Annotated[
    Optional[Path], typer.Option("--server", help="A tritonserver executable (default: $TRITONSERVER, PATH, "
                                 "/opt/tritonserver, then the embedded wheel).")
]
DockerOption = Annotated[
    bool, typer.Option("--docker", help="Run in a container of the release's tritonserver image (docker SDK).")
]
ImageOption = Annotated[
    Optional[str], typer.Option("--image", help="The image for --docker (default: "
                                "nvcr.io/nvidia/tritonserver:<release>-py3).")
]
GpuRequestOption = Annotated[
    bool, typer.Option("--gpu", help="With --docker: give the container the GPUs (needs the NVIDIA runtime).")
]
SanitizeOption = Annotated[
    Optional[str], typer.Option("--sanitize", help="Build the C++ backend with sanitizers: address,undefined "
                                "(the server then runs with their runtimes preloaded).")
]


@app.command()
def serve(
    project: Annotated[Path, typer.Argument(help="A project or a model repository.")] = Path("."),
    server: ServerPath = None,
    http_port: Annotated[int, typer.Option(help="HTTP port (0: a free one).")] = 0,
    grpc_port: Annotated[int, typer.Option(help="gRPC port (0: a free one).")] = 0,
    metrics_port: Annotated[int, typer.Option(help="Metrics port (0: a free one).")] = 0,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Stream the server log.")] = False,
    docker: DockerOption = False,
    image: ImageOption = None,
    gpu: GpuRequestOption = False,
) -> None:
    """Start Triton on the project's model repository until Ctrl-C."""
    from triton_backend_gen.runtime.server import start_server, stop_on_signals

    with _user_errors(), stop_on_signals():
        _check_docker_options(docker, image, gpu)
        triton = start_server(
            project, server=server, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
            host=host, verbose=verbose, docker=docker, image=image, gpu=gpu,
        )
        with triton:
            _print_server(triton)
            console.print("Serving; press Ctrl-C to stop.")
            _wait_while_running(triton, follow_log=verbose)
    console.print("Server stopped.")


def _check_docker_options(docker: bool, image: str | None, gpu: bool) -> None:
    from triton_backend_gen.errors import UsageError

    if image and not docker:
        raise UsageError("--image names the image for --docker.", "Add --docker, or drop --image.")
    if gpu and not docker:
        raise UsageError("--gpu asks a container for the GPUs; a local server sees this machine's GPUs already.",
                         "Add --docker, or drop --gpu.")


def _wait_while_running(triton, follow_log: bool) -> None:
    """Block until Ctrl-C (or SIGTERM); with ``follow_log``, print the server log as it grows."""
    import time

    from triton_backend_gen.errors import ServerError

    position = 0
    while triton.running:
        if follow_log:
            with open(triton.log_file, errors="replace") as log:
                log.seek(position)
                chunk = log.read()
                position = log.tell()
            if chunk:
                console.out(chunk, end="", highlight=False)
        time.sleep(0.2)
    raise ServerError(
        "tritonserver exited on its own.", "Its log:\n" + "\n".join(triton.relevant_log_lines()) + f"\nFull log: {triton.log_file}"
    )


def _print_server(triton) -> None:
    from rich.table import Table

    for warning in triton.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    console.print(triton.describe(), highlight=False)
    endpoints = Table(title="Endpoints", title_justify="left")
    for column in ("protocol", "address"):
        endpoints.add_column(column)
    endpoints.add_row("HTTP", triton.http_url)
    endpoints.add_row("gRPC", triton.grpc_url)
    endpoints.add_row("metrics", triton.metrics_url)
    console.print(endpoints)
    models = Table(title="Models", title_justify="left")
    for column in ("model", "version", "state", "reason"):
        models.add_column(column)
    for m in triton.model_states():
        colour = "green" if m.state == "READY" else "red"
        models.add_row(m.name, m.version, f"[{colour}]{m.state or 'not loaded'}[/]", escape_markup(m.reason))
    console.print(models)
    console.print(f"Log: {triton.log_file}", highlight=False)


def escape_markup(text: str) -> str:
    from rich.markup import escape

    return escape(text)


@app.command("test")
def test_(
    project: Annotated[Path, typer.Argument(help="The project to test.")] = Path("."),
    server: ServerPath = None,
    junit_xml: Annotated[Optional[Path], typer.Option("--junit-xml", help="Write the results as JUnit XML.")] = None,
    fuzz: Annotated[int, typer.Option("--fuzz", help="Also send N randomised malformed requests.")] = 0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fuzzer.")] = 0,
    sanitize: SanitizeOption = None,
    docker: DockerOption = False,
    image: ImageOption = None,
    gpu: GpuRequestOption = False,
    packaged: Annotated[bool, typer.Option("--packaged", help="With --docker --image: test the image as it is "
                                           "(an image made by tbgen package; nothing built or mounted).")] = False,
) -> None:
    """Start a real Triton, load the project's backend and run the smoke suite against it."""
    from triton_backend_gen.testrun import run_project_tests
    from triton_backend_gen.toolchain.build import parse_sanitizers

    with _user_errors():
        _check_docker_options(docker, image, gpu)
        if packaged and not (docker and image):
            from triton_backend_gen.errors import UsageError

            raise UsageError("--packaged tests an image made by tbgen package.", "Add --docker --image TAG.")
        report = run_project_tests(project, server=server, fuzz=fuzz, seed=seed, sanitize=parse_sanitizers(sanitize),
                                   docker=docker, image=image, gpu=gpu, packaged=packaged)
    _report_tests(report, junit_xml)


def _report_tests(report, junit_xml: Path | None) -> None:
    """Print a test run's results (and write them as JUnit XML); exit 1 unless every check passed."""
    from rich.table import Table

    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    table = Table(title=f"{report.project.name}: smoke tests against {report.server}", title_justify="left")
    for column in ("check", "protocol", "result", "detail", "seconds"):
        table.add_column(column)
    for r in report.results:
        verdict = "[green]pass[/green]" if r.passed else "[red]FAIL[/red]"
        table.add_row(r.name, r.protocol, verdict, escape_markup(r.detail), f"{r.seconds:.2f}")
    console.print(table)
    if junit_xml:
        from triton_backend_gen.smoke import write_junit_xml

        write_junit_xml(report.results, junit_xml, suite=report.project.name)
        console.print(f"JUnit XML: {junit_xml}", highlight=False)
    failed = sum(not r.passed for r in report.results)
    colour = "red" if failed else "green"
    console.print(f"[{colour}]{len(report.results) - failed} passed, {failed} failed[/]  (server log: {report.log_file})")
    raise typer.Exit(1 if failed or not report.results else 0)


@app.command()
def infer(
    model: Annotated[str, typer.Argument(help="Model name.")],
    input_: Annotated[
        Optional[list[str]], typer.Option("--input", "-i", help="NAME=FILE.npy or NAME=JSON (repeatable); "
                                          "inputs not given come from the project's reference.py.")
    ] = None,
    project: Annotated[Path, typer.Option("--project", help="The project whose server to start.")] = Path("."),
    url: Annotated[Optional[str], typer.Option("--url", help="Use a running server (HTTP host:port) instead.")] = None,
    server: ServerPath = None,
) -> None:
    """Send one request and print the outputs."""
    from triton_backend_gen.infer import infer_once

    with _user_errors():
        outputs = infer_once(model, input_ or [], project=project, url=url, server=server)
    for name, array in outputs.items():
        console.print(f"[bold]{name}[/bold] {array.dtype} {list(array.shape)}")
        console.print(array, highlight=False)


@app.command()
def doctor(
    server: ServerPath = None,
    triton_version: Annotated[
        Optional[str], typer.Option("--triton-version", help="Release to check for (default: the project's, else "
                                    "the newest).")
    ] = None,
) -> None:
    """Check what tbgen needs (CMake, compiler, Ninja, RapidJSON, googletest, nvcc, Triton's sources, servers,
    Docker) and print the command that fixes each missing piece."""
    from rich.table import Table

    from triton_backend_gen.doctor import FAIL, OK, diagnose

    with _user_errors():
        diagnoses = diagnose(server, triton_version)
    table = Table(title="What tbgen needs, and how to fix what is missing", title_justify="left")
    for column in ("check", "status", "found", "fix"):
        table.add_column(column)
    colours = {OK: "green", FAIL: "red"}
    for d in diagnoses:
        colour = colours.get(d.status, "yellow")
        table.add_row(d.name, f"[{colour}]{d.status}[/]", escape_markup(d.found), escape_markup(d.fix))
    console.print(table)
    failed = [d.name for d in diagnoses if d.failed]
    if failed:
        console.print(f"[red]Missing what tbgen requires:[/red] {', '.join(failed)}; run the fix shown for each.")
        raise typer.Exit(1)


ReleaseOption = Annotated[
    Optional[str], typer.Option("--triton-version", help="Release: 24.10, r24.10 or 2.51.0 (default: the project's, "
                                "else the newest).")
]


@deps_app.command("fetch")
def deps_fetch(
    triton_version: ReleaseOption = None,
    organization: Annotated[
        Optional[str], typer.Option("--organization", help="URL or directory holding core.git, common.git and "
                                    "backend.git (default: $TRITON_REPO_ORGANIZATION, else Triton's GitHub).")
    ] = None,
    googletest_url: Annotated[
        Optional[str], typer.Option("--googletest-url", help="A mirror of the googletest archive common asks for.")
    ] = None,
    googletest: Annotated[bool, typer.Option("--googletest/--no-googletest", help="Also fetch googletest.")] = True,
    force: Annotated[bool, typer.Option("--force", help="Replace a cached release.")] = False,
) -> None:
    """Clone core, common and backend at the release branch (and googletest) into tbgen's cache."""
    from triton_backend_gen.toolchain.sources import fetch_sources, target_release

    with _user_errors():
        release, _ = target_release(triton_version)
        entry = fetch_sources(release, organization=organization, force=force, googletest=googletest,
                              googletest_url=googletest_url, progress=lambda line: console.print(line, markup=False))
    console.print(f"[green]Cached[/green] {release.branch} in {entry}", highlight=False)


@deps_app.command("add")
def deps_add(
    from_: Annotated[Path, typer.Option("--from", help="A directory holding core/, common/ and backend/.")],
    triton_version: ReleaseOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a cached release.")] = False,
) -> None:
    """Register Triton sources you already have (air-gapped sites): they are checked and copied into the cache."""
    from triton_backend_gen.toolchain.sources import add_sources, target_release

    with _user_errors():
        release, _ = target_release(triton_version)
        entry = add_sources(from_, release, force=force)
    console.print(f"[green]Cached[/green] {release.branch} in {entry}", highlight=False)


@deps_app.command("list")
def deps_list() -> None:
    """Show the cached releases, each repository's commit (or "archive" for a tree without git)."""
    from rich.table import Table

    from triton_backend_gen.toolchain.sources import GOOGLETEST, REPOSITORIES, list_sources, sources_dir

    entries = list_sources()
    if not entries:
        console.print(f"No Triton sources cached in {sources_dir()}. Fill it with `tbgen deps fetch`.", highlight=False)
        return
    table = Table(title=f"Triton sources in {sources_dir()}", title_justify="left")
    for column in ("release", *REPOSITORIES, GOOGLETEST, "complete"):
        table.add_column(column)
    for entry in entries:
        cells = [entry.repositories.get(name) or "[red]missing[/red]" for name in REPOSITORIES]
        cells.append(entry.repositories.get(GOOGLETEST) or "[dim]system[/dim]")
        table.add_row(entry.branch, *cells, "[green]yes[/green]" if entry.complete else "[red]no[/red]")
    console.print(table)


@app.command()
def build(
    project: Annotated[Path, typer.Argument(help="The project to build.")] = Path("."),
    gpu: Annotated[
        Optional[bool], typer.Option("--gpu/--no-gpu", help="Build the CUDA path (default: the project's gpu answer).")
    ] = None,
    build_type: Annotated[str, typer.Option("--build-type", help="Release, Debug or RelWithDebInfo.")] = "Release",
    jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, help="Parallel jobs (default: CPUs).")] = None,
    clean: Annotated[bool, typer.Option("--clean", help="Remove the previous build first.")] = False,
    server: ServerPath = None,
    sanitize: SanitizeOption = None,
    docker: DockerOption = False,
    image: ImageOption = None,
) -> None:
    """Configure, build and install the project's backend (or native extension), then check the library."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from triton_backend_gen.toolchain.build import build_project, parse_sanitizers

    columns = (TextColumn("[bold]building[/bold]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}", markup=False))
    with _user_errors(), Progress(*columns, console=console, transient=True) as bar:
        _check_docker_options(docker, image, gpu=False)
        task = bar.add_task("configuring", total=None)

        def progress(done: int, total: int, line: str) -> None:
            bar.update(task, completed=done, total=total, description=line[:80])

        result = build_project(project, gpu=gpu, build_type=build_type, jobs=jobs, clean=clean, progress=progress,
                               server=server, sanitize=parse_sanitizers(sanitize), docker=docker, image=image)
    for note in result.notes:
        console.print(f"[dim]note:[/dim] {escape_markup(note)}", highlight=False)
    if result.artifact is None:
        raise typer.Exit(0)
    verb = "Built" if result.work_done else "Up to date:"
    console.print(f"[green]{verb}[/green] {result.artifact}  ({result.seconds:.1f}s, log: {result.log_file})",
                  highlight=False)
    _print_findings(result.findings)
    raise typer.Exit(1 if result.errors else 0)


def _print_findings(findings) -> None:
    for finding in findings:
        colour = "red" if finding.severity == "error" else "dim"
        console.print(f"[{colour}]{finding.severity}:[/] {escape_markup(finding.message)}", highlight=False)


@app.command()
def check(
    project: Annotated[Path, typer.Argument(help="A built C++ project, or a backend library (.so).")] = Path("."),
    server: ServerPath = None,
) -> None:
    """Check a built backend library: its exports, its imports against the server, its dependencies."""
    from triton_backend_gen.toolchain.symbols import check_project

    with _user_errors():
        report = check_project(project, server=server)
    console.print(f"{report.library}" + (f" against {report.server}" if report.server else ""), highlight=False)
    _print_findings(report.findings)
    if report.errors:
        console.print(f"[red]{len(report.errors)} error(s)[/red]")
        raise typer.Exit(1)
    console.print("[green]OK[/green]")


@app.command()
def bench(
    project: Annotated[Path, typer.Argument(help="The project whose model to load.")] = Path("."),
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model (default: the project's first).")] = None,
    protocol: Annotated[str, typer.Option("--protocol", help="grpc or http.")] = "grpc",
    concurrency: Annotated[str, typer.Option("--concurrency", help="Concurrency levels, comma-separated.")] = "1,8,32",
    duration: Annotated[str, typer.Option("--duration", help="Measurement time per level: 10s, 500ms, 2m.")] = "10s",
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Batch size of each request.")] = 1,
    tool: Annotated[str, typer.Option("--tool", help="auto (perf_analyzer when found), perf_analyzer or builtin "
                                      "(tbgen's asyncio gRPC generator).")] = "auto",
    url: Annotated[Optional[str], typer.Option("--url", help="A running server (HTTP host:port; gRPC on the next "
                                               "port, or give HTTP,GRPC) instead of starting one.")] = None,
    json_file: Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON.")] = None,
    compare_with: Annotated[Optional[Path], typer.Option("--compare", help="A report of an earlier run (--json): "
                                                         "print this run's ratios to it.")] = None,
    server: ServerPath = None,
) -> None:
    """Load a model at several concurrency levels: throughput, latency percentiles, server queue/compute, CPU."""
    from rich.table import Table

    from triton_backend_gen.bench import BenchReport, compare, parse_concurrency, parse_duration, run_bench

    with _user_errors():
        levels, seconds = parse_concurrency(concurrency), parse_duration(duration)
        other = BenchReport.read(compare_with) if compare_with else None
        report = run_bench(project, model=model, protocol=protocol, concurrency=levels, seconds=seconds,
                           batch_size=batch_size, tool=tool, url=url, server=server,
                           progress=lambda line: console.print(line, markup=False, highlight=False))
    table = Table(title=f"{report.model} ({report.protocol}, batch {report.batch_size}, {report.tool}) against "
                  f"{report.server}", title_justify="left")
    decoupled = any(level.responses_per_s for level in report.levels)
    columns = ["conc", "infer/s", *(["resp/s"] if decoupled else []), "p50", "p90", "p99", "queue", "compute",
               "client CPU", "server CPU", "errors"]
    for column in columns:
        table.add_column(column, justify="right")
    for level in report.levels:
        table.add_row(str(level.concurrency), f"{level.throughput:,.1f}",
                      *([f"{level.responses_per_s:,.1f}"] if decoupled else []),
                      f"{level.p50_us:,.0f}", f"{level.p90_us:,.0f}", f"{level.p99_us:,.0f}",
                      f"{level.server_queue_us:,.1f}", f"{level.server_compute_us:,.1f}",
                      f"{level.client_cpu:.0%}", f"{level.server_cpu:.0%}", str(level.errors))
    console.print(table)
    console.print("[dim]Latencies (p50-p99) and the server's queue and compute times per request in microseconds; "
                  "CPU: share of one core over the level (client and server share this machine's cores).[/dim]")
    if json_file:
        report.write(json_file)
        console.print(f"JSON: {json_file}", highlight=False)
    if other is not None:
        ratios = Table(title=f"This run / {compare_with}", title_justify="left")
        for column in ("concurrency", "throughput", "p50 latency", "p99 latency"):
            ratios.add_column(column, justify="right")
        for ratio in compare(report, other):
            ratios.add_row(str(ratio.concurrency), f"{ratio.throughput:.2f}x", f"{ratio.p50:.2f}x", f"{ratio.p99:.2f}x")
        console.print(ratios)


@app.command()
def package(
    project: Annotated[Path, typer.Argument(help="The project to package.")] = Path("."),
    image_tag: Annotated[Optional[str], typer.Option("--image-tag", help="Tag of the image (default: "
                                                    "<project>:latest).")] = None,
    base_image: Annotated[Optional[str], typer.Option("--base-image", help="BASE_IMAGE of the Dockerfile (default: "
                                                      "the release's tritonserver image).")] = None,
    test: Annotated[bool, typer.Option("--test", help="Then run the smoke suite against a container of the "
                                       "image.")] = False,
) -> None:
    """Build the project's Dockerfile into a deployable image: the server, the backend and /models."""
    from triton_backend_gen.package import package_project

    with _user_errors():
        result = package_project(project, tag=image_tag, base_image=base_image,
                                 progress=lambda line: console.print(line[:100], markup=False, highlight=False))
    source = "Triton's sources from tbgen's cache" if result.offline else "the Dockerfile as it is"
    console.print(f"[green]Built[/green] {result.tag} ({result.image_id[:19]}) from {source}; log: {result.log_file}",
                  highlight=False)
    if test:
        from triton_backend_gen.testrun import run_project_tests

        with _user_errors():
            report = run_project_tests(project, image=result.tag, packaged=True)
        _report_tests(report, junit_xml=None)


@app.command()
def clean(
    containers: Annotated[bool, typer.Option("--containers", help="Stop and remove every container with tbgen's "
                                             "label (left behind by a killed tbgen).")] = False,
) -> None:
    """Remove what tbgen left behind."""
    from triton_backend_gen.errors import UsageError

    with _user_errors():
        if not containers:
            raise UsageError("Say what to clean.", "tbgen clean --containers")
        from triton_backend_gen.runtime.container import connect, remove_containers, tbgen_containers

        removed = remove_containers(tbgen_containers(connect()))
    console.print(f"Removed {len(removed)} container(s){': ' + ', '.join(removed) if removed else ''}.",
                  highlight=False)


class _user_errors:
    """Turn a TbgenError into a Rich message and its exit code (no traceback for user mistakes)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            return False
        if isinstance(exc, TbgenError):
            err_console.print(f"[bold red]error:[/bold red] {exc.message}", highlight=False)
            if exc.hint:
                err_console.print(f"[dim]hint:[/dim] {exc.hint}", highlight=False)
            raise typer.Exit(exc.exit_code)
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or SIGTERM/SIGHUP turned into one by the runtime
            err_console.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(getattr(exc, "exit_code", 130))
        return False


def main() -> None:
    app()
