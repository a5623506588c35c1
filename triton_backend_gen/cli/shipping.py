"""Commands that ship the project: env pack (its python models' environments), package (its image), deploy
helm, manifests, check and local (Kubernetes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from triton_backend_gen.cli.app import app, deploy_app, env_app
from triton_backend_gen.cli.options import (
    ImageOption,
    ProjectOption,
    SoakConcurrencyOption,
    SoakOption,
    SoakRateOption,
    check_docker_options,
    soak_options,
)
from triton_backend_gen.cli.output import Column, note, records, say, user_errors
from triton_backend_gen.cli.running import report_tests
from triton_backend_gen.commands.deploy import deploy_local as run_pod_spec
from triton_backend_gen.commands.env import pack_envs
from triton_backend_gen.commands.package import package_project
from triton_backend_gen.commands.test import run_project_tests
from triton_backend_gen.deploy import (
    HELM_DIR,
    MANIFESTS_DIR,
    ChartOptions,
    check_deployment,
    render_helm,
    render_manifests,
)
from triton_backend_gen.deploy.values import chart_name, startup_probe
from triton_backend_gen.errors import UsageError
from triton_backend_gen.findings import NOTE, WARNING
from triton_backend_gen.project import Project, load_project
from triton_backend_gen.runtime.load_time import read_load_time
from triton_backend_gen.signals import stop_on_signals


@env_app.command("pack")
def env_pack(
    project: Annotated[Path, typer.Argument(help="The project.")] = Path("."),
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model", help="Only this model (default: every python model with a requirements.txt)."
        ),
    ] = None,
    docker: Annotated[
        bool,
        typer.Option(
            "--docker",
            help="Build it inside the server's image (for `tbgen test "
            "--docker` and `tbgen package`), with the image's python3.",
        ),
    ] = False,
    image: ImageOption = None,
) -> None:
    """Pack model_repository/MODEL/requirements.txt (with numpy) into the environment the python backend runs
    the model in: MODEL/python-env.tar.gz, named by EXECUTION_ENV_PATH in its config.pbtxt."""
    with user_errors():
        check_docker_options(docker, image, gpu=False)
        loaded = load_project(project)
        say(f"Packing for {image or 'the release image' if docker else 'this machine'} ...")
        packed = pack_envs(loaded, model=model, docker=docker, image=image)
    for result in packed:
        env = result.env
        size = env.path.stat().st_size / 1e6
        say(
            f"{env.path} ({size:.1f} MB): Python {env.python}, {len(env.modules)} modules, for "
            f"{result.target}; pip's output: {result.log_file}",
            label="Packed",
            style="green",
        )
        if result.unchecked:
            note(result.unchecked)
        if result.config_written:
            say(
                f"EXECUTION_ENV_PATH into {result.model}/config.pbtxt "
                "($$TRITON_MODEL_DIRECTORY/python-env.tar.gz)",
                label="Wrote",
                style="yellow",
            )
    say(f"Next: `tbgen test{' --docker' if docker else ''}{loaded.path_argument()}`")


@app.command()
def package(
    project: Annotated[Path, typer.Argument(help="The project to package.")] = Path("."),
    image_tag: Annotated[
        Optional[str], typer.Option("--image-tag", help="Tag of the image (default: <project>:latest).")
    ] = None,
    base_image: Annotated[
        Optional[str],
        typer.Option(
            "--base-image", help="BASE_IMAGE of the Dockerfile (default: the release's tritonserver image)."
        ),
    ] = None,
    test: Annotated[
        bool, typer.Option("--test", help="Then run the smoke suite against a container of the image.")
    ] = False,
    soak: SoakOption = None,
    concurrency: SoakConcurrencyOption = None,
    rate: SoakRateOption = None,
) -> None:
    """Build the project's Dockerfile into a deployable image: the server, the backend and /models."""
    with user_errors():
        soaked = soak_options(soak, concurrency, rate)
        if soaked is not None and not test:
            raise UsageError("--soak runs with the smoke suite of the image.", "Add --test.")
        loaded = load_project(project)
        result = package_project(loaded, tag=image_tag, base_image=base_image, progress=say)
    if result.prebuilt:
        carried = f", carrying {', '.join(result.carried)}" if result.carried else ""
        source = f"the backend built on this machine{carried}"
    else:
        source = "Triton's sources from tbgen's cache" if result.offline else "the Dockerfile as it is"
    say(f"Built {result.tag} ({result.image_id[:19]}) from {source}; log: {result.log_file}")
    if test:
        with user_errors():
            report = run_project_tests(loaded, image=result.tag, packaged=True, soak=soaked)
        report_tests(report, junit_xml=None)


DeployOut = Annotated[
    Optional[Path], typer.Option("--out", help="Where to write (default: the project's {}).")
]

DeployImage = Annotated[
    Optional[str],
    typer.Option(
        "--image", help="The image the pods run (default: the tag `tbgen package` gives, <project>:latest)."
    ),
]

DeployReplicas = Annotated[
    Optional[int], typer.Option("--replicas", help="Pods while autoscaling is off (replicaCount).")
]

DeployControlMode = Annotated[
    Optional[str],
    typer.Option("--model-control-mode", help="none, explicit or poll (server.modelControlMode)."),
]

DeployServerArg = Annotated[
    Optional[list[str]],
    typer.Option(
        "--server-arg",
        help="One more tritonserver flag, e.g. --server-arg=--log-verbose=1 (repeatable; server.extraArgs).",
    ),
]

DeploySet = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        help="Any chart value: --set KEY=VALUE with KEY as "
        "in values.yaml, e.g. autoscaling.enabled=true (repeatable).",
    ),
]

DeployValues = Annotated[
    Optional[Path],
    typer.Option(
        "--values", "-f", help="A YAML file of chart values, laid over the defaults (then the options above)."
    ),
]

DeployForce = Annotated[
    bool, typer.Option("--force", help="Write over tbgen's files in a directory that holds some already.")
]


def _chart_options(image, replicas, model_control_mode, server_arg, set_, values):
    return ChartOptions(
        image=image,
        values_file=values,
        settings=set_ or [],
        replicas=replicas,
        model_control_mode=model_control_mode,
        server_args=server_arg or [],
    )


def _print_rendered(what: str, written, project: Project) -> None:
    say(f"{what} {written.directory} ({len(written.files)} files)", label="Wrote", style="green")
    say(startup_probe(read_load_time(project))[1])


@deploy_app.command("helm")
def deploy_helm(
    project: ProjectOption = Path("."),
    out: Annotated[
        Optional[Path],
        typer.Option("--out", help="Where to write the chart (default: the project's deploy/helm/)."),
    ] = None,
    image: DeployImage = None,
    replicas: DeployReplicas = None,
    model_control_mode: DeployControlMode = None,
    server_arg: DeployServerArg = None,
    set_: DeploySet = None,
    values: DeployValues = None,
    force: DeployForce = False,
) -> None:
    """Render a Helm chart for the project's image: Deployment (probes, resources, GPU for KIND_GPU models,
    /dev/shm, non-root), Service, PodDisruptionBudget, optional HorizontalPodAutoscaler and ServiceMonitor."""
    with user_errors():
        loaded = load_project(project)
        written = render_helm(
            loaded,
            _chart_options(image, replicas, model_control_mode, server_arg, set_, values),
            out,
            force=force,
        )
    _print_rendered("the Helm chart", written, loaded)
    release = chart_name(loaded)
    local = f" --chart {written.directory}" if out is not None else ""
    say(
        f"Next: `tbgen deploy check {written.directory}`; `tbgen deploy "
        f"local{loaded.project_option()}{local}`; `helm install {release} {written.directory}`"
    )


@deploy_app.command("manifests")
def deploy_manifests(
    project: ProjectOption = Path("."),
    out: Annotated[
        Optional[Path],
        typer.Option("--out", help="Where to write the manifests (default: the project's deploy/k8s/)."),
    ] = None,
    image: DeployImage = None,
    replicas: DeployReplicas = None,
    model_control_mode: DeployControlMode = None,
    server_arg: DeployServerArg = None,
    set_: DeploySet = None,
    values: DeployValues = None,
    force: DeployForce = False,
) -> None:
    """Render plain Kubernetes YAML (the chart's objects, one file each) for users without Helm."""
    with user_errors():
        loaded = load_project(project)
        written = render_manifests(
            loaded,
            _chart_options(image, replicas, model_control_mode, server_arg, set_, values),
            out,
            force=force,
        )
    _print_rendered("manifests to", written, loaded)
    say(f"Next: `tbgen deploy check {written.directory}`; `kubectl apply -f {written.directory}`")


@deploy_app.command("check")
def deploy_check(
    directory: Annotated[
        Optional[Path],
        typer.Argument(help="A chart or a directory of manifests (default: deploy/helm, else deploy/k8s)."),
    ] = None,
    kube_version: Annotated[
        Optional[list[str]],
        typer.Option(
            "--kube-version",
            help="Validate for this Kubernetes "
            "version (repeatable; default: 1.29 and the newest "
            "kubernetes-validate bundles).",
        ),
    ] = None,
) -> None:
    """Validate a rendered chart or manifests offline: helm lint and template, strict Kubernetes schemas for
    each version, the ServiceMonitor against tbgen's schema, yamllint. Exit 1 on any failure."""
    with user_errors():
        if directory is None:
            directory = HELM_DIR if HELM_DIR.is_dir() else MANIFESTS_DIR
        report = check_deployment(directory, kube_version or None)
    steps: dict[str, list[int]] = {}
    for finding in report.findings:
        counts = steps.setdefault(finding.check, [0, 0])
        counts[1 if finding.failed else 0] += 1
        if finding.failed:
            say(f"{finding.check}: {finding.subject}: {finding.message}", label="FAIL", style="red")
        elif finding.severity in (NOTE, WARNING):
            say(
                f"{finding.check}: {finding.subject}: {finding.message}",
                label=f"{finding.severity}:",
                style="yellow",
            )
    say(f"{report.subject}: {report.counts['objects']} objects, {report.against}")
    records(
        "",
        [Column("check"), Column("passed", justify="right"), Column("failed", justify="right")],
        [(step, str(passed), str(failed)) for step, (passed, failed) in steps.items()],
        styles=["red" if failed else "" for _, (_, failed) in steps.items()],
    )
    if not report.passed:
        say(f"{len(report.errors)} failure(s)", style="red")
        raise typer.Exit(1)
    say(f"OK {report.subject}", style="green")


@deploy_app.command("local")
def deploy_local(
    project: ProjectOption = Path("."),
    chart: Annotated[
        Optional[Path],
        typer.Option(
            "--chart",
            help="The chart (or manifests) to run (default: the "
            "project's deploy/helm/, rendered first when missing).",
        ),
    ] = None,
    base_image: Annotated[
        Optional[str],
        typer.Option(
            "--base-image",
            help="BASE_IMAGE when the project is packaged first (default: the release's tritonserver image).",
        ),
    ] = None,
    package: Annotated[
        bool, typer.Option("--package", help="Package the project first even when its image exists.")
    ] = False,
    junit_xml: Annotated[
        Optional[Path], typer.Option("--junit-xml", help="Write the results as JUnit XML.")
    ] = None,
) -> None:
    """Run the chart's pod spec as a container here (same image, command, args, env, ports, /dev/shm, user),
    probe it as the kubelet would, and run the smoke suite against it; the container is removed afterwards."""
    with user_errors(), stop_on_signals():
        loaded = load_project(project)
        run = run_pod_spec(loaded, chart, base_image=base_image, repackage=package, progress=say)
    if run.packaged is not None:
        say(f"Packaged {run.packaged.tag} ({run.packaged.image_id[:19]})")
    pod = run.pod
    ready = f"ready {run.ready_after:.1f} s after its start" if run.ready_after is not None else "never ready"
    say(
        f"Pod spec of {run.chart}: {pod.image} as user {pod.user or 'of the image'}, ports "
        f"{', '.join(f'{n} {p}' for n, p in pod.ports.items())}, /dev/shm "
        f"{(pod.shm_bytes or 0) / 2**20:.0f} MiB; {ready}"
    )
    if run.memory_used is not None:
        limit = f" of its {pod.memory_limit / 2**20:.0f} MiB limit" if pod.memory_limit else ""
        say(
            f"The server used {run.memory_used / 2**20:.0f} MiB{limit} after the tests (resources in "
            "values.yaml)."
        )
    report_tests(run.report, junit_xml)
