"""`tbgen build/test/serve --docker` and `tbgen package` against a real Docker engine, with the stand-in for
the NGC image that tests/containers/standin.py builds (no registry is reachable here). They skip, saying why,
when no engine answers; .ci/run installs and starts one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import new_project, run_tbgen, triton_sources_or_skip

from triton_backend_gen import docker_engine as engine

pytestmark = pytest.mark.slow


def tbgen_containers(client) -> list:
    return client.containers.list(all=True, filters={"label": "tbgen"})


@pytest.fixture(scope="module", autouse=True)
def no_leftovers_of_an_earlier_run(docker_client):
    """An engine that outlived an interrupted run (a machine stopped mid-build) still holds that run's
    containers; tbgen removes those whose tbgen is gone, and so does this module before it starts."""
    removed = engine.remove_containers(engine.orphans(tbgen_containers(docker_client)))
    if removed:
        print(f"removed containers left by an interrupted earlier run: {removed}")


@pytest.fixture(autouse=True)
def no_container_left_behind(no_leftovers_of_an_earlier_run, docker_client):
    assert tbgen_containers(docker_client) == [], "a tbgen container was left by an earlier test"
    yield
    left = tbgen_containers(docker_client)
    for container in left:
        container.remove(force=True)
    assert left == [], f"left behind: {[c.name for c in left]}"


def docker_serve(project: Path, image: str) -> subprocess.Popen:
    """`tbgen serve --docker` of ``project`` in ``image``, started; its output (stderr too) in .stdout."""
    command = [
        sys.executable,
        "-m",
        "triton_backend_gen",
        "serve",
        str(project),
        "--docker",
        "--image",
        image,
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


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


@pytest.mark.cpp
def test_composed_models_pass_in_a_container(tmp_path, standin_image):
    """An ensemble around the C++ backend, then a BLS fan-out added to the same project, served by the
    image."""
    triton_sources_or_skip("r24.10")
    project = tmp_path / "pipe"
    created = run_tbgen(
        "new",
        str(project),
        "-t",
        "cpp-backend",
        "--pattern",
        "ensemble",
        "--no-input",
        "--triton-version",
        "24.10",
    )
    assert created.returncode == 0, created.stdout + created.stderr
    added = run_tbgen("add", "model", "fan", "--pattern", "bls-async", cwd=project)
    assert added.returncode == 0, added.stdout + added.stderr
    built = run_tbgen("build", str(project), "--docker", "--image", standin_image)
    assert built.returncode == 0, built.stdout + built.stderr
    tested = run_tbgen("test", str(project), "--docker", "--image", standin_image)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert " 0 failed" in tested.stdout and "the server's statistics of each model" in tested.stdout
    for model in ("ensemble", "preprocess", "add_sub", "postprocess", "fan", "add_sub_2"):
        assert f"{model}: infer" in tested.stdout


def test_python_backend_passes_in_a_container(tmp_path, standin_image):
    project = new_project(tmp_path, "python-backend")
    tested = run_tbgen("test", str(project), "--docker", "--image", standin_image)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert " 0 failed" in tested.stdout


def test_a_model_that_fails_to_load_keeps_its_log_and_no_container(tmp_path, standin_image):
    project = new_project(tmp_path, "python-backend")
    model = project / "model_repository" / "add_sub" / "1" / "model.py"
    model.write_text(
        model.read_text().replace("def initialize(self, args", "def initialize(self, args, broken")
    )
    result = run_tbgen("test", str(project), "--docker", "--image", standin_image)
    assert result.returncode == 1
    assert "Models failed to load: add_sub" in result.stderr
    # The failed container's log was read before it was removed.
    assert "broken" in (project / "build" / "tbgen" / "server.log").read_text()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_serve_stops_and_removes_its_container(tmp_path, standin_image, docker_client, signum):
    project = new_project(tmp_path, "python-backend")
    serve = docker_serve(project, standin_image)
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


def test_a_killed_tbgen_leaves_a_container_that_doctor_lists_and_clean_removes(
    tmp_path, standin_image, docker_client
):
    project = new_project(tmp_path, "python-backend")
    serve = docker_serve(project, standin_image)
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
        result = run_tbgen(
            "package", str(project), "--base-image", standin_image, "--image-tag", tag, "--test"
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "from Triton's sources from tbgen's cache" in result.stdout
        assert " 0 failed" in result.stdout
        image = docker_client.images.get(tag)
        assert image.labels["tbgen.project"] == str(project)
        # The backend and the models are in the image: the test above mounted nothing.
        listing = docker_client.containers.run(
            tag, ["ls", "/opt/tritonserver/backends/proj", "/models/add_sub"], remove=True
        ).decode()
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


SPDLOG_USE = '  spdlog::info("backend {} logs with spdlog", name);\n'


@pytest.mark.cpp
def test_a_library_the_image_lacks_is_named_by_check_and_carried_by_package(
    tmp_path, standin_image, docker_client
):
    """Debian's spdlog (and the fmt it needs) is on this machine, not in the stand-in image: `tbgen add
    library` links it, the backend uses it at load time, `tbgen check --docker` names both libraries as
    missing in the image, and `tbgen package` carries them beside the backend, where the packaged image's
    server loads them."""
    triton_sources_or_skip("r24.10")
    if subprocess.run(["dpkg", "-s", "libspdlog-dev"], capture_output=True, check=False).returncode != 0:
        pytest.skip(
            "Debian's libspdlog-dev is not installed (scripts/setup installs it: apt-get install "
            "libspdlog-dev)"
        )
    project = new_project(tmp_path, "cpp-backend")
    assert not list((project / "cmake").glob("libraries/*.cmake")), "a plain cpp-backend links no library"
    added = run_tbgen("add", "library", "spdlog", str(project), "--find-package", "spdlog")
    assert added.returncode == 0, added.stderr
    # A real use at backend load: the library is NEEDED, and the server log proves it ran.
    source = project / "src" / "proj.cc"
    text = source.read_text()
    anchor = "  RETURN_IF_ERROR(TRITONBACKEND_BackendName(backend, &name));\n"
    assert anchor in text
    text = text.replace(
        '#include "triton/backend/backend_common.h"',
        '#include <spdlog/spdlog.h>\n\n#include "triton/backend/backend_common.h"',
        1,
    )
    source.write_text(text.replace(anchor, anchor + SPDLOG_USE, 1))

    built = run_tbgen("build", str(project))
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    dynamic = subprocess.run(
        ["readelf", "-d", str(project / "build/install/backends/proj/libtriton_proj.so")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "[libspdlog.so.1.10]" in dynamic and "(RPATH)" in dynamic and "[$ORIGIN]" in dynamic
    tested = run_tbgen("test", str(project))
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]

    checked = run_tbgen("check", str(project), "--docker", "--image", standin_image)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    said = " ".join(checked.stdout.split())  # Rich wraps long lines
    assert (
        f"libspdlog.so.1.10, which libtriton_proj.so needs, is not in {standin_image}: `tbgen package` "
        "carries it beside the backend"
    ) in said
    assert "apt-get install libspdlog1.10" in said
    assert "libfmt.so.9, which libtriton_proj.so and libspdlog.so.1.10 need" in said

    tag = f"tbgen-test-carried-{os.getpid()}:latest"
    try:
        packaged = run_tbgen(
            "package", str(project), "--base-image", standin_image, "--image-tag", tag, "--test"
        )
        assert packaged.returncode == 0, packaged.stdout[-3000:] + packaged.stderr[-3000:]
        assert "from the backend built on this machine, carrying libspdlog.so.1.10, libfmt.so.9" in " ".join(
            packaged.stdout.split()
        )
        assert " 0 failed" in packaged.stdout
        assert "backend proj logs with spdlog" in (project / "build" / "tbgen" / "server.log").read_text()
        listing = docker_client.containers.run(
            tag, ["ls", "/opt/tritonserver/backends/proj"], remove=True
        ).decode()
        assert set(listing.split()) == {"libtriton_proj.so", "libspdlog.so.1.10", "libfmt.so.9"}
        assert not (
            project / "third_party" / "backend"
        ).exists()  # the staged backend went only into the context
    finally:
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - the build failed before tagging
            pass


@pytest.mark.cpp
def test_a_framework_backend_is_served_by_its_packaged_image(tmp_path, standin_image, docker_client):
    """cpp-backend --framework opencv-dnn: `tbgen check --docker` names OpenCV's libraries, which the stand-in
    image lacks; `tbgen package` carries them, and the packaged image loads the ONNX model and passes the
    smoke suite. (libtorch goes the same way; its closure is about 470 MB, too much for the suite.)"""
    triton_sources_or_skip("r24.10")
    project = tmp_path / "proj"
    created = run_tbgen(
        "new",
        str(project),
        "-t",
        "cpp-backend",
        "--no-input",
        "--triton-version",
        "24.10",
        "--framework",
        "opencv-dnn",
    )
    assert created.returncode == 0, created.stdout + created.stderr
    if "Example model: wrote" not in created.stdout:
        pytest.skip(f"no example model.onnx: {created.stdout} (scripts/setup installs onnx<1.18)")
    built = run_tbgen("build", str(project))
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]

    checked = run_tbgen("check", str(project), "--docker", "--image", standin_image)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    said = " ".join(checked.stdout.split())
    assert f"which libtriton_proj.so needs, is not in {standin_image}" in said and "libopencv_dnn.so" in said

    tag = f"tbgen-test-framework-{os.getpid()}:latest"
    try:
        packaged = run_tbgen(
            "package", str(project), "--base-image", standin_image, "--image-tag", tag, "--test"
        )
        assert packaged.returncode == 0, packaged.stdout[-3000:] + packaged.stderr[-3000:]
        assert "carrying" in packaged.stdout and "libopencv_dnn.so" in " ".join(packaged.stdout.split())
        assert " 0 failed" in packaged.stdout
        listing = docker_client.containers.run(
            tag, ["ls", "/opt/tritonserver/backends/proj"], remove=True
        ).decode()
        assert "libtriton_proj.so" in listing.split() and any(
            n.startswith("libopencv_dnn.so") for n in listing.split()
        )
    finally:
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - the build failed before tagging
            pass
