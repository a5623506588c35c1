"""`tbgen tune`: search a model's configuration space on a real server within a time budget, recommend the
best configuration under the user's constraints, report it (results.jsonl, report.html, PNGs) and, with
``--apply``, write it into config.pbtxt.

Phases: plan (the space from the model's config.pbtxt, the request from its reference), serve (one server with
explicit model control for the whole search), search (each configuration loaded through the repository API,
each point measured by perf_analyzer; tune.search decides where), decide (the recommendation, the Pareto
front) and report.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config.parsing import load_model_config
from triton_backend_gen.perf.report import write_tune_report
from triton_backend_gen.perf.run import Bench, model_stats, plan_bench
from triton_backend_gen.project import ModelEntry, Project
from triton_backend_gen.runtime import TritonServer, prepare_server
from triton_backend_gen.runtime.control_mode import control_mode_args
from triton_backend_gen.runtime.model_control import load_model
from triton_backend_gen.signals import stop_on_signals
from triton_backend_gen.toolchain.ensure_built import ensure_built
from triton_backend_gen.tune import search as decide
from triton_backend_gen.tune.config_file import apply_config, config_diff, tuned_text
from triton_backend_gen.tune.results import ResultsFile, record
from triton_backend_gen.tune.search import Constraints, Point
from triton_backend_gen.tune.space import DIMENSIONS, Settings, Space, configure, plan_space

json_format = lazy_module("google.protobuf.json_format")

MEASURE_S = 1.5  # per point: perf_analyzer's 500 ms windows, measured until they agree
# Three windows within 10% of each other, in at most 6 (else measured again and taken as they come): on a
# small machine the client and the server share the cores, and one noisy window must not rank a configuration.
STABILITY, MAX_TRIALS = (10, 1000), 6
TUNE_DIR = "tune"
CONVERGED = "converged"
WHOLE_SPACE = "the whole space was measured"


@dataclass
class TuneOutcome:
    """What a search found and what was written."""

    model: str
    root: Path  # the project's
    space: Space
    constraints: Constraints
    points: list[Point]
    results_file: Path
    stopped: str = ""  # why the search ended
    recommended: Point | None = None
    closest: Point | None = None  # when nothing met the constraints
    front: list[Point] = field(default_factory=list)
    diff: str = ""  # config.pbtxt against the recommendation ("" to keep it)
    backup: Path | None = None  # --apply: where the old config.pbtxt is
    report: list[Path] = field(default_factory=list)
    interrupted: int = 0  # the exit code of the signal that cut the search short (130 for Ctrl-C), else 0
    notes: list[str] = field(default_factory=list)

    @property
    def keep_current(self) -> bool:
        return self.recommended is not None and self.recommended.settings == self.space.start


@dataclass
class _Search:
    """The measuring half of a search: the server, the model's config, what is loaded, what was measured."""

    entry: ModelEntry
    config: object  # the model's ModelConfig message, as config.pbtxt has it
    space: Space
    constraints: Constraints
    bench: Bench
    files: ResultsFile
    budget_s: float
    started: float
    offset_s: float  # elapsed seconds of the search resumed
    grid: bool
    progress: Callable[[str], None]
    points: list[Point] = field(default_factory=list)
    failed: set[Settings] = field(default_factory=set)
    loaded: Settings | None = None
    load_s: list[float] = field(default_factory=list)
    measure_s: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def run(self, triton: TritonServer) -> str:
        """Measure until the search converges, the space is done or the budget is spent; why it stopped."""
        while True:
            step = self._choose()
            if step is None:
                return WHOLE_SPACE if self.grid else CONVERGED
            if not self._affordable(step[0]):
                return "budget spent"
            self._measure(triton, *step)

    def _choose(self) -> tuple[Settings, int] | None:
        measured = {p.key for p in self.points}
        if self.grid:
            return next(
                (
                    (settings, level)
                    for settings in self.space.configurations()
                    if settings not in self.failed
                    for level in self.space.concurrency
                    if (settings, level) not in measured
                ),
                None,
            )
        level = decide.ladder_next(self.points, self.space, self.constraints)
        if level is not None:
            return self.space.start, level
        return (
            decide.next_point(self.space, self.points, self.constraints, self.loaded, self.failed)
            or decide.neighbor_next(self.space, self.points, self.constraints, self.failed)
            or decide.confirm_next(self.points, self.constraints, self.failed)
        )

    def _affordable(self, settings: Settings) -> bool:
        """Whether the next point fits in what is left of the budget (by the mean costs so far)."""
        cost = _mean(self.measure_s, MEASURE_S * 2)
        if settings != self.loaded:
            cost += _mean(self.load_s, 1.0)
        return self.elapsed() + cost <= self.budget_s

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _measure(self, triton: TritonServer, settings: Settings, level: int) -> None:
        if settings != self.loaded and not self._load(triton, settings):
            return
        before, began = model_stats(triton.http_url, self.entry.name), time.monotonic()
        try:
            report = self.bench.measure(
                triton.http_url, triton.grpc_url, triton.pid, triton.describe(), [level], MEASURE_S
            )
        except ServerError as err:
            if settings == self.space.start:
                raise
            self._fail(settings, f"measuring {settings.label()} at concurrency {level} failed: {err.message}")
            return
        self.measure_s.append(time.monotonic() - began)
        point = _point(settings, report.levels[0], before, model_stats(triton.http_url, self.entry.name))
        point = dataclasses.replace(point, elapsed_s=self.offset_s + self.elapsed())
        self.points.append(point)
        self.files.append(record(point, self.space.start, self.constraints))
        self.progress(self._progress_line(point))

    def _load(self, triton: TritonServer, settings: Settings) -> bool:
        """Load ``settings`` through the repository API; False (and a note) when the server refuses them."""
        began = time.monotonic()
        changed = configure(self.config, settings)
        try:
            load_model(
                triton.http_url,
                self.entry.name,
                json_format.MessageToDict(changed, preserving_proto_field_name=True),
            )
        except ServerError as err:
            if settings == self.space.start:
                raise
            self._fail(settings, f"{settings.label()} did not load: {err.message}")
            self.loaded = None  # a failed load leaves the version that was serving: reload before use
            return False
        self.load_s.append(time.monotonic() - began)
        self.loaded = settings
        return True

    def _fail(self, settings: Settings, note: str) -> None:
        self.failed.add(settings)
        self.notes.append(note)
        self.progress(note)

    def _progress_line(self, point: Point) -> str:
        best = decide.best_point(self.points, self.constraints)
        left = max(self.budget_s - self.elapsed(), 0)
        line = (
            f"[{self.elapsed():4.0f} s, {left:.0f} s left] {point.settings.label()} at concurrency "
            f"{point.concurrency}: {point.throughput:,.0f} inf/s, p99 {point.p99_us / 1000:,.2f} ms"
        )
        if best is not None:
            line += f"; best: {best.throughput:,.0f} inf/s ({best.settings.label()}, c {best.concurrency})"
        return line


def run_tune(
    project: Project,
    *,
    model: str | None = None,
    budget_s: float = 300.0,
    constraints: Constraints | None = None,
    concurrency: Sequence[int] | None = None,
    dimensions: Sequence[str] | None = None,
    apply: bool = False,
    resume: bool = False,
    grid: bool = False,
    server: Path | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> TuneOutcome:
    """Tune ``model`` (default: the project's first) of ``project`` within ``budget_s`` seconds.

    ``concurrency`` and ``dimensions`` default to all (``auto``), or to the resumed search's. ``resume``
    continues the search in build/tbgen/tune; one that ran to its end, or any with ``apply``, is decided
    again from its measurements without a server."""
    started = time.monotonic()
    constraints = constraints or Constraints()
    _check_options(budget_s, constraints)
    entry = project.model(model)
    config = load_model_config(entry.config_file)
    files = ResultsFile(project.runtime_dir / TUNE_DIR)
    earlier = files.read_search() if resume else {}
    dimensions = list(dimensions or earlier.get("dimensions") or DIMENSIONS)
    cores = len(os.sched_getaffinity(0))
    space = plan_space(
        config, cores=cores, dimensions=dimensions, concurrency=concurrency or earlier.get("concurrency")
    )
    grid = grid or bool(earlier.get("grid"))
    wanted = {
        "model": entry.name,
        "start": space.start.as_dict(),
        "grid": grid,
        "concurrency": list(space.concurrency),
        "dimensions": dimensions,
    }
    points = files.resumable(wanted) if resume else []
    bench = dataclasses.replace(
        plan_bench(project, model=entry.name), stability=STABILITY, max_trials=MAX_TRIALS
    )
    search = _Search(
        entry, config, space, constraints, bench, files, budget_s, started,
        max((p.elapsed_s for p in points), default=0.0), grid, progress, list(points),
    )  # fmt: skip
    outcome = TuneOutcome(entry.name, project.root, space, constraints, search.points, files.path)
    if resume and (apply or files.finished()):
        outcome.stopped = "decided from the measurements of the search resumed"
    else:
        _measure(project, search, outcome, wanted, resume, server)
    outcome.notes += search.notes + [f"{name}: {why}" for name, why in space.fixed.items()]
    if bench.executable is None:
        outcome.notes.append("measured by tbgen's builtin generator: perf_analyzer was not found")
    if not outcome.interrupted:  # a search cut short is not decided: --resume continues it
        _decide(outcome, entry, config, apply, progress)
    return outcome


def _measure(
    project: Project, search: _Search, outcome: TuneOutcome, wanted: dict, resume: bool, server: Path | None
) -> None:
    """The measuring half: a new search's files begun (a resumed one's stale decision dropped), the search
    run in one server, and the files marked when it ran to its end."""
    files, start = search.files, search.space.start
    if resume:
        files.decide([record(p, start, search.constraints) for p in search.points], None)
    else:
        files.begin(wanted)
    search.progress(_plan_line(search.space, search.budget_s, search.bench))
    outcome.stopped, outcome.interrupted = _serve_and_search(project, search, server)
    if outcome.stopped in (CONVERGED, WHOLE_SPACE):
        files.finish()


def _serve_and_search(project: Project, search: _Search, server: Path | None) -> tuple[str, int]:
    """One server for the search (explicit model control; the model and the models it calls loaded); (why
    it stopped, the exit code of the signal that stopped it or 0)."""
    ensure_built(project, server)
    only = (search.entry.name, *search.entry.calls)
    triton = prepare_server(
        project, server=server, extra_args=control_mode_args("explicit", project=True, only=only)[1]
    )
    with stop_on_signals(), triton:
        not_ready = [m for m in triton.model_states() if m.name == search.entry.name and m.state != "READY"]
        if not_ready:
            raise ServerError(
                f"{search.entry.name} did not load: {not_ready[0].reason}", f"Server log: {triton.log_file}"
            )
        try:
            return search.run(triton), 0
        except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM/SIGHUP as stop_on_signals raises them
            return "interrupted", getattr(stop, "exit_code", 130)


def _decide(outcome: TuneOutcome, entry: ModelEntry, config, apply: bool, progress) -> None:
    """The recommendation, the front, results.jsonl's recommended line, the report, the diff (and --apply)."""
    points, constraints, start = outcome.points, outcome.constraints, outcome.space.start
    outcome.recommended = decide.recommend(points, constraints, start)
    outcome.closest = None if outcome.recommended else decide.closest_point(points, constraints)
    outcome.front = decide.pareto_front(points)
    entries = [record(p, start, constraints) for p in points]
    chosen = record(outcome.recommended, start, constraints, "recommended") if outcome.recommended else None
    files = ResultsFile(outcome.results_file.parent)
    files.decide(entries, chosen)
    if not points:
        return
    progress("drawing the report")
    outcome.report = write_tune_report(
        files.directory,
        entries,
        model=entry.name,
        objective=constraints.objective,
        max_p99_us=constraints.max_p99_us,
        min_throughput=constraints.min_throughput,
        front=[record(p, start, constraints) for p in outcome.front],
        recommended=chosen,
        notes=outcome.notes,
    )
    if outcome.recommended is None or outcome.keep_current:
        return
    settings = outcome.recommended.settings
    change = ", ".join(f"{k} {v}" for k, v in settings.differences(start).items())
    text = tuned_text(entry.config_file.read_text(), config, configure(config, settings), change)
    outcome.diff = config_diff(entry.config_file, text)
    if apply:
        outcome.backup = apply_config(entry.config_file, text)


def _check_options(budget_s: float, constraints: Constraints) -> None:
    if budget_s <= 0:
        raise UsageError(
            f"--budget {budget_s:g} s leaves no time to measure.", "Give a budget such as --budget 5m."
        )
    if constraints.objective not in ("throughput", "latency"):
        raise UsageError(
            f"--objective {constraints.objective!r} is neither throughput nor latency.",
            "Use --objective throughput (the default) or --objective latency.",
        )
    for name, value in (
        ("--max-latency-p99", constraints.max_p99_us),
        ("--min-throughput", constraints.min_throughput),
    ):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"{name} must be above 0.", f"Drop {name}, or give a positive value.")


def _plan_line(space: Space, budget_s: float, bench: Bench) -> str:
    searched = [name for name in DIMENSIONS if name not in space.fixed and name in _varied(space)]
    return (
        f"tuning {bench.spec.name}: {len(space.configurations())} configurations x "
        f"{len(space.concurrency)} concurrency levels ({space.size()} points; searching "
        f"{', '.join(searched) or 'concurrency only'}) within {budget_s:g} s, from {space.start.label()}"
    )


def _varied(space: Space) -> set[str]:
    """The dimensions with more than one value in ``space``."""
    return {name for name, options in space.values().items() if len(options) > 1}


def _point(settings: Settings, level, before: dict, after: dict) -> Point:
    """A Point from a measured level and the model's statistics before and after it."""
    rows = int(after.get("inference_count", 0)) - int(before.get("inference_count", 0))
    executions = int(after.get("execution_count", 0)) - int(before.get("execution_count", 0))
    return Point(
        settings,
        level.concurrency,
        level.throughput,
        level.p50_us,
        level.p99_us,
        rows / executions if executions > 0 else 1.0,
        level.server_compute_us,
        level.server_queue_us,
        0.0,
    )


def _mean(values: Sequence[float], default: float) -> float:
    return sum(values) / len(values) if values else default
