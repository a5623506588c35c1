"""The chart's values as tbgen decides them: defaults from the project, overrides, and the rules (no tools
run)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import new_project, run_tbgen

from triton_backend_gen.deploy.render import ChartOptions, project_values
from triton_backend_gen.deploy.values import (
    STARTUP_MIN_S,
    STARTUP_UNMEASURED_S,
    apply_settings,
    parse_settings,
    split_image,
    startup_probe,
    value_errors,
)
from triton_backend_gen.errors import UsageError
from triton_backend_gen.project import load_project
from triton_backend_gen.runtime.load_time import LoadTime, load_time_file, read_load_time, record_load_time


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    root = tmp_path_factory.mktemp("projects")
    return {
        "python": load_project(new_project(root, "python-backend", name="py")),
        "cpp": load_project(new_project(root, "cpp-backend", name="cpu")),
        "gpu": load_project(new_project(root, "cpp-backend", "gpu=yes", name="gpu")),
    }


def budget(probe: dict) -> int:
    return probe["failureThreshold"] * probe["periodSeconds"]


def test_the_startup_probe_allows_three_times_the_measured_load_time_plus_30_s_and_at_least_60_s():
    slow, why = startup_probe(LoadTime(40.0, "server", "2026-01-01T00:00:00Z"))
    assert budget(slow) >= 3 * 40 + 30 and budget(slow) - (3 * 40 + 30) < slow["periodSeconds"]
    assert "40.0 s" in why and "150 s" in why
    fast, _ = startup_probe(LoadTime(1.2, "server", "2026-01-01T00:00:00Z"))
    assert budget(fast) == STARTUP_MIN_S
    unmeasured, why = startup_probe(None)
    assert budget(unmeasured) == STARTUP_UNMEASURED_S and "tbgen test" in why


def test_the_load_time_round_trips_through_the_projects_runtime_dir(projects):
    project = projects["python"]
    assert read_load_time(project) is None
    record_load_time(project, 12.3456, "tritonserver 2.51.0")
    try:
        measured = read_load_time(project)
        assert measured.seconds == pytest.approx(12.346) and measured.server == "tritonserver 2.51.0"
        values = project_values(project).values
        assert budget(values["probes"]["startup"]) >= 3 * 12.346 + 30
        load_time_file(project).write_text("{not json")
        assert read_load_time(project) is None
    finally:
        load_time_file(project).unlink()


def test_only_a_project_with_kind_gpu_models_asks_for_a_gpu(projects):
    gpu = project_values(projects["gpu"]).values
    assert gpu["gpu"] == 1 and gpu["tolerations"][0]["key"] == "nvidia.com/gpu"
    for name in ("cpp", "python"):
        values = project_values(projects[name]).values
        assert values["gpu"] == 0 and values["tolerations"] == []


def test_the_python_backend_gets_a_larger_shm_and_memory_than_a_cpp_backend(projects):
    python, cpp = project_values(projects["python"]).values, project_values(projects["cpp"]).values
    assert python["sharedMemory"] == "1Gi" and cpp["sharedMemory"] == "256Mi"
    assert python["resources"]["limits"]["memory"] == "4Gi" and cpp["resources"]["limits"]["memory"] == "2Gi"


def test_the_image_defaults_to_the_tag_tbgen_package_gives_and_options_override_it(projects):
    values = project_values(projects["cpp"]).values
    assert (values["image"]["repository"], values["image"]["tag"]) == ("cpu", "latest")
    options = ChartOptions(
        image="registry.example.invalid:5000/team/cpu:1.2",
        replicas=3,
        model_control_mode="explicit",
        server_args=["--log-info=true"],
        settings=["server.loadModels=[add_sub]", "autoscaling.enabled=true"],
    )
    values = project_values(projects["cpp"], options).values
    assert values["image"] == {
        "repository": "registry.example.invalid:5000/team/cpu",
        "tag": "1.2",
        "pullPolicy": "IfNotPresent",
    }
    assert values["replicaCount"] == 3 and values["server"]["extraArgs"] == ["--log-info=true"]
    assert values["server"]["loadModels"] == ["add_sub"] and values["autoscaling"]["enabled"] is True


def test_a_values_file_lies_under_the_options(projects, tmp_path):
    file = tmp_path / "mine.yaml"
    file.write_text("replicaCount: 5\nresources:\n  limits:\n    memory: 8Gi\n")
    values = project_values(projects["cpp"], ChartOptions(values_file=file, replicas=2)).values
    assert values["replicaCount"] == 2 and values["resources"]["limits"] == {"cpu": "4", "memory": "8Gi"}


def test_split_image_and_set_parsing():
    assert split_image("proj:latest") == ("proj", "latest")
    assert split_image("host:5000/proj") == ("host:5000/proj", "latest")
    with pytest.raises(UsageError, match="digest"):
        split_image("proj@sha256:abc")
    assert parse_settings(["a.b=1", "c=true", "d=[x, y]", "e=text"]) == {
        "a.b": 1,
        "c": True,
        "d": ["x", "y"],
        "e": "text",
    }
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_settings(["replicas"])
    assert apply_settings({"a": {"b": 1, "c": 2}}, {"a.b": 3}) == {"a": {"b": 3, "c": 2}}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["replicaCount=-1"], "replicaCount: -1 is less than the minimum of 0"),
        (["ports.grpc=8000"], "ports: http (8000), grpc (8000) and metrics (8002) must differ"),
        (["autoscaling.metric=latency"], "autoscaling.metric: 'latency' is not one of"),
        (
            ["autoscaling.minReplicas=5", "autoscaling.maxReplicas=2"],
            "minReplicas (5) is above maxReplicas (2)",
        ),
        (
            ["server.modelControlMode=explicit", "server.loadModels=[nope]"],
            "nope is not a model of the project",
        ),
        (["server.loadModels=[add_sub]"], "server.loadModels needs server.modelControlMode=explicit"),
        (["sharedMemory=4Gi"], "sharedMemory (4Gi) counts against resources.limits.memory (2Gi)"),
        (["resources.requests.memory=3Gi"], "the memory request (3Gi) is above its limit (2Gi)"),
        (["server.extraArgs=[log-verbose]"], "server.extraArgs.0: 'log-verbose' does not match"),
        (["replicas=2"], "Additional properties are not allowed ('replicas' was unexpected)"),
    ],
)
def test_bad_values_fail_with_the_value_and_the_rule(projects, settings, message):
    with pytest.raises(UsageError) as caught:
        project_values(projects["cpp"], ChartOptions(settings=settings))
    assert message in caught.value.message


def test_the_defaults_keep_every_rule(projects):
    for project in projects.values():
        values = project_values(project).values
        assert value_errors(values, [m.name for m in project.models]) == []
        json.dumps(values)  # plain data, as values.yaml and helm take it


@pytest.mark.parametrize(
    "command",
    [["deploy"], ["deploy", "helm"], ["deploy", "manifests"], ["deploy", "check"], ["deploy", "local"]],
)
def test_every_deploy_command_has_help(command):
    result = run_tbgen(*command, "--help")
    assert result.returncode == 0 and "Usage" in result.stdout, result.stderr
    assert "Traceback" not in result.stderr


def test_deploy_help_does_not_import_the_deploy_tools():
    """helm's wheel, the Kubernetes schemas, jsonschema and yamllint (the deploy extra) load when a deploy
    command runs, not for its --help."""
    code = (
        "import sys\nfrom triton_backend_gen.cli import app\ntry:\n    app(['deploy', 'helm', '--help'])\n"
        "except SystemExit:\n    pass\nprint(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('kubernetes_validate', 'yamllint', 'jsonschema', 'docker')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
