"""Options several commands share, and the checks of how they combine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from triton_backend_gen import versions
from triton_backend_gen.errors import TbgenError, UsageError
from triton_backend_gen.perf.stats import parse_duration
from triton_backend_gen.project import Project, load_project_or_none
from triton_backend_gen.runtime.instance_kind import parse_instance_kind
from triton_backend_gen.smoke.soak import MIN_SOAK_S, SoakOptions

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
SoakOption = Annotated[
    Optional[str],
    typer.Option(
        "--soak",
        help="Also load every model with valid requests for this long (2m, 90s, 1h), every answer checked, "
        "the memory of the server and of each python stub sampled: a leak (its slope), a latency drift or a "
        "wrong answer is a failed result.",
    ),
]
SoakConcurrencyOption = Annotated[
    Optional[int], typer.Option("--concurrency", min=1, help="With --soak: clients in all (default 4).")
]
SoakRateOption = Annotated[
    Optional[float],
    typer.Option(
        "--rate", help="With --soak: requests per second in all (default: each client as fast as answered)."
    ),
]


def soak_options(soak: str | None, concurrency: int | None, rate: float | None) -> SoakOptions | None:
    """--soak DURATION with its --concurrency and --rate (UsageError for those without --soak, a rate that
    is not positive, a soak too short to fit)."""
    if soak is None:
        given = [name for name, value in (("--concurrency", concurrency), ("--rate", rate)) if value]
        if given:
            raise UsageError(f"{' and '.join(given)} shape a soak.", "Add --soak DURATION, e.g. --soak 2m.")
        return None
    seconds = parse_duration(soak, "--soak")
    if seconds < MIN_SOAK_S:
        raise UsageError(
            f"--soak {soak} is too short to fit a trend after its warm-up.",
            f"Give at least {MIN_SOAK_S:.0f}s, e.g. --soak 2m.",
        )
    if rate is not None and not rate > 0:
        raise UsageError(f"--rate {rate:g} is no request rate.", "Give requests per second, e.g. --rate 200.")
    return SoakOptions(seconds, concurrency or SoakOptions.concurrency, rate)


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
