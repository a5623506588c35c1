"""`tbgen build/test/serve --docker` and `tbgen package` against a real Docker engine, with the stand-in for the
NGC image that tests/containers/standin.py builds (no registry is reachable here). They skip, saying why, when
no engine answers; .ci/run installs and starts one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import new_project, run_tbgen, triton_sources_or_skip

pytestmark = pytest.mark.slow


def tbgen_containers(client) -> list:
    return client.containers.list(all=True, filters={"label": "tbgen"})


@pytest.fixture(autouse=True)
def no_container_left_behind(docker_client):
    assert tbgen_containers(docker_client) == [], "a tbgen container was left by an earlier test"
    yield
    left = tbgen_containers(docker_client)
    for container in left:
        container.remove(force=True)
    assert left == [], f"left behind: {[c.name for c in left]}"


def owned_by_someone_else(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.lstat().st_uid != os.getuid()]


@pytest.mark.cpp
def test_cpp_backend_builds_offline_and_passes_in_a_container(tmp_path, standin_image):
    triton_sources_or_skip("r24.10")
    project = new_project(tmp_path, "cpp-backend")
    built = run_tbgen("build", str(project), "--docker", "--image", standin_image)
    assert built.returncode == 0, built.stdout + built.stderr
    assert (project / "build/install/backends/proj/libtriton_proj.so").is_file()
    (log,) = (project / "build" / "docker").glob("*/tbgen-build.log")
    assert "-DFETCHCONTENT_FULLY_DISCONNECTED=ON" in log.read_text()  # the source cache, mounted read-only
    assert owned_by_someone_else(project) == []

    tested = run_tbgen("test", str(project), "--docker", "--image", standin_image)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert f"in a container of {standin_image}" in tested.stdout
    assert " 0 failed" in tested.stdout
    server_log = (project / "build" / "tbgen" / "server.log").read_text()
    assert "--model-repository=/models" in server_log and "Started GRPCInferenceService" in server_log


def test_python_backend_passes_in_a_container(tmp_path, standin_image):
    project = new_project(tmp_path, "python-backend")
    tested = run_tbgen("test", str(project), "--docker", "--image", standin_image)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert " 0 failed" in tested.stdout


def test_a_model_that_fails_to_load_keeps_its_log_and_no_container(tmp_path, standin_image):
    project = new_project(tmp_path, "python-backend")
    model = project / "model_repository" / "add_sub" / "1" / "model.py"
    model.write_text(model.read_text().replace("def initialize(self, args", "def initialize(self, args, broken"))
    result = run_tbgen("test", str(project), "--docker", "--image", standin_image)
    assert result.returncode == 1
    assert "Models failed to load: add_sub" in result.stderr
    # The failed container's log was read before it was removed.
    assert "broken" in (project / "build" / "tbgen" / "server.log").read_text()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_serve_stops_and_removes_its_container(tmp_path, standin_image, docker_client, signum):
    project = new_project(tmp_path, "python-backend")
    serve = subprocess.Popen(
        [sys.executable, "-m", "triton_backend_gen", "serve", str(project), "--docker", "--image", standin_image],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "200"},
    )
    try:
        for line in serve.stdout:
            if "Serving" in line:
                break
        (running,) = tbgen_containers(docker_client)
        assert running.status == "running" and running.labels["tbgen.role"] == "server"
        serve.send_signal(signum)
        serve.wait(timeout=60)
    finally:
        if serve.poll() is None:
            serve.kill()
    assert serve.returncode != 0  # interrupted, not finished
    assert tbgen_containers(docker_client) == []


def test_a_killed_tbgen_leaves_a_container_that_doctor_lists_and_clean_removes(tmp_path, standin_image,
                                                                               docker_client):
    project = new_project(tmp_path, "python-backend")
    serve = subprocess.Popen(
        [sys.executable, "-m", "triton_backend_gen", "serve", str(project), "--docker", "--image", standin_image],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    for line in serve.stdout:
        if "Serving" in line:
            break
    serve.kill()  # SIGKILL: tbgen cannot clean up
    serve.wait()
    (orphan,) = tbgen_containers(docker_client)

    doctor = run_tbgen("doctor")
    assert "tbgen containers" in doctor.stdout and orphan.name in doctor.stdout
    assert "tbgen clean --containers" in doctor.stdout
    cleaned = run_tbgen("clean", "--containers")
    assert cleaned.returncode == 0 and orphan.name in cleaned.stdout
    assert tbgen_containers(docker_client) == []


@pytest.mark.cpp
def test_package_builds_an_image_that_passes_the_smoke_suite(tmp_path, standin_image, docker_client):
    triton_sources_or_skip("r24.10")
    project = new_project(tmp_path, "cpp-backend")
    tag = f"tbgen-test-package-{os.getpid()}:latest"
    try:
        result = run_tbgen("package", str(project), "--base-image", standin_image, "--image-tag", tag, "--test")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "from Triton's sources from tbgen's cache" in result.stdout
        assert " 0 failed" in result.stdout
        image = docker_client.images.get(tag)
        assert image.labels["tbgen.project"] == str(project)
        # The backend and the models are in the image: the test above mounted nothing.
        listing = docker_client.containers.run(
            tag, ["ls", "/opt/tritonserver/backends/proj", "/models/add_sub"], remove=True).decode()
        assert "libtriton_proj.so" in listing and "config.pbtxt" in listing
        assert not (project / "third_party" / "triton").exists()  # the sources went only into the context
    finally:
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - the build failed before tagging
            pass


def test_a_missing_image_names_the_pull_command(tmp_path, docker_client):
    project = new_project(tmp_path, "python-backend")
    result = run_tbgen("test", str(project), "--docker", "--image", "tbgen-test/never-built:0")
    assert result.returncode == 1
    assert "docker pull tbgen-test/never-built:0" in result.stderr


def test_gpu_is_refused_without_the_nvidia_runtime(tmp_path, standin_image, docker_client):
    if "nvidia" in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime")
    project = new_project(tmp_path, "python-backend")
    result = run_tbgen("test", str(project), "--docker", "--gpu", "--image", standin_image)
    assert result.returncode == 2
    assert "NVIDIA container runtime" in result.stderr
