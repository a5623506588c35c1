"""``tbgen test``: start the project's server, run its smoke plan against it, stop the server.

The stage function wires runtime (a running Triton) to smoke (the checks); it decides nothing about either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from triton_backend_gen.errors import BuildError, ServerError, UsageError
from triton_backend_gen.project import Project, load_project


@dataclass
class TestRunReport:
    __test__ = False  # not a pytest test class

    project: Project
    server: str  # which tritonserver, e.g. "tritonserver 2.51.0 (embedded wheel)"
    log_file: Path
    warnings: list[str] = field(default_factory=list)
    results: list = field(default_factory=list)  # smoke.SmokeResult

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)


def run_project_tests(
    path: Path,
    *,
    server: Path | None = None,
    fuzz: int = 0,
    seed: int = 0,
    sanitize: tuple[str, ...] = (),
    docker: bool = False,
    image: str | None = None,
    gpu: bool = False,
    packaged: bool = False,
    on_result: Callable[[object], None] = lambda result: None,
) -> TestRunReport:
    """Smoke-test every model of the project at ``path`` in a real server (started and stopped here).

    With ``sanitize`` the backend is built with those sanitizers, and any sanitizer report in the server
    log (read after the server stopped) fails the run. With ``docker`` the backend is built and served in a
    container of ``image`` (default: the NGC image of the project's release), with all GPUs when ``gpu``;
    ``packaged`` tests the image of `tbgen package` as it is (nothing built, nothing mounted)."""
    from triton_backend_gen.runtime.server import prepare_server, stop_on_signals
    from triton_backend_gen.smoke import Endpoints, plan_fuzz, plan_smoke, run_fuzz, run_smoke

    project = load_project(path)
    if docker and sanitize:
        raise UsageError("--sanitize runs with a local server; it cannot be combined with --docker.",
                         "Drop one of --sanitize and --docker.")
    if gpu and not docker:
        raise UsageError("--gpu asks a container for the GPUs; a local server sees this machine's GPUs already.",
                         "Add --docker, or drop --gpu.")
    if not packaged:
        build_if_needed(project, server, sanitize, docker=docker, image=image)
    plan = [check for model in project.models for check in plan_smoke(project, model)]
    fuzz_cases = plan_fuzz(project, fuzz, seed) if fuzz else []
    triton = prepare_server(project.root, server=server, docker=docker or packaged, image=image, gpu=gpu,
                            mount=not packaged)
    report = TestRunReport(project, triton.describe(), triton.log_file, list(triton.warnings))
    with stop_on_signals(), triton:
        not_ready = [m for m in triton.model_states() if m.state != "READY"]
        if not_ready:
            names = ", ".join(f"{m.name} ({m.state or 'not loaded'}: {m.reason})" for m in not_ready)
            raise ServerError(
                f"Models failed to load: {names}",
                _config_warnings(project, {m.name for m in not_ready})
                + "Server log:\n" + "\n".join(triton.relevant_log_lines()) + f"\nFull log: {triton.log_file}",
            )
        endpoints = Endpoints(http_url=triton.http_url, grpc_url=triton.grpc_url)
        healthy = lambda: triton.running  # noqa: E731
        report.results += run_smoke(plan, endpoints, is_healthy=healthy, progress=on_result)
        if fuzz_cases:
            fuzz_report = run_fuzz(fuzz_cases, endpoints, server_pid=triton.pid, is_healthy=healthy)
            report.results += fuzz_report.as_results()
    if triton.layout.sanitizer_runtimes:
        report.results.append(_sanitizer_result(triton))
    return report


def _config_warnings(project: Project, models: set[str]) -> str:
    """tbgen validate's warnings for the configs of ``models`` (they often say why a model did not load)."""
    from triton_backend_gen.model_config import validate_tree
    from triton_backend_gen.runtime.discovery import gpus_visible

    findings = validate_tree(project.model_repository, gpus_visible=gpus_visible())
    lines = [str(f) for f in findings if f.path.parent.name in models]
    return "".join(f"{line}\n" for line in lines)


def _sanitizer_result(triton) -> object:
    """One result for a sanitizer build's run: passed when the server log holds no sanitizer report."""
    from triton_backend_gen.runtime.sanitizers import sanitizer_reports
    from triton_backend_gen.smoke.run import SmokeResult

    reports = sanitizer_reports(triton.log_file.read_text(errors="replace"))
    runtimes = ", ".join(path.name for path in triton.layout.sanitizer_runtimes)
    detail = (f"{len(reports)} report(s) in {triton.log_file}; the first:\n{reports[0]}" if reports
              else f"no reports (server ran with {runtimes} preloaded)")
    return SmokeResult("sanitizer reports", "-", not reports, detail, 0.0)


def build_if_needed(project: Project, server: Path | None, sanitize: tuple[str, ...] = (), *, docker: bool = False,
                    image: str | None = None) -> None:
    """Bring the project's build up to date before a run (a no-op check, about a second, when it is).

    C++ projects are always built (they cannot run otherwise). A python project's native extension is rebuilt
    once it has been built (so edits to it are tested); never built, the model runs its numpy fallback."""
    from triton_backend_gen.toolchain.build import build_kind, build_project

    kind = build_kind(project)
    if kind is None or (kind == "native" and not (project.root / "build" / "native" / "CMakeCache.txt").is_file()):
        return
    if kind == "native" and docker:
        return  # built for this machine's Python; the container's python backend uses it as it is
    result = build_project(project.root, server=server, sanitize=sanitize, docker=docker, image=image)
    errors = [f.message for f in result.errors]
    if errors:
        raise BuildError("The built library would not load: " + "; ".join(errors),
                         f"Run `tbgen check {project.root}` for the details.")
