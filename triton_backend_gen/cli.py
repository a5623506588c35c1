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
) -> None:
    """Render every template over its option matrix and check the results."""
    from rich.markup import escape

    from triton_backend_gen.template_check import check_templates

    with _user_errors():
        report = check_templates(template or None, progress=lambda line: console.print(line, markup=False))
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
        if isinstance(exc, KeyboardInterrupt):
            err_console.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(130)
        return False


def main() -> None:
    app()
