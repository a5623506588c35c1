"""A soak's report (`tbgen test --soak`): memory.png (each process's private memory against the requests it
served, the fitted line after the warm-up), latency.png (each model's p50 and p99 per stretch of the soak),
report.html holding both with the verdicts, and samples.json (every memory sample, to plot again)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from triton_backend_gen.perf.report import (
    BEST,
    FRONT,
    GREY,
    LIMIT,
    empty_panel,
    html_image,
    html_page,
    html_table,
    new_figure,
    png_bytes,
    write_report_files,
)
from triton_backend_gen.project import Project
from triton_backend_gen.smoke.growth import KIB, LEAK_BYTES_PER_REQUEST, MIB, MemoryGrowth
from triton_backend_gen.smoke.soak import SoakRun

MEMORY_CAPTION = (
    "Private memory (RssAnon) of each process through the soak. The dashed line is the slope fitted after "
    "the warm-up (grey) against the requests the process served (a python stub: its model's; the server: "
    "all); a leak is drawn in red."
)
LATENCY_CAPTION = "Each model's p50 (solid) and p99 (dashed) latency per stretch of the soak."


def _points(run: SoakRun, process: str) -> list[tuple[float, int, float]]:
    """(seconds, requests the process served, MiB) of each sample of ``process``."""
    model = run.process_models.get(process)
    return [
        (s.seconds, s.per_model.get(model, 0) if model else s.requests, s.memory[process] / MIB)
        for s in run.samples
        if process in s.memory
    ]


def _memory_png(run: SoakRun, growths: list[MemoryGrowth]) -> bytes:
    figure = new_figure(9, 4.8)
    axes = figure.add_subplot()
    if not growths:
        empty_panel(axes, "no process's memory was sampled")
        return png_bytes(figure)
    for index, growth in enumerate(growths):
        points = _points(run, growth.process)
        colour = LIMIT if growth.leaks else (FRONT, BEST, "#2a9d8f", "#6a4c93", "#555555")[index % 5]
        axes.plot(
            [p[0] for p in points], [p[2] for p in points], color=colour, linewidth=1.4, label=growth.process
        )
        fitted = [p for p in points if p[0] >= run.warmup_s]
        if fitted:  # the fitted slope (against requests) drawn through the samples after the warm-up
            seconds, requests, mib = fitted[0]
            axes.plot(
                [p[0] for p in fitted],
                [mib + growth.bytes_per_request * (p[1] - requests) / MIB for p in fitted],
                color=colour,
                linestyle="--",
                linewidth=1,
            )
    axes.axvspan(0, run.warmup_s, color=GREY, alpha=0.25, lw=0, label="warm-up")
    axes.set_xlabel("seconds into the soak")
    axes.set_ylabel("private memory (MiB)")
    axes.legend(loc="upper left", fontsize=8)
    axes.grid(alpha=0.3)
    return png_bytes(figure)


def _latency_png(run: SoakRun) -> bytes:
    figure = new_figure(9, 4.2)
    axes = figure.add_subplot()
    drawn = False
    for index, name in enumerate(run.models):
        windows = run.windows(name)
        if not windows:
            continue
        drawn = True
        colour = (FRONT, BEST, "#2a9d8f", "#6a4c93", LIMIT)[index % 5]
        middle = [(w.start_s + w.end_s) / 2 for w in windows]
        axes.plot(middle, [w.p50_us / 1000 for w in windows], color=colour, marker="o", label=f"{name} p50")
        axes.plot(middle, [w.p99_us / 1000 for w in windows], color=colour, linestyle="--", marker="x")
    if not drawn:
        empty_panel(axes, "no answer was timed")
        return png_bytes(figure)
    axes.set_xlabel("seconds into the soak")
    axes.set_ylabel("latency (ms)")
    axes.set_ylim(bottom=0)
    axes.legend(loc="upper left", fontsize=8)
    axes.grid(alpha=0.3)
    return png_bytes(figure)


def _verdict_rows(growths: list[MemoryGrowth]) -> list[tuple]:
    rows = []
    for growth in growths:
        rows.append(
            (
                growth.process,
                "LEAK" if growth.leaks else "ok",
                f"{growth.bytes_per_request * 1000 / KIB:+.2f}",
                f"{growth.mib_per_hour:+.1f}",
                f"{growth.first / MIB:.1f} -> {growth.last / MIB:.1f}",
            )
        )
    return rows


def _model_rows(run: SoakRun) -> list[tuple]:
    rows = []
    for name, load in run.models.items():
        drift = run.drift(name)
        windows = run.windows(name)
        rows.append(
            (
                name,
                f"{load.answered:,}",
                f"{load.failed:,}",
                f"{windows[0].p99_us / 1000:.2f} -> {windows[-1].p99_us / 1000:.2f}" if windows else "-",
                "DRIFT" if drift is not None and drift.drifts else "ok",
            )
        )
    return rows


def soak_report_dir(project: Project) -> Path:
    """Where a project's soak report goes: beside its other runtime files (build/tbgen/soak)."""
    return project.runtime_dir / "soak"


def write_soak_report(out_dir: Path, run: SoakRun) -> list[Path]:
    """Write the soak's report into ``out_dir`` (created when missing); the paths, report.html first."""
    growths = run.memory()
    memory, latency = _memory_png(run, growths), _latency_png(run)
    lead = (
        f"{run.requests:,} requests in {run.seconds:.0f} s from {run.options.concurrency} clients"
        + (f" at {run.options.rate:g} requests/s" if run.options.rate else "")
        + f"; the first {run.warmup_s:.0f} s are warm-up. A leak: more than "
        f"{LEAK_BYTES_PER_REQUEST * 1000 / KIB:.1f} KiB per 1,000 requests after it."
    )
    body = [
        "<h1>Soak</h1>",
        f"<p class='lead'>{html.escape(lead)}</p>",
        html_image(memory, "private memory against requests served", MEMORY_CAPTION),
        html_table(
            ("process", "verdict", "KiB per 1,000 requests", "MiB per hour", "MiB"),
            _verdict_rows(growths),
            {2, 3},
        ),
        html_image(latency, "latency per stretch of the soak", LATENCY_CAPTION),
        html_table(
            ("model", "answers", "failed", "p99 first -> last (ms)", "drift"), _model_rows(run), {1, 2}
        ),
    ]
    samples = [
        {"seconds": s.seconds, "requests": s.requests, "per_model": s.per_model, "memory": s.memory}
        for s in run.samples
    ]
    return write_report_files(
        out_dir,
        {
            "report.html": html_page("Soak", body),
            "memory.png": memory,
            "latency.png": latency,
            "samples.json": json.dumps(samples, indent=1).encode(),
        },
    )
