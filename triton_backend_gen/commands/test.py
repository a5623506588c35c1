"""``tbgen test``: build what is out of date, run the project's unit tests, start the project's server, run
the smoke suite, stop the server; or, with ``url``, run the smoke suite against a server that is already
running (nothing built, nothing started or stopped); or only the unit tests (``run_project_unit_tests``).

The command sequences the stages (toolchain's build, runtime's server, smoke's suite) and records how long
the models took to load, for `tbgen deploy`'s startup probe; it decides nothing about any of them.
"""

from __future__ import annotations

from pathlib import Path

from triton_backend_gen.errors import UsageError
from triton_backend_gen.perf.soak_report import soak_report_dir, write_soak_report
from triton_backend_gen.project import Project
from triton_backend_gen.runtime import prepare_server
from triton_backend_gen.runtime.control_mode import control_mode_args
from triton_backend_gen.runtime.load_time import record_load_time
from triton_backend_gen.runtime.remote import RemoteServer, parse_server_address
from triton_backend_gen.smoke.run import SmokeResult
from triton_backend_gen.smoke.soak import SoakOptions
from triton_backend_gen.smoke.suite import SuiteProgress, SuiteReport, run_suite
from triton_backend_gen.toolchain.ensure_built import ensure_built
from triton_backend_gen.toolchain.unit_tests import UnitResult, run_unit_tests

UNIT_PREFIX = "unit: "  # what the name of a unit test's result starts with, among the smoke checks


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
    url: str | None = None,
    unit: bool = True,
    progress: SuiteProgress | None = None,
    soak: SoakOptions | None = None,
    chaos: bool = False,
) -> SuiteReport:
    """Smoke-test every model of ``project`` (or ``model``) in a real server, started and stopped here.

    First, after the build and before a server starts, the project's unit tests (``unit``; they run on this
    machine, so not with ``docker``, nor for a ``packaged`` image or a ``url``): a failure ends the run there,
    its report holding the unit results only; else they lead the report's results.

    With ``sanitize`` the backend is built with those sanitizers, and any sanitizer report in the server
    log (read after the server stopped) fails the run. With ``docker`` the backend is built and served in a
    container of ``image`` (default: the NGC image of the project's release), with all GPUs when ``gpu``;
    ``packaged`` tests the image of `tbgen package` as it is (nothing built, nothing mounted);
    ``instance_kind`` ("cpu", "gpu") serves a copy of the models with instances of that kind.

    ``url`` (``HTTP``, ``HTTP,GRPC`` or ``HTTP,GRPC,METRICS`` host:port of a running server) tests that server
    instead: the project's models are loaded there through the repository API where the server allows it, else
    found loaded and READY; their configs as served are compared with config.pbtxt by the suite's checks.

    ``soak`` adds a soak after the checks (smoke.soak): sustained valid load, memory and latency judged.

    ``chaos`` ends the run by breaking the server's own parts while requests flow (smoke.chaos): a local
    server, started with explicit model control so that models can be unloaded and loaded again."""
    if url is not None:
        check_url_options(
            sanitize=sanitize,
            docker=docker,
            image=image,
            gpu=gpu,
            packaged=packaged,
            instance_kind=instance_kind,
            server=server,
        )
    check_test_options(
        sanitize=sanitize, docker=docker, gpu=gpu, packaged=packaged, instance_kind=instance_kind
    )
    check_chaos_options(chaos, url=url, docker=docker, packaged=packaged)
    project.model(model)  # UsageError for a model the project does not have, before anything runs
    progress = progress or SuiteProgress()
    if url is not None:
        return _test_running_server(
            project, url, model=model, fuzz=fuzz, seed=seed, progress=progress, soak=soak
        )
    units = None
    if not packaged:
        units = _build_and_unit_test(project, server, sanitize, docker, image, model, unit, progress)
        if units is not None and not all(r.passed for r in units.results):
            return units  # no server for a computation that is wrong already
    triton = prepare_server(
        project,
        server=server,
        docker=docker or packaged,
        image=image,
        gpu=gpu,
        mount=not packaged,
        instance_kind=instance_kind,
        extra_args=control_mode_args("explicit", project=True)[1] if chaos else (),
    )
    report = run_suite(
        project,
        triton,
        model=model,
        fuzz=fuzz,
        seed=seed,
        progress=progress,
        on_ready=lambda seconds: record_load_time(project, seconds, triton.describe()),
        soak=soak,
        chaos=chaos,
    )
    report.results[:0] = units.results if units is not None else []
    _write_soak_report(project, report)
    if unit and docker and not packaged:
        report.notes.append(
            "the unit tests were not run: they run on this machine, not in the image "
            f"(`tbgen test{project.path_argument()} --unit`)"
        )
    return report


def _build_and_unit_test(
    project: Project,
    server: Path | None,
    sanitize: tuple[str, ...],
    docker: bool,
    image: str | None,
    model: str | None,
    unit: bool,
    progress: SuiteProgress,
) -> SuiteReport | None:
    """The build phase: what changed built, then the unit tests (a report of them; None when not run)."""
    if project.is_cpp or project.native is not None:
        progress.phase("building what changed")
    ensure_built(project, server, sanitize, docker=docker, image=image)
    return run_project_unit_tests(project, model, progress) if unit and not docker else None


def run_project_unit_tests(
    project: Project, model: str | None = None, progress: SuiteProgress | None = None
) -> SuiteReport:
    """The unit tests of every model of ``project`` (or ``model``): no server (the report names none), each
    result as a check "unit: ..." (BuildError when the C++ test target does not compile)."""
    progress = progress or SuiteProgress()
    progress.phase("unit tests: each model's computation against reference.py")
    report = SuiteReport(project, server="", log_file=None)
    report.add([unit_check_result(r) for r in run_unit_tests(project, model)], progress)
    return report


def unit_check_result(result: UnitResult) -> SmokeResult:
    """A unit test's result as a check of the run's report (and its JUnit XML)."""
    return SmokeResult(f"{UNIT_PREFIX}{result.name}", "-", result.passed, result.detail, result.seconds)


def _test_running_server(
    project: Project,
    url: str,
    *,
    model: str | None,
    fuzz: int,
    seed: int,
    progress: SuiteProgress,
    soak: SoakOptions | None,
) -> SuiteReport:
    """The smoke suite against the server at ``url``: the project's models (``model`` and those it calls)."""
    address = parse_server_address(url)
    names = project.needed_by(model) if model is not None else [m.name for m in project.models]
    triton = RemoteServer(address, project.model_repository, names)
    report = run_suite(project, triton, model=model, fuzz=fuzz, seed=seed, progress=progress, soak=soak)
    _write_soak_report(project, report)
    return report


def _write_soak_report(project: Project, report: SuiteReport) -> None:
    """A soak's report (plots, samples) into the project's runtime directory, named in the notes."""
    if report.soak is not None:
        written = write_soak_report(soak_report_dir(project), report.soak)
        report.notes.append(f"soak report: {written[0]}")


def check_url_options(
    *,
    sanitize: tuple[str, ...] = (),
    docker: bool = False,
    image: str | None = None,
    gpu: bool = False,
    packaged: bool = False,
    instance_kind: str | None = None,
    server: Path | None = None,
    unit: bool = False,
) -> None:
    """UsageError naming the options that cannot go with --url: each builds or starts a server, or changes
    what one serves, and --url tests one that is already running."""
    given = _server_flags(sanitize, docker, image, gpu, packaged, instance_kind, server) + _given(
        ("--unit", unit)
    )
    _refuse(
        given,
        "--url tests a server that is already running (nothing is built, started or changed there)",
        "drop --url (the project is then built and served here)",
    )


def check_unit_options(
    *,
    sanitize: tuple[str, ...] = (),
    docker: bool = False,
    image: str | None = None,
    gpu: bool = False,
    packaged: bool = False,
    instance_kind: str | None = None,
    server: Path | None = None,
    fuzz: int = 0,
    soak: bool = False,
) -> None:
    """UsageError naming the options that cannot go with --unit: each concerns the server, which the unit
    tests run without."""
    given = _server_flags(sanitize, docker, image, gpu, packaged, instance_kind, server) + _given(
        ("--fuzz", fuzz), ("--soak", soak)
    )
    _refuse(
        given,
        "--unit runs only the project's unit tests, with no server",
        "drop --unit to run the unit tests and then the smoke suite in a server",
    )


def _server_flags(sanitize, docker, image, gpu, packaged, instance_kind, server) -> list[str]:
    """The names of the given options that concern the server a run starts."""
    return _given(
        ("--docker", docker),
        ("--image", image),
        ("--gpu", gpu),
        ("--packaged", packaged),
        ("--sanitize", sanitize),
        ("--instance-kind", instance_kind),
        ("--server", server),
    )


def _refuse(given: list[str], what: str, or_else: str) -> None:
    """UsageError when ``given`` names options: ``what`` the option refused with them does, and the fix."""
    if given:
        raise UsageError(
            f"{what}; {', '.join(given)} cannot be combined with it.",
            f"Drop {' and '.join(given)}, or {or_else}.",
        )


def _given(*flags: tuple[str, object]) -> list[str]:
    """The names of the ``flags`` (name, value) that were given a value."""
    return [name for name, value in flags if value]


def check_test_options(
    *, sanitize: tuple[str, ...], docker: bool, gpu: bool, packaged: bool, instance_kind: str | None
) -> None:
    """UsageError for option combinations a test run cannot honour."""
    if docker and sanitize:
        raise UsageError(
            "--sanitize runs with a local server; it cannot be combined with --docker.",
            "Drop one of --sanitize and --docker.",
        )
    if gpu and not docker:
        raise UsageError(
            "--gpu asks a container for the GPUs; a local server sees this machine's GPUs already.",
            "Add --docker, or drop --gpu.",
        )
    if packaged and instance_kind:
        raise UsageError(
            "--instance-kind rewrites a copy of the project's models; a packaged image serves its own.",
            "Drop --instance-kind, or test the project with --docker instead of --packaged.",
        )


def check_chaos_options(
    chaos: bool,
    *,
    url: str | None = None,
    unit: bool = False,
    docker: bool = False,
    packaged: bool = False,
) -> None:
    """UsageError naming the options that cannot go with --chaos: it kills python stubs of a server tbgen
    starts on this machine (it must see their processes) and unloads models there."""
    if chaos:
        _refuse(
            _given(("--url", url), ("--unit", unit), ("--docker", docker), ("--packaged", packaged)),
            "--chaos breaks a server tbgen starts on this machine (it kills python stubs it must see, and "
            "unloads and loads models)",
            "drop --chaos (the other options run the smoke suite without it)",
        )
