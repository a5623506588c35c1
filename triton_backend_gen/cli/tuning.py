"""`tbgen tune`: the best configuration of a model for a latency budget, searched on a real server."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from triton_backend_gen.cli.app import app
from triton_backend_gen.cli.options import ServerPath
from triton_backend_gen.cli.output import Column, console, records, say, user_errors
from triton_backend_gen.commands.tune import TuneOutcome, run_tune
from triton_backend_gen.errors import UsageError
from triton_backend_gen.perf.stats import parse_concurrency, parse_duration
from triton_backend_gen.project import load_project
from triton_backend_gen.tune.search import Constraints, Point, merged
from triton_backend_gen.tune.space import DIMENSIONS, auto_concurrency


@app.command()
def tune(
    project: Annotated[Path, typer.Argument(help="The project whose model to tune.")] = Path("."),
    model: Annotated[
        Optional[str], typer.Option("--model", "-m", help="Model (default: the project's first).")
    ] = None,
    budget: Annotated[
        str, typer.Option("--budget", help="Time for the whole run, start-up included: 5m, 90s.")
    ] = "5m",
    max_latency_p99: Annotated[
        Optional[float], typer.Option("--max-latency-p99", help="Latency budget: p99 in milliseconds.")
    ] = None,
    min_throughput: Annotated[
        Optional[float], typer.Option("--min-throughput", help="Throughput floor in inferences/s.")
    ] = None,
    objective: Annotated[
        str,
        typer.Option("--objective", help="throughput (highest under the budget) or latency (lowest p99)."),
    ] = "throughput",
    concurrency: Annotated[
        Optional[str],
        typer.Option(
            "--concurrency",
            help="Client concurrency levels, comma-separated, or auto (1 to 64, at most 16 per core): the "
            "default, or the resumed search's.",
        ),
    ] = None,
    dimensions: Annotated[
        Optional[str],
        typer.Option(
            "--dimensions",
            help=f"What to search, comma-separated: {', '.join(DIMENSIONS)} (default: all, or the resumed "
            "search's).",
        ),
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Write the recommendation into config.pbtxt (the old one kept).")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue the search in build/tbgen/tune; a finished one (or any, with --apply) is decided "
            "again from its measurements, without a server.",
        ),
    ] = False,
    grid: Annotated[
        bool, typer.Option("--grid", help="Measure the whole space in order instead of searching it.")
    ] = False,
    server: ServerPath = None,
) -> None:
    """Search the model's configuration space within a time budget; recommend the best under the limits."""
    with user_errors():
        outcome = run_tune(
            load_project(project),
            model=model,
            budget_s=parse_duration(budget, "--budget"),
            constraints=Constraints(
                max_latency_p99 * 1000 if max_latency_p99 is not None else None, min_throughput, objective
            ),
            concurrency=_concurrency(concurrency),
            dimensions=_dimensions(dimensions) if dimensions is not None else None,
            apply=apply,
            resume=resume,
            grid=grid,
            server=server,
            progress=say,
        )
    if outcome.interrupted:
        say(
            f"Interrupted: {len(outcome.points)} measurements kept in {outcome.results_file}; continue with "
            f"`{_resume_command(outcome)}`.",
            style="yellow",
        )
        raise typer.Exit(outcome.interrupted)
    if not outcome.points:
        say(
            f"Nothing was measured: {outcome.stopped} before the first point (the budget counts the build "
            "check and the server's start).",
            label="none:",
            style="bold red",
        )
        say("Give it more time, e.g. `tbgen tune --budget 5m`.", style="dim")
        raise typer.Exit(1)
    _print_outcome(outcome)
    raise typer.Exit(0 if outcome.recommended is not None else 1)


def _concurrency(text: str | None) -> tuple[int, ...] | None:
    """--concurrency: None when not given (the default, or the resumed search's), auto's levels, or a list."""
    if text is None:
        return None
    if text.strip() == "auto":
        return auto_concurrency(len(os.sched_getaffinity(0)))
    return tuple(parse_concurrency(text))


def _dimensions(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise UsageError(
            "--dimensions names nothing to search.", f"Example: --dimensions {','.join(DIMENSIONS)}"
        )
    return names


def _print_outcome(outcome: TuneOutcome) -> None:
    records(
        f"Pareto front of {outcome.model} (throughput against p99; {len(outcome.points)} points measured)",
        [
            Column("configuration"),
            *(Column(c, justify="right") for c in ("conc", "infer/s", "p50 ms", "p99 ms")),
        ],
        [_row(point) for point in outcome.front],
    )
    say(f"The search stopped: {outcome.stopped}.")
    for note in outcome.notes:
        say(note, label="note:", style="dim")
    if outcome.recommended is None:
        _print_none_met(outcome)
    elif outcome.keep_current:
        say(
            f"Keep the current configuration ({outcome.space.start.label()}) at concurrency "
            f"{outcome.recommended.concurrency}: {_figures(outcome.recommended)}.",
            label="recommended:",
            style="bold green",
        )
    else:
        _print_change(outcome)
    say(f"Results: {outcome.results_file}")
    if outcome.report:
        say(f"Report: {outcome.report[0]}")


def _print_none_met(outcome: TuneOutcome) -> None:
    closest = outcome.closest
    where = (
        f" The closest: {closest.settings.label()} at concurrency {closest.concurrency} "
        f"({_figures(closest)})."
        if closest
        else ""
    )
    say(
        f"No configuration measured met the constraints ({_constraints(outcome.constraints)}).{where}",
        label="none:",
        style="bold red",
    )


def _print_change(outcome: TuneOutcome) -> None:
    point = outcome.recommended
    start = [p for p in outcome.points if p.settings == outcome.space.start]
    say(
        f"{point.settings.label()} at concurrency {point.concurrency}: {_figures(point)}"
        + _against_start(point, start, outcome.constraints),
        label="recommended:",
        style="bold green",
    )
    console.print(outcome.diff, markup=False, highlight=False, end="")
    if outcome.backup is not None:
        say(f"Applied: config.pbtxt rewritten; the previous one is {outcome.backup}.")
    else:
        say(f"Apply it: `{_resume_command(outcome, '--apply')}`")


def _resume_command(outcome: TuneOutcome, *extra: str) -> str:
    """The command that resumes this search with the same constraints (a finished one decides again)."""
    constraints = outcome.constraints
    words = ["tbgen", "tune", str(outcome.root), "--model", outcome.model, "--resume", *extra]
    if constraints.max_p99_us is not None:
        words += ["--max-latency-p99", f"{constraints.max_p99_us / 1000:g}"]
    if constraints.min_throughput is not None:
        words += ["--min-throughput", f"{constraints.min_throughput:g}"]
    if constraints.objective != "throughput":
        words += ["--objective", constraints.objective]
    return shlex.join(words)


def _against_start(point: Point, start: list[Point], constraints: Constraints) -> str:
    from_start = [p for p in merged(start) if constraints.meets(p.throughput, p.p99_us)]
    if not from_start:
        return "; the current configuration met the constraints at no concurrency measured"
    best = max(from_start, key=lambda p: constraints.score(p.throughput, p.p99_us))
    if constraints.objective == "latency":
        return f"; the current configuration's best: p99 {best.p99_us / 1000:,.2f} ms"
    ratio = point.throughput / best.throughput
    return f"; {ratio:.2f}x the current configuration's {best.throughput:,.0f} inf/s"


def _row(point: Point) -> tuple[str, ...]:
    return (
        point.settings.label(),
        str(point.concurrency),
        f"{point.throughput:,.1f}",
        f"{point.p50_us / 1000:,.2f}",
        f"{point.p99_us / 1000:,.2f}",
    )


def _figures(point: Point) -> str:
    return (
        f"{point.throughput:,.0f} inf/s, p50 {point.p50_us / 1000:,.2f} ms, p99 {point.p99_us / 1000:,.2f} ms"
    )


def _constraints(constraints: Constraints) -> str:
    parts = []
    if constraints.max_p99_us is not None:
        parts.append(f"p99 <= {constraints.max_p99_us / 1000:g} ms")
    if constraints.min_throughput is not None:
        parts.append(f">= {constraints.min_throughput:g} inf/s")
    return ", ".join(parts) or "none"
