"""``tbgen test``: build what is out of date, start the project's server, run its smoke plan, stop the server.

The command wires toolchain (the build), runtime (a running Triton) and smoke (the checks); it decides
nothing about any of them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from triton_backend_gen.commands.build import build_if_needed
from triton_backend_gen.commands.env import load_failure_hints
from triton_backend_gen.commands.load_time import record_load_time
from triton_backend_gen.discovery import gpus_visible
from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.model_config import validate_tree
from triton_backend_gen.project import ModelEntry, Project
from triton_backend_gen.runtime import TritonServer, prepare_server
from triton_backend_gen.runtime.release_note import ReleaseNote
from triton_backend_gen.runtime.sanitizers import sanitizer_reports
from triton_backend_gen.runtime.server import relevant_log_lines
from triton_backend_gen.signals import stop_on_signals
from triton_backend_gen.smoke import (
    Endpoints,
    SmokeCheck,
    SmokeResult,
    custom_metrics_results,
    leaves_tensors_to_backend,
    load_model_spec,
    load_model_specs,
    plan_fuzz,
    plan_smoke,
    request_parameters_results,
    run_fuzz,
    run_smoke,
    served_configs,
    server_statistics,
)


@dataclass
class TestRunReport:
    __test__ = False  # not a pytest test class

    project: Project
    server: str  # which tritonserver, e.g. "tritonserver 2.51.0 (embedded wheel)"
    log_file: Path
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what tbgen changed for the run (e.g. the instance kind)
    release_note: ReleaseNote | None = None  # the server is of another release than the project
    results: list = field(default_factory=list)  # smoke.SmokeResult
    statistics: list = field(default_factory=list)  # smoke.ModelStatistics of each model, once the suite ran

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)


def run_project_tests(
    project: Project,
    *,
    server: Path | None = None,
    fuzz: int = 0,
    seed: int = 0,
    sanitize: tuple[str, ...] = (),
    docker: bool = False,
    image: str | None = None,
    gpu: bool = False,
    packaged: bool = False,
    instance_kind: str | None = None,
    model: str | None = None,
    on_result: Callable[[SmokeResult], None] = lambda result: None,
    on_check: Callable[[SmokeCheck], None] = lambda check: None,
    on_phase: Callable[[str], None] = lambda phase: None,
    triton: TritonServer | None = None,
) -> TestRunReport:
    """Smoke-test every model of ``project`` (or ``model``) in a real server (started and stopped here); the
    report carries the server's statistics of every model the project lists.

    With ``sanitize`` the backend is built with those sanitizers, and any sanitizer report in the server
    log (read after the server stopped) fails the run. With ``docker`` the backend is built and served in a
    container of ``image`` (default: the NGC image of the project's release), with all GPUs when ``gpu``;
    ``packaged`` tests the image of `tbgen package` as it is (nothing built, nothing mounted);
    ``instance_kind`` ("cpu", "gpu") serves a copy of the models with instances of that kind. ``triton``: a
    server that another launcher prepared (`tbgen deploy local`: a chart's pod spec), tested as it is; else the
    time the server took to load the models is recorded for `tbgen deploy` (commands.load_time).
    ``on_phase`` hears what the run does next (building, starting the server, ...), ``on_check`` of each check
    before it runs and ``on_result`` of each result."""
    check_test_options(sanitize=sanitize, docker=docker, gpu=gpu, packaged=packaged, instance_kind=instance_kind)
    chosen = project.model(model) if model is not None else None
    measured = triton is None
    if not packaged and measured:
        if project.is_cpp or project.native is not None:
            on_phase("building what changed")
        build_if_needed(project, server, sanitize, docker=docker, image=image)
    if triton is None:
        triton = prepare_server(project, server=server, docker=docker or packaged, image=image, gpu=gpu,
                                mount=not packaged, instance_kind=instance_kind)
    served = triton.options.model_repository  # the project's, or its run copy with another instance kind
    # Planned before the server starts (a broken reference.py fails at once), unless a model leaves its tensors
    # to auto-complete: then only the server knows them, and the plan is made once it has loaded the models.
    auto_completed = any(leaves_tensors_to_backend(load_model_spec(m, served)[1]) for m in project.models)
    plan = [] if auto_completed else plan_smoke(project, chosen, repository=served)
    fuzz_cases = plan_fuzz(project, fuzz, seed, chosen, repository=served) if fuzz and not auto_completed else []
    report = TestRunReport(project, triton.describe(), triton.log_file, list(triton.warnings), list(triton.notes),
                           triton.release_note)
    started = time.monotonic()
    on_phase(f"starting {triton.describe()} and loading the models")
    with stop_on_signals(), triton:
        _require_ready(project, triton)
        if measured:  # only a load that succeeded sizes the chart's probes
            record_load_time(project, time.monotonic() - started, triton.describe())
        endpoints = Endpoints(http_url=triton.http_url, grpc_url=triton.grpc_url)
        completed = served_configs(project, endpoints, repository=served) if auto_completed else None
        if auto_completed:
            plan = plan_smoke(project, chosen, repository=served, served=completed)
            fuzz_cases = plan_fuzz(project, fuzz, seed, chosen, repository=served, served=completed) if fuzz else []
        healthy = lambda: triton.running  # noqa: E731
        report.results += run_smoke(plan, endpoints, is_healthy=healthy, progress=on_result, on_start=on_check)
        named = len(project.models) > 1 and chosen is None
        declared = {m.name: m.metrics for m in project.models if m.metrics and (chosen is None or m is chosen)}
        if declared and triton.running:  # after the smoke checks, all answered, before requests that fail
            on_phase("custom metrics against the server's statistics")
            for result in custom_metrics_results(triton.metrics_url, endpoints, declared, named):
                report.results.append(result)
                on_result(result)
        with_parameters = [m for m in project.models if m.parameters and (chosen is None or m is chosen)]
        if with_parameters and triton.running:
            on_phase("request parameters")
            models = _parameter_models(project, with_parameters, served, completed)
            for result in request_parameters_results(endpoints, models, named):
                report.results.append(result)
                on_result(result)
        if fuzz_cases:
            on_phase(f"fuzzing: {len(fuzz_cases)} requests")
            fuzz_report = run_fuzz(fuzz_cases, endpoints, server_pid=triton.pid, is_healthy=healthy)
            for result in fuzz_report.as_results():
                report.results.append(result)
                on_result(result)
        if triton.running:
            report.statistics = server_statistics(endpoints, [m.name for m in project.models])
        unanswering = _unanswering_stubs(report.results)
        alive_stubs = triton.python_stubs() if unanswering else None
    late = _stub_results(unanswering, alive_stubs, triton)
    if triton.sanitizer_runtimes:
        late.append(_sanitizer_result(triton))
    for result in late:
        report.results.append(result)
        on_result(result)
    return report


def _parameter_models(project: Project, models: list[ModelEntry], repository: Path, served) -> list[tuple]:
    """(reference, spec, whether the python backend serves it, parameters) of each of ``models``."""
    found = []
    for model in models:
        [(reference, spec, config)] = load_model_specs(project, model, repository, served)
        based = project.python_based_dir is not None and config.backend == project.backend
        python = config.backend == "python" or based  # served by the python backend's stub
        found.append((reference, spec, python, model.parameters))
    return found


def check_test_options(*, sanitize: tuple[str, ...], docker: bool, gpu: bool, packaged: bool,
                       instance_kind: str | None) -> None:
    """UsageError for option combinations a test run cannot honour."""
    if docker and sanitize:
        raise UsageError("--sanitize runs with a local server; it cannot be combined with --docker.",
                         "Drop one of --sanitize and --docker.")
    if gpu and not docker:
        raise UsageError("--gpu asks a container for the GPUs; a local server sees this machine's GPUs already.",
                         "Add --docker, or drop --gpu.")
    if packaged and instance_kind:
        raise UsageError("--instance-kind rewrites a copy of the project's models; a packaged image serves its own.",
                         "Drop --instance-kind, or test the project with --docker instead of --packaged.")


def _require_ready(project: Project, triton: TritonServer) -> None:
    """ServerError naming every model that did not load, with validate's findings and the server's log lines."""
    not_ready = [m for m in triton.model_states() if m.state != "READY"]
    if not_ready:
        names = ", ".join(f"{m.name} ({m.state or 'not loaded'}: {m.reason})" for m in not_ready)
        log = triton.log_text()
        log_lines = relevant_log_lines(log)
        hints = load_failure_hints(log, docker=triton.in_container)
        raise ServerError(
            f"Models failed to load: {names}",
            "".join(f"{hint}\n" for hint in hints) + _config_warnings(project, {m.name for m in not_ready})
            + "Server log:\n" + "\n".join(log_lines) + f"\nFull log: {triton.log_file}",
        )


def _config_warnings(project: Project, models: set[str]) -> str:
    """tbgen validate's warnings for the configs of ``models`` (they often say why a model did not load)."""
    findings = validate_tree(project.model_repository, gpus_visible=gpus_visible())
    lines = [str(f) for f in findings if f.path.parent.name in models]
    return "".join(f"{line}\n" for line in lines)


STUB_CHECK = "python stub"  # the name of the result that a stub which stopped answering adds (+ its instance)
_STUB_UNHEALTHY = re.compile(r"Stub process '([^']+)' is not healthy")


def _unanswering_stubs(results: list[SmokeResult]) -> list[str]:
    """The model instances whose python backend stub a failed check found not answering."""
    return sorted({m.group(1) for r in results if not r.passed for m in [_STUB_UNHEALTHY.search(r.detail)] if m})


def _stub_results(instances: list[str], alive: set[str] | None, triton: TritonServer) -> list[SmokeResult]:
    """One failed result per model instance whose python backend stub stopped answering: whether its process
    had exited (``alive``: the instances whose stub runs, None when unknown), and the server log's lines (the
    stub prints its fatal errors there)."""
    found = []
    lines = "\n".join(triton.relevant_log_lines(limit=15)) if instances else ""
    for instance in instances:
        state = ("it crashed or hung" if alive is None else "its process had exited (it crashed or was killed)"
                 if instance not in alive else "its process was still running (it hung)")
        found.append(SmokeResult(
            f"{STUB_CHECK} {instance}", "-", False,
            f"the python backend's stub process of {instance} stopped answering: {state}. Triton does not restart "
            "it, so every later request of the model failed. Run the test again: a fault of model.py comes back "
            f"every time. Server log ({triton.log_file}):\n{lines or '(nothing about it)'}", 0.0))
    return found


def _sanitizer_result(triton: TritonServer) -> SmokeResult:
    """One result for a sanitizer build's run: passed when the server log holds no sanitizer report."""
    reports = sanitizer_reports(triton.log_file.read_text(errors="replace"))
    runtimes = ", ".join(path.name for path in triton.sanitizer_runtimes)
    detail = (f"{len(reports)} report(s) in {triton.log_file}; the first:\n{reports[0]}" if reports
              else f"no reports (server ran with {runtimes} preloaded)")
    return SmokeResult("sanitizer reports", "-", not reports, detail, 0.0)
