"""The run's report: $OUT/gpu-check.md for people, gpu-check.json with the figures, and the logs."""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
import time
from datetime import UTC, datetime

from gpu_check.device import BENCH_SECONDS, FAIL, PASS, PROJECTS, SKIP
from gpu_check.state import RunState, StepResult
from gpu_check.steps import describe_gpu


# --- the report ------------------------------------------------------------------------------------------
def throughput_rows(state: RunState) -> list[dict]:
    """Per project and concurrency: KIND_GPU and KIND_CPU inferences/s and their ratio."""
    rows = []
    for key in PROJECTS:
        gpu = state.results.get(f"bench {key} KIND_GPU")
        cpu = state.results.get(f"bench {key} KIND_CPU")
        levels = sorted({*(gpu.figures if gpu else {}), *(cpu.figures if cpu else {})}, key=int)
        for level in levels:
            on_gpu = gpu.figures.get(level, {}).get("throughput") if gpu else None
            on_cpu = cpu.figures.get(level, {}).get("throughput") if cpu else None
            ratio = on_gpu / on_cpu if on_gpu and on_cpu else None
            rows.append(
                {"project": key, "concurrency": int(level), "gpu": on_gpu, "cpu": on_cpu, "ratio": ratio}
            )
    return rows


def cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def figure(value: float | None, form: str = "{:,.0f}") -> str:
    return form.format(value) if value is not None else "-"


# What the device step found, as the report names it.
FACT_LABELS = {
    "nvcc": "nvcc (CUDA)",
    "cmake": "CMake",
    "python": "Python",
    "numpy": "numpy",
    "torch": "torch",
    "torch_cuda": "torch's CUDA",
    "glibc": "C library",
    "kernel": "kernel",
    "cpus": "CPUs",
    "tbgen_sees_gpu": "tbgen sees a GPU (gpus_visible: /proc/driver/nvidia/gpus or /dev/nvidiaN)",
    "libcuda": "libcuda.so.1 in the loader's cache",
    "python_probe": "numpy and torch",
}


def report_lines(state: RunState, budget: float) -> list[str]:
    results = list(state.results.values())
    return (
        head_lines(state, budget, results)
        + machine_lines(state)
        + step_lines(results)
        + throughput_lines(state)
    )


def head_lines(state: RunState, budget: float, results: list[StepResult]) -> list[str]:
    skipped = [r.name for r in results if r.status == SKIP]
    lines = [
        "# tbgen GPU check",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {state.facts.get('hostname', '?')}: "
        f"{time.monotonic() - state.started:.0f} s of a {budget:.0f} s budget; "
        f"{sum(r.status == PASS for r in results)} steps passed, {sum(r.status == FAIL for r in results)} "
        f"failed, {len(skipped)} skipped.",
        "",
    ]
    if state.gpu is None:
        lines += [f"**No GPU here** (nvidia-smi lists none): skipped {', '.join(skipped)}.", ""]
    return lines


def machine_lines(state: RunState) -> list[str]:
    facts = state.facts
    carried = state.manifest
    return [
        "## The machine",
        "",
        "| | |",
        "|---|---|",
        f"| GPU | {cell(describe_gpu(state.gpu) if state.gpu else 'none')} |",
        *(f"| {label} | {cell(facts[key])} |" for key, label in FACT_LABELS.items() if key in facts),
        f"| tritonserver | {cell(getattr(state.results.get('server'), 'summary', '-'))} |",
        f"| carried | {cell(carried_summary(carried))} |",
        "",
    ]


def carried_summary(manifest: dict) -> str:
    """What prepare carried, and what it left out (by name)."""
    if not manifest:
        return "nothing"
    left = ", ".join(item["name"].split("-")[0] for item in manifest.get("left_out", []))
    return (
        f"{len(manifest['pieces'])} pieces, {manifest['carried_bytes'] / 1e6:.1f} MB (made "
        f"{manifest['made_at']}); left out: {left}"
    )


def step_lines(results: list[StepResult]) -> list[str]:
    lines = ["## Steps", "", "| step | result | seconds | what it found |", "|---|---|---|---|"]
    lines += [f"| {cell(r.name)} | {r.status} | {r.seconds:.1f} | {cell(r.summary)} |" for r in results]
    failures = [r for r in results if r.status == FAIL and r.detail]
    for result in failures:
        lines += ["", f"### {result.name}: why it failed", "", "```", *result.detail[-40:], "```"]
    return lines + [""]


def throughput_lines(state: RunState) -> list[str]:
    rows = throughput_rows(state)
    if not rows:
        return ["## Throughput", "", "Not measured (see the bench steps).", ""]
    lines = [
        "## Throughput: KIND_GPU against KIND_CPU",
        "",
        f"`tbgen bench --tool builtin --duration {BENCH_SECONDS}`: gRPC, batch 1 per request (dynamic "
        "batching merges concurrent ones), inferences/s.",
        "",
        "| project | concurrency | KIND_GPU | KIND_CPU | GPU/CPU |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['project']} | {row['concurrency']} | {figure(row['gpu'])} | {figure(row['cpu'])} | "
            f"{figure(row['ratio'], '{:.2f}')} |"
        )
    return lines + [""]


def write_report(state: RunState, budget: float) -> None:
    (state.out / "gpu-check.md").write_text("\n".join(report_lines(state, budget)))
    document = {
        "made_by": "scripts/gpu-check run",
        "seconds": round(time.monotonic() - state.started, 1),
        "budget_s": budget,
        "gpu": state.gpu,
        "machine": state.facts,
        "steps": [dataclasses.asdict(r) for r in state.results.values()],
        "throughput": throughput_rows(state),
        "carried": {
            key: state.manifest.get(key) for key in ("made_at", "release", "python", "carried_bytes")
        },
    }
    (state.out / "gpu-check.json").write_text(json.dumps(document, indent=2, default=str) + "\n")
    write_logs(state)
    print(f"report: {state.out / 'gpu-check.md'}", flush=True)


LOG_TAIL_BYTES = 1 << 20


def write_logs(state: RunState) -> None:
    """The steps' logs, the builds' and the servers' logs (each its last MiB) in one archive."""
    logs = sorted(state.logs.glob("*")) if state.logs.is_dir() else []
    for project in state.projects.values():
        candidates = (project / "build" / "tbgen-build.log", project / "build" / "tbgen" / "server.log")
        logs += [path for path in candidates if path.is_file()]
    with tarfile.open(state.out / "gpu-check-logs.tar.gz", "w:gz") as tar:
        for path in logs:
            data = path.read_bytes()[-LOG_TAIL_BYTES:]
            info = tarfile.TarInfo(str(path.relative_to(state.work)))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
