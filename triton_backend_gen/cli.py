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
    smoke: Annotated[bool, typer.Option("--smoke", help="Also run the smoke suite on each variant in a real server.")] = False,
) -> None:
    """Render every template over its option matrix and check the results."""
    from rich.markup import escape

    from triton_backend_gen.template_check import check_templates

    with _user_errors():
        report = check_templates(template or None, smoke=smoke, progress=lambda line: console.print(line, markup=False))
    for failure in report.failures:
        console.print(f"[red]FAIL[/red] {escape(failure)}", highlight=False)
    colour = "red" if report.failures else "green"
    console.print(f"[{colour}]{report.variants} variants, {report.files} files, {len(report.failures)} failures[/]")
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

    with _user_errors():
        if not path.exists():
            from triton_backend_gen.errors import UsageError

            raise UsageError(f"{path} does not exist.", "Pass a project, a model repository or a config.pbtxt.")
        findings = validate_tree(path)
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


@app.command()
def serve(
    project: Annotated[Path, typer.Argument(help="A project or a model repository.")] = Path("."),
    server: ServerPath = None,
    http_port: Annotated[int, typer.Option(help="HTTP port (0: a free one).")] = 0,
    grpc_port: Annotated[int, typer.Option(help="gRPC port (0: a free one).")] = 0,
    metrics_port: Annotated[int, typer.Option(help="Metrics port (0: a free one).")] = 0,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Stream the server log.")] = False,
) -> None:
    """Start Triton on the project's model repository until Ctrl-C."""
    from triton_backend_gen.runtime.server import start_server, stop_on_signals

    with _user_errors(), stop_on_signals():
        triton = start_server(
            project, server=server, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
            host=host, verbose=verbose,
        )
        with triton:
            _print_server(triton)
            console.print("Serving; press Ctrl-C to stop.")
            _wait_while_running(triton, follow_log=verbose)
    console.print("Server stopped.")


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
    console.print(triton.install.describe(), highlight=False)
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
) -> None:
    """Start a real Triton, load the project's backend and run the smoke suite against it."""
    from rich.table import Table

    from triton_backend_gen.testrun import run_project_tests

    with _user_errors():
        report = run_project_tests(project, server=server, fuzz=fuzz, seed=seed)
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
def doctor(server: ServerPath = None) -> None:
    """Check what tbgen needs: the tritonservers it can find, and how to fix what is missing."""
    from rich.table import Table

    from triton_backend_gen.runtime.discovery import discover_servers

    table = Table(title="Triton servers, in the order tbgen looks for them", title_justify="left")
    for column in ("source", "found", "note"):
        table.add_column(column)
    chosen = False
    for source, install, note in discover_servers(server):
        if install is not None:
            mark = "[green]use[/green]" if not chosen else "found"
            chosen = True
            table.add_row(source, f"{mark} {install.version}", escape_markup(note or str(install.executable)))
        else:
            table.add_row(source, "[dim]no[/dim]", escape_markup(note))
    console.print(table)
    if not chosen:
        console.print("[red]No tritonserver found.[/red] Fix: pip install 'triton-backend-gen[server]'")
        raise typer.Exit(1)


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
