"""`tbgen deploy helm` and `tbgen deploy manifests`: the project's chart values, checked, then written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from triton_backend_gen.deploy.chart import Written, write_chart, write_manifests
from triton_backend_gen.deploy.values import (
    ChartValues,
    apply_settings,
    check_values,
    default_values,
    merge,
    parse_settings,
    read_values_file,
)
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.instance_kind import gpu_models
from triton_backend_gen.runtime.load_time import read_load_time
from triton_backend_gen.toolchain.image import default_tag

HELM_DIR = Path("deploy") / "helm"
MANIFESTS_DIR = Path("deploy") / "k8s"


@dataclass(frozen=True)
class ChartOptions:
    """What the user asked for on the command line (None: the default)."""

    image: str | None = None  # default: the tag `tbgen package` gives
    values_file: Path | None = None
    settings: list[str] = field(default_factory=list)  # --set KEY=VALUE
    replicas: int | None = None
    model_control_mode: str | None = None
    server_args: list[str] = field(default_factory=list)

    def as_settings(self) -> dict[str, object]:
        named = {
            "replicaCount": self.replicas,
            "server.modelControlMode": self.model_control_mode,
            "server.extraArgs": list(self.server_args) or None,
        }
        return {
            **{key: value for key, value in named.items() if value is not None},
            **parse_settings(self.settings),
        }


def project_values(project: Project, options: ChartOptions = ChartOptions()) -> ChartValues:
    """The chart values of ``project``: its defaults, then the values file, then the options and ``--set``
    items; UsageError for a value that breaks a rule (nothing is written then)."""
    chart = default_values(
        project,
        image=options.image or default_tag(project),
        gpu_models=gpu_models(project.model_repository),
        load=read_load_time(project),
    )
    values = (
        merge(chart.values, read_values_file(options.values_file)) if options.values_file else chart.values
    )
    values = apply_settings(values, options.as_settings())
    check_values(values, [m.name for m in project.models])
    return ChartValues(values, chart.notes)


def render_helm(
    project: Project, options: ChartOptions = ChartOptions(), out: Path | None = None, *, force: bool = False
) -> Written:
    """Write the project's chart into ``out`` (default: <project>/deploy/helm)."""
    chart = project_values(project, options)
    return write_chart(project, chart, out or project.root / HELM_DIR, force=force)


def render_manifests(
    project: Project, options: ChartOptions = ChartOptions(), out: Path | None = None, *, force: bool = False
) -> Written:
    """Write the project's manifests into ``out`` (default: <project>/deploy/k8s)."""
    chart = project_values(project, options)
    return write_manifests(project, chart, out or project.root / MANIFESTS_DIR, force=force)
