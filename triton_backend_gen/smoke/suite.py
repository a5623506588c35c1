"""The smoke suite run against one server: what `tbgen test`, `tbgen deploy local`, `tbgen package --test` and
`tbgen templates check --smoke` share.

A run goes through named phases: **plan** (the checks and fuzz cases, from each model's config.pbtxt and its
reference.py; before the server starts, so that a broken reference.py fails at once, unless a model leaves its
tensors to the backend's auto-complete, when only the loaded server knows them), **serve** (start the server,
every model ready, the load time measured), **check** (the smoke checks, then custom metrics and request
parameters, which need the checks' requests answered first, then the fuzzer, which sends requests that fail),
and **report** (the server's statistics, a python stub that stopped answering, sanitizer reports). A model
with a batching strategy of its own is checked after the statistics were read (smoke.batching loads it
again).

A local server's python stubs are looked at after each check (``stub_health``): a stub found dead or hung
fails the check, its model's remaining checks are not run, the fuzzer leaves that model out, and the report
names the model, the instance and what happened; the server is then stopped without waiting for it to unload
that model (it never does). On a server of 25.12+ the suite ends by killing a stub of each python model to see
the model turn not ready; with ``chaos`` (`tbgen test --chaos`) it ends with smoke.chaos instead: the BLS
models' callees unloaded and loaded again, then a stub of each python model killed while requests flow.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from triton_backend_gen.project import ModelEntry, Project
from triton_backend_gen.runtime.load_failures import require_ready, stub_failures, unanswering_stubs
from triton_backend_gen.runtime.release_note import ReleaseNote
from triton_backend_gen.runtime.remote import RemoteServer
from triton_backend_gen.runtime.sanitizers import (
    LEAK_CHECK_DONE,
    LEAK_CHECK_LIBRARY,
    LEAK_CHECK_SIGNAL,
    leak_reports,
    sanitizer_reports,
)
from triton_backend_gen.runtime.server import TritonServer
from triton_backend_gen.runtime.stub_watch import watch_stubs
from triton_backend_gen.signals import stop_on_signals
from triton_backend_gen.smoke.batching import batching_strategy_results
from triton_backend_gen.smoke.chaos import CHAOS_PREFIX, ChaosRun, run_chaos
from triton_backend_gen.smoke.checks import plan_smoke, served_configs
from triton_backend_gen.smoke.clients import Endpoints, server_statistics
from triton_backend_gen.smoke.fuzz import plan_fuzz, run_fuzz
from triton_backend_gen.smoke.metrics import custom_metrics_results
from triton_backend_gen.smoke.model import leaves_tensors_to_backend, load_model_spec, load_model_specs
from triton_backend_gen.smoke.parameters import request_parameters_results
from triton_backend_gen.smoke.run import SmokeCheck, SmokeResult, run_smoke
from triton_backend_gen.smoke.soak import SoakModel, SoakOptions, SoakRun, run_soak, soak_results
from triton_backend_gen.smoke.stream_protocol import LogWindow, holds_the_server
from triton_backend_gen.smoke.stub_health import (
    BROKEN_STOP_TIMEOUT_S,
    STUB_CHECK,
    StubHealth,
    plans_unhealthy_instance_checks,
    stub_health,
    unhealthy_instance_checks,
)

LEAK_CHECK = "leak check (LeakSanitizer)"
LEAK_CHECK_TIMEOUT_S = 60.0


class SuiteProgress:
    """What a run tells the one watching it; this one tells nothing (the CLI's shows a live status)."""

    def phase(self, text: str) -> None:
        """The run goes on with ``text`` (building, starting the server, fuzzing ...)."""

    def check(self, check: SmokeCheck) -> None:
        """``check`` runs now."""

    def result(self, result: SmokeResult) -> None:
        """A check's (or a late finding's) result."""


@dataclass
class SuiteReport:
    project: Project
    server: str  # which tritonserver: "tritonserver 2.51.0 (embedded wheel)", "the server at HOST:PORT"
    log_file: Path | None  # None: a server tbgen did not start (runtime.remote), whose log is its owner's
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what tbgen changed for the run (e.g. the instance kind)
    release_note: ReleaseNote | None = None  # the server is of another release than the project
    results: list[SmokeResult] = field(default_factory=list)
    statistics: list = field(default_factory=list)  # smoke.ModelStatistics of each model, once the suite ran
    soak: SoakRun | None = None  # what a soak measured (its samples, for a report), when one ran

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def add(self, results: list[SmokeResult], progress: SuiteProgress) -> None:
        for result in results:
            self.results.append(result)
            progress.result(result)


@dataclass
class _Plan:
    """The checks and fuzz cases of a run, and what they were planned from."""

    chosen: ModelEntry | None
    repository: Path  # the served repository: the project's, or its run copy with another instance kind
    auto_completed: bool  # a model leaves its tensors to the backend: planned once the server has loaded it
    checks: list[SmokeCheck] = field(default_factory=list)
    fuzz_cases: list = field(default_factory=list)
    served: dict | None = None  # the configs as served, for auto-completed models


@dataclass
class _Run:
    """What the steps of the check phase share: the project, its server and plan, the endpoints, the report
    they add to, who watches, and the python stubs' health."""

    project: Project
    triton: TritonServer
    plan: _Plan
    endpoints: Endpoints
    report: SuiteReport
    progress: SuiteProgress
    health: StubHealth
    soak: SoakOptions | None = None
    chaos: bool = False  # end with smoke.chaos (`tbgen test --chaos`)

    @property
    def models(self) -> list[ModelEntry]:
        """The models the run checks (all, or the one chosen) whose python stub is not broken."""
        chosen, broken = self.plan.chosen, self.health.broken
        return [m for m in self.project.models if chosen in (None, m) and m.name not in broken]

    @property
    def named(self) -> bool:
        """Whether results carry their model's name (several models, all checked)."""
        return len(self.project.models) > 1 and self.plan.chosen is None


def run_suite(
    project: Project,
    triton: TritonServer,
    *,
    model: str | None = None,
    fuzz: int = 0,
    seed: int = 0,
    progress: SuiteProgress | None = None,
    on_ready: Callable[[float], None] = lambda seconds: None,
    soak: SoakOptions | None = None,
    chaos: bool = False,
) -> SuiteReport:
    """Start ``triton`` (stopped again on any way out), smoke-test every model of ``project`` (or ``model``)
    and send ``fuzz`` malformed requests (fuzzer ``seed``); ``on_ready`` hears how long the server took to
    load every model, once it has. The report carries the server's statistics of every model the project
    lists."""
    progress = progress or SuiteProgress()
    plan = _plan(project, triton, model, fuzz, seed)
    report = SuiteReport(
        project,
        triton.describe(),
        triton.log_file,
        list(triton.warnings),
        list(triton.notes),
        triton.release_note,
    )
    started = time.monotonic()
    progress.phase(
        f"loading the models on {triton.describe()}"
        if isinstance(triton, RemoteServer)
        else f"starting {triton.describe()} and loading the models"
    )
    with stop_on_signals(), triton:
        report.notes = list(triton.notes)  # with what starting it said (a server at --url: how it loaded)
        require_ready(project, triton)
        on_ready(time.monotonic() - started)  # only a load that succeeded sizes the chart's probes
        endpoints = Endpoints(triton.http_url, triton.grpc_url, triton.log_file)
        if plan.auto_completed:
            _plan_from_the_server(project, plan, endpoints, fuzz, seed)
        health = stub_health(project, triton, endpoints, watch_stubs(triton), plan.repository, plan.served)
        killed_on_purpose = _check(
            _Run(project, triton, plan, endpoints, report, progress, health, soak, chaos)
        )
        stub_results = _stub_results(triton, report, health)
        if health.deaths or killed_on_purpose:
            _stop_broken_server(triton, report, STUB_NEVER_UNLOADS)
        elif holds_the_server(r.detail for r in report.results if not r.passed):
            _stop_broken_server(triton, report, STREAM_NEVER_UNLOADS)
    report.add(stub_results, progress)
    if triton.sanitizer_runtimes:
        report.add([_sanitizer_result(triton)], progress)
    return report


def _plan(project: Project, triton: TritonServer, model: str | None, fuzz: int, seed: int) -> _Plan:
    """The plan made before the server starts (empty for auto-completed models: see _plan_from_the_server)."""
    chosen = project.model(model) if model is not None else None
    served = triton.options.model_repository
    auto_completed = any(leaves_tensors_to_backend(load_model_spec(m, served)[1]) for m in project.models)
    plan = _Plan(chosen, served, auto_completed)
    if not auto_completed:
        plan.checks = plan_smoke(project, chosen, repository=served)
        plan.fuzz_cases = plan_fuzz(project, fuzz, seed, chosen, repository=served) if fuzz else []
    return plan


def _plan_from_the_server(project: Project, plan: _Plan, endpoints: Endpoints, fuzz: int, seed: int) -> None:
    """The plan of a project whose models leave their tensors to auto-complete: from the configs as served."""
    plan.served = served_configs(project, endpoints, repository=plan.repository)
    plan.checks = plan_smoke(project, plan.chosen, repository=plan.repository, served=plan.served)
    if fuzz:
        plan.fuzz_cases = plan_fuzz(
            project, fuzz, seed, plan.chosen, repository=plan.repository, served=plan.served
        )


def _check(run: _Run) -> bool:
    """The smoke checks, then custom metrics and request parameters (after the checks, all answered, before
    requests that fail), then the fuzzer; the server's statistics; the batching strategies; last, on a server
    that reports a python instance's health, a stub of each python model killed (whether one was)."""
    triton, report = run.triton, run.report
    report.results += run_smoke(
        run.plan.checks,
        run.endpoints,
        is_healthy=lambda: triton.running,
        progress=run.progress.result,
        on_start=run.progress.check,
        broken_models=run.health.after,
    )
    if triton.running:
        _check_metrics_and_parameters(run)
    if run.soak is not None and triton.running:
        _soak(run, run.soak)
    if run.plan.fuzz_cases:
        _fuzz(run)
    if not triton.running:
        return False
    report.statistics = server_statistics(run.endpoints, [m.name for m in run.project.models])
    _check_batching_strategies(run)
    _check_leaks(run)
    if run.chaos:  # last, as it breaks the server; it kills the stubs the check below would
        return _check_chaos(run)
    return _check_unhealthy_instances(run)


def _fuzz(run: _Run) -> None:
    """The fuzz cases of the models that are not broken (a model whose stub died only fails its requests)."""
    health, report = run.health, run.report
    cases = [case for case in run.plan.fuzz_cases if case.model.name not in health.broken]
    left_out = sorted({case.model.name for case in run.plan.fuzz_cases} - {case.model.name for case in cases})
    for name in left_out:
        report.notes.append(f"the fuzzer left out {name}: {health.broken[name]}")
    if not cases:
        return
    run.progress.phase(f"fuzzing: {len(cases)} requests")
    triton = run.triton
    fuzzed = run_fuzz(cases, run.endpoints, server_pid=triton.pid, is_healthy=lambda: triton.running)
    report.add(fuzzed.as_results(), run.progress)
    health.look("fuzzing", "\n".join(fuzzed.failures))


def _soak(run: _Run, options: SoakOptions) -> None:
    """The soak (smoke.soak) of the models that are not broken, after the checks proved them right and before
    the fuzzer's malformed requests: memory and latency then come from valid load alone."""
    models = [
        SoakModel(spec, reference)
        for model in run.models
        for reference, spec, _ in load_model_specs(run.project, model, run.plan.repository, run.plan.served)
    ]
    if not models:
        return
    run.progress.phase(f"soak: {options.seconds:.0f} s of valid load, memory sampled")
    triton = run.triton
    soaked = run_soak(
        models,
        run.endpoints,
        options,
        server_pid=triton.pid,
        watch=run.health.watch,
        is_healthy=lambda: triton.running,
        progress=run.progress.phase,
    )
    run.report.soak = soaked
    run.report.notes += soaked.notes
    results = soak_results(soaked, run.named)
    run.report.add(results, run.progress)
    run.health.look("the soak", "\n".join(r.detail for r in results if not r.passed))


def _check_unhealthy_instances(run: _Run) -> bool:
    """On a server that reports a python instance's health (25.12+), a stub of each python model killed and
    the model (from 26.04 the server too) seen not ready; whether a stub was killed (none elsewhere)."""
    health = run.health
    release = health.server.release
    if not plans_unhealthy_instance_checks(release, sees_stubs=health.watch is not None):
        return False
    planned = [name for name, python in _served_by_python(run.project, run.models, run.plan) if python]
    if not planned:
        return False
    run.progress.phase("a python stub of each model killed: the model must turn not ready")
    checks = unhealthy_instance_checks(health.watch, planned, release, run.named)
    run.report.results += run_smoke(
        checks, run.endpoints, progress=run.progress.result, on_start=run.progress.check
    )
    return True


def _check_leaks(run: _Run) -> None:
    """A sanitizer build's leak check (runtime.sanitizers): LeakSanitizer run in the server on tbgen's signal,
    once every request was answered; the leaks the backend allocated fail the result."""
    triton = run.triton
    names = [path.name for path in triton.sanitizer_runtimes]
    if not any(name.startswith("libasan") for name in names) or triton.pid is None:
        return
    if not any(name.startswith(LEAK_CHECK_LIBRARY) for name in names):
        run.report.notes.append(
            "LeakSanitizer's check was not run: tbgen's leak-check library could not be built (it needs a C "
            "compiler, cc or gcc)"
        )
        return
    run.progress.phase("LeakSanitizer: the memory the backend allocated and lost")
    started = time.monotonic()
    window = LogWindow(triton.log_file)  # what the log gains from the signal on
    with contextlib.suppress(ProcessLookupError):  # a server that just died: no check done, said below
        os.kill(triton.pid, LEAK_CHECK_SIGNAL)
    log = ""
    while LEAK_CHECK_DONE not in log and time.monotonic() - started < LEAK_CHECK_TIMEOUT_S and triton.running:
        time.sleep(0.1)  # the check stops the server's threads while it scans: a second or so
        log = window.text()
    seconds = time.monotonic() - started
    if LEAK_CHECK_DONE not in log:
        detail = f"LeakSanitizer did not finish within {LEAK_CHECK_TIMEOUT_S:.0f} s (log: {triton.log_file})"
        run.report.add([SmokeResult(LEAK_CHECK, "-", False, detail, seconds)], run.progress)
        return
    leaks = leak_reports(log, run.project.backend)
    detail = (
        f"{len(leaks)} leak(s) allocated by the backend; the first:\n{leaks[0]}"
        if leaks
        else "no leak allocated by the backend (LeakSanitizer's check in the running server)"
    )
    run.report.add([SmokeResult(LEAK_CHECK, "-", not leaks, detail, seconds)], run.progress)


def _check_chaos(run: _Run) -> bool:
    """`tbgen test --chaos` (smoke.chaos): the BLS models' callees unloaded and loaded again, then a stub of
    each python model killed while requests flow; whether a stub was killed."""
    python = [name for name, served in _served_by_python(run.project, run.models, run.plan) if served]
    chaos = ChaosRun(
        run.project,
        run.models,
        python,
        run.plan.repository,
        run.plan.served,
        run.endpoints,
        run.health.watch,
        run.health.server,
        add=lambda result: run.report.add([result], run.progress),
        phase=run.progress.phase,
        notes=run.report.notes,
    )
    killed = run_chaos(chaos)
    run.health.look("chaos")
    return killed


def _stub_results(triton: TritonServer, report: SuiteReport, health: StubHealth) -> list[SmokeResult]:
    """A failed result per python stub that died or hung: those the watch found (a local server), then those
    that only the failures' text names ("Stub process '...' is not healthy": a server in a container or at
    --url, or a stub the watch saw alive)."""
    # a stub killed on purpose (--chaos) is its own result's subject
    failures = (r.detail for r in report.results if not r.passed and not r.name.startswith(CHAOS_PREFIX))
    unanswering = [i for i in unanswering_stubs(failures) if i not in health.instances]
    alive_stubs = triton.python_stubs() if unanswering else None
    return health.results(STUB_CHECK) + [
        SmokeResult(f"{STUB_CHECK} {instance}", "-", False, detail, 0.0)
        for instance, detail in stub_failures(unanswering, alive_stubs, triton)
    ]


STUB_NEVER_UNLOADS = "a model whose python stub died or hung never finishes unloading"
STREAM_NEVER_UNLOADS = "a decoupled model with a stream that never ended never finishes unloading"


def _stop_broken_server(triton: TritonServer, report: SuiteReport, why: str) -> None:
    """Stop a server that holds a model it will never unload (``why``) at once."""
    if triton.stop(timeout=BROKEN_STOP_TIMEOUT_S) < 0:
        report.notes.append(
            f"the server was killed after {BROKEN_STOP_TIMEOUT_S:g} s of its shutdown: {why} (the 2.51 "
            "server waits out its 30 s exit timeout, then exits 1)"
        )


def _check_metrics_and_parameters(run: _Run) -> None:
    """The custom metrics the models declare against the server's statistics, and the request parameters they
    answer back (model names in the results when the project has several models and all run); not for a
    broken model (its python stub died)."""
    triton, report, progress, plan = run.triton, run.report, run.progress, run.plan
    models = run.models
    declared = {m.name: m.metrics for m in models if m.metrics}
    if declared and triton.metrics_url is None:
        report.notes.append(
            f"the custom metrics of {', '.join(declared)} were not checked: {triton.describe()} was given "
            "without its metrics endpoint (give it as the third part of --url: HTTP,GRPC,METRICS)"
        )
    elif declared:
        progress.phase("custom metrics against the server's statistics")
        report.add(custom_metrics_results(triton.metrics_url, run.endpoints, declared, run.named), progress)
    with_parameters = [m for m in models if m.parameters]
    if with_parameters and triton.running:
        progress.phase("request parameters")
        answering = _parameter_models(run.project, with_parameters, plan.repository, plan.served)
        report.add(request_parameters_results(run.endpoints, answering, run.named), progress)


def _check_batching_strategies(run: _Run) -> None:
    """Each model's batching strategy against the batches the server forms (smoke.batching): after the
    server's statistics were read, since the check loads the model again (which starts them over, and gives a
    python model new stubs: the watch forgets the old ones)."""
    models = [m for m in run.models if m.batch_strategy]
    if not models or not run.triton.running:
        return
    run.progress.phase("batching strategies: the batches the server forms against each strategy's rule")
    checked = []
    for model in models:
        [(reference, spec, _config)] = load_model_specs(
            run.project, model, run.plan.repository, run.plan.served
        )
        checked.append((reference, spec, model.batch_strategy))
    results, notes = batching_strategy_results(checked, run.endpoints, run.triton.log_file, run.named)
    if run.health.watch is not None:
        run.health.watch.forget([m.name for m in models])
    run.report.add(results, run.progress)
    run.report.notes += notes


def _parameter_models(project: Project, models: list[ModelEntry], repository: Path, served) -> list[tuple]:
    """(reference, spec, whether the python backend serves it, parameters) of each of ``models``."""
    found = []
    for model in models:
        [(reference, spec, config)] = load_model_specs(project, model, repository, served)
        found.append((reference, spec, _python_served(project, config), model.parameters))
    return found


def _served_by_python(project: Project, models: list[ModelEntry], plan: _Plan) -> list[tuple[str, bool]]:
    """(name, whether the python backend's stub serves it) of each of ``models``."""
    found = []
    for model in models:
        [(_, _, config)] = load_model_specs(project, model, plan.repository, plan.served)
        found.append((model.name, _python_served(project, config)))
    return found


def _python_served(project: Project, config) -> bool:
    """Whether a model of ``config`` runs in the python backend's stub (python, or a python-based backend)."""
    based = project.python_based_dir is not None and config.backend == project.backend
    return config.backend == "python" or based


def _sanitizer_result(triton: TritonServer) -> SmokeResult:
    """One result for a sanitizer build's run: passed when the server log holds no sanitizer report."""
    reports = sanitizer_reports(triton.log_file.read_text(errors="replace"))
    runtimes = ", ".join(path.name for path in triton.sanitizer_runtimes)
    detail = (
        f"{len(reports)} report(s) in {triton.log_file}; the first:\n{reports[0]}"
        if reports
        else f"no reports (server ran with {runtimes} preloaded)"
    )
    return SmokeResult("sanitizer reports", "-", not reports, detail, 0.0)
