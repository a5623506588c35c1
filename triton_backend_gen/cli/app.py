"""The Typer application and its command groups; the command modules register on them."""

from __future__ import annotations

from typing import Annotated

import typer

from triton_backend_gen import __version__
from triton_backend_gen.cli.output import say

app = typer.Typer(
    name="tbgen",
    help="Scaffold, build and test custom backends for NVIDIA Triton Inference Server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
templates_app = typer.Typer(help="List and check tbgen's project templates.", no_args_is_help=True)
app.add_typer(templates_app, name="templates")
deps_app = typer.Typer(
    help="Triton's core/common/backend sources in tbgen's cache (for offline builds).", no_args_is_help=True
)
app.add_typer(deps_app, name="deps")
add_app = typer.Typer(
    help="Add a piece to a project: a model, or a third-party library a C++ backend links.",
    no_args_is_help=True,
)
app.add_typer(add_app, name="add")
remove_app = typer.Typer(help="Remove what `tbgen add` added to a project.", no_args_is_help=True)
app.add_typer(remove_app, name="remove")
env_app = typer.Typer(
    help="Python environments of python-backend models (their requirements.txt).", no_args_is_help=True
)
app.add_typer(env_app, name="env")
deploy_app = typer.Typer(
    help="Kubernetes for the project's image: a Helm chart or manifests, checked "
    "offline, and run here as the cluster would run it.",
    no_args_is_help=True,
)
app.add_typer(deploy_app, name="deploy")


def _version_callback(value: bool) -> None:
    if value:
        say(f"tbgen {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Scaffold, build and test custom backends for NVIDIA Triton Inference Server."""
