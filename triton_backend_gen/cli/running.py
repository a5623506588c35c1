"""Commands that run the project in a real Triton: serve, test, infer, bench."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from triton_backend_gen.cli.app import app
from triton_backend_gen.cli.options import (
    DockerOption,
    GpuRequestOption,
    ImageOption,
    InstanceKindOption,
    QuietOption,
    SanitizeOption,
    ServerPath,
    SoakConcurrencyOption,
    SoakOption,
    SoakRateOption,
    VerboseNotesOption,
    check_docker_options,
    soak_options,
)
from triton_backend_gen.cli.options import instance_kind as instance_kind_option
from triton_backend_gen.cli.output import (
    Column,
    console,
    on_terminal,
    print_notes,
    records,
    say,
    user_errors,
    warning,
    wrap,
)
from triton_backend_gen.commands.bench import run_bench
from triton_backend_gen.commands.infer import Sequencing, infer_once
from triton_backend_gen.commands.test import (
    check_chaos_options,
    check_unit_options,
    check_url_options,
    run_project_tests,
    run_project_unit_tests,
)
from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.perf.report import check_report_dir, write_bench_report
from triton_backend_gen.perf.stats import BenchReport, compare, parse_concurrency, parse_duration
from triton_backend_gen.project import Project, load_project, load_project_or_none
from triton_backend_gen.runtime import start_server
from triton_backend_gen.runtime.control_mode import POLL_SECONDS, control_mode_args
from triton_backend_gen.runtime.remote import parse_server_address
from triton_backend_gen.signals import stop_on_signals
from triton_backend_gen.smoke.run import SmokeCheck, SmokeResult, write_junit_xml
from triton_backend_gen.smoke.suite import SuiteProgress
from triton_backend_gen.toolchain.build import parse_sanitizers

progress = lazy_module("rich.progress")  # the progress displays: 25 ms of every tbgen start


@app.command()
def serve(
    project: Annotated[Path, typer.Argument(help="A project or a model repository.")] = Path("."),
    server: ServerPath = None,
    http_port: Annotated[int, typer.Option(help="HTTP port (0: a free one).")] = 0,
    grpc_port: Annotated[int, typer.Option(help="gRPC port (0: a free one).")] = 0,
    metrics_port: Annotated[int, typer.Option(help="Metrics port (0: a free one).")] = 0,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Stream the server log.")] = False,
    docker: DockerOption = False,
    image: ImageOption = None,
    gpu: GpuRequestOption = False,
    instance_kind: InstanceKindOption = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model", "-m", help="Load only this model and the models it calls (tbgen.toml's calls)."
        ),
    ] = None,
    model_control_mode: Annotated[
        Optional[str],
        typer.Option(
            "--model-control-mode",
            help="explicit (the default for a project: the repository API loads and reloads models), poll "
            "(reload what changes on disk, every second) or none (the default for a bare model repository).",
        ),
    ] = None,
) -> None:
    """Start Triton on the project's model repository until Ctrl-C."""
    with user_errors(), stop_on_signals():
        check_docker_options(docker, image, gpu)
        target = load_project_or_none(project) or project
        if model is not None and not isinstance(target, Project):
            raise UsageError(
                "--model picks a model of a tbgen project.", "Run it in a project, or drop --model."
            )
        only = target.needed_by(target.model(model).name) if model is not None else []
        mode, control_args = control_mode_args(
            model_control_mode, project=isinstance(target, Project), only=only
        )
        triton = start_server(
            target,
            server=server,
            http_port=http_port,
            grpc_port=grpc_port,
            metrics_port=metrics_port,
            host=host,
            verbose=verbose,
            docker=docker,
            image=image,
            gpu=gpu,
            instance_kind=instance_kind_option(instance_kind),
            extra_args=control_args,
        )
        with triton:
            _print_server(triton, target if isinstance(target, Project) else None, verbose)
            _print_model_control(triton, target if isinstance(target, Project) else None, mode, model)
            say("Serving; press Ctrl-C to stop.")
            _wait_while_running(triton, follow_log=verbose)
    say("Server stopped.")


def _wait_while_running(triton, follow_log: bool) -> None:
    """Block until Ctrl-C (or SIGTERM); with ``follow_log``, print the server log as it grows."""
    position = 0
    while triton.running:
        if follow_log:
            with open(triton.log_file, errors="replace") as log:
                log.seek(position)
                chunk = log.read()
                position = log.tell()
            if chunk:
                console.out(chunk, end="", highlight=False)
        time.sleep(0.2)
    raise ServerError(
        "tritonserver exited on its own.",
        "Its log:\n" + "\n".join(triton.relevant_log_lines()) + f"\nFull log: {triton.log_file}",
    )


def _print_model_control(triton, project: Project | None, mode: str, model: str | None) -> None:
    """What the model control mode lets the user do, and the command that tests this server."""
    first = next((state.name for state in triton.model_states()), "")
    say(
        {
            "explicit": "Model control: explicit (the repository API loads and reloads models: "
            f"`curl -X POST http://{triton.http_url}/v2/repository/models/{first}/load`).",
            "poll": f"Model control: poll (the server reloads what changes on disk every {POLL_SECONDS} s).",
            "none": "Model control: none (the models stay as loaded at start).",
        }[mode]
    )
    if project is not None and not triton.notes:  # a run copy (--instance-kind) serves other configs
        argument = project.path_argument() + (f" --model {model}" if model else "")
        say(
            f"Test it from another terminal: `tbgen test{argument} --url "
            f"{triton.http_url},{triton.grpc_url},{triton.metrics_url}`"
        )


def _print_server(triton, project: Project | None, verbose: bool) -> None:
    print_notes(triton, project, verbose)
    say(triton.describe())
    records(
        "Endpoints",
        [Column("protocol"), Column("address")],
        [
            ("HTTP", triton.http_url),
            ("gRPC", triton.grpc_url),
            ("metrics", f"http://{triton.metrics_url}/metrics"),
        ],
    )
    states = triton.model_states()
    records(
        "Models",
        [Column("model"), Column("version"), Column("state"), Column("reason", wide=True)],
        [(m.name, m.version, m.state or "not loaded", m.reason) for m in states],
        styles=["green" if m.state == "READY" else "red" for m in states],
    )
    for model in project.models if project is not None else ():
        if model.metrics:
            say(
                f"Custom metrics of {model.name}: {', '.join(model.metrics)} "
                f"(`curl -s http://{triton.metrics_url}/metrics | grep {model.metrics[0]}`)"
            )
    say(f"Log: {triton.log_file}")


@app.command("test")
def test_(
    project: Annotated[Path, typer.Argument(help="The project to test.")] = Path("."),
    server: ServerPath = None,
    junit_xml: Annotated[
        Optional[Path], typer.Option("--junit-xml", help="Write the results as JUnit XML.")
    ] = None,
    fuzz: Annotated[
        int, typer.Option("--fuzz", min=0, help="Also send N randomised malformed requests.")
    ] = 0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fuzzer.")] = 0,
    sanitize: SanitizeOption = None,
    docker: DockerOption = False,
    image: ImageOption = None,
    gpu: GpuRequestOption = False,
    packaged: Annotated[
        bool,
        typer.Option(
            "--packaged",
            help="With --docker --image: test the image as it is "
            "(an image made by `tbgen package`; nothing built or mounted).",
        ),
    ] = False,
    instance_kind: InstanceKindOption = None,
    model: Annotated[
        Optional[str],
        typer.Option("--model", "-m", help="Test this model only (default: every model tbgen.toml lists)."),
    ] = None,
    url: Annotated[
        Optional[str],
        typer.Option(
            "--url",
            help="Test a running server (HTTP host:port; gRPC on the next port, or give HTTP,GRPC or "
            "HTTP,GRPC,METRICS): nothing built or started; the models are loaded there where it allows.",
        ),
    ] = None,
    unit: Annotated[
        Optional[bool],
        typer.Option(
            "--unit/--no-unit",
            help="--unit: only the project's unit tests (each model's computation against reference.py, no "
            "server); --no-unit: skip them (by default they run after the build, before the server starts; "
            "not with --docker, as they run on this machine).",
        ),
    ] = None,
    soak: SoakOption = None,
    concurrency: SoakConcurrencyOption = None,
    rate: SoakRateOption = None,
    chaos: Annotated[
        bool,
        typer.Option(
            "--chaos",
            help="Last, break the server's own parts while valid requests flow: unload the models each BLS "
            "model calls and load them again, then kill a python stub of each python model; each step is "
            "reported (which stub, whether the server recovered or said not ready, the requests that "
            "failed). Needs the local server tbgen starts.",
        ),
    ] = False,
    quiet: QuietOption = False,
    verbose: VerboseNotesOption = False,
) -> None:
    """Build, run the project's unit tests, start a real Triton, load the project's backend and run the smoke
    suite against it."""
    with user_errors():
        # what decides the server: checked against --url and --unit, then handed to the run as they are
        server_options = dict(
            sanitize=parse_sanitizers(sanitize),
            docker=docker,
            image=image,
            gpu=gpu,
            packaged=packaged,
            instance_kind=instance_kind_option(instance_kind),
            server=server,
        )
        soaked = soak_options(soak, concurrency, rate)
        _check_test_flags(url=url, unit=unit, fuzz=fuzz, soak=soaked, **server_options)
        check_chaos_options(chaos, url=url, unit=bool(unit), docker=docker, packaged=packaged)
        if packaged and not (docker and image):
            raise UsageError(
                "--packaged tests an image made by `tbgen package`.", "Add --docker --image TAG."
            )
        loaded = load_project(project)
        with TestProgress(quiet) as shown:
            report = (
                run_project_unit_tests(loaded, model, shown)
                if unit
                else run_project_tests(
                    loaded,
                    fuzz=fuzz,
                    seed=seed,
                    model=model,
                    url=url,
                    unit=unit is None,
                    progress=shown,
                    soak=soaked,
                    chaos=chaos,
                    **server_options,
                )
            )
    report_tests(report, junit_xml, quiet=quiet, verbose=verbose, streamed=True)


def _check_test_flags(*, url: str | None, unit: bool | None, fuzz: int, soak, **server_options) -> None:
    """UsageError for flags that cannot go with --url or --unit (before --image's or --gpu's own checks, so
    that the error names the flag that rules the others out)."""
    if url is not None:
        check_url_options(unit=bool(unit), **server_options)
        parse_server_address(url)  # a --url that is no address: said before anything else is read
    if unit:
        check_unit_options(fuzz=fuzz, soak=soak is not None, **server_options)
    check_docker_options(server_options["docker"], server_options["image"], server_options["gpu"])


class TestProgress(SuiteProgress):
    """What `tbgen test` shows while it runs. On a terminal: a live line with what runs now and for how long
    (a check that waits on purpose says why). Off a terminal: a line per step and per result, the result's
    detail wrapped beneath it; with ``quiet`` only the failures."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.live = on_terminal()
        self.bar = (
            progress.Progress(
                progress.SpinnerColumn(),
                progress.TextColumn("{task.description}", markup=False),
                progress.TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            if self.live
            else None
        )
        self.task = None
        self.count = 0

    def __enter__(self):
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc_info)

    def phase(self, text: str) -> None:
        self._show(text)
        if not self.live and not self.quiet:
            say(f"... {text}")

    def check(self, check: SmokeCheck) -> None:
        self._show(
            f"check {self.count + 1}: {check.name} [{check.protocol}]"
            + (f": {check.waits}" if check.waits else "")
        )
        if check.waits and not self.live and not self.quiet:
            say(f"... {check.name}: {check.waits}")

    def result(self, result: SmokeResult) -> None:
        self.count += 1
        if not self.live and (not self.quiet or not result.passed):
            _print_result(result)

    def _show(self, text: str) -> None:
        if self.bar is not None:  # a task of its own, so that the time shown is this step's
            if self.task is not None:
                self.bar.remove_task(self.task)
            self.task = self.bar.add_task(text, total=None)


def _print_result(result) -> None:
    """One result off a terminal: its line, its whole detail wrapped beneath."""
    verdict = "pass" if result.passed else "FAIL"
    protocol = f" [{result.protocol}]" if result.protocol != "-" else ""
    say(f"{verdict}  {result.name}{protocol}  {result.seconds:.2f} s")
    for line in wrap(result.detail, console.width, indent="    ", first_indent="    "):
        console.print(line, markup=False, soft_wrap=True)


def report_tests(
    report, junit_xml: Path | None, *, quiet: bool = False, verbose: bool = False, streamed: bool = False
) -> None:
    """Print a test run's results (unless ``streamed`` off a terminal already) and write them as JUnit XML;
    exit 1 unless every check passed."""
    if quiet:
        for text in report.warnings:
            warning(text)
    else:
        print_notes(report, report.project, verbose)
    _print_results(report, quiet=quiet, streamed=streamed)
    if len(report.statistics) > 1 and not quiet:
        _statistics_table(report.statistics)
    if junit_xml:
        write_junit_xml(report.results, junit_xml, suite=report.project.name)
        if not quiet:
            say(f"JUnit XML: {junit_xml}")
    failed = sum(not r.passed for r in report.results)
    where = (
        f"server log: {report.log_file}"
        if report.log_file is not None
        else report.server or "unit tests only: no server started"
    )
    say(
        f"{len(report.results) - failed} passed, {failed} failed  ({where})",
        style="red" if failed else "green",
    )
    raise typer.Exit(1 if failed or not report.results else 0)


def _print_results(report, *, quiet: bool, streamed: bool) -> None:
    """The results (only the failures when ``quiet``): a table on a terminal, else a line each unless they
    were ``streamed`` already."""
    shown = [r for r in report.results if not quiet or not r.passed]
    if on_terminal() and shown:
        _result_table(report, shown)
    elif not streamed:
        for result in shown:
            _print_result(result)


def _result_table(report, shown: list) -> None:
    """The results on a terminal: one row per check, failures in red."""
    records(
        f"{report.project.name}: "
        + (f"smoke tests against {report.server}" if report.server else "unit tests (no server)"),
        [
            Column("check"),
            Column("protocol"),
            Column("result"),
            Column("detail", wide=True),
            Column("seconds", justify="right"),
        ],
        [(r.name, r.protocol, "pass" if r.passed else "FAIL", r.detail, f"{r.seconds:.2f}") for r in shown],
        styles=["" if r.passed else "red" for r in shown],
    )


def _statistics_table(statistics: list) -> None:
    """The server's statistics of each model of a project with several."""
    columns = ("model", "ok", "failed", "inferences", "executions", "queue us", "compute us")
    records(
        "the server's statistics of each model",
        [Column(c, justify="right" if c != "model" else "left") for c in columns],
        [
            (s.name, str(s.success), str(s.failed), str(s.inferences), str(s.executions))
            + (f"{s.queue_us:.0f}", f"{s.compute_us:.0f}")
            for s in statistics
        ],
    )


@app.command()
def infer(
    model: Annotated[str, typer.Argument(help="Model name.")],
    input_: Annotated[
        Optional[list[str]],
        typer.Option(
            "--input",
            "-i",
            help="NAME=FILE.npy or NAME=JSON (repeatable); "
            "inputs not given come from the project's reference.py.",
        ),
    ] = None,
    project: Annotated[Path, typer.Option("--project", help="The project whose server to start.")] = Path(
        "."
    ),
    url: Annotated[
        Optional[str], typer.Option("--url", help="Use a running server (HTTP host:port) instead.")
    ] = None,
    server: ServerPath = None,
    instance_kind: InstanceKindOption = None,
    param: Annotated[
        Optional[list[str]],
        typer.Option(
            "--param",
            "-p",
            help="KEY=VALUE request parameter (repeatable; true/false and integers are typed).",
        ),
    ] = None,
    sequence_id: Annotated[
        Optional[str],
        typer.Option(
            "--sequence-id",
            help="Correlation ID of a sequence model's request (default: a sequence of its own).",
        ),
    ] = None,
    start: Annotated[
        bool, typer.Option("--start/--no-start", help="With --sequence-id: the request starts its sequence.")
    ] = True,
    end: Annotated[
        bool, typer.Option("--end/--no-end", help="With --sequence-id: the request ends its sequence.")
    ] = True,
    verbose: VerboseNotesOption = False,
) -> None:
    """Send one request and print the outputs (and the response's parameters)."""
    with user_errors():
        sequencing = Sequencing(
            None if sequence_id is None else int(sequence_id) if sequence_id.isdigit() else sequence_id,
            start,
            end,
        )
        loaded = load_project_or_none(project)
        outputs = infer_once(
            model,
            input_ or [],
            project=loaded,
            url=url,
            server=server,
            instance_kind=instance_kind_option(instance_kind),
            param_options=param or [],
            sequencing=sequencing,
            on_parameters=lambda parameters: say(json.dumps(parameters), label="parameters", style="bold"),
            on_server=lambda triton: print_notes(triton, loaded, verbose),
        )
    for name, array in outputs.items():
        say(f"{array.dtype} {list(array.shape)}", label=name, style="bold")
        console.print(escape(str(array)), highlight=False)


@app.command()
def bench(
    project: Annotated[Path, typer.Argument(help="The project whose model to load.")] = Path("."),
    model: Annotated[
        Optional[str], typer.Option("--model", "-m", help="Model (default: the project's first).")
    ] = None,
    protocol: Annotated[str, typer.Option("--protocol", help="grpc or http.")] = "grpc",
    concurrency: Annotated[
        str, typer.Option("--concurrency", help="Concurrency levels, comma-separated.")
    ] = "1,8,32",
    duration: Annotated[
        str, typer.Option("--duration", help="Measurement time per level: 10s, 500ms, 2m.")
    ] = "10s",
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Batch size of each request.")] = 1,
    tool: Annotated[
        str,
        typer.Option(
            "--tool",
            help="auto (perf_analyzer when found), perf_analyzer or builtin "
            "(tbgen's asyncio gRPC generator).",
        ),
    ] = "auto",
    url: Annotated[
        Optional[str],
        typer.Option(
            "--url",
            help="A running server (HTTP host:port; gRPC on the next "
            "port, or give HTTP,GRPC) instead of starting one.",
        ),
    ] = None,
    json_file: Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON.")] = None,
    compare_with: Annotated[
        Optional[Path],
        typer.Option("--compare", help="A report of an earlier run (--json): print this run's ratios to it."),
    ] = None,
    report_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--report",
            metavar="DIR",
            help="Write an HTML report with plots (bench-report.html, bench.png) into DIR.",
        ),
    ] = None,
    server: ServerPath = None,
    instance_kind: InstanceKindOption = None,
) -> None:
    """Load a model at several concurrency levels: throughput, latency percentiles, queue/compute, CPU."""
    with user_errors():
        levels, seconds = parse_concurrency(concurrency), parse_duration(duration)
        if report_dir is not None:
            check_report_dir(report_dir)
        other = BenchReport.read(compare_with) if compare_with else None
        report = run_bench(
            load_project(project),
            model=model,
            protocol=protocol,
            concurrency=levels,
            seconds=seconds,
            batch_size=batch_size,
            tool=tool,
            url=url,
            server=server,
            instance_kind=instance_kind_option(instance_kind),
            progress=say,
        )
    _print_bench(report)
    if json_file:
        report.write(json_file)
        say(f"JSON: {json_file}")
    if other is not None:
        records(
            f"This run / {compare_with}",
            [Column(c, justify="right") for c in ("concurrency", "throughput", "p50 latency", "p99 latency")],
            [
                (str(r.concurrency), f"{r.throughput:.2f}x", f"{r.p50:.2f}x", f"{r.p99:.2f}x")
                for r in compare(report, other)
            ],
        )
    if report_dir is not None:
        with user_errors():
            say(f"Report: {write_bench_report(report_dir, report)[0]}")


def _print_bench(report: BenchReport) -> None:
    """The levels of a benchmark as a table (a line each off a terminal), and what the figures mean."""
    decoupled = any(level.responses_per_s for level in report.levels)
    columns = [
        "conc",
        "infer/s",
        *(["resp/s"] if decoupled else []),
        "p50",
        "p90",
        "p99",
        "queue",
        "compute",
        "client CPU",
        "server CPU",
        "errors",
    ]
    records(
        f"{report.model} ({report.protocol}, batch {report.batch_size}, {report.tool}) against "
        f"{report.server}",
        [Column(column, justify="right") for column in columns],
        [
            (
                str(level.concurrency),
                f"{level.throughput:,.1f}",
                *([f"{level.responses_per_s:,.1f}"] if decoupled else []),
                f"{level.p50_us:,.0f}",
                f"{level.p90_us:,.0f}",
                f"{level.p99_us:,.0f}",
                f"{level.server_queue_us:,.1f}",
                f"{level.server_compute_us:,.1f}",
                f"{level.client_cpu:.0%}",
                f"{level.server_cpu:.0%}",
                str(level.errors),
            )
            for level in report.levels
        ],
    )
    say(
        "Latencies (p50-p99) and the server's queue and compute times per request in microseconds; CPU: "
        "share of one core over the level (client and server share this machine's cores).",
        style="dim",
    )
