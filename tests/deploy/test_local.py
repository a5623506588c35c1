"""`tbgen deploy local` on the real Docker engine with the stand-in NGC image: each kind of project is
packaged, its chart's pod spec runs as a container, passes the probes and the smoke suite, and no container is
left; and `tbgen test` records the load time the chart's startup probe is sized from."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import new_project, run_tbgen
from deploy_support import deploy_tools_or_skip

from triton_backend_gen.docker_engine import PROJECT_LABEL
from triton_backend_gen.runtime.load_time import LOAD_TIME_FILE


@pytest.fixture(scope="module")
def deploy_tools() -> Path:
    return deploy_tools_or_skip()


def containers_of(docker_client, project) -> list:
    return docker_client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={project}"})


def remove_image(docker_client, tag: str) -> None:
    try:
        docker_client.images.remove(tag, force=True)
    except Exception:  # noqa: BLE001 - not built
        pass


def stopped_by_sigterm(docker_client, project) -> None:
    """SIGTERM while the pod starts: tbgen exits 143 and leaves no container."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "triton_backend_gen",
            "deploy",
            "local",
            "--project",
            str(project),
            "--chart",
            str(project / "slow-chart"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not containers_of(docker_client, project) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert containers_of(docker_client, project), "the pod never started"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143 and "Traceback" not in stderr, stderr
    assert containers_of(docker_client, project) == []


@pytest.mark.slow
@pytest.mark.parametrize("template", ["python-backend", "cpp-backend", "decoupled-backend"])
def test_the_charts_pod_spec_serves_passes_its_probes_and_the_smoke_suite(
    tmp_path, standin_image, docker_client, deploy_tools, template
):
    name = f"dl{os.getpid()}-{template.split('-')[0]}"
    project = new_project(tmp_path, template, name=name)
    try:
        result = run_tbgen(
            "deploy", "local", "--project", str(project), "--base-image", standin_image, timeout=1800
        )
        output = " ".join(result.stdout.split())
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
        assert f"packaging {name} into {name}:latest first" in output
        assert "rendered the chart into" in output and "as user 1000:1000" in output and "/dev/shm" in output
        for probe in ("startup probe", "readiness probe", "liveness probe"):
            assert re.search(rf"pass {probe} \[http\]", output), output[-4000:]
        assert " 0 failed" in output and "The server used" in output
        assert containers_of(docker_client, project) == []
        log = (project / "build" / "tbgen" / "deploy-local.log").read_text(errors="replace")
        assert "--http-address=127.0.0.1" in log.splitlines()[0]

        if template == "python-backend":  # a chart whose startup probe cannot wait for the load: restarted
            rendered = run_tbgen(
                "deploy",
                "helm",
                "--project",
                str(project),
                "--force",
                "--set",
                "probes.startup.failureThreshold=1",
                "--set",
                "probes.startup.periodSeconds=1",
            )
            assert rendered.returncode == 0, rendered.stderr
            slow = run_tbgen(
                "deploy",
                "helm",
                "--project",
                str(project),
                "--out",
                str(project / "slow-chart"),
                "--set",
                "probes.startup.periodSeconds=60",
            )  # the second probe a minute later
            assert slow.returncode == 0, slow.stderr
            failed = run_tbgen("deploy", "local", "--project", str(project))
            assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-3000:]
            assert "the kubelet would restart the container" in " ".join(failed.stderr.split())
            assert "Traceback" not in failed.stderr and containers_of(docker_client, project) == []
            stopped_by_sigterm(docker_client, project)
    finally:
        remove_image(docker_client, f"{name}:latest")


@pytest.mark.slow
def test_a_gpu_chart_is_refused_where_docker_has_no_nvidia_runtime(tmp_path, docker_client, deploy_tools):
    if "nvidia" in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime: a KIND_GPU chart would run")
    project = new_project(tmp_path, "cpp-backend", "gpu=yes", name="gpu-local")
    result = run_tbgen("deploy", "local", "--project", str(project))
    assert result.returncode == 1
    assert "asks each pod for 1 nvidia.com/gpu" in " ".join(result.stderr.split())
    assert containers_of(docker_client, project) == []


@pytest.mark.slow
def test_tbgen_test_records_the_load_time_and_the_chart_is_sized_from_it(tmp_path, server_or_skip):
    project = new_project(tmp_path, "python-backend", name="timed")
    tested = run_tbgen("test", str(project))
    assert tested.returncode == 0, tested.stdout[-3000:]
    measured = json.loads((project / "build" / "tbgen" / LOAD_TIME_FILE).read_text())
    assert 0 < measured["seconds"] < 120 and measured["server"]
    rendered = run_tbgen("deploy", "manifests", "--project", str(project))
    assert rendered.returncode == 0, rendered.stderr
    assert f"measured {measured['seconds']:.1f} s to load the models" in " ".join(rendered.stdout.split())
    text = (project / "deploy" / "k8s" / "deployment.yaml").read_text()
    assert "failureThreshold: 12" in text  # max(60, 3 x load + 30) s at 5 s a probe, for a load under 10 s


@pytest.mark.slow
def test_a_load_that_fails_records_no_load_time(tmp_path, server_or_skip):
    project = new_project(tmp_path, "python-backend", name="broken")
    model = project / "model_repository" / "add_sub" / "1" / "model.py"
    model.write_text(model.read_text() + "\nraise ImportError('no such thing')\n")
    tested = run_tbgen("test", str(project))
    assert tested.returncode == 1 and "no such thing" in tested.stderr, tested.stderr[-3000:]
    assert not (project / "build" / "tbgen" / LOAD_TIME_FILE).exists()
