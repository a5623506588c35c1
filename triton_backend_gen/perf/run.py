"""``tbgen bench``: load one model of a running server at several concurrency levels and report what it
sustained.

``plan_bench`` checks the options against the model (before any server starts) and makes the request;
``Bench.measure`` loads a running server (commands.bench starts one, or takes a URL). Each level is
measured by perf_analyzer when it is available (``tool="auto"``), else by tbgen's asyncio gRPC generator;
either way the server's own queue and compute times come from Triton's statistics extension (the difference
over the level), and the CPU time both the client and the server used is reported beside the throughput,
because on a small machine they compete for the same cores.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import tempfile
import time
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.perf import perf_analyzer as pa
from triton_backend_gen.perf.loadgen import run_load
from triton_backend_gen.perf.stats import BenchReport, Level, percentiles
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.local import group_members
from triton_backend_gen.smoke.model import ModelSpec, load_model_specs

urllib_request = lazy_module("urllib.request")  # with http.client: 30 ms of every tbgen start

np = lazy_module("numpy")

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
    datatypes: Mapping[str, str]  # each input's declared datatype (a BF16 array is float32)
    responses_per_request: int  # decoupled: responses the reference streams per request; else 1


@dataclass(frozen=True)
class Bench:
    """One model's benchmark, planned: the request to send and the tool that sends it."""

    spec: ModelSpec
    protocol: str
    batch_size: int
    request: Mapping[str, np.ndarray]
    responses_per_request: int
    executable: Path | None  # perf_analyzer, or None for tbgen's builtin generator
    work_dir: Path
    # perf_analyzer's stability rule: three windows within the first percentage, in at most max_trials
    # windows; when they never agree, measured again under the next percentage and taken as they come
    stability: tuple[int, ...] = (100, 1000)
    max_trials: int = 3

    def measure(
        self,
        http_url: str,
        grpc_url: str,
        server_pid: int | None,
        where: str,
        concurrency: list[int],
        seconds: float,
        progress: Callable[[str], None] = lambda line: None,
    ) -> BenchReport:
        """Load the server at ``http_url``/``grpc_url`` at each concurrency level for ``seconds``."""
        target = Target(
            self.spec.name,
            http_url,
            grpc_url,
            server_pid,
            self.spec.decoupled,
            self.spec.max_batch_size > 0,
            self.request,
            self.spec.input_datatypes,
            self.responses_per_request,
        )
        tool = "perf_analyzer" if self.executable else BUILTIN
        report = BenchReport(self.spec.name, self.protocol, tool, self.batch_size, where)
        for level in concurrency:
            progress(f"{self.spec.name}: concurrency {level} for {seconds:g} s ({tool}, {self.protocol})")
            report.levels.append(_measure_level(target, level, seconds, self))
        return report


def plan_bench(
    project: Project,
    *,
    model: str | None = None,
    protocol: str = "grpc",
    batch_size: int = 1,
    tool: str = "auto",
    inputs: Mapping[str, np.ndarray] | None = None,
) -> Bench:
    """The benchmark of ``model`` (default: the project's first); UsageError for options the model or this
    machine cannot honour. ``inputs`` replaces ``reference.make_inputs`` for the request sent."""
    _check_bench_options(protocol, tool)
    [(reference, spec, _config)] = load_model_specs(project, project.model(model))
    _check_model_takes(spec, batch_size, protocol)
    batch = batch_size if spec.max_batch_size else None
    request = dict(inputs) if inputs is not None else reference.make_inputs(batch)
    per_request = len(reference.responses(request)) if spec.decoupled else 1
    executable = _perf_analyzer_for(spec, tool)
    return Bench(spec, protocol, batch_size, request, per_request, executable, project.runtime_dir / "bench")


def _check_bench_options(protocol: str, tool: str) -> None:
    """UsageError for a --protocol or --tool that tbgen bench does not know."""
    if protocol not in ("grpc", "http"):
        raise UsageError(
            f"--protocol {protocol!r} is neither grpc nor http.", "Use --protocol grpc or --protocol http."
        )
    if tool not in TOOLS:
        raise UsageError(
            f"--tool {tool!r} is not one of {', '.join(TOOLS)}.", "Use --tool auto (the default)."
        )


def _check_model_takes(spec: ModelSpec, batch_size: int, protocol: str) -> None:
    """UsageError when the model cannot take requests of ``batch_size`` over ``protocol``."""
    if batch_size > 1 and spec.max_batch_size == 0:
        raise UsageError(
            f"{spec.name} does not batch (max_batch_size 0): --batch-size {batch_size} cannot be sent.",
            "Drop --batch-size.",
        )
    if batch_size > max(spec.max_batch_size, 1):
        raise UsageError(
            f"--batch-size {batch_size} is above {spec.name}'s max_batch_size {spec.max_batch_size}.",
            f"Use --batch-size {spec.max_batch_size} or less.",
        )
    if spec.decoupled and protocol == "http":
        raise UsageError(
            f"{spec.name} is decoupled: its responses stream over gRPC only.", "Use --protocol grpc."
        )


def _perf_analyzer_for(spec: ModelSpec, tool: str) -> Path | None:
    """perf_analyzer when ``tool`` allows it and it is found, else None (tbgen's builtin generator);
    UsageError when the model or ``tool`` needs perf_analyzer and there is none."""
    executable = pa.find_perf_analyzer() if tool in ("auto", "perf_analyzer") else None
    if spec.sequence is not None and executable is None:
        raise UsageError(
            f"{spec.name} is a sequence model: its requests need correlation IDs and START/END flags, "
            "which perf_analyzer sends (sequences of 20 requests) and tbgen's builtin generator does not.",
            "pip install 'tritonclient[all]==2.51.0' (its wheel ships perf_analyzer) and use --tool auto.",
        )
    if tool == "perf_analyzer" and executable is None:
        raise UsageError(
            "perf_analyzer was not found (beside this Python or on PATH).",
            "pip install 'tritonclient[all]==2.51.0' (its wheel ships perf_analyzer), or --tool builtin.",
        )
    return executable


def _measure_level(target: Target, concurrency: int, seconds: float, bench: Bench) -> Level:
    before_stats, before_cpu = (
        model_stats(target.http_url, target.model),
        server_cpu_seconds(target.server_pid),
    )
    started = time.monotonic()
    if bench.executable is not None:
        figures, client_cpu = _perf_analyzer_level(target, concurrency, seconds, bench)
    else:
        figures, client_cpu = _builtin_level(target, concurrency, seconds, bench.batch_size)
    wall = time.monotonic() - started
    after_stats, after_cpu = model_stats(target.http_url, target.model), server_cpu_seconds(target.server_pid)
    queue_us, compute_us, requests = server_times(before_stats, after_stats)
    server_cpu = (after_cpu - before_cpu) / wall if before_cpu is not None and after_cpu is not None else 0.0
    return Level(
        concurrency=concurrency,
        requests=requests,
        seconds=round(wall, 3),
        **figures,
        server_queue_us=queue_us,
        server_compute_us=compute_us,
        client_cpu=client_cpu / wall,
        server_cpu=server_cpu,
    )


def _perf_analyzer_level(
    target: Target, concurrency: int, seconds: float, bench: Bench
) -> tuple[dict, float]:
    work_dir, batch_size, protocol = bench.work_dir, bench.batch_size, bench.protocol
    work_dir.mkdir(parents=True, exist_ok=True)
    libs = pa.library_dir(work_dir / "lib")
    data_file = pa.write_input_data(
        target.inputs, target.datatypes, target.batched, work_dir / "input-data.json"
    )
    with tempfile.NamedTemporaryFile(suffix=".csv", dir=work_dir, delete=False) as handle:
        csv_file = Path(handle.name)
    url = target.grpc_url if protocol == "grpc" else target.http_url
    # perf_analyzer measures until three windows agree: about three windows per level.
    window_ms = max(500, int(seconds * 1000 / 3))
    env = dict(os.environ)
    if libs is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Windows that disagree by more than bench.stability[0] (100% for tbgen bench: a sequence model's
    # sequences start and end in bursts) are measured again and taken as they come: the level's figure is
    # their mean either way.
    for stability in bench.stability:
        command = pa.command(
            bench.executable,
            target.model,
            url,
            protocol,
            concurrency,
            data_file=data_file,
            csv_file=csv_file,
            batch_size=batch_size,
            measurement_ms=window_ms,
            streaming=target.decoupled,
            stability_percentage=stability,
            max_trials=bench.max_trials,
        )
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, env=env, timeout=seconds * 10 + 120, check=False
            )
        except subprocess.TimeoutExpired as err:
            raise ServerError(
                f"perf_analyzer did not finish within {err.timeout:g} s.", " ".join(command)
            ) from err
        if done.returncode == 0 or pa.UNSTABLE not in done.stdout + done.stderr:
            break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        row = pa.parse_csv(csv_file.read_text()) if done.returncode == 0 else None
    finally:
        csv_file.unlink(missing_ok=True)
    if row is None:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ServerError(f"perf_analyzer failed (exit {done.returncode}):\n{tail}", "$ " + " ".join(command))
    throughput = row["Inferences/Second"]
    figures = {
        "throughput": throughput,
        "p50_us": row["p50 latency"],
        "p90_us": row["p90 latency"],
        "p99_us": row["p99 latency"],
        "responses_per_s": throughput / batch_size * target.responses_per_request
        if target.decoupled
        else 0.0,
    }
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return figures, cpu


def _builtin_level(target, concurrency, seconds, batch_size) -> tuple[dict, float]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = run_load(
        target.grpc_url,
        target.model,
        target.inputs,
        target.datatypes,
        concurrency=concurrency,
        seconds=seconds,
        decoupled=target.decoupled,
    )
    after = resource.getrusage(resource.RUSAGE_SELF)
    if not result.latencies_us:
        raise ServerError(
            f"No request to {target.model} succeeded: {result.first_error or 'no answer'}.",
            "Run `tbgen test` first: the smoke suite says what the model does wrong.",
        )
    p50, p90, p99 = percentiles(result.latencies_us)
    requests_per_s = len(result.latencies_us) / result.seconds
    figures = {
        "throughput": requests_per_s * batch_size,
        "p50_us": p50,
        "p90_us": p90,
        "p99_us": p99,
        "responses_per_s": result.responses / result.seconds if target.decoupled else 0.0,
        "errors": result.errors,
    }
    return figures, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def model_stats(http_url: str, model: str) -> dict:
    """The model's entry of Triton's statistics extension (GET /v2/models/<model>/stats)."""
    opener = urllib_request.build_opener(urllib_request.ProxyHandler({}))
    try:
        with opener.open(f"http://{http_url}/v2/models/{model}/stats", timeout=10) as response:
            entries = json.loads(response.read()).get("model_stats", [])
    except urllib.error.HTTPError as err:
        raise ServerError(
            f"The server at {http_url} has no model {model} ready (HTTP {err.code}).",
            "Check the server's models (`tbgen serve` lists them), or pick another with --model.",
        ) from err
    except (OSError, ValueError) as err:  # nothing listens there, or it is not a Triton server
        raise ServerError(
            f"No Triton server answers at {http_url}: {err}",
            "Start one (`tbgen serve`), or give --url the HTTP host:port of a running server.",
        ) from err
    return entries[0] if entries else {}


def server_times(before: dict, after: dict) -> tuple[float, float, int]:
    """(queue us, compute us, requests) per request over the interval between two statistics readings."""

    def total(stats: dict, key: str, field: str) -> int:
        return int(stats.get("inference_stats", {}).get(key, {}).get(field, 0))

    requests = total(after, "success", "count") - total(before, "success", "count")
    if requests <= 0:
        return 0.0, 0.0, 0
    queue_ns = total(after, "queue", "ns") - total(before, "queue", "ns")
    compute_ns = sum(
        total(after, key, "ns") - total(before, key, "ns")
        for key in ("compute_input", "compute_infer", "compute_output")
    )
    return queue_ns / requests / 1000, compute_ns / requests / 1000, requests


def server_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds used so far by ``pid``'s process group (the server and its python stubs); None without
    one."""
    if pid is None:
        return None
    ticks = 0
    for member in group_members(pid) or [pid]:
        try:
            stat = Path(f"/proc/{member}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / _CLOCK_TICKS
