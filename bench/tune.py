"""`tbgen tune` against the exhaustive grid of the same space: how soon tune reaches within 5% of the grid's
best throughput under the latency budget, against the time the grid takes, on two models, in one run.

    python bench/tune.py [--models synthetic,cpp] [--budget 3m] [--fixed-ms 10] [--row-ms 1]
                         [--work-dir DIR] [--json FILE] [--quick]

Models, each made by tbgen's own commands (`tbgen new`, `tbgen build`) in its own project:

    synthetic  a python-backend model (batching=vectorized: one compute() per execution, max_batch_size 8,
               dynamic batching on, 1 instance) whose compute.py (the user's file) sleeps --fixed-ms +
               --row-ms x rows before answering add/sub: an execution of known cost a + b x batch, spent
               off the CPU (an accelerator's time), so that the best configuration can be computed; p99
               budget 60 ms, concurrency 1,4,16,64
    cpp        the cpp-backend add/sub example as `tbgen new` makes it (max_batch_size 8, dynamic batching,
               1 instance); p99 budget 5 ms, concurrency 1,4,16,32 (64 clients of a CPU-bound model on a
               small machine measure the machine's scheduler, and take perf_analyzer half a minute a point)

For each: `tbgen tune --budget B --max-latency-p99 P --concurrency LEVELS`, then `tbgen tune --grid` of
the same space (every configuration at every level, in order; no budget that stops it), in one server each.
Figures: the grid's best throughput under the budget (the truth), tune's recommendation as the grid measured
it (`tune pick`: one run measures both, so the machine's load moves them alike), the seconds until tune had
first measured a point the grid puts within 5% of its best (start-up included) and until it stopped, the
grid's seconds, and their ratio; for the synthetic model also its execution time at the grid's best point as
a + b x batch computes it from the mean rows per execution, beside the one the server measured (the model
is what it says; its throughput and latency then follow from how full the batches are and how long the
clients take, which is what the search measures). Exit 1 when tune's recommendation is not within 5% of
the grid's best.

--quick is the smoke run of the test suite (tests/bench/test_bench_tune.py, `--quick --models synthetic`):
each model's space made small (instances only, concurrency 1,4, a 60 s budget), every part run, the figures
meaning nothing; the proof is the full run (README's figures). --work-dir keeps the projects, results and
server logs (<DIR>/bench-tune, replaced on each run; default: a temporary directory, removed at the end).
Needs the embedded server and perf_analyzer (`pip install 'tritonclient[all]==2.51.0'`), and Triton's r24.10
sources in tbgen's cache for the C++ model.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

RELEASE = "24.10"
WITHIN = 0.05
CONCURRENCY = "1,4,16,64"

COMPUTE = '''\
"""bench/tune.py's synthetic model: add/sub after an execution of known cost, slept (an accelerator's time,
off the CPU): {fixed_ms} ms + {row_ms} ms per row."""

from __future__ import annotations

import time

import numpy as np

FIXED_S = {fixed_ms} / 1000
ROW_S = {row_ms} / 1000


class Unrecoverable(Exception):
    """model.py's: this instance cannot serve requests any more (never raised here)."""


def compute(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    in0, in1 = inputs["INPUT0"], inputs["INPUT1"]
    time.sleep(FIXED_S + ROW_S * len(in0))
    return {{"OUTPUT0": in0 + in1, "OUTPUT1": in0 - in1}}
'''


@dataclass
class Case:
    """One model of the benchmark: how it is made and the search's options."""

    name: str
    p99_ms: float
    budget: str = "3m"
    concurrency: str = CONCURRENCY
    tune_args: tuple[str, ...] = ()


@dataclass
class Figures:
    model: str
    grid_best: float  # inferences/s: the grid's best under the p99 budget
    grid_best_label: str
    tune_best: float  # tune's recommendation, as tune measured it
    tune_best_label: str
    tune_pick_in_grid: float  # tune's recommendation, as the grid measured it
    tune_to_within_s: float | None  # until tune first measured a point within 5% of grid_best
    tune_s: float  # until tune stopped
    grid_s: float
    tune_points: int
    grid_points: int
    execution_ms: tuple[float, float] | None = (
        None  # synthetic, at the grid's best: (a + b x batch, measured)
    )

    @property
    def within(self) -> bool:
        """Whether tune's recommendation, as the grid measured it, is within 5% of the grid's best."""
        return self.tune_pick_in_grid >= self.grid_best * (1 - WITHIN)

    @property
    def ratio(self) -> float | None:
        return self.grid_s / self.tune_to_within_s if self.tune_to_within_s else None


def tbgen(*args: str, cwd: Path | None = None, ok=(0,)) -> subprocess.CompletedProcess:
    """A `tbgen` process whose exit code must be in ``ok``."""
    argv = [sys.executable, "-m", "triton_backend_gen", *args]
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, env=env)
    if result.returncode not in ok:
        sys.exit(f"tbgen {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def make_project(work: Path, case: Case, args) -> Path:
    project = work / case.name
    template = "python-backend" if case.name == "synthetic" else "cpp-backend"
    extra = ["--set", "batching=vectorized"] if case.name == "synthetic" else []
    tbgen("new", str(project), "-t", template, "--no-input", "--triton-version", RELEASE, *extra)
    if case.name == "synthetic":
        (project / "model_repository" / "add_sub" / "1" / "compute.py").write_text(
            COMPUTE.format(fixed_ms=args.fixed_ms, row_ms=args.row_ms)
        )
    tbgen("build", cwd=project)
    return project


def search(project: Path, case: Case, grid: bool) -> tuple[list[dict], float]:
    """The results of one tune run (the grid's with ``grid``) and its wall time."""
    began = time.monotonic()
    options = ["--grid", "--budget", "2h"] if grid else ["--budget", case.budget]
    tbgen(
        "tune", str(project), "--max-latency-p99", f"{case.p99_ms:g}", "--concurrency", case.concurrency,
        *case.tune_args, *options, ok=(0, 1),
    )  # fmt: skip
    wall = time.monotonic() - began
    results = project / "build" / "tbgen" / "tune" / "results.jsonl"
    entries = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    shutil.copy(results, results.with_name("grid.jsonl" if grid else "tune.jsonl"))
    return entries, wall


def figures(case: Case, tuned: list[dict], tune_s: float, grid: list[dict], grid_s: float, args) -> Figures:
    """The run's figures. Which points are within 5% of the best is judged by the grid's measurements (one
    run's measure of every point): tune's own measurement of a point, minutes apart, moves with the machine's
    load, and the grid's best is the largest of many noisy figures."""
    measured = {(e["label"], e["concurrency"]): e for e in grid if e["role"] != "recommended"}
    best = next((e for e in grid if e["role"] == "recommended"), None)
    chosen = next((e for e in tuned if e["role"] == "recommended"), None)
    grid_best = best["throughput"] if best else 0.0

    def good(entry: dict) -> bool:
        known = measured.get((entry["label"], entry["concurrency"]))
        return known is not None and known["meets"] and known["throughput"] >= grid_best * (1 - WITHIN)

    reached = [e["elapsed_s"] for e in tuned if e["role"] != "recommended" and good(e)]
    picked = measured.get((chosen["label"], chosen["concurrency"])) if chosen else None
    return Figures(
        case.name,
        grid_best,
        best["label"] if best else "-",
        chosen["throughput"] if chosen else 0.0,
        chosen["label"] if chosen else "-",
        picked["throughput"] if picked else 0.0,
        min(reached) if reached else None,
        tune_s,
        grid_s,
        sum(e["role"] != "recommended" for e in tuned),
        len(measured),
        execution_check(args, grid) if case.name == "synthetic" and best else None,
    )


def execution_check(args, grid: list[dict]) -> tuple[float, float]:
    """(the execution time a + b x batch computes for the grid's best point from its mean rows per
    execution, the execution time the server measured there), in ms: the synthetic model is what it says."""
    best = next(e for e in grid if e["role"] == "recommended")
    return args.fixed_ms + args.row_ms * best["batch"], best["exec_us"] / 1000


def print_table(rows: list[Figures]) -> None:
    print(
        f"{'model':<10} {'grid best':>10} {'tune pick':>10} {'pick/best':>9} {'to 5% s':>8} {'tune s':>7} "
        f"{'grid s':>7} {'speed-up':>8} {'points':>11}  recommended"
    )
    for f in rows:
        reached = f"{f.tune_to_within_s:.1f}" if f.tune_to_within_s else "-"
        ratio = f"{f.ratio:.1f}x" if f.ratio else "-"
        share = f.tune_pick_in_grid / f.grid_best if f.grid_best else 0.0
        print(
            f"{f.model:<10} {f.grid_best:>10,.0f} {f.tune_pick_in_grid:>10,.0f} {share:>9.2f} {reached:>8} "
            f"{f.tune_s:>7.0f} {f.grid_s:>7.0f} {ratio:>8} {f.tune_points:>4} / {f.grid_points:<4}  "
            f"{f.tune_best_label} (grid: {f.grid_best_label})"
        )
        if f.execution_ms is not None:
            computed, measured = f.execution_ms
            print(
                f"{'':<10} execution at the grid's best: a + b x batch = {computed:.1f} ms, "
                f"measured {measured:.1f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--models", default="synthetic,cpp", help="comma-separated: synthetic, cpp")
    parser.add_argument("--budget", default="3m", help="tune's budget (default 3m)")
    parser.add_argument("--fixed-ms", type=float, default=10.0, help="synthetic: cost of an execution (ms)")
    parser.add_argument("--row-ms", type=float, default=1.0, help="synthetic: cost of a row (ms)")
    parser.add_argument(
        "--work-dir", type=Path, help="keep the projects and logs there (default: a temp dir)"
    )
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="the smoke run: every part, figures meaningless")
    args = parser.parse_args()
    cases = {
        "synthetic": Case("synthetic", 60.0, args.budget),
        "cpp": Case("cpp", 5.0, args.budget, "1,4,16,32"),
    }
    if args.quick:  # each model over instances and two levels: grids of four points, 60 s budgets
        cases["synthetic"] = Case("synthetic", 60.0, "60s", "1,4", ("--dimensions", "instances"))
        cases["cpp"] = Case("cpp", 5.0, "60s", "1,4", ("--dimensions", "instances"))
    chosen = [cases[name] for name in args.models.split(",") if name]
    temporary = args.work_dir is None
    work = Path(tempfile.mkdtemp(prefix="tbgen-bench-tune-")) if temporary else args.work_dir / "bench-tune"
    if not temporary:
        shutil.rmtree(work, ignore_errors=True)  # an earlier run's, with the same --work-dir
        work.mkdir(parents=True)
    try:
        rows = []
        for case in chosen:
            project = make_project(work, case, args)
            print(f"{case.name}: tune (budget {case.budget}), then the grid", flush=True)
            tuned, tune_s = search(project, case, grid=False)
            grid, grid_s = search(project, case, grid=True)
            rows.append(figures(case, tuned, tune_s, grid, grid_s, args))
        print_table(rows)
        if args.json:
            args.json.write_text(
                json.dumps([{**asdict(f), "within": f.within, "ratio": f.ratio} for f in rows])
            )
    finally:
        if temporary:
            shutil.rmtree(work, ignore_errors=True)
    if not args.quick and not all(f.within for f in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
