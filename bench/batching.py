"""Batching strategies under variable-size requests: throughput and p99 of the `volume` and `tokens`
strategies against Triton's plain dynamic batching and against no batching, in one server, in one run.

    python bench/batching.py [--duration 5] [--concurrency 16] [--rounds 1] [--fixed-ms 2] [--row-ms 0.1]
                             [--spill-ms 0] [--queue-delay-us 500] [--work-dir DIR] [--quick]

One python-backend project (add/sub, FP32 [16], max_batch_size 32, batching=vectorized: one compute() call
per execution, on the batch's rows concatenated) serves four models, made by tbgen's own commands (`tbgen
new`, `tbgen add model`, `tbgen add batcher`, `tbgen build`):

    none      no dynamic batching: one request per execution
    dynamic   dynamic batching (max_queue_delay_microseconds --queue-delay-us): up to 32 rows an execution
    volume    the same + strategy volume, MAX_BATCH_VOLUME_BYTES 1024 (8 rows: 8 x 2 inputs x 16 x 4 B)
    tokens    the same + strategy tokens, MAX_BATCH_ELEMENTS 128 of INPUT0 (8 rows of 16 elements)

Each model's compute.py (the user's file) is replaced by one that returns the right sums and differences
after sleeping --fixed-ms + --row-ms x rows (+ --spill-ms for each row past 8): an accelerator's execution,
a fixed part and a part per row, spent off the CPU (a sleep, not a busy loop: on a small machine a busy loop
would take the CPU from the load generator and the server, and measure them instead). Batching pays the
fixed part once per execution, and a batch's rows all wait for the whole execution. With the default, linear
cost, bigger batches are always cheaper per row, so volume and tokens are expected between no batching and
plain dynamic batching; --spill-ms makes rows past 8 dearer (a model whose working set outgrows its memory
past 8 rows: the reason to cap a batch's volume), where the cap pays.

The load: a small asyncio gRPC load generator (tritonclient.grpc.aio; perf_analyzer sends one batch size per
run) keeps --concurrency requests in flight, each of a batch size drawn from MIX (1, 2, 4, 8 or 16 rows;
each worker its own seeded generator, so every model gets the same sequence of sizes), checks the answers to
the warm-up's requests, and records each measured request's latency (the requests sent within the
--duration window that follows a --warmup under the same load). The models are measured one after the other
in one server, in the order none dynamic volume tokens and then backwards, --rounds times (--quick: once,
forwards); a model's passes are pooled (rows and requests summed, latencies merged).

Figures per model: rows/s (inferences) and requests/s, p50 and p99 latency (ms), executions, mean and
largest rows per execution, and `over`: the executions of more than 8 rows that no single request explains
(sizes other than 16: a 16-row request runs alone; a lower bound), all from Triton's statistics API (its
batch_stats, read before and after each pass); then rows/s and p99 as ratios against `dynamic` and against
`none`, and a one-line conclusion. The ratios are what to read: the absolute figures move with the machine's
load. `over` is not 0 under load in r24.10: when the dynamic batcher grows a batch that waits for a busy
instance, it starts the strategy's state afresh (ModelBatchInitialize) while the batch keeps the requests it
holds (core's dynamic_batch_scheduler.cc, GetDynamicBatch with its cursor reset), so the strategy cannot see
them.

--quick is the smoke run of the test suite (tests/bench/test_bench_batching.py): 0.5 s windows, 0.2 s
warm-ups, concurrency 4, one pass; every part runs, the figures mean nothing. --work-dir keeps the project,
its build and the server's log there (<DIR>/bench-batching, replaced on each run; default: a temporary
directory, removed at the end). The server stops on the way out, Ctrl-C included. Needs Triton's r24.10
sources in tbgen's cache (the strategies' libraries are built against their headers) and the embedded server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

RELEASE = "24.10"
MODELS = ("none", "dynamic", "volume", "tokens")
DIMS = 16
MAX_BATCH_SIZE = 32
LIMIT_ROWS = 8  # the strategies' limit, in rows
VOLUME_BYTES = LIMIT_ROWS * 2 * DIMS * 4  # two FP32 inputs of DIMS elements per row
TOKENS = LIMIT_ROWS * DIMS  # elements of INPUT0
MIX = {1: 0.40, 2: 0.25, 4: 0.15, 8: 0.12, 16: 0.08}  # rows of a request: weight (mean 3.74 rows)
SEED = 0

COMPUTE = '''\
"""Model "{model}" of bench/batching.py: add/sub after a synthetic cost per execution, slept (an
accelerator's time, off the CPU): {fixed_ms} ms + {row_ms} ms per row + {spill_ms} ms per row past {knee}."""

from __future__ import annotations

import time

import numpy as np

INPUT0 = "INPUT0"
INPUT1 = "INPUT1"
OUTPUT0 = "OUTPUT0"
OUTPUT1 = "OUTPUT1"
FIXED_S = {fixed_ms} / 1000
ROW_S = {row_ms} / 1000
SPILL_S = {spill_ms} / 1000
KNEE = {knee}


class Unrecoverable(Exception):
    """model.py's: this instance cannot serve requests any more (never raised here)."""


def compute(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    in0 = inputs[INPUT0]
    in1 = inputs[INPUT1]
    rows = len(in0)
    time.sleep(FIXED_S + ROW_S * rows + SPILL_S * max(0, rows - KNEE))
    return {{OUTPUT0: in0 + in1, OUTPUT1: in0 - in1}}
'''


def tbgen(*args: str, cwd: Path | None = None) -> None:
    """A `tbgen` process that must succeed."""
    argv = [sys.executable, "-m", "triton_backend_gen", *args]
    result = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "200"}
    )
    if result.returncode != 0:
        sys.exit(f"tbgen {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def make_project(work: Path, args) -> Path:
    """The project of the four models (see the module), built."""
    project = work / "bench-batching"
    shutil.rmtree(project, ignore_errors=True)  # an earlier run's, with the same --work-dir
    common = ["--set", "batching=vectorized", "--set", f"max_batch_size={MAX_BATCH_SIZE}"]
    tbgen(
        "new", str(project), "-t", "python-backend", "--no-input", "--triton-version", RELEASE,
        "--set", "model_name=none", "--set", "dynamic_batching=false", *common,
    )  # fmt: skip
    for model in MODELS[1:]:
        tbgen("add", "model", model, "--project", str(project), "--set", "dynamic_batching=true", *common)
    here = ("--project", str(project))
    tbgen("add", "batcher", "volume", "--strategy", "volume", "--limit", str(VOLUME_BYTES), *here)
    tbgen(
        "add", "batcher", "tokens", "--strategy", "tokens", "--limit", str(TOKENS), "--input", "INPUT0", *here
    )
    for model in MODELS:
        directory = project / "model_repository" / model
        (directory / "1" / "compute.py").write_text(
            COMPUTE.format(
                model=model,
                fixed_ms=args.fixed_ms,
                row_ms=args.row_ms,
                spill_ms=args.spill_ms,
                knee=LIMIT_ROWS,
            )
        )
        config_file = directory / "config.pbtxt"
        config = config_file.read_text()
        batching = f"dynamic_batching {{ max_queue_delay_microseconds: {args.queue_delay_us} }}"
        config, found = re.subn(r"dynamic_batching \{[^}]*\}", batching, config)
        if found != (model != "none"):
            sys.exit(f"{config_file}: {found} dynamic_batching blocks, expected {int(model != 'none')}")
        config_file.write_text(config)
    tbgen("build", cwd=project)
    return project


@dataclass
class Pass:
    """One model's figures over one measured window."""

    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    rows: int = 0
    executions: int = 0
    executed_rows: int = 0
    largest: int = 0  # rows of the largest execution
    over: int = 0  # executions over LIMIT_ROWS that no single request of MIX explains


@dataclass
class Figures:
    """A model's passes pooled."""

    rows_per_s: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    executions: int
    rows_per_execution: float
    largest: int
    over: int


def requests_for(rng: np.random.Generator) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per batch size of MIX, the two inputs of a request of that many rows."""
    return {
        rows: tuple(rng.uniform(-10, 10, (rows, DIMS)).astype(np.float32) for _ in range(2)) for rows in MIX
    }


def batch_rows(stats_before: dict, stats_after: dict) -> tuple[int, int, int, int]:
    """(executions, rows executed, rows of the largest execution, executions of more than LIMIT_ROWS rows
    and of no size of MIX: surely over the strategies' limit, since a request of MIX over it runs alone)
    between two statistics readings, from Triton's batch_stats (a count of executions per batch size)."""

    def counts(stats: dict) -> dict[int, int]:
        return {
            int(entry["batch_size"]): int(entry.get("compute_infer", {}).get("count", 0))
            for entry in stats.get("batch_stats", [])
        }

    before, after = counts(stats_before), counts(stats_after)
    grown = {
        size: count - before.get(size, 0) for size, count in after.items() if count > before.get(size, 0)
    }
    over = sum(count for size, count in grown.items() if size > LIMIT_ROWS and size not in MIX)
    return (
        sum(grown.values()),
        sum(size * count for size, count in grown.items()),
        max(grown, default=0),
        over,
    )


async def measure_pass(urls: tuple[str, str], model: str, args, seconds: float, warmup: float) -> Pass:
    """``args.concurrency`` requests in flight against ``model``: ``warmup`` seconds (their answers
    checked), then ``seconds`` measured."""
    import tritonclient.grpc as grpcclient
    import tritonclient.grpc.aio as grpc_aio

    from triton_backend_gen.perf.run import model_stats

    http_url, grpc_url = urls
    result = Pass(seconds=seconds)
    loop = asyncio.get_running_loop()
    start = loop.time() + warmup
    stop = start + seconds
    failures: list[str] = []

    async def worker(index: int) -> None:
        sizes = random.Random(SEED * 1000 + index)
        data = requests_for(np.random.default_rng([SEED, index]))
        tensors = {}
        for rows, arrays in data.items():
            tensors[rows] = []
            for name, array in zip(("INPUT0", "INPUT1"), arrays, strict=True):
                tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
                tensor.set_data_from_numpy(array)
                tensors[rows].append(tensor)
        checked = set()
        while (now := loop.time()) < stop and not failures:
            rows = sizes.choices(list(MIX), weights=list(MIX.values()))[0]
            began = time.perf_counter()
            try:
                response = await client.infer(model, tensors[rows])
            except Exception as err:  # noqa: BLE001 - the pass fails with the first error
                failures.append(f"{model}: {err}")
                return
            latency = (time.perf_counter() - began) * 1000
            if now >= start:
                result.latencies_ms.append(latency)
                result.rows += rows
            elif rows not in checked:
                in0, in1 = data[rows]
                if not (
                    np.array_equal(response.as_numpy("OUTPUT0"), in0 + in1)
                    and np.array_equal(response.as_numpy("OUTPUT1"), in0 - in1)
                ):
                    failures.append(f"{model}: wrong answer to a request of {rows} rows")
                checked.add(rows)

    client = grpc_aio.InferenceServerClient(grpc_url)
    try:
        workers = asyncio.gather(*(worker(index) for index in range(args.concurrency)))
        await asyncio.sleep(max(0.0, start - loop.time()))
        before = await asyncio.to_thread(model_stats, http_url, model)
        await workers
        after = await asyncio.to_thread(model_stats, http_url, model)
    finally:
        await client.close()
    if failures:
        sys.exit(failures[0])
    result.executions, result.executed_rows, result.largest, result.over = batch_rows(before, after)
    return result


def pooled(passes: list[Pass]) -> Figures:
    latencies = np.array([latency for one in passes for latency in one.latencies_ms])
    seconds = sum(one.seconds for one in passes)
    executions = sum(one.executions for one in passes)
    return Figures(
        rows_per_s=sum(one.rows for one in passes) / seconds,
        requests_per_s=len(latencies) / seconds,
        p50_ms=float(np.percentile(latencies, 50)),
        p99_ms=float(np.percentile(latencies, 99)),
        executions=executions,
        rows_per_execution=sum(one.executed_rows for one in passes) / executions if executions else 0.0,
        largest=max(one.largest for one in passes),
        over=sum(one.over for one in passes),
    )


def run(project: Path, args) -> tuple[dict[str, Figures], float, float]:
    """Every model measured in one server, in the order of the module's docstring; ({model: figures}, the
    server's and this process's CPU shares over the passes, warm-ups included)."""
    from triton_backend_gen.perf.run import server_cpu_seconds
    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime import prepare_server
    from triton_backend_gen.signals import stop_on_signals

    passes: dict[str, list[Pass]] = {model: [] for model in MODELS}
    order = list(MODELS) if args.quick else [*MODELS, *reversed(MODELS)] * args.rounds
    with stop_on_signals(), prepare_server(load_project(project)) as triton:
        states = {state.name: state for state in triton.model_states()}
        not_ready = [model for model in MODELS if model not in states or states[model].state != "READY"]
        if not_ready:
            errors = "\n".join(triton.relevant_log_lines())
            sys.exit(f"not ready: {', '.join(not_ready)}; server log: {triton.log_file}\n{errors}")
        server_before, client_before = server_cpu_seconds(triton.pid) or 0.0, time.process_time()
        wall_before = time.perf_counter()
        for model in order:
            urls = (triton.http_url, triton.grpc_url)
            passes[model].append(asyncio.run(measure_pass(urls, model, args, args.duration, args.warmup)))
        wall = time.perf_counter() - wall_before
        server_share = ((server_cpu_seconds(triton.pid) or 0.0) - server_before) / wall
        client_share = (time.process_time() - client_before) / wall
    return {model: pooled(model_passes) for model, model_passes in passes.items()}, server_share, client_share


def ratio(mine: float, theirs: float) -> str:
    return f"{mine / theirs:.2f}x" if theirs else "-"


def report(figures: dict[str, Figures], args, server_share: float, client_share: float) -> None:
    passes = 1 if args.quick else 2 * args.rounds
    mix = ", ".join(f"{rows}: {weight:.0%}" for rows, weight in MIX.items())
    print(
        f"python-backend add/sub FP32 [{DIMS}], max_batch_size {MAX_BATCH_SIZE}; cost per execution "
        f"{args.fixed_ms:g} ms + {args.row_ms:g} ms/row"
        + (f" + {args.spill_ms:g} ms/row past {LIMIT_ROWS} rows" if args.spill_ms else "")
        + f" (slept); max_queue_delay {args.queue_delay_us} us"
    )
    print(
        f"requests of 1-16 rows (rows: share {mix}); concurrency {args.concurrency}, {args.duration:g} s x "
        f"{passes} pass(es) per model, warm-up {args.warmup:g} s; limits: volume {VOLUME_BYTES} B, tokens "
        f"{TOKENS} elements (= {LIMIT_ROWS} rows)"
    )
    print(
        f"\n{'model':<8} {'rows/s':>7} {'req/s':>6} {'p50 ms':>7} {'p99 ms':>7} {'execs':>6} "
        f"{'rows/exec':>9} {'max':>4} {'over':>5}  {'rows/s vs dynamic':>17} {'p99 vs dynamic':>14}  "
        f"{'rows/s vs none':>14} {'p99 vs none':>11}"
    )
    dynamic, none = figures["dynamic"], figures["none"]
    for model, mine in figures.items():
        print(
            f"{model:<8} {mine.rows_per_s:>7.0f} {mine.requests_per_s:>6.0f} {mine.p50_ms:>7.2f} "
            f"{mine.p99_ms:>7.2f} {mine.executions:>6} {mine.rows_per_execution:>9.2f} {mine.largest:>4} "
            f"{mine.over if model in ('volume', 'tokens') else '-':>5}  "
            f"{ratio(mine.rows_per_s, dynamic.rows_per_s):>17} {ratio(mine.p99_ms, dynamic.p99_ms):>14}  "
            f"{ratio(mine.rows_per_s, none.rows_per_s):>14} {ratio(mine.p99_ms, none.p99_ms):>11}"
        )
    print(f"\nCPU: server {server_share:.0%}, load generator {client_share:.0%} (of one core)")
    print("conclusion: " + conclusion(figures))


def conclusion(figures: dict[str, Figures]) -> str:
    dynamic, none = figures["dynamic"], figures["none"]
    parts = [
        f"{model} gives {figures[model].rows_per_s / dynamic.rows_per_s:.2f}x the rows/s of plain dynamic "
        f"batching at {figures[model].p99_ms / dynamic.p99_ms:.2f}x its p99, and "
        f"{figures[model].rows_per_s / none.rows_per_s:.2f}x the rows/s of no batching at "
        f"{figures[model].p99_ms / none.p99_ms:.2f}x its p99 ({figures[model].over} of "
        f"{figures[model].executions} executions surely over its limit)"
        for model in ("volume", "tokens")
    ]
    return "; ".join(parts) + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per pass (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each pass")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of two passes per model (default 1)")
    parser.add_argument("--fixed-ms", type=float, default=2.0, help="cost of an execution (ms)")
    parser.add_argument("--row-ms", type=float, default=0.1, help="cost of a row of an execution (ms)")
    parser.add_argument(
        "--spill-ms",
        type=float,
        default=0.0,
        help=f"extra cost of each row past {LIMIT_ROWS} of an execution (ms; default 0: a linear cost)",
    )
    parser.add_argument("--queue-delay-us", type=int, default=500, help="max_queue_delay_microseconds")
    parser.add_argument("--work-dir", type=Path, help="keep the project and logs there (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="the smoke run: every part, figures meaningless")
    args = parser.parse_args()
    if args.quick:
        args.duration, args.warmup, args.concurrency = 0.5, 0.2, 4
    with tempfile.TemporaryDirectory(prefix="tbgen-bench-batching-") as scratch:
        work = args.work_dir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        project = make_project(work, args)
        figures, server_share, client_share = run(project, args)
    report(figures, args, server_share, client_share)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the server was stopped and the temporary directory removed on the way out
        sys.exit("interrupted")
