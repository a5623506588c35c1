"""scripts/gpu-check on a machine without a GPU: what `prepare` gathers for the device (within 64 MiB with the
working tree, each piece in the manifest with its size and digest, the server runnable from its archive),
what `run` does without a GPU (the steps it can do, for real; the others skipped with the reason, in its
report), the decisions it runs on, and README's device call being the one the script prints."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from triton_backend_gen.discovery import SOURCE_WHEEL, discover_servers
from triton_backend_gen.scaffold.example_model import python_with

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-check"
sys.path.insert(0, str(REPO / "scripts"))

from gpu_check.device import DEVICE_CALL, LIMIT_BYTES, CheckError  # noqa: E402
from gpu_check.prepare import manylinux_platforms, pip_download_command, runtime_requirements  # noqa: E402
from gpu_check.run import batches, fresh_work_dir, plan_steps, why_not  # noqa: E402
from gpu_check.state import RunState, Step, StepResult, run_logged  # noqa: E402

# The slow tests share one gathering (module scope): one worker runs them.
shared_gathering = pytest.mark.xdist_group("gpu_check")


def gpu_check(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """scripts/gpu-check in this Python (tbgen's), as a person runs it here."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def carried(tmp_path_factory, request):
    """What `prepare` gathers, in a folder of its own (the repo's .gpu-check stays as it is)."""
    if not any(source == SOURCE_WHEEL and install for source, install, _ in discover_servers()):
        pytest.skip("no embedded tritonserver in this Python (tbgen's server extra) to carry")
    request.getfixturevalue("release_sources")
    dest = tmp_path_factory.mktemp("gpu-check") / "carried"
    started = time.monotonic()
    result = gpu_check("prepare", "--dest", str(dest))
    if result.returncode != 0 and "pip could not download" in result.stderr:
        pytest.skip(f"pip reaches no index here: {result.stderr.strip()[-500:]}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return dest, result.stdout, time.monotonic() - started


@pytest.fixture(scope="module")
def release_sources():
    """The embedded server's release sources (r24.10) in tbgen's cache, which prepare carries."""
    from conftest import triton_sources_or_skip

    return triton_sources_or_skip("r24.10")


# --- prepare ---------------------------------------------------------------------------------------------
@pytest.mark.slow
@shared_gathering
def test_prepare_gathers_what_the_device_lacks_within_the_limit(carried):
    dest, output, _seconds = carried
    manifest = json.loads((dest / "manifest.json").read_text())
    pieces = manifest["pieces"]
    assert {p["kind"] for p in pieces} == {"wheel", "server", "sources", "build-deps"}
    for item in pieces:  # each piece named with its size and digest, as it is on disk
        path = dest / item["name"]
        assert path.stat().st_size == item["bytes"], item["name"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == item["sha256"], item["name"]
    on_disk = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert manifest["carried_bytes"] == sum(p["bytes"] for p in pieces) == on_disk
    assert (
        manifest["tree_bytes"] > 0
        and manifest["total_bytes"] == manifest["carried_bytes"] + manifest["tree_bytes"]
    )
    assert manifest["fits"] and manifest["total_bytes"] <= LIMIT_BYTES == manifest["limit_bytes"]
    assert re.search(r"^Travels: .* of 64 MiB .*: fits$", output, re.MULTILINE), output[-2000:]
    assert DEVICE_CALL in output
    assert manifest["release"] == "24.10" and manifest["server_version"] == "2.51.0"


@pytest.mark.slow
@shared_gathering
def test_prepare_carries_wheels_for_the_devices_python_and_leaves_its_own_packages(carried):
    dest, _output, _seconds = carried
    manifest = json.loads((dest / "manifest.json").read_text())
    wheels = [p["name"].removeprefix("wheels/") for p in manifest["pieces"] if p["kind"] == "wheel"]
    names = {re.sub(r"[-_.]+", "-", wheel.split("-")[0]).lower() for wheel in wheels}
    assert {"typer", "cookiecutter", "tritonclient", "grpcio", "geventhttpclient", "docker"} <= names
    assert "numpy" not in names  # the torch image's numpy 2.x serves; a 1.x wheel would shadow it
    for wheel in wheels:  # what CPython 3.12 on x86-64 Linux installs
        python_tag, abi_tag, platform_tag = wheel.removesuffix(".whl").split("-")[-3:]
        assert python_tag in ("py3", "py2.py3", "cp312") or abi_tag == "abi3", wheel
        assert platform_tag == "any" or "x86_64" in platform_tag, wheel
    left = {item["name"].split("-")[0]: item["why"] for item in manifest["left_out"]}
    assert "numpy" in left and "numpy 2" in left["numpy"]


@pytest.mark.slow
@shared_gathering
def test_prepare_carries_the_server_that_runs_without_its_python_backend(carried, tmp_path):
    from triton_backend_gen.discovery import install_from_executable

    dest, _output, _seconds = carried
    archive = next(dest.glob("tritonserver-*.tar.xz"))
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path, filter="data")
    assert "pytriton/tritonserver/bin/tritonserver" in names
    assert any(re.match(r"nvidia_pytriton\.libs/libtritonserver-\w+\.so$", n) for n in names)
    assert any("libcudart" in n for n in names)  # the server's own CUDA 12 runtime
    assert not any("python_backend_stubs" in n or "libpython3" in n for n in names)
    # Unpacked elsewhere, it loads every library it needs from the archive and reports its version.
    install = install_from_executable(tmp_path / "pytriton/tritonserver/bin/tritonserver", "test")
    assert install.version == "2.51.0"
    manifest = json.loads((dest / "manifest.json").read_text())
    assert any("python_backend_stubs" in item["name"] for item in manifest["left_out"])


# --- run without a GPU -----------------------------------------------------------------------------------
def gpus_here() -> bool:
    smi = shutil.which("nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False).stdout if smi else ""
    return "GPU" in listed


@pytest.mark.slow
@shared_gathering
def test_run_without_a_gpu_does_what_it_can_and_says_what_it_skipped(carried, tmp_path):
    if gpus_here():
        pytest.skip("this machine has a GPU: `scripts/gpu-check run` does the GPU steps here")
    dest, _output, _seconds = carried
    out = tmp_path / "out"
    started = time.monotonic()
    result = gpu_check("run", "--carry", str(dest), "--out", str(out), "--work", str(tmp_path / "work"))
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert seconds < 120, f"run took {seconds:.0f} s without a GPU"
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu-check-logs.tar.gz",
        "gpu-check.json",
        "gpu-check.md",
    ]
    report = json.loads((out / "gpu-check.json").read_text())
    steps = {step["name"]: step for step in report["steps"]}
    assert report["gpu"] is None
    # What needs no GPU ran for real: the carried server was unpacked and ran, the projects were rendered.
    for name in ("device", "carried", "install", "server", "sources", "render cpp-backend"):
        assert steps[name]["status"] == "pass", steps[name]
    assert "tritonserver 2.51.0 (release 24.10)" in steps["server"]["summary"]
    torch_here = python_with("torch") is not None
    assert steps["render libtorch"]["status"] == ("pass" if torch_here else "FAIL"), steps["render libtorch"]
    # What needs one was skipped with the reason; the builds and KIND_CPU benchmarks say how to run them.
    gpu_steps = [name for name in steps if "KIND_GPU" in name or name in ("kernel alone", "model.pt alone")]
    assert len(gpu_steps) == 6
    assert {(steps[name]["status"], steps[name]["summary"]) for name in gpu_steps} == {("skip", "no GPU")}
    for name in (
        "build cpp-backend",
        "build libtorch",
        "bench cpp-backend KIND_CPU",
        "bench libtorch KIND_CPU",
    ):
        assert steps[name]["status"] == "skip" and "--cpu-steps" in steps[name]["summary"], steps[name]
    markdown = (out / "gpu-check.md").read_text()
    assert (
        "**No GPU here**" in markdown and "serve cpp-backend KIND_GPU" in markdown.split("**No GPU here**")[1]
    )
    with tarfile.open(out / "gpu-check-logs.tar.gz") as tar:
        assert "logs/render-cpp-backend.log" in tar.getnames()


# --- the decisions ---------------------------------------------------------------------------------------
def test_pip_download_names_no_index_and_asks_for_the_devices_wheels():
    command = pip_download_command(["typer>=0.12"], Path("/tmp/x"), "3.12")
    assert command[1:4] == ["-m", "pip", "download"]
    assert "--only-binary=:all:" in command and "typer>=0.12" in command
    assert command[command.index("--python-version") + 1] == "3.12" and "cp312" in command
    assert not any(re.search(r"index|https?:|--find-links", part) for part in command)  # pip's own config
    platforms = [command[i + 1] for i, part in enumerate(command) if part == "--platform"]
    assert platforms == manylinux_platforms()
    assert "manylinux2014_x86_64" in platforms and "manylinux_2_39_x86_64" in platforms  # Ubuntu 24.04
    assert "manylinux_2_40_x86_64" not in platforms


def test_the_carried_requirements_are_tbgens_less_numpy():
    requirements = runtime_requirements()
    assert not any(r.startswith("numpy") for r in requirements)
    assert any(r.startswith("tritonclient") for r in requirements)
    assert any(r.startswith("cookiecutter") for r in requirements)


def state(gpu: bool, *, cpu_steps: bool = False, passed: tuple[str, ...] = (), left: float = 300) -> RunState:
    run_state = RunState(Path("/w"), Path("/o"), Path("/c"), cpu_steps, time.monotonic() + left)
    run_state.facts["gpus"] = [{"name": "NVIDIA H200"}] if gpu else []
    run_state.results = {name: StepResult(name, "pass", 1.0, "") for name in passed}
    return run_state


def test_a_step_runs_only_with_what_it_needs():
    serve = Step("serve", lambda s: None, "needs", ("build",), least=30)
    build = Step("build", lambda s: None, "for", ("render",), least=60)
    assert why_not(state(False, passed=("build",)), serve) == "no GPU"
    assert "--cpu-steps" in why_not(state(False, passed=("render",)), build)
    assert why_not(state(False, cpu_steps=True, passed=("render",)), build) is None
    assert why_not(state(True), serve) == "needs build, which did not pass"
    assert why_not(state(True, passed=("build",)), serve) is None
    assert why_not(state(True, passed=("build",), left=20), serve).startswith("not started: 20 s")


def test_the_plan_builds_side_by_side_and_checks_every_project_on_the_gpu():
    plan = plan_steps()
    names = [step.name for step in plan]
    assert len(names) == len(set(names))
    together = [[step.name for step in batch] for batch in batches(plan) if len(batch) > 1]
    assert together == [["build cpp-backend", "build libtorch"]]
    for project in ("cpp-backend", "libtorch"):
        serve = next(step for step in plan if step.name == f"serve {project} KIND_GPU")
        assert serve.gpu == "needs" and f"build {project}" in serve.after
        assert {f"bench {project} KIND_GPU", f"bench {project} KIND_CPU"} <= set(names)
    every_after = {name for step in plan for name in step.after}
    assert every_after <= set(names)  # no step waits on one that is not planned
    assert all(names.index(n) < names.index(step.name) for step in plan for n in step.after)


def test_a_command_past_its_time_is_stopped_with_its_process_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    command = ["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"]
    started = time.monotonic()
    completed = run_logged(command, tmp_path / "log", 1, dict(os.environ), tmp_path)
    assert completed.returncode is None and time.monotonic() - started < 15
    assert not running(int(pid_file.read_text()))  # the shell's own child went with it
    assert (tmp_path / "log").read_text().startswith("$ sh -c")


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return not re.search(r"^State:\s+[ZX]", status, re.MULTILINE)


def test_run_empties_only_a_work_folder_of_its_own(tmp_path):
    mine = tmp_path / "work"
    fresh_work_dir(mine)
    (mine / "left").write_text("from an earlier run")
    fresh_work_dir(mine)
    assert [p.name for p in mine.iterdir()] == [".gpu-check-work"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "file").write_text("someone's")
    with pytest.raises(CheckError):
        fresh_work_dir(other)
    assert (other / "file").is_file()


# --- README ----------------------------------------------------------------------------------------------
def test_readme_gives_the_device_call_the_script_prints():
    result = gpu_check("usage", timeout=60)
    assert result.returncode == 0, result.stderr
    assert DEVICE_CALL in result.stdout.splitlines()[2]
    readme = (REPO / "README.md").read_text()
    assert DEVICE_CALL in readme, (
        "README's GPU check section must give the device call `gpu-check usage` prints"
    )
    assert os.access(SCRIPT, os.X_OK)
