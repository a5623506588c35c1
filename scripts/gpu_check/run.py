"""`gpu-check run`, there: the plan of steps, each run when what it needs is there (a GPU, the steps before
it, enough of the budget), and the report written whatever happened."""

from __future__ import annotations

import os
import shutil
import threading
import time
import traceback
from collections.abc import Iterable
from pathlib import Path

from gpu_check.alone import kernel_step, torch_model_step
from gpu_check.device import FAIL, PASS, PROJECTS, REPO, SKIP, CheckError
from gpu_check.report import write_report
from gpu_check.state import Outcome, RunState, Step, StepResult, begin_step
from gpu_check.steps import (
    bench_step,
    build_step,
    carried_step,
    device_step,
    install_step,
    render_step,
    serve_step,
    server_step,
    sources_step,
)


# --- the plan and the runner -----------------------------------------------------------------------------
def plan_steps() -> list[Step]:
    setup = [
        Step("device", device_step, timeout=240, least=5),
        Step("carried", carried_step, least=5),
        Step("install", install_step, after=("carried",), timeout=180, least=20),
        Step("server", server_step, after=("carried",), timeout=120, least=15),
        Step("sources", sources_step, after=("carried", "device"), least=5),
    ]
    render = [Step(f"render {key}", render_step(key), after=("install",), least=15) for key in PROJECTS]
    build = [
        Step(f"build {key}", build_step(key), "for", (f"render {key}", "sources"), 420, 60, group="build")
        for key in PROJECTS
    ]
    serve = [
        Step(f"serve {key} KIND_GPU", serve_step(key), "needs", (f"build {key}", "server"), 180, 30)
        for key in PROJECTS
    ]
    alone = [
        Step("kernel alone", kernel_step, "needs", ("render cpp-backend",), 150, 20),
        Step("model.pt alone", torch_model_step, "needs", ("render libtorch",), 120, 15),
    ]
    bench = [
        Step(
            f"bench {key} KIND_{kind.upper()}",
            bench_step(key, kind),
            need,
            (f"build {key}", "server"),
            120,
            20,
        )
        for key in PROJECTS
        for kind, need in (("gpu", "needs"), ("cpu", "for"))
    ]
    return setup + render + build + serve + alone + bench


def why_not(state: RunState, step: Step) -> str | None:
    """Why ``step`` is skipped (no GPU, a step it needs did not pass, too little time), or None."""
    if step.gpu == "needs" and state.gpu is None:
        return "no GPU"
    if step.gpu == "for" and state.gpu is None and not state.cpu_steps:
        return "no GPU: it serves the GPU steps (--cpu-steps runs it here too)"
    unmet = [name for name in step.after if getattr(state.results.get(name), "status", None) != PASS]
    if unmet:
        return f"needs {', '.join(unmet)}, which did not pass"
    if state.left() < step.least:
        return (
            f"not started: {max(state.left(), 0):.0f} s of the run's budget left, it needs {step.least:.0f}"
        )
    return None


def run_one(state: RunState, step: Step) -> StepResult:
    started = time.monotonic()
    reason = why_not(state, step)
    if reason is not None:
        return StepResult(step.name, SKIP, 0.0, reason)
    begin_step(min(step.timeout, state.left()))
    try:
        outcome = step.action(state)
    except Exception as err:  # noqa: BLE001 - one step's surprise must not cost the later steps their run
        outcome = Outcome(FAIL, f"{type(err).__name__}: {err}", traceback.format_exc().splitlines()[-12:])
    seconds = time.monotonic() - started
    return StepResult(step.name, outcome.status, seconds, outcome.summary, outcome.detail, outcome.figures)


def batches(steps: list[Step]) -> Iterable[list[Step]]:
    """Consecutive steps of one group together; every other step alone."""
    batch: list[Step] = []
    for step in steps:
        if batch and (not step.group or step.group != batch[-1].group):
            yield batch
            batch = []
        batch.append(step)
    if batch:
        yield batch


def run_batch(state: RunState, batch: list[Step]) -> list[StepResult]:
    if len(batch) == 1:
        return [run_one(state, batch[0])]
    results: dict[str, StepResult] = {}
    threads = [
        threading.Thread(target=lambda s=s: results.update({s.name: run_one(state, s)})) for s in batch
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[step.name] for step in batch]


def say(state: RunState, result: StepResult) -> None:
    elapsed = time.monotonic() - state.started
    print(
        f"[{elapsed:4.0f} s] {result.name}: {result.status} ({result.seconds:.1f} s) {result.summary}",
        flush=True,
    )


def run(work: Path, out: Path, carry: Path, budget: float, cpu_steps: bool) -> int:
    """Every step in order, each bounded in time; the report in ``out``; 1 when a step failed."""
    fresh_work_dir(work)
    out.mkdir(parents=True, exist_ok=True)
    state = RunState(work, out, carry, cpu_steps, time.monotonic() + budget)
    state.env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    print(f"gpu-check run: budget {budget:.0f} s, work in {work}, report in {out}", flush=True)
    for batch in batches(plan_steps()):
        for result in run_batch(state, batch):
            state.results[result.name] = result
            say(state, result)
    write_report(state, budget)
    return 1 if any(r.status == FAIL for r in state.results.values()) else 0


WORK_MARK = ".gpu-check-work"


def fresh_work_dir(work: Path) -> None:
    """An empty ``work``: one left by an earlier run is emptied; any other folder that holds files is
    refused."""
    if work.is_dir() and any(work.iterdir()) and not (work / WORK_MARK).is_file():
        raise CheckError(f"{work} holds files and is not a gpu-check work folder.", "Pass another --work.")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / WORK_MARK).write_text("scripts/gpu-check run: emptied by the next run\n")
