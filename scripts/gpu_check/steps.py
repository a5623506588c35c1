"""The steps of a run that set the machine up (its facts, what was carried, the wheels, the server, the
sources) and those that take the two projects through tbgen (render, build, serve, bench)."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from gpu_check.device import (
    BENCH_CONCURRENCY,
    BENCH_SECONDS,
    CARRY_NAME,
    FAIL,
    MANIFEST,
    PASS,
    PROJECTS,
    REPO,
    SCRIPT,
    sha256_of,
    tail_lines,
)
from gpu_check.state import Completed, Outcome, RunState, failed, run_step_command, slug, tbgen
from triton_backend_gen import discovery
from triton_backend_gen.errors import ServerError
from triton_backend_gen.toolchain import sources
from triton_backend_gen.toolchain.cmake import cmake_executable


# --- device facts ----------------------------------------------------------------------------------------
def quiet_output(command: list[str], timeout: float = 60) -> str | None:
    """What ``command`` prints, or None when it cannot run or fails."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def query_gpus() -> list[dict]:
    """The GPUs nvidia-smi lists: name, driver, memory, compute capability."""
    fields = ["name", "driver_version", "memory.total", "compute_cap"]
    for asked in (fields, fields[:3]):  # an old driver does not know compute_cap
        output = quiet_output(["nvidia-smi", f"--query-gpu={','.join(asked)}", "--format=csv,noheader"])
        if output is not None:
            rows = [[cell.strip() for cell in line.split(",")] for line in output.strip().splitlines()]
            return [dict(zip(asked, row, strict=False)) for row in rows if row and row[0]]
    return []


def nvcc_path() -> str | None:
    """The nvcc tbgen would build with: $CUDACXX, PATH, then /usr/local/cuda."""
    for candidate in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def probe_python(state: RunState) -> dict:
    """numpy and torch of the Python that runs tbgen (a subprocess: torch takes seconds to import)."""
    command = [state.python, str(SCRIPT), "probe-python"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return {"python_probe": f"failed: {err}"}
    try:
        return json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"python_probe": f"failed: {tail_lines(result.stderr, 1)}"}


def device_step(state: RunState) -> Outcome:
    nvcc = nvcc_path()
    nvcc_version = quiet_output([nvcc, "--version"]) if nvcc else None
    cmake_version = quiet_output([cmake_executable(), "--version"])  # the CMake tbgen builds with
    ldconfig = quiet_output(["ldconfig", "-p"]) or ""
    state.facts.update(
        gpus=query_gpus(),
        nvcc=(re.search(r"release (\S+),", nvcc_version or "") or [None, None])[1],
        cmake=(cmake_version or "").split("\n")[0].removeprefix("cmake version ").strip() or None,
        python=f"{platform.python_version()} ({state.python})",
        glibc=" ".join(platform.libc_ver()),
        kernel=platform.release(),
        cpus=os.cpu_count(),
        hostname=socket.gethostname(),
        tbgen_sees_gpu=discovery.gpus_visible(),
        libcuda=" libcuda.so.1 " in ldconfig,
        **probe_python(state),
    )
    gpu = state.gpu
    summary = describe_gpu(gpu) if gpu else "no GPU: nvidia-smi lists none"
    detail = [f"{key}: {value}" for key, value in state.facts.items() if key != "gpus"]
    return Outcome(PASS, summary, detail, {"gpus": state.facts["gpus"]})


def describe_gpu(gpu: dict) -> str:
    capability = f", compute capability {gpu['compute_cap']}" if gpu.get("compute_cap") else ""
    return (
        f"{gpu['name']}, {gpu.get('memory.total', '?')}, driver {gpu.get('driver_version', '?')}{capability}"
    )


# --- what was carried ------------------------------------------------------------------------------------
def carried_step(state: RunState) -> Outcome:
    """The manifest, and each piece present with its digest."""
    path = state.carry / MANIFEST
    if not path.is_file():
        return Outcome(
            FAIL,
            f"nothing carried: no {path}",
            [f"run `.venv/bin/python scripts/gpu-check prepare` first and carry {CARRY_NAME}"],
        )
    state.manifest = json.loads(path.read_text())
    broken = [
        p["name"]
        for p in state.manifest["pieces"]
        if not (state.carry / p["name"]).is_file() or sha256_of(state.carry / p["name"]) != p["sha256"]
    ]
    if broken:
        return Outcome(FAIL, f"{len(broken)} carried pieces missing or damaged", broken)
    pieces = state.manifest["pieces"]
    summary = (
        f"{len(pieces)} pieces, {state.manifest['carried_bytes'] / 1e6:.1f} MB, made "
        f"{state.manifest['made_at']} for release {state.manifest['release']}"
    )
    return Outcome(
        PASS, summary, [f"left out: {item['name']}: {item['why']}" for item in state.manifest["left_out"]]
    )


def pieces_of(state: RunState, kind: str) -> list[Path]:
    return [state.carry / p["name"] for p in state.manifest.get("pieces", []) if p["kind"] == kind]


def install_step(state: RunState) -> Outcome:
    """The carried wheels installed into work/site (for the Python they were gathered for), then tbgen and
    its clients imported from there and this checkout."""
    wanted = state.manifest["python"]
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    site = state.work / "site"
    paths = [str(REPO)]
    if here == wanted:
        completed = install_wheels(state, site)
        if completed.returncode != 0:
            return failed(completed, "pip install of the carried wheels")
        paths.insert(0, str(site))
        summary = f"{len(pieces_of(state, 'wheel'))} wheels installed into {site}"
    else:
        summary = f"the carried wheels are for Python {wanted}, this is {here}: its own packages serve tbgen"
    state.env["PYTHONPATH"] = os.pathsep.join(paths)
    probe = "import triton_backend_gen.cli, tritonclient.grpc, tritonclient.http, cookiecutter.main, numpy"
    completed = run_step_command(state, "import tbgen", [state.python, "-c", probe])
    if completed.returncode != 0:
        return failed(completed, "tbgen does not import")
    return Outcome(PASS, summary)


def install_wheels(state: RunState, site: Path) -> Completed:
    """pip install --target of the carried wheels; a Python without pip gets them unzipped (a wheel is a zip
    of what goes into site-packages)."""
    wheels = pieces_of(state, "wheel")
    command = [state.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    completed = run_step_command(
        state, "install wheels", [*command, "--no-cache-dir", "--target", site, *wheels]
    )
    if completed.returncode != 0 and "No module named pip" in completed.output:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
        return Completed(0, completed.output + "\nunzipped instead\n", completed.seconds)
    return completed


def unpack(archive: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")


def server_step(state: RunState) -> Outcome:
    """The carried tritonserver unpacked, and run once for its version (it loads all its libraries)."""
    archives = pieces_of(state, "server")
    if not archives:
        return Outcome(FAIL, "no tritonserver was carried (see the manifest's left_out)")
    root = state.work / "server"
    unpack(archives[0], root)
    executable = root / "pytriton" / "tritonserver" / "bin" / "tritonserver"
    try:
        install = discovery.install_from_executable(executable, "gpu-check")
    except ServerError as err:
        return Outcome(FAIL, "the carried tritonserver does not run here", err.message.splitlines())
    state.env["TRITONSERVER"] = str(install.executable)
    return Outcome(PASS, install.describe())


def sources_step(state: RunState) -> Outcome:
    """Triton's sources as tbgen's source cache (TBGEN_CACHE_DIR) and RapidJSON as a CMake prefix, with
    torch's CMake package when this Python has torch."""
    cache = state.work / "cache"
    for archive in pieces_of(state, "sources"):
        unpack(archive, cache / "triton-src")
    prefix = state.work / "prefix"
    for archive in pieces_of(state, "build-deps"):
        unpack(archive, prefix)
    state.env["TBGEN_CACHE_DIR"] = str(cache)
    # RapidJSON's headers as system headers (as /usr/include's are): Triton's common builds with -Werror, and
    # they use std::iterator, which C++17 deprecates. A directory of CPLUS_INCLUDE_PATH is a system one, also
    # where CMake names it with -I.
    include = [str(prefix / "include"), *filter(None, [os.environ.get("CPLUS_INCLUDE_PATH")])]
    state.env["CPLUS_INCLUDE_PATH"] = os.pathsep.join(include)
    torch = [state.facts[key] for key in ("torch_dir", "torch_cmake") if state.facts.get(key)]
    # torch's own folder first: its lib/ is then searched before any system libtorch (find_library).
    state.env["CMAKE_PREFIX_PATH"] = os.pathsep.join([*torch, str(prefix)])
    branch = f"r{state.manifest['release']}"
    entry = cache / "triton-src" / branch
    missing = [
        r for r in (*sources.REPOSITORIES, sources.GOOGLETEST) if not (entry / r / "CMakeLists.txt").is_file()
    ]
    if missing:
        return Outcome(FAIL, f"the carried sources lack {', '.join(missing)}")
    return Outcome(PASS, f"{branch} sources in {cache}; CMAKE_PREFIX_PATH {state.env['CMAKE_PREFIX_PATH']}")


# --- projects: render, build, serve, bench ---------------------------------------------------------------
def render_step(key: str) -> Callable[[RunState], Outcome]:
    def render(state: RunState) -> Outcome:
        directory, options = PROJECTS[key]
        project = state.work / "projects" / directory
        shutil.rmtree(project, ignore_errors=True)
        project.parent.mkdir(parents=True, exist_ok=True)
        command = tbgen(state, "new", project, "-t", "cpp-backend", "--no-input")
        command += ["--triton-version", state.manifest["release"], *options]
        completed = run_step_command(state, f"render {key}", command)
        if completed.returncode != 0:
            return failed(completed, "tbgen new")
        model = project / "model_repository" / "add_sub" / "1" / "model.pt"
        if key == "libtorch" and not model.is_file():
            return Outcome(FAIL, "no model.pt: no Python here imports torch", completed.output.splitlines())
        state.projects[key] = project
        return Outcome(PASS, f"tbgen new {' '.join(options)}: {project}", completed.output.splitlines()[1:])

    return render


def build_step(key: str) -> Callable[[RunState], Outcome]:
    """`tbgen build --gpu`: CMake with the machine's nvcc, Triton's sources from the carried cache."""

    def build(state: RunState) -> Outcome:
        project = state.projects[key]
        completed = run_step_command(state, f"build {key}", tbgen(state, "build", project, "--gpu"))
        if completed.returncode != 0:
            return failed(completed, "tbgen build --gpu", 20)
        lines = [line for line in completed.output.splitlines() if not line.startswith("building:")]
        built = next((line for line in lines if line.startswith("Built ")), "built")
        found = cmake_cache(project / "build" / "CMakeCache.txt", ("TORCH_LIBRARY", "CMAKE_CUDA_COMPILER"))
        return Outcome(PASS, built, [*lines[1:], *found], {"seconds": round(completed.seconds, 1)})

    return build


def cmake_cache(path: Path, keys: tuple[str, ...]) -> list[str]:
    """``KEY=value`` of each of ``keys`` in a CMakeCache.txt (which libtorch, which nvcc a build used)."""
    text = path.read_text(errors="replace") if path.is_file() else ""
    return [
        f"{m.group(1)}={m.group(2)}"
        for m in re.finditer(r"^(\w+):\w+=(.*)$", text, re.M)
        if m.group(1) in keys
    ]


def serve_step(key: str) -> Callable[[RunState], Outcome]:
    """`tbgen test --instance-kind gpu`: the smoke suite, every output against reference.py."""

    def serve(state: RunState) -> Outcome:
        name = f"serve {key} KIND_GPU"
        junit = state.logs / f"{slug(name)}.xml"
        command = tbgen(state, "test", state.projects[key], "--instance-kind", "gpu", "--no-unit")
        completed = run_server_command(state, name, key, [*command, "--junit-xml", junit])
        summary = (
            re.findall(r"^(\d+ passed, \d+ failed)", completed.output, re.MULTILINE) or ["no summary"]
        )[-1]
        checks = [line for line in completed.output.splitlines() if re.match(r"^(pass|FAIL)  ", line)]
        if completed.returncode != 0:
            outcome = failed(completed, f"tbgen test --instance-kind gpu ({summary})", 30)
            outcome.detail += server_log_errors(state, name)
            return outcome
        return Outcome(PASS, f"{summary}: KIND_GPU instances, outputs against reference.py", checks)

    return serve


def run_server_command(state: RunState, name: str, key: str, command: list) -> Completed:
    """A tbgen command that starts the project's server; the server's log kept as logs/<name>.server.log (the
    next run of the project writes over its own)."""
    completed = run_step_command(state, name, command)
    log = state.projects[key] / "build" / "tbgen" / "server.log"
    if log.is_file():
        shutil.copyfile(log, state.logs / f"{slug(name)}.server.log")
    return completed


def server_log_errors(state: RunState, name: str) -> list[str]:
    """The error and warning lines of the server log a step kept."""
    log = state.logs / f"{slug(name)}.server.log"
    if not log.is_file():
        return []
    lines = log.read_text(errors="replace").splitlines()
    return ["server log:", *[line for line in lines if re.match(r"^[EW]\d{4} ", line)][-15:]]


def bench_step(key: str, kind: str) -> Callable[[RunState], Outcome]:
    """`tbgen bench` of the project's model with instances of ``kind`` (gpu or cpu)."""

    def bench(state: RunState) -> Outcome:
        name = f"bench {key} KIND_{kind.upper()}"
        report = state.work / "bench" / f"{slug(name)}.json"
        report.parent.mkdir(parents=True, exist_ok=True)
        command = tbgen(state, "bench", state.projects[key], "--instance-kind", kind, "--tool", "builtin")
        command += ["--duration", BENCH_SECONDS, "--concurrency", BENCH_CONCURRENCY, "--json", report]
        completed = run_server_command(state, name, key, command)
        if completed.returncode != 0 or not report.is_file():
            outcome = failed(completed, "tbgen bench", 20)
            outcome.detail += server_log_errors(state, name)
            return outcome
        return bench_outcome(json.loads(report.read_text())["levels"])

    return bench


def bench_outcome(levels: list[dict]) -> Outcome:
    """Each concurrency level's throughput; a failure when requests failed."""
    figures = {str(level["concurrency"]): level for level in levels}
    summary = ", ".join(
        f"{level['throughput']:,.0f} inf/s at concurrency {level['concurrency']}" for level in levels
    )
    errors = sum(level["errors"] for level in levels)
    if errors:
        return Outcome(FAIL, f"{summary}; {errors} requests failed", [], figures)
    return Outcome(PASS, summary, [], figures)
