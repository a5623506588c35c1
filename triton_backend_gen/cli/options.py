"""Options several commands share, and the checks of how they combine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from triton_backend_gen import versions
from triton_backend_gen.errors import TbgenError, UsageError
from triton_backend_gen.project import Project, load_project_or_none
from triton_backend_gen.runtime.instance_kind import parse_instance_kind

PatternOption = Annotated[
    Optional[str],
    typer.Option(
        "--pattern",
        help="Compose models: bls (a router), bls-async (a fan-out), bls-decoupled (over a stream) or "
        "ensemble (pre -> model -> post); --model-name names the top model, --set callees=A,B the others.",
    ),
]
ServerPath = Annotated[
    Optional[Path],
    typer.Option(
        "--server",
        help="A tritonserver executable (default: $TRITONSERVER, PATH, "
        "/opt/tritonserver, then the embedded wheel).",
    ),
]
DockerOption = Annotated[
    bool,
    typer.Option("--docker", help="Run in a container of the release's tritonserver image (docker SDK)."),
]
ImageOption = Annotated[
    Optional[str],
    typer.Option(
        "--image", help="The image for --docker (default: nvcr.io/nvidia/tritonserver:<release>-py3)."
    ),
]
GpuRequestOption = Annotated[
    bool, typer.Option("--gpu", help="With --docker: give the container the GPUs (needs the NVIDIA runtime).")
]
InstanceKindOption = Annotated[
    Optional[str],
    typer.Option(
        "--instance-kind",
        help="cpu, gpu or model (default): serve a copy of the models "
        "with every instance group of that kind (your config.pbtxt files stay as they are); "
        "cpu runs a --gpu project on a machine without a GPU.",
    ),
]
SanitizeOption = Annotated[
    Optional[str],
    typer.Option(
        "--sanitize",
        help="Build the C++ backend with sanitizers: address,undefined "
        "(the server then runs with their runtimes preloaded).",
    ),
]
QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print only the failed checks and the summary line.")
]
VerboseNotesOption = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Say every note, also those said on an earlier run (the server's release)."
    ),
]
ReleaseOption = Annotated[
    Optional[str],
    typer.Option(
        "--triton-version",
        help="Release: 24.10, r24.10 or 2.51.0 (default: the project's, else $TBGEN_TRITON_VERSION, else the "
        "newest).",
    ),
]
ProjectOption = Annotated[Path, typer.Option("--project", help="The project (default: the one here).")]


def instance_kind(text: str | None) -> str | None:
    """--instance-kind as the runtime takes it (UsageError for another value)."""
    return parse_instance_kind(text)


def check_docker_options(docker: bool, image: str | None, gpu: bool) -> None:
    """UsageError for --image or --gpu without --docker."""
    if image and not docker:
        raise UsageError("--image names the image for --docker.", "Add --docker, or drop --image.")
    if gpu and not docker:
        raise UsageError(
            "--gpu asks a container for the GPUs; a local server sees this machine's GPUs already.",
            "Add --docker, or drop --gpu.",
        )


def project_here() -> Project | None:
    """The project the current directory is in (None outside one, or when its tbgen.toml is unreadable)."""
    try:
        return load_project_or_none(Path.cwd())
    except TbgenError:
        return None


def release_option(spec: str | None) -> versions.Release:
    """The release --triton-version names, else the project's here, else the newest."""
    project = project_here()
    return versions.target_release(spec, project.release if project is not None else None)[0]
