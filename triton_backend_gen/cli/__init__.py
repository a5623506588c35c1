"""tbgen's command line: a Typer app (cli.app) whose commands, by family, map flags onto one command or stage
function and print the result (cli.output); shared options live in cli.options.

    scaffolding   new, add model, add library, remove model, update, check --drift
    building      build, check, validate
    running       serve, test, infer, bench
    tuning        tune
    developing    dev (serve, watch, verify every save)
    shipping      env pack, package, deploy helm|manifests|check|local
    housekeeping  doctor, deps fetch|add|list, clean, versions, templates list|check

Every piece of tbgen the CLI calls is imported as usual; third-party modules that take long to import (docker,
tritonclient, grpc, protobuf, numpy, cookiecutter) are imported where they are first used, through
triton_backend_gen.lazy, so that `tbgen --help` starts at once.
"""

from triton_backend_gen.cli import (  # noqa: F401 - register
    building,
    developing,
    housekeeping,
    running,
    scaffolding,
    shipping,
    tuning,
)
from triton_backend_gen.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
