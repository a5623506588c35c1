"""A real embedded tritonserver: start, readiness, inference, logs, ports, shutdown, no orphans."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import runtime_support
from runtime_support import alive, render

from triton_backend_gen import versions
from triton_backend_gen.errors import ServerError
from triton_backend_gen.project import load_project
from triton_backend_gen.runtime import ServerOptions, assemble_backend_dir, prepare_server, start_server
from triton_backend_gen.runtime.local import SHM_DIR, LocalServer, group_members
from triton_backend_gen.runtime.release_note import first_time, release_note
from triton_backend_gen.runtime.server import relevant_log_lines

# One worker for the module: its module-scoped server serves every test (see tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("runtime-server")]
embedded_install = runtime_support.embedded_install  # the fixture

CPU_NOISE = ("NVML", "DCGM", "CUDA driver", "CudaDriverHelper", "pinned memory", "CUDA memory pool")
BROKEN_MODEL = "broken"
BROKEN_MESSAGE = "tbgen test: this model fails on purpose"


def add_broken_model(repository: Path) -> None:
    """A python model whose model.py raises on import."""
    model = repository / BROKEN_MODEL
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'name: "{BROKEN_MODEL}"\nbackend: "python"\nmax_batch_size: 0\n')
    (model / "1" / "model.py").write_text(f"raise RuntimeError({BROKEN_MESSAGE!r})\n")


@pytest.fixture(scope="module")
def project(tmp_path_factory, embedded_install) -> Path:
    root = render("python-backend", tmp_path_factory.mktemp("server") / "served")
    add_broken_model(root / "model_repository")
    return root


@pytest.fixture(scope="module")
def server(project):
    started = time.monotonic()
    with start_server(load_project(project)) as running:
        running.startup_s = time.monotonic() - started
        yield running


def http_get(server, path: str):
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{server.http_url}{path}", timeout=5) as response:
        return json.loads(response.read())


# --- one server for the project (with a model that fails to load) ------------------------------------------
def test_models_are_ready_or_failed(server):
    states = {state.name: state for state in server.model_states()}
    assert states["add_sub"].state == "READY"
    assert states[BROKEN_MODEL].state == "UNAVAILABLE"
    assert BROKEN_MESSAGE in states[BROKEN_MODEL].reason
    assert server.running


def test_endpoints_are_loopback_and_answer(server):
    for url in (server.http_url, server.grpc_url, server.metrics_url):
        host, port = url.rsplit(":", 1)
        assert host == "127.0.0.1"
        with socket.create_connection((host, int(port)), timeout=5):
            pass


def test_the_server_reports_the_version_discovery_found(server):
    assert http_get(server, "/v2")["version"] == server.install.version


def test_http_inference_answers_like_the_reference(server, project):
    import tritonclient.http as httpclient
    from tritonclient.utils import np_to_triton_dtype

    spec = importlib.util.spec_from_file_location("served_reference", project / "reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    inputs = reference.make_inputs(2, seed=7)
    tensors = []
    for name, array in inputs.items():
        tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        result = client.infer("add_sub", tensors)
    finally:
        client.close()
    for name, expected in reference.compute(inputs).items():
        np.testing.assert_allclose(result.as_numpy(name), expected, **reference.TOLERANCE)


def test_log_is_written_under_the_project(server, project):
    assert server.log_file == project / "build" / "tbgen" / "server.log"
    log = server.log_file.read_text()
    assert server.server_id in log and "successfully loaded 'add_sub'" in log


def test_relevant_log_lines_explain_the_failure_without_cpu_noise(server):
    log = server.log_file.read_text()
    lines = server.relevant_log_lines()
    assert any(BROKEN_MESSAGE in line for line in lines)
    assert any("model.py" in line for line in lines)  # the stub's traceback comes along
    for line in lines:
        assert not any(noise in line for noise in CPU_NOISE), line
    if not any(noise in log for noise in CPU_NOISE):
        pytest.skip("this machine's server log has no CPU-only CUDA/NVML/DCGM warnings to leave out")


def test_another_release_is_said_plainly(server, project):
    target = load_project(project).release
    if target == server.install.release:
        pytest.skip(f"the rendered project targets the server's own release {target.container}")
    said = server.release_note.text
    assert target.container in said and server.install.version in said, said


def test_release_note_is_a_note_when_the_backend_api_matches(embedded_install, tmp_path, monkeypatch):
    release = embedded_install.release
    root = render("python-backend", tmp_path / "same", triton_version=release.container)
    assert release_note(load_project(root), embedded_install) is None
    same_api = next(r for r in versions.RELEASES if r != release and r.backend_api == release.backend_api)
    root = render("python-backend", tmp_path / "other", triton_version=same_api.container)
    monkeypatch.chdir(root)
    note = release_note(load_project(root), embedded_install)
    assert not note.warning and same_api.container in note.text and release.container in note.text
    assert "backend API" in note.text and "--server" in note.text and "--docker" in note.text
    # The fix runs as printed from where the command ran: in the project, or naming it from elsewhere.
    assert f"`tbgen update --triton-version {release.container}`" in note.text
    monkeypatch.chdir(tmp_path)
    assert (
        f"`tbgen update --triton-version {release.container} --project other`"
        in release_note(load_project(root), embedded_install).text
    )
    newer_api = [r for r in versions.RELEASES if r.backend_api > release.backend_api]
    if newer_api:
        root = render("python-backend", tmp_path / "newer", triton_version=newer_api[0].container)
        note = release_note(load_project(root), embedded_install)
        assert note.warning and "may refuse to load" in note.text


def test_a_release_note_is_said_once_per_project_and_releases_a_warning_every_time(
    embedded_install, tmp_path
):
    release = embedded_install.release
    same_api = next(r for r in versions.RELEASES if r != release and r.backend_api == release.backend_api)
    first = load_project(render("python-backend", tmp_path / "first", triton_version=same_api.container))
    second = load_project(render("python-backend", tmp_path / "second", triton_version=same_api.container))
    note = release_note(first, embedded_install)
    assert first_time(first, note) and not first_time(first, note)
    assert first_time(second, note)  # another project hears it too
    warning = dataclasses.replace(note, warning=True)
    assert first_time(first, warning) and first_time(first, warning)


def test_busy_port_is_refused_before_launch(server, embedded_install, tmp_path):
    (tmp_path / "model" / "1").mkdir(parents=True)  # a bare model repository; nothing loads before the ports
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        triton = prepare_server(tmp_path, http_port=port)
        with pytest.raises(ServerError) as raised:
            triton.start()
    assert str(port) in raised.value.message and "--http-port" in raised.value.hint
    assert triton.pid is None

    grpc_port = int(server.grpc_url.rsplit(":", 1)[1])  # a tritonserver's own port is busy too
    with pytest.raises(ServerError, match=str(grpc_port)) as raised:
        prepare_server(tmp_path, grpc_port=grpc_port).start()
    assert "--grpc-port" in raised.value.hint


def test_relevant_log_lines_of_a_startup_error():
    log = textwrap.dedent("""\
        $ tritonserver --model-repository=/nowhere --exit-on-error=false
        W1202 17:05:05.695651 8681 pinned_memory_manager.cc:273] "Unable to allocate pinned system memory, \
pinned memory pool will not be available: CUDA driver version is insufficient for CUDA runtime version"
        I1202 17:05:05.695738 8681 cuda_memory_manager.cc:117] "CUDA memory pool disabled"
        E1202 17:05:05.695919 8681 server.cc:241] "CudaDriverHelper has not been initialized."
        +------+------+
        | server_version | 2.51.0 |
        I1202 17:05:05.696424 8681 server.cc:302] "No server context available. Exiting immediately."
        error: creating server: Internal - failed to stat file /nowhere
        """)
    assert relevant_log_lines(log) == ["error: creating server: Internal - failed to stat file /nowhere"]


# --- stopping ----------------------------------------------------------------------------------------------
@pytest.fixture
def python_repository(project, tmp_path) -> Path:
    """A bare model repository with the project's python model (so the server has stub processes)."""
    repository = tmp_path / "repository"
    shutil.copytree(project / "model_repository" / "add_sub", repository / "add_sub")
    return repository


def test_stop_is_idempotent_and_leaves_no_process(python_repository, embedded_install, tmp_path):
    layout = assemble_backend_dir(embedded_install, tmp_path / "run", None)
    options = ServerOptions(model_repository=python_repository, log_file=tmp_path / "run" / "server.log")
    triton = LocalServer(embedded_install, layout, options)
    assert triton.stop() == 0  # never started: nothing to do
    with triton:
        pgid = triton.pid
        members = group_members(pgid)
        assert pgid in members and len(members) >= 2, "expected the server and its python stub"
        assert list(SHM_DIR.glob(f"{triton.shm_prefix}*")), "the python backend uses tbgen's shm prefix"
        started = time.monotonic()
        code = triton.stop()
        stop_s = time.monotonic() - started
    assert code == 0, triton.relevant_log_lines()
    assert triton.stop() == code and not triton.running
    assert not [pid for pid in members if alive(pid)] and group_members(pgid) == []
    assert not list(SHM_DIR.glob(f"{triton.shm_prefix}*"))
    assert stop_s < 10


def test_stop_kills_a_server_that_does_not_exit(python_repository, embedded_install, tmp_path):
    triton = start_server(python_repository)
    members = group_members(triton.pid)
    triton._process.send_signal(signal.SIGSTOP)  # a stopped process ignores SIGTERM, as a hung one would
    try:
        assert triton.stop(timeout=1) == -signal.SIGKILL
    finally:
        for pid in members:
            if alive(pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)
    assert not [pid for pid in members if alive(pid)]


def test_a_bare_repository_runs_from_a_scratch_directory_removed_on_stop(python_repository):
    with start_server(python_repository) as triton:
        backends = triton.layout.backend_dir
        assert backends.is_dir() and not backends.is_relative_to(python_repository)
        assert [state.state for state in triton.model_states()] == ["READY"]
    assert not backends.exists()
    assert "successfully loaded 'add_sub'" in triton.log_file.read_text()


# --- tbgen killed while it runs a server --------------------------------------------------------------------
RUNNER = """
import sys, time
from pathlib import Path
from triton_backend_gen.project import load_project_or_none
from triton_backend_gen.runtime import start_server
from triton_backend_gen.signals import SignalReceived, stop_on_signals

try:
    target = load_project_or_none(Path(sys.argv[1])) or Path(sys.argv[1])
    with stop_on_signals(), start_server(target) as server:
        print(server.pid, flush=True)
        time.sleep(600)
except SignalReceived as received:
    sys.exit(received.exit_code)
"""


def run_and_kill(project_root: Path, signum: int) -> tuple[int, list[int], int]:
    """Run start_server in a child process, send it ``signum`` once the server is up.

    Returns (the child's exit status, the server's process group members, the server's pid)."""
    child = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(project_root)], stdout=subprocess.PIPE, text=True
    )
    try:
        pid = int(child.stdout.readline())
        members = group_members(pid)
        assert pid in members and len(members) >= 2
        child.send_signal(signum)
        return child.wait(30), members, pid
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_sigterm_to_tbgen_stops_the_server(tmp_path):
    code, members, _ = run_and_kill(render("python-backend", tmp_path / "p"), signal.SIGTERM)
    assert code == 128 + signal.SIGTERM  # stop_on_signals turned it into an exception that unwound the server
    assert wait_gone(members, 1) == []


def test_sigkill_to_tbgen_takes_the_server_down(tmp_path):
    code, members, pid = run_and_kill(render("python-backend", tmp_path / "p"), signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert wait_gone([pid], 5) == [], "the server outlived tbgen"
    # its python stubs notice the server is gone and exit by themselves
    assert wait_gone(members, 30) == []
