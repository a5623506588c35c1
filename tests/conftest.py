"""Shared fixtures: rendering templates and locating Triton's source cache."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

# pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their environment: tbgen (in the worker, or a
# tbgen a test starts) would wrap its output at 80 columns there and at 200 in one process. Every test sees
# the environment of a plain run.
if "PYTEST_XDIST_WORKER" in os.environ:
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def newest_release_at_hand() -> str | None:
    """The newest release of the matrix whose core/common/backend sources are in tbgen's cache, or None."""
    from triton_backend_gen import versions
    from triton_backend_gen.toolchain.sources import missing_repositories

    at_hand = [r.container for r in versions.RELEASES if not missing_repositories(r.branch)]
    return at_hand[-1] if at_hand else None


# tbgen targets the newest release by default; its sources are not here (no network): the tests render and
# build for the newest release the cache holds, as an offline site does with $TBGEN_TRITON_VERSION. A test
# of the default itself removes the variable.
if "TBGEN_TRITON_VERSION" not in os.environ and (_at_hand := newest_release_at_hand()):
    os.environ["TBGEN_TRITON_VERSION"] = _at_hand

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = REPO_ROOT / "templates"
# Set by .ci/run once it has filled the source cache: then the C++ tests must find their sources, not skip.
REQUIRE_SOURCES = "TBGEN_TESTS_REQUIRE_SOURCES"


def source_cache_dir() -> Path:
    """tbgen's cache of Triton sources ($TBGEN_CACHE_DIR/triton-src), as `tbgen deps fetch|add` lay it out."""
    from triton_backend_gen.toolchain.sources import sources_dir

    return sources_dir()


def triton_sources_or_skip(branch: str) -> Path:
    """The cached core/common/backend sources of ``branch`` (e.g. "r24.10"), or skip the test saying why."""
    from triton_backend_gen.toolchain.sources import missing_repositories, sources_dir

    missing = missing_repositories(branch)
    if missing:
        reason = (
            f"Triton sources for {branch} are not in {sources_dir() / branch} (missing: "
            f"{', '.join(missing)}); fill the cache with `tbgen deps fetch --triton-version {branch}` (or "
            f"`tbgen deps add --from DIR --triton-version {branch}`) to run this test"
        )
        if os.environ.get(REQUIRE_SOURCES):  # CI filled the cache: a C++ test that finds nothing is a failure
            pytest.fail(f"{reason} (${REQUIRE_SOURCES} is set)")
        pytest.skip(reason)
    return sources_dir() / branch


def cmake_fits_or_skip(release) -> None:
    """Skip unless tbgen's cmake is new enough for ``release`` (a versions.Release) to configure."""
    from triton_backend_gen.toolchain.cmake import cmake_executable

    output = subprocess.run(
        [cmake_executable(), "--version"], capture_output=True, text=True, check=True
    ).stdout
    have = tuple(int(part) for part in output.split()[2].split(".")[:3])
    needed = tuple(int(part) for part in release.min_cmake.split("."))
    if have < needed:
        pytest.skip(
            f"backend {release.branch} needs CMake >= {release.min_cmake}, {cmake_executable()} is "
            f"{'.'.join(map(str, have))} (pip install 'cmake>={release.min_cmake}')"
        )


# README's test command runs the suite in pytest-xdist workers (pyproject's addopts: -n auto --dist
# loadgroup). Tests in one group run in one worker, one after the other: every test of the Docker engine (they
# count the engine's tbgen containers, so two at once would see each other's), and the modules that mark
# themselves with `pytest.mark.xdist_group` because their module-scoped server or build serves all their
# tests.
DOCKER_FIXTURES = {"docker_client", "standin_image"}


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: two workers more than the cores this process may use ($PYTEST_XDIST_AUTO_NUM_WORKERS still
    decides when set). The slow tests wait on servers, stubs, builds and probes as much as they compute (a
    slow subset on 2 cores: 217 s with 2 workers, 147 s with 3, 136 s with 4; the whole suite on 2 cores,
    2026-12-05: 17 min 58 s with 3 workers, 15 min 35 s with 4)."""
    given = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(given) if given else len(os.sched_getaffinity(0)) + 2


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups into the node IDs
def pytest_collection_modifyitems(config, items):
    for item in items:
        if DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("docker"))


@pytest.fixture
def render_template(tmp_path):
    """Render ``templates/<name>`` with the given answers into tmp_path; returns the project directory.

    Uses tbgen's own rendering path (answers validated, atomic write)."""

    def render(name: str, **answers) -> Path:
        from triton_backend_gen.scaffold import render_new_project

        project_name = answers.pop("project_name", "my-backend")
        return render_new_project(name, tmp_path / project_name, answers)

    return render


@pytest.fixture(scope="session", autouse=True)
def compiler_cache():
    """ccache for every C++ build of the session (autouse: every test's, a tbgen it starts inherits the
    environment), kept between runs beside the source cache, so Triton's own libraries are compiled once
    rather than for every rendered variant (tbgen sets CCACHE_BASEDIR to the project, so projects of the same
    name in different directories share entries)."""
    if shutil.which("ccache") is None:
        yield None
        return
    with pytest.MonkeyPatch.context() as patch:
        if "CCACHE_DIR" not in os.environ:
            patch.setenv("CCACHE_DIR", str(source_cache_dir().parent / "ccache"))
        # ccache hashes the working directory into every compile with -g (the sanitizer builds), so without
        # this two projects in different temporary directories never share an entry.
        patch.setenv("CCACHE_NOHASHDIR", "1")
        yield os.environ["CCACHE_DIR"]


def build_native(project: Path) -> Path:
    """Build a rendered python-backend's pybind11 extension for this Python with `tbgen build`'s stage
    function (into <project>/build/native); returns its compile commands."""
    from triton_backend_gen.project import load_project
    from triton_backend_gen.toolchain.build import build_project

    result = build_project(load_project(project))
    assert result.artifact is not None and result.log_file is not None
    return result.log_file.parent / "compile_commands.json"


@pytest.fixture
def require_pybind11():
    from triton_backend_gen.toolchain.cmake import cmake_executable

    if importlib.util.find_spec("pybind11") is None:
        pytest.skip(
            "pybind11 is not installed for this Python (pip install pybind11, or tbgen's build extra)"
        )
    if not shutil.which(cmake_executable()):
        pytest.skip("cmake is not installed")


def template_files(project: Path) -> set[str]:
    """The files a template rendered into ``project``: all but tbgen's generation record (tests/update tests
    it)."""
    return {
        str(path.relative_to(project))
        for path in project.rglob("*")
        if path.is_file() and path.relative_to(project).parts[0] != ".tbgen"
    }


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (a git repository's .git aside), to compare a tree
    before/after."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def run_tbgen(*args, cwd=None, timeout=900, env=None) -> subprocess.CompletedProcess:
    """A real `tbgen` process (wide Rich output so messages are not wrapped)."""
    return subprocess.run(
        [sys.executable, "-m", "triton_backend_gen", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "COLUMNS": "250", **(env or {})},
    )


def run_bench_script(name: str, *args: str, timeout: int = 900) -> str:
    """The output of ``python bench/NAME.py ARGS`` (a bench script's smoke run), asserted to exit 0."""
    command = [sys.executable, str(REPO_ROOT / "bench" / f"{name}.py"), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def project_of(path: Path):
    """The tbgen project at or above ``path`` (a directory or a config file), or None."""
    from triton_backend_gen.project import load_project_or_none

    path = Path(path)
    return load_project_or_none(path if path.is_dir() else path.parent)


def check_results(output: str) -> dict[str, str]:
    """check name ("infer [http]") -> "pass" or "FAIL", from what `tbgen test` prints off a terminal: a line
    per check ("pass  infer [http]  0.02 s") with its detail indented beneath."""
    found = {}
    for line in output.splitlines():
        match = re.match(r"^(pass|FAIL)  (.+?)  \d+\.\d\d s$", line)
        if match:
            found.setdefault(match.group(2), match.group(1))
    return found


def new_project(tmp_path: Path, template: str, *sets: str, name: str = "proj") -> Path:
    """`tbgen new` a project for release 24.10 (the embedded server's) with ``--set`` answers."""
    args = ["new", str(tmp_path / name), "-t", template, "--no-input", "--triton-version", "24.10"]
    for item in sets:
        args += ["--set", item]
    result = run_tbgen(*args)
    assert result.returncode == 0, result.stderr
    return tmp_path / name


def read_config(project: Path, model: str | None = None):
    """The ModelConfig of ``model`` in a rendered project (its first model from tbgen.toml when None)."""
    from triton_backend_gen.model_config import load_model_config
    from triton_backend_gen.project import load_project

    name = model or load_project(project).models[0].name
    return load_model_config(project / "model_repository" / name / "config.pbtxt")


@pytest.fixture
def server_or_skip():
    """The tritonserver tbgen finds (the embedded one in CI), or skip saying why there is none."""
    from triton_backend_gen.discovery import find_tritonserver
    from triton_backend_gen.errors import ServerError

    try:
        return find_tritonserver()
    except ServerError as err:
        pytest.skip(f"no tritonserver to check against: {err.message}")


@pytest.fixture(scope="session")
def docker_client():
    """A client of a Docker engine that answers, or skip saying why (.ci/run installs and starts one)."""
    from triton_backend_gen.errors import ServerError
    from triton_backend_gen.runtime.container import connect

    try:
        return connect()
    except ServerError as err:
        pytest.skip(f"no Docker engine: {err.message} ({err.hint})")


@pytest.fixture(scope="session")
def standin_image(docker_client) -> str:
    """The local stand-in for the NGC tritonserver image (built once, then reused while its recipe holds)."""
    sys.path.insert(0, str(REPO_ROOT / "tests" / "containers"))
    try:
        from standin import ensure_standin_image
    finally:
        sys.path.pop(0)
    return ensure_standin_image(docker_client)


def grpc_infer(client, model: str, reference, inputs: dict, **options) -> dict:
    """One gRPC request of ``inputs`` to ``model``, typed as ``reference.INPUTS`` declares, with
    tritonclient's ``options`` (sequence_id, sequence_start, ...); its outputs by name."""
    import tritonclient.grpc as grpcclient

    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), reference.INPUTS[name][0])
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = client.infer(model, tensors, **options)
    return {name: result.as_numpy(name) for name in reference.OUTPUTS}


def interleaved_sequences(reference, lengths: list[int], send) -> None:
    """Sequences of ``lengths`` requests to a served sequence model, each from a thread of its own, released
    together so that their requests interleave: ``send(n, inputs, start, end)`` sends request k of sequence n
    (reference.make_inputs(batch, seed=100 * n + k)) and returns its outputs, each checked against
    reference.compute_sequence of the sequence's inputs so far."""
    from triton_backend_gen.smoke.compare import output_mismatches

    batch = 1 if reference.MAX_BATCH_SIZE > 0 else None
    barrier = threading.Barrier(len(lengths))
    failures: list[BaseException] = []

    def run(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            history: list[dict] = []
            for step in range(lengths[n]):
                history.append(reference.make_inputs(batch, seed=100 * n + step))
                outputs = send(n, history[-1], step == 0, step == lengths[n] - 1)
                mismatches = output_mismatches(
                    outputs, reference.compute_sequence(history)[-1], reference.TOLERANCE
                )
                assert not mismatches, (f"sequence {n}, request {step}", mismatches)
        except BaseException as err:  # noqa: BLE001 - reported below
            failures.append(err)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(lengths))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not [thread for thread in threads if thread.is_alive()], "a sequence got no answer within 120 s"
    assert not failures, failures


def fuzz_passes(project: Path, count: int = 300, *extra: str) -> str:
    """`tbgen test --fuzz COUNT`'s report, asserted clean. The 2.51 server's own gRPC frontend now and then
    segfaults when the fuzzer cancels requests that are still executing (Triton's cancellation race, server
    issues #7368 and #8034, fixed after 24.10; the stack is in tritonserver, not the backend, and a busy loop
    in a plain backend shows the same). Such a crash is run again once with another seed; any other failure,
    or a second crash, fails."""
    for seed in ("0", "1"):
        result = run_tbgen("test", str(project), "--fuzz", str(count), "--seed", seed, *extra)
        log = project / "build" / "tbgen" / "server.log"
        crashed = log.is_file() and "Signal (11) received" in log.read_text(errors="replace")
        if result.returncode == 0 or not crashed:
            break
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " 0 failed" in result.stdout and f"{count} requests" in result.stdout, result.stdout[-4000:]
    return result.stdout


def triton_processes_of(project: Path) -> list[str]:
    """The tritonserver and python stub processes whose command line names ``project`` ("pid: command line";
    zombies have none), read from /proc: what a run must not leave behind."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"triton" in argv[0] and any(str(project).encode() in arg for arg in argv):
            found.append(f"{entry.name}: {b' '.join(argv).decode(errors='replace')[:200]}")
    return found


def replace_once(path: Path, old: str, new: str) -> None:
    """Edit a file as a user would: ``old`` (which must be there) becomes ``new``."""
    text = path.read_text()
    assert old in text, f"{old!r} is not in {path}"
    path.write_text(text.replace(old, new, 1))


def commit_all(project: Path) -> None:
    """Commit everything in ``project`` (a git repository is made there first if needed)."""

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
            cwd=project,
            check=True,
            capture_output=True,
        )

    if not (project / ".git").exists():
        git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "work", "--allow-empty")
