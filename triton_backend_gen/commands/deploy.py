"""``tbgen deploy local``: the chart's pod spec run here as the cluster would run it, then the smoke suite.

It renders the chart when the project has none yet, packages the project when the pod's image is the one
`tbgen package` makes and it is missing, starts the pod spec as a container (deploy.local: ports, /dev/shm,
user, limits, the kubelet's probes), and runs the smoke suite against it (smoke.suite). `tbgen deploy helm`,
`manifests` and `check` are single stage calls (deploy.render, deploy.check) the CLI makes itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.deploy.local import (
    ADDRESS_FLAGS,
    LOG_NAME,
    PodContainer,
    PodServer,
    check_gpus,
    fit_to_engine,
    pod_for_local,
)
from triton_backend_gen.deploy.render import HELM_DIR, render_helm
from triton_backend_gen.docker_engine import connect, default_image
from triton_backend_gen.errors import UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.execution_envs import check_envs_in_image
from triton_backend_gen.runtime.server import LOOPBACK
from triton_backend_gen.smoke.suite import SuiteReport, run_suite
from triton_backend_gen.toolchain.image import PackageResult, build_image, default_tag

docker_errors = lazy_module("docker.errors")


@dataclass
class LocalRun:
    report: SuiteReport
    pod: PodContainer
    chart: Path
    packaged: PackageResult | None
    memory_used: int | None
    ready_after: float | None


def deploy_local(
    project: Project,
    chart: Path | None = None,
    *,
    base_image: str | None = None,
    repackage: bool = False,
    progress: Callable[[str], None] = lambda line: None,
) -> LocalRun:
    """Run the chart's pod spec (rendering the chart and packaging the project first when needed), probe it
    and run the smoke suite against it."""
    notes: list[str] = []
    chart = chart or project.root / HELM_DIR
    if not chart.exists():
        if chart != project.root / HELM_DIR:
            raise UsageError(
                f"{chart} does not exist.", f"Render a chart there first: `tbgen deploy helm --out {chart}`."
            )
        render_helm(project, out=chart)
        notes.append(f"rendered the chart into {chart} first (`tbgen deploy helm`)")
    pod, port_notes = pod_for_local(chart)
    engine = connect().info()
    pod, cpu_notes = fit_to_engine(pod, int(engine.get("NCPU") or 0))
    check_gpus(pod, engine)
    packaged = ensure_pod_image(
        project, pod.image, repackage=repackage, base_image=base_image, progress=progress
    )
    server = PodServer(pod, project, project.runtime_dir / LOG_NAME)
    progress(f"starting {pod.image} as the chart's pod spec; probing it as the kubelet would")
    report = run_suite(project, server)
    report.results += server.probe_results()
    report.notes += [
        *notes,
        *port_notes,
        *cpu_notes,
        f"servers bound to {LOOPBACK} (host networking): {', '.join(ADDRESS_FLAGS)} appended to the args",
    ]
    return LocalRun(report, pod, chart, packaged, server.memory_used, server.started_after)


def ensure_pod_image(
    project: Project, image: str, *, repackage: bool, base_image: str | None, progress: Callable[[str], None]
) -> PackageResult | None:
    """Package the project when the chart's image is the one `tbgen package` makes and it is missing (or asked
    to); UsageError naming the image otherwise."""
    try:
        connect().images.get(image)
        present = True
    except docker_errors.ImageNotFound:
        present = False
    if present and not repackage:
        return None
    if image != default_tag(project):
        raise UsageError(
            f"The chart runs {image}, which is not on this Docker engine and not the image "
            f"`tbgen package` makes ({default_tag(project)}).",
            f"Build or load it (docker pull {image}), or set image.repository/image.tag to "
            f"{default_tag(project)}.",
        )
    progress(f"packaging {project.name} into {image} first (`tbgen package`)")
    check_envs_in_image(
        project.model_repository, base_image or default_image(project.release), project.runtime_dir
    )
    return build_image(project, tag=image, base_image=base_image, progress=progress)
