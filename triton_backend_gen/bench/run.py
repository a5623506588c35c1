"""``tbgen bench``: load one model of a project at several concurrency levels and report what it sustained.

The server is started for the run (as `tbgen serve` does) unless ``url`` names a running one. Each level is
measured by perf_analyzer when it is available (``tool="auto"``), else by tbgen's asyncio gRPC generator; either
way the server's own queue and compute times come from Triton's statistics extension (the difference over the
level), and the CPU time both the client and the server used is reported beside the throughput, because on a
small machine they compete for the same cores.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triton_backend_gen.bench import perf_analyzer as pa
from triton_backend_gen.bench.loadgen import run_load
from triton_backend_gen.bench.stats import BenchReport, Level, percentiles
from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.project import load_project

TOOLS = ("auto", "perf_analyzer", "builtin")
BUILTIN = "tbgen (asyncio gRPC)"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Target:
    """The model under load and the server it runs in."""

    model: str
    http_url: str
    grpc_url: str
    server_pid: int | None
    decoupled: bool
    batched: bool
    inputs: Mapping[str, np.ndarray]
    responses_per_request: int  # decoupled: responses the reference streams per request; else 1


def run_bench(path: Path, *, model: str | None = None, protocol: str = "grpc", concurrency: list[int] = (1, 8),
              seconds: float = 10.0, batch_size: int = 1, tool: str = "auto", url: str | None = None,
              server_pid: int | None = None, server: Path | None = None,
              inputs: Mapping[str, np.ndarray] | None = None,
              progress: Callable[[str], None] = lambda line: None) -> BenchReport:
    """Benchmark ``model`` (default: the project's first) of the project at ``path``; see the module docstring.

    ``url`` (HTTP host:port of a running server; gRPC is taken on the next port up unless it is given as
    ``http,grpc``) skips starting one (``server_pid``, when known, gives its CPU use). ``inputs`` replaces ``reference.make_inputs`` for the request sent."""
    from triton_backend_gen.runtime.server import prepare_server, stop_on_signals
    from triton_backend_gen.smoke.model import load_model_specs
    from triton_backend_gen.testrun import build_if_needed

    if protocol not in ("grpc", "http"):
        raise UsageError(f"--protocol {protocol!r} is neither grpc nor http.", "Use --protocol grpc or --protocol http.")
    if tool not in TOOLS:
        raise UsageError(f"--tool {tool!r} is not one of {', '.join(TOOLS)}.", "Use --tool auto (the default).")
    project = load_project(path)
    entry = next((m for m in project.models if model in (None, m.name)), None)
    if entry is None:
        raise UsageError(f"{project.name} has no model {model!r}.",
                         f"Models: {', '.join(m.name for m in project.models)}")
    reference, [(spec, _config)] = load_model_specs(project, entry)
    if batch_size > 1 and spec.max_batch_size == 0:
        raise UsageError(f"{spec.name} does not batch (max_batch_size 0): --batch-size {batch_size} cannot be sent.",
                         "Drop --batch-size.")
    if batch_size > max(spec.max_batch_size, 1):
        raise UsageError(f"--batch-size {batch_size} is above {spec.name}'s max_batch_size {spec.max_batch_size}.",
                         f"Use --batch-size {spec.max_batch_size} or less.")
    if spec.decoupled and protocol == "http":
        raise UsageError(f"{spec.name} is decoupled: its responses stream over gRPC only.", "Use --protocol grpc.")
    request = dict(inputs) if inputs is not None else reference.make_inputs(batch_size if spec.max_batch_size else None)
    per_request = len(reference.responses(request)) if spec.decoupled else 1
    executable = pa.find_perf_analyzer() if tool in ("auto", "perf_analyzer") else None
    if tool == "perf_analyzer" and executable is None:
        raise UsageError("perf_analyzer was not found (beside this Python or on PATH).",
                         "pip install 'tritonclient[all]==2.51.0' (its wheel ships perf_analyzer), or --tool builtin.")

    def measure(target: Target) -> BenchReport:
        report = BenchReport(spec.name, protocol, "perf_analyzer" if executable else BUILTIN, batch_size, where)
        for level in concurrency:
            progress(f"{spec.name}: concurrency {level} for {seconds:g} s ({report.tool}, {protocol})")
            report.levels.append(_measure_level(target, level, seconds, batch_size, protocol, executable,
                                                project.root / "build" / "tbgen" / "bench"))
        return report

    def target_of(http_url: str, grpc_url: str, pid: int | None) -> Target:
        return Target(spec.name, http_url, grpc_url, pid, spec.decoupled, spec.max_batch_size > 0, request, per_request)

    if url:
        http_url, _, grpc_url = url.partition(",")
        host, _, port = http_url.rpartition(":")
        where = f"the server at {http_url}"
        return measure(target_of(http_url, grpc_url or f"{host}:{int(port) + 1}", server_pid))
    build_if_needed(project, server)
    triton = prepare_server(project.root, server=server)
    where = triton.describe()
    with stop_on_signals(), triton:
        not_ready = [m for m in triton.model_states() if m.name == spec.name and m.state != "READY"]
        if not_ready:
            raise ServerError(f"{spec.name} did not load: {not_ready[0].reason}", f"Server log: {triton.log_file}")
        return measure(target_of(triton.http_url, triton.grpc_url, triton.pid))


def _measure_level(target: Target, concurrency: int, seconds: float, batch_size: int, protocol: str,
                   executable: Path | None, work_dir: Path) -> Level:
    before_stats, before_cpu = model_stats(target.http_url, target.model), server_cpu_seconds(target.server_pid)
    started = time.monotonic()
    if executable is not None:
        figures, client_cpu = _perf_analyzer_level(target, concurrency, seconds, batch_size, protocol, executable,
                                                   work_dir)
    else:
        figures, client_cpu = _builtin_level(target, concurrency, seconds, batch_size)
    wall = time.monotonic() - started
    after_stats, after_cpu = model_stats(target.http_url, target.model), server_cpu_seconds(target.server_pid)
    queue_us, compute_us, requests = server_times(before_stats, after_stats)
    server_cpu = (after_cpu - before_cpu) / wall if before_cpu is not None and after_cpu is not None else 0.0
    return Level(concurrency=concurrency, requests=requests, seconds=round(wall, 3), **figures,
                 server_queue_us=queue_us, server_compute_us=compute_us, client_cpu=client_cpu / wall,
                 server_cpu=server_cpu)


def _perf_analyzer_level(target, concurrency, seconds, batch_size, protocol, executable, work_dir) -> tuple[dict, float]:
    work_dir.mkdir(parents=True, exist_ok=True)
    libs = pa.library_dir(work_dir / "lib")
    data_file = pa.write_input_data(target.inputs, target.batched, work_dir / "input-data.json")
    with tempfile.NamedTemporaryFile(suffix=".csv", dir=work_dir, delete=False) as handle:
        csv_file = Path(handle.name)
    url = target.grpc_url if protocol == "grpc" else target.http_url
    # perf_analyzer measures until three windows agree: about three windows per level.
    window_ms = max(500, int(seconds * 1000 / 3))
    command = pa.command(executable, target.model, url, protocol, concurrency, data_file=data_file, csv_file=csv_file,
                         batch_size=batch_size, measurement_ms=window_ms, streaming=target.decoupled)
    env = dict(os.environ)
    if libs is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=seconds * 10 + 120, check=False)
    except subprocess.TimeoutExpired as err:
        raise ServerError(f"perf_analyzer did not finish within {err.timeout:g} s.", " ".join(command)) from err
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        row = pa.parse_csv(csv_file.read_text()) if done.returncode == 0 else None
    finally:
        csv_file.unlink(missing_ok=True)
    if row is None:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ServerError(f"perf_analyzer failed (exit {done.returncode}):\n{tail}", "$ " + " ".join(command))
    throughput = row["Inferences/Second"]
    figures = {"throughput": throughput, "p50_us": row["p50 latency"], "p90_us": row["p90 latency"],
               "p99_us": row["p99 latency"],
               "responses_per_s": throughput / batch_size * target.responses_per_request if target.decoupled else 0.0}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return figures, cpu


def _builtin_level(target, concurrency, seconds, batch_size) -> tuple[dict, float]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = run_load(target.grpc_url, target.model, target.inputs, concurrency=concurrency, seconds=seconds,
                      decoupled=target.decoupled)
    after = resource.getrusage(resource.RUSAGE_SELF)
    if not result.latencies_us:
        raise ServerError(f"No request to {target.model} succeeded: {result.first_error or 'no answer'}.",
                          "Run `tbgen test` first: the smoke suite says what the model does wrong.")
    p50, p90, p99 = percentiles(result.latencies_us)
    requests_per_s = len(result.latencies_us) / result.seconds
    figures = {"throughput": requests_per_s * batch_size, "p50_us": p50, "p90_us": p90, "p99_us": p99,
               "responses_per_s": result.responses / result.seconds if target.decoupled else 0.0,
               "errors": result.errors}
    return figures, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def model_stats(http_url: str, model: str) -> dict:
    """The model's entry of Triton's statistics extension (GET /v2/models/<model>/stats)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{http_url}/v2/models/{model}/stats", timeout=10) as response:
        entries = json.loads(response.read()).get("model_stats", [])
    return entries[0] if entries else {}


def server_times(before: dict, after: dict) -> tuple[float, float, int]:
    """(queue us, compute us, requests) per request over the interval between two statistics readings."""
    def total(stats: dict, key: str, field: str) -> int:
        return int(stats.get("inference_stats", {}).get(key, {}).get(field, 0))

    requests = total(after, "success", "count") - total(before, "success", "count")
    if requests <= 0:
        return 0.0, 0.0, 0
    queue_ns = total(after, "queue", "ns") - total(before, "queue", "ns")
    compute_ns = sum(total(after, key, "ns") - total(before, key, "ns")
                     for key in ("compute_input", "compute_infer", "compute_output"))
    return queue_ns / requests / 1000, compute_ns / requests / 1000, requests


def server_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds used so far by ``pid``'s process group (the server and its python stubs); None without one."""
    if pid is None:
        return None
    from triton_backend_gen.runtime.server import group_members

    ticks = 0
    for member in group_members(pid) or [pid]:
        try:
            stat = Path(f"/proc/{member}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / _CLOCK_TICKS
