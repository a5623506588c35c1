"""tbgen's command line: one small function per command, each mapping flags onto one command or stage function.

The stages and commands are imported when a command runs, in one place (:func:`_load`), so that ``tbgen
--help`` starts without cookiecutter, protobuf, tritonclient or docker. Every piece of user or tool text that
reaches the console is escaped (it is never read as Rich markup).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.prompt import Confirm, Prompt
from rich.table import Table

from triton_backend_gen import __version__, signature, versions
from triton_backend_gen.errors import AnswerError, ServerError, TbgenError, UsageError
from triton_backend_gen.project import Project, load_project, load_project_or_none

if TYPE_CHECKING:
    from triton_backend_gen.scaffold.templates import Option


def _load(module: str) -> ModuleType:
    """The one lazy import of the CLI: a stage or command module of tbgen, when a command needs it."""
    return importlib.import_module(f"triton_backend_gen.{module}")

app = typer.Typer(
    name="tbgen",
    help="Scaffold, build and test custom backends for NVIDIA Triton Inference Server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
templates_app = typer.Typer(help="List and check tbgen's project templates.", no_args_is_help=True)
app.add_typer(templates_app, name="templates")
deps_app = typer.Typer(help="Triton's core/common/backend sources in tbgen's cache (for offline builds).",
                       no_args_is_help=True)
app.add_typer(deps_app, name="deps")
add_app = typer.Typer(help="Add a piece to a project: a third-party library a C++ backend links.",
                      no_args_is_help=True)
app.add_typer(add_app, name="add")
env_app = typer.Typer(help="Python environments of python-backend models (their requirements.txt).",
                      no_args_is_help=True)
app.add_typer(env_app, name="env")
deploy_app = typer.Typer(help="Kubernetes for the project's image: a Helm chart or manifests, checked "
                          "offline, and run here as the cluster would run it.", no_args_is_help=True)
app.add_typer(deploy_app, name="deploy")

# Not on a terminal (CI logs, pipes) Rich would cut tables at 80 columns: print full values there instead.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 4096
console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"tbgen {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Scaffold, build and test custom backends for NVIDIA Triton Inference Server."""


class RichPrompter:
    """Asks for answers on a terminal with Rich prompts."""

    def ask(self, option: Option, default: Any) -> Any:
        if option.kind is dict:
            return self._ask_signature()
        if option.kind is bool:
            return Confirm.ask(option.help, default=bool(default), console=console)
        if option.choices:
            return Prompt.ask(option.help, choices=list(option.choices), default=str(default), console=console)
        return Prompt.ask(option.help, default=str(default), console=console)

    def show_error(self, error: AnswerError) -> None:
        console.print(f"[red]{escape(error.message)}[/red] {escape(error.hint)}")

    def _ask_signature(self) -> dict[str, Any]:
        """The model's tensors, one per line; no input at all keeps the template's example."""
        console.print(f"Tensors as {escape(signature.FLAG_GRAMMAR)}; an empty line ends the list.", highlight=False)
        tensors: dict[str, list[dict[str, Any]]] = {"inputs": [], "outputs": []}
        for side in ("inputs", "outputs"):
            while True:
                prompt = f"{side[:-1].capitalize()} {len(tensors[side]) + 1}"
                if side == "inputs" and not tensors[side]:
                    prompt += " (empty: the template's example)"
                text = Prompt.ask(prompt, default="", show_default=False, console=console).strip()
                if not text:
                    break
                try:
                    tensors[side].append(signature.parse_tensor(text, output=side == "outputs").table())
                except AnswerError as err:
                    self.show_error(err)
            if not tensors["inputs"]:
                return dict(signature.EMPTY)
        return {**tensors, "config": ""}


PatternOption = Annotated[Optional[str], typer.Option(
    "--pattern", help="Compose models: bls (a router), bls-async (a fan-out), bls-decoupled (over a stream) or "
    "ensemble (pre -> model -> post); --model-name names the top model, --set callees=A,B the others.")]


@app.command()
def new(
    path: Annotated[Path, typer.Argument(help="Project directory to create; its name is the project name.")],
    template: Annotated[
        Optional[str], typer.Option("--template", "-t", help="cpp-backend, python-backend or decoupled-backend.")
    ] = None,
    set_: Annotated[
        Optional[list[str]], typer.Option("--set", help="Set any answer: --set key=value (repeatable).")
    ] = None,
    gpu: Annotated[Optional[bool], typer.Option("--gpu/--no-gpu", help="CUDA kernels (cpp-backend).")] = None,
    triton_version: Annotated[
        Optional[str], typer.Option("--triton-version", help="Target release: 24.10, r24.10 or 2.51.0.")
    ] = None,
    backend_name: Annotated[Optional[str], typer.Option("--backend-name", help="Backend name.")] = None,
    model_name: Annotated[Optional[str], typer.Option("--model-name", help="Name of the example model.")] = None,
    framework: Annotated[Optional[str], typer.Option(
        "--framework", help="cpp-backend: wrap an inference library, libtorch (model.pt) or opencv-dnn (model.onnx).")
    ] = None,
    answers_file: Annotated[
        Optional[Path], typer.Option("--answers", help="Answers from a file: a project's tbgen.toml, or TOML/JSON.")
    ] = None,
    pattern: PatternOption = None,
    inputs: Annotated[
        Optional[list[str]], typer.Option("--input", help="A model input NAME:DTYPE:DIMS[:optional], e.g. "
                                          "IMG:FP16:3,224,224 (repeatable; give --output too).")
    ] = None,
    outputs: Annotated[
        Optional[list[str]], typer.Option("--output", help="A model output NAME:DTYPE:DIMS, e.g. SCORES:FP32:-1 "
                                          "(repeatable).")
    ] = None,
    from_config: Annotated[
        Optional[Path], typer.Option("--from-config", help="Serve the signature of this model configuration "
                                     "(a config.pbtxt, any file name): name, tensors, batching, instance groups.")
    ] = None,
    no_input: Annotated[bool, typer.Option("--no-input", help="Never prompt; take defaults.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Render into an existing directory, overwriting template files only.")
    ] = False,
) -> None:
    """Create a backend project from a template."""
    scaffold = _load("scaffold")
    with _user_errors():
        given: dict[str, Any] = scaffold.read_answers_file(answers_file) if answers_file else {}
        flags = {"gpu": gpu, "triton_version": triton_version, "backend_name": backend_name, "model_name": model_name,
                 "framework": framework, "pattern": pattern}
        given.update({key: value for key, value in flags.items() if value is not None})
        given.update(scaffold.parse_set_options(set_ or []))
        flagged = signature.from_flags(inputs or [], outputs or [])
        if flagged is not None and from_config is not None:
            raise UsageError("--from-config gives the model's tensors; --input/--output cannot be added to it.",
                             "Drop --input/--output, or edit the configuration you import.")
        if flagged is not None:
            given["signature"] = flagged.context()
        interactive = not no_input and sys.stdin.isatty()
        template = template or given.pop("template", None) or _ask_template(interactive)
        given.pop("template", None)
        imported = scaffold.import_config(from_config, template) if from_config is not None else None
        prompter = RichPrompter() if interactive else None
        project = scaffold.render_new_project(template, path, given, force=force, prompter=prompter,
                                              imported=imported)
    console.print(f"[green]Created[/green] {escape(str(project))} from [bold]{escape(template)}[/bold]",
                  highlight=False)
    if pattern is not None:
        models = load_project(project).models
        console.print("Models: " + ", ".join(escape(m.name) + (f" ({m.pattern})" if m.pattern else "")
                                             for m in models), highlight=False)
    example = _load("scaffold").write_example_model(project)
    if example is not None:
        colour = "green" if example.written or example.path.exists() else "yellow"
        console.print(f"[{colour}]Example model:[/] {escape(example.message)}", highlight=False)
    if imported is not None:
        console.print(f"Model {escape(imported.name)}: {escape(imported.signature.describe())}", highlight=False)
        for note in imported.notes:
            console.print(f"[yellow]note[/yellow] {escape(note)}", highlight=False)
    console.print(f"Next: cd {escape(str(path))} and read README.md", highlight=False)


def _ask_template(interactive: bool) -> str:
    if not interactive:
        return "cpp-backend"
    names = [t.name for t in _load("scaffold").list_templates()]
    return Prompt.ask("Template", choices=names, default="cpp-backend", console=console)


@templates_app.command("list")
def templates_list() -> None:
    """Show the templates, their options and defaults."""
    for spec in _load("scaffold").list_templates():
        table = Table(title=escape(f"{spec.name} {spec.version}: {spec.description}"), title_justify="left")
        table.add_column("option")
        table.add_column("default")
        table.add_column("choices / type")
        for option in spec.options:
            choices = ", ".join(option.choices) if option.choices else option.kind.__name__
            table.add_row(escape(option.key), escape(str(option.default)), escape(choices))
        console.print(table)


@templates_app.command("check")
def templates_check(
    template: Annotated[
        Optional[list[str]], typer.Option("--template", "-t", help="Only these templates (repeatable).")
    ] = None,
    build: Annotated[bool, typer.Option("--build", help="Also build each variant that has something to build "
                                        "(C++ from the Triton source cache, native Python extensions).")] = False,
    smoke: Annotated[bool, typer.Option("--smoke", help="Also build and run the smoke suite on each variant in a "
                                        "real server.")] = False,
    triton_version: Annotated[
        Optional[list[str]], typer.Option("--triton-version", help="Render the matrix for these releases "
                                          "(repeatable; default: the server's with --smoke, else the newest).")
    ] = None,
) -> None:
    """Render every template over its option matrix and check the results."""
    with _user_errors():
        releases = [versions.resolve(v).container for v in triton_version or []]
        report = _load("commands.templates_check").check_templates(template or None, build=build, smoke=smoke, releases=releases,
                                 progress=lambda line: console.print(line, markup=False, highlight=False))
    for skipped in report.skipped:
        console.print(f"[yellow]SKIP[/yellow] {escape(skipped)}", highlight=False)
    for failure in report.failures:
        console.print(f"[red]FAIL[/red] {escape(failure)}", highlight=False)
    colour = "red" if report.failures else "green"
    console.print(f"[{colour}]{report.variants} variants, {report.files} files, {len(report.failures)} failures"
                  f"{f', {len(report.skipped)} not built' if report.skipped else ''}[/]")
    raise typer.Exit(1 if report.failures else 0)


@app.command("versions")
def versions_() -> None:
    """Show the supported Triton releases and what each implies."""
    table = Table(title="Triton releases (newest is the default)", title_justify="left")
    for column in ("release", "branch", "server", "python", "CUDA", "backend API", "server API", "CUDA archs", "CMake"):
        table.add_column(column)
    for r in versions.RELEASES:
        table.add_row(
            r.container, r.branch, r.server_version, r.python, r.cuda,
            "%d.%d" % r.backend_api, "%d.%d" % r.server_api, ";".join(r.cuda_architectures), f">= {r.min_cmake}",
        )
    console.print(table)


@app.command()
def validate(
    path: Annotated[Path, typer.Argument(help="A project, a model repository or one config.pbtxt.")] = Path("."),
) -> None:
    """Validate every config.pbtxt under PATH with Triton's ModelConfig schema and semantic checks."""
    with _user_errors():
        if not path.exists():
            raise UsageError(f"{path} does not exist.", "Pass a project, a model repository or a config.pbtxt.")
        findings = _load("model_config").validate_tree(path, gpus_visible=_load("discovery").gpus_visible())
    for finding in findings:
        colour = "red" if finding.severity == "error" else "yellow"
        console.print(f"[{colour}]{escape(str(finding))}[/]", highlight=False)
    errors = sum(1 for f in findings if f.severity == "error")
    if errors:
        console.print(f"[red]{errors} error(s)[/red]")
        raise typer.Exit(1)
    console.print(f"[green]OK[/green] {escape(str(path))}", highlight=False)


ServerPath = Annotated[
    Optional[Path], typer.Option("--server", help="A tritonserver executable (default: $TRITONSERVER, PATH, "
                                 "/opt/tritonserver, then the embedded wheel).")
]
DockerOption = Annotated[
    bool, typer.Option("--docker", help="Run in a container of the release's tritonserver image (docker SDK).")
]
ImageOption = Annotated[
    Optional[str], typer.Option("--image", help="The image for --docker (default: "
                                "nvcr.io/nvidia/tritonserver:<release>-py3).")
]
GpuRequestOption = Annotated[
    bool, typer.Option("--gpu", help="With --docker: give the container the GPUs (needs the NVIDIA runtime).")
]
InstanceKindOption = Annotated[
    Optional[str], typer.Option("--instance-kind", help="cpu, gpu or model (default): serve a copy of the models "
                                "with every instance group of that kind (your config.pbtxt files stay as they are); "
                                "cpu runs a --gpu project on a machine without a GPU.")
]
SanitizeOption = Annotated[
    Optional[str], typer.Option("--sanitize", help="Build the C++ backend with sanitizers: address,undefined "
                                "(the server then runs with their runtimes preloaded).")
]


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
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Load only this model and the models it "
                                                 "calls (tbgen.toml's calls).")] = None,
) -> None:
    """Start Triton on the project's model repository until Ctrl-C."""
    signals = _load("signals")
    with _user_errors(), signals.stop_on_signals():
        _check_docker_options(docker, image, gpu)
        target = load_project_or_none(project) or project
        if model is not None and not isinstance(target, Project):
            raise UsageError("--model picks a model of a tbgen project.", "Run it in a project, or drop --model.")
        only = target.needed_by(target.model(model).name) if model is not None else []
        triton = _load("runtime").start_server(
            target, server=server, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
            host=host, verbose=verbose, docker=docker, image=image, gpu=gpu,
            instance_kind=_instance_kind(instance_kind),
            extra_args=("--model-control-mode=explicit", *(f"--load-model={name}" for name in only)) if only else (),
        )
        with triton:
            _print_server(triton, target.models if isinstance(target, Project) else ())
            console.print("Serving; press Ctrl-C to stop.")
            _wait_while_running(triton, follow_log=verbose)
    console.print("Server stopped.")


def _instance_kind(text: str | None) -> str | None:
    return _load("runtime.instance_kind").parse_instance_kind(text)


def _check_docker_options(docker: bool, image: str | None, gpu: bool) -> None:
    if image and not docker:
        raise UsageError("--image names the image for --docker.", "Add --docker, or drop --image.")
    if gpu and not docker:
        raise UsageError("--gpu asks a container for the GPUs; a local server sees this machine's GPUs already.",
                         "Add --docker, or drop --gpu.")


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
        "tritonserver exited on its own.", "Its log:\n" + "\n".join(triton.relevant_log_lines()) + f"\nFull log: {triton.log_file}"
    )


def _print_notes(warnings: list[str], notes: list[str]) -> None:
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)
    for note in notes:
        console.print(f"[dim]note:[/dim] {escape(note)}", highlight=False)


def _print_server(triton, models: tuple = ()) -> None:
    _print_notes(triton.warnings, triton.notes)
    console.print(escape(triton.describe()), highlight=False)
    endpoints = Table(title="Endpoints", title_justify="left")
    for column in ("protocol", "address"):
        endpoints.add_column(column)
    endpoints.add_row("HTTP", triton.http_url)
    endpoints.add_row("gRPC", triton.grpc_url)
    endpoints.add_row("metrics", f"http://{triton.metrics_url}/metrics")
    console.print(endpoints)
    states = Table(title="Models", title_justify="left")
    for column in ("model", "version", "state", "reason"):
        states.add_column(column)
    for m in triton.model_states():
        colour = "green" if m.state == "READY" else "red"
        states.add_row(escape(m.name), escape(m.version), f"[{colour}]{escape(m.state or 'not loaded')}[/]",
                       escape(m.reason))
    console.print(states)
    for model in models:
        if model.metrics:
            console.print(f"Custom metrics of {escape(model.name)}: {escape(', '.join(model.metrics))} "
                          f"(curl -s http://{escape(triton.metrics_url)}/metrics | grep {escape(model.metrics[0])})",
                          highlight=False)
    console.print(f"Log: {escape(str(triton.log_file))}", highlight=False)


@app.command("test")
def test_(
    project: Annotated[Path, typer.Argument(help="The project to test.")] = Path("."),
    server: ServerPath = None,
    junit_xml: Annotated[Optional[Path], typer.Option("--junit-xml", help="Write the results as JUnit XML.")] = None,
    fuzz: Annotated[int, typer.Option("--fuzz", help="Also send N randomised malformed requests.")] = 0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fuzzer.")] = 0,
    sanitize: SanitizeOption = None,
    docker: DockerOption = False,
    image: ImageOption = None,
    gpu: GpuRequestOption = False,
    packaged: Annotated[bool, typer.Option("--packaged", help="With --docker --image: test the image as it is "
                                           "(an image made by tbgen package; nothing built or mounted).")] = False,
    instance_kind: InstanceKindOption = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Test this model only (default: every "
                                                 "model tbgen.toml lists).")] = None,
) -> None:
    """Start a real Triton, load the project's backend and run the smoke suite against it."""
    with _user_errors():
        _check_docker_options(docker, image, gpu)
        if packaged and not (docker and image):
            raise UsageError("--packaged tests an image made by tbgen package.", "Add --docker --image TAG.")
        sanitizers = _load("toolchain.build").parse_sanitizers(sanitize)
        kind = _instance_kind(instance_kind)
        report = _load("commands.test").run_project_tests(
            load_project(project), server=server, fuzz=fuzz, seed=seed, sanitize=sanitizers, docker=docker,
            image=image, gpu=gpu, packaged=packaged, instance_kind=kind, model=model)
    _report_tests(report, junit_xml)


def _report_tests(report, junit_xml: Path | None) -> None:
    """Print a test run's results (and write them as JUnit XML); exit 1 unless every check passed."""
    _print_notes(report.warnings, report.notes)
    table = Table(title=escape(f"{report.project.name}: smoke tests against {report.server}"), title_justify="left")
    for column in ("check", "protocol", "result", "detail", "seconds"):
        table.add_column(column)
    for r in report.results:
        verdict = "[green]pass[/green]" if r.passed else "[red]FAIL[/red]"
        table.add_row(escape(r.name), r.protocol, verdict, escape(r.detail), f"{r.seconds:.2f}")
    console.print(table)
    if len(report.statistics) > 1:
        stats = Table(title="the server's statistics of each model", title_justify="left")
        for column in ("model", "ok", "failed", "inferences", "executions", "queue us", "compute us"):
            stats.add_column(column)
        for s in report.statistics:
            stats.add_row(escape(s.name), str(s.success), str(s.failed), str(s.inferences), str(s.executions),
                          f"{s.queue_us:.0f}", f"{s.compute_us:.0f}")
        console.print(stats)
    if junit_xml:
        _load("smoke").write_junit_xml(report.results, junit_xml, suite=report.project.name)
        console.print(f"JUnit XML: {escape(str(junit_xml))}", highlight=False)
    failed = sum(not r.passed for r in report.results)
    colour = "red" if failed else "green"
    console.print(f"[{colour}]{len(report.results) - failed} passed, {failed} failed[/]  (server log: "
                  f"{escape(str(report.log_file))})", highlight=False)
    raise typer.Exit(1 if failed or not report.results else 0)


@app.command()
def infer(
    model: Annotated[str, typer.Argument(help="Model name.")],
    input_: Annotated[
        Optional[list[str]], typer.Option("--input", "-i", help="NAME=FILE.npy or NAME=JSON (repeatable); "
                                          "inputs not given come from the project's reference.py.")
    ] = None,
    project: Annotated[Path, typer.Option("--project", help="The project whose server to start.")] = Path("."),
    url: Annotated[Optional[str], typer.Option("--url", help="Use a running server (HTTP host:port) instead.")] = None,
    server: ServerPath = None,
    instance_kind: InstanceKindOption = None,
    param: Annotated[Optional[list[str]], typer.Option(
        "--param", "-p", help="KEY=VALUE request parameter (repeatable; true/false and integers are typed).")] = None,
    sequence_id: Annotated[Optional[str], typer.Option(
        "--sequence-id", help="Correlation ID of a sequence model's request (default: a sequence of its own).")] = None,
    start: Annotated[bool, typer.Option("--start/--no-start", help="With --sequence-id: the request starts its "
                                        "sequence.")] = True,
    end: Annotated[bool, typer.Option("--end/--no-end", help="With --sequence-id: the request ends its "
                                      "sequence.")] = True,
) -> None:
    """Send one request and print the outputs (and the response's parameters)."""
    infer_ = _load("commands.infer")
    with _user_errors():
        sequencing = infer_.Sequencing(
            None if sequence_id is None else int(sequence_id) if sequence_id.isdigit() else sequence_id, start, end)
        outputs = infer_.infer_once(
            model, input_ or [], project=load_project_or_none(project), url=url, server=server,
            instance_kind=_instance_kind(instance_kind), param_options=param or [], sequencing=sequencing,
            on_parameters=lambda parameters: console.print(
                f"[bold]parameters[/bold] {escape(json.dumps(parameters))}", highlight=False))
    for name, array in outputs.items():
        console.print(f"[bold]{escape(name)}[/bold] {array.dtype} {list(array.shape)}", highlight=False)
        console.print(escape(str(array)), highlight=False)


@app.command()
def doctor(
    server: ServerPath = None,
    triton_version: Annotated[
        Optional[str], typer.Option("--triton-version", help="Release to check for (default: the project's, else "
                                    "the newest).")
    ] = None,
) -> None:
    """Check what tbgen needs (CMake, compiler, Ninja, RapidJSON, googletest, nvcc, Triton's sources, servers,
    Docker) and print the command that fixes each missing piece."""
    doctor_ = _load("commands.doctor")
    FAIL, OK = doctor_.FAIL, doctor_.OK
    with _user_errors():
        diagnoses = doctor_.diagnose(server, _project_here(), triton_version)
    table = Table(title="What tbgen needs, and how to fix what is missing", title_justify="left")
    for column in ("check", "status", "found", "fix"):
        table.add_column(column)
    colours = {OK: "green", FAIL: "red"}
    for d in diagnoses:
        colour = colours.get(d.status, "yellow")
        table.add_row(escape(d.name), f"[{colour}]{d.status}[/]", escape(d.found), escape(d.fix))
    console.print(table)
    failed = [d.name for d in diagnoses if d.failed]
    if failed:
        console.print(f"[red]Missing what tbgen requires:[/red] {escape(', '.join(failed))}; run the fix shown for each.")
        raise typer.Exit(1)


ReleaseOption = Annotated[
    Optional[str], typer.Option("--triton-version", help="Release: 24.10, r24.10 or 2.51.0 (default: the project's, "
                                "else the newest).")
]


@deps_app.command("fetch")
def deps_fetch(
    triton_version: ReleaseOption = None,
    organization: Annotated[
        Optional[str], typer.Option("--organization", help="URL or directory holding core.git, common.git and "
                                    "backend.git (default: $TRITON_REPO_ORGANIZATION, else Triton's GitHub).")
    ] = None,
    googletest_url: Annotated[
        Optional[str], typer.Option("--googletest-url", help="A mirror of the googletest archive common asks for.")
    ] = None,
    googletest: Annotated[bool, typer.Option("--googletest/--no-googletest", help="Also fetch googletest.")] = True,
    force: Annotated[bool, typer.Option("--force", help="Replace a cached release.")] = False,
) -> None:
    """Clone core, common and backend at the release branch (and googletest) into tbgen's cache."""
    with _user_errors():
        release = _release(triton_version)
        entry = _load("toolchain.sources").fetch_sources(release, organization=organization, force=force, googletest=googletest,
                              googletest_url=googletest_url, progress=lambda line: console.print(line, markup=False))
    console.print(f"[green]Cached[/green] {release.branch} in {escape(str(entry))}", highlight=False)


@deps_app.command("add")
def deps_add(
    from_: Annotated[Path, typer.Option("--from", help="A directory holding core/, common/ and backend/.")],
    triton_version: ReleaseOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a cached release.")] = False,
) -> None:
    """Register Triton sources you already have (air-gapped sites): they are checked and copied into the cache."""
    with _user_errors():
        release = _release(triton_version)
        entry = _load("toolchain.sources").add_sources(from_, release, force=force)
    console.print(f"[green]Cached[/green] {release.branch} in {escape(str(entry))}", highlight=False)


def _project_here() -> Project | None:
    """The project the current directory is in (None outside one, or when its tbgen.toml is unreadable)."""
    try:
        return load_project_or_none(Path.cwd())
    except TbgenError:
        return None


def _release(spec: str | None) -> versions.Release:
    """The release --triton-version names, else the project's here, else the newest."""
    project = _project_here()
    return versions.target_release(spec, project.release if project is not None else None)[0]


@deps_app.command("list")
def deps_list() -> None:
    """Show the cached releases, each repository's commit (or "archive" for a tree without git)."""
    sources = _load("toolchain.sources")
    GOOGLETEST, REPOSITORIES = sources.GOOGLETEST, sources.REPOSITORIES
    entries = sources.list_sources()
    if not entries:
        console.print(f"No Triton sources cached in {escape(str(sources.sources_dir()))}. Fill it with `tbgen deps "
                      "fetch`, or `tbgen deps add --from DIR`.", highlight=False)
        return
    table = Table(title=escape(f"Triton sources in {sources.sources_dir()}"), title_justify="left")
    for column in ("release", *REPOSITORIES, GOOGLETEST, "complete"):
        table.add_column(column)
    for entry in entries:
        cells = [entry.repositories.get(name) or "[red]missing[/red]" for name in REPOSITORIES]
        cells.append(entry.repositories.get(GOOGLETEST) or "[dim]system[/dim]")
        table.add_row(entry.branch, *cells, "[green]yes[/green]" if entry.complete else "[red]no[/red]")
    console.print(table)


@app.command()
def build(
    project: Annotated[Path, typer.Argument(help="The project to build.")] = Path("."),
    gpu: Annotated[
        Optional[bool], typer.Option("--gpu/--no-gpu", help="Build the CUDA path (default: the project's gpu answer).")
    ] = None,
    build_type: Annotated[str, typer.Option("--build-type", help="Release, Debug or RelWithDebInfo.")] = "Release",
    jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, help="Parallel jobs (default: CPUs).")] = None,
    clean: Annotated[bool, typer.Option("--clean", help="Remove the previous build first.")] = False,
    server: ServerPath = None,
    sanitize: SanitizeOption = None,
    docker: DockerOption = False,
    image: ImageOption = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Build what this model needs (nothing for "
                                                 "a model of the python backend).")] = None,
) -> None:
    """Configure, build and install the project's backend (or native extension), then check the library."""
    columns = (TextColumn("[bold]building[/bold]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}", markup=False))
    with _user_errors(), Progress(*columns, console=console, transient=True) as bar:
        _check_docker_options(docker, image, gpu=False)
        sanitizers = _load("toolchain.build").parse_sanitizers(sanitize)
        loaded = load_project(project)
        if model is not None and loaded.model(model).backend == "python":
            console.print(f"Nothing to build for {escape(model)}: Triton's python backend serves it.",
                          highlight=False)
            raise typer.Exit(0)
        task = bar.add_task("configuring", total=None)

        def progress(done: int, total: int, line: str) -> None:
            bar.update(task, completed=done, total=total, description=line[:80])

        result = _load("commands.build").build(loaded, gpu=gpu, build_type=build_type, jobs=jobs, clean=clean,
                                               progress=progress, server=server, sanitize=sanitizers, docker=docker,
                                               image=image)
    for note in result.notes:
        console.print(f"[dim]note:[/dim] {escape(note)}", highlight=False)
    if result.artifact is None:
        raise typer.Exit(0)
    verb = "Built" if result.work_done else "Up to date:"
    console.print(f"[green]{verb}[/green] {escape(str(result.artifact))}  ({result.seconds:.1f}s, log: "
                  f"{escape(str(result.log_file))})", highlight=False)
    _print_findings(result.findings)
    raise typer.Exit(1 if result.errors else 0)


def _print_findings(findings) -> None:
    for finding in findings:
        colour = {"error": "red", "warning": "yellow"}.get(finding.severity, "dim")
        console.print(f"[{colour}]{finding.severity}:[/] {escape(finding.message)}", highlight=False)


@app.command()
def check(
    project: Annotated[Path, typer.Argument(help="A built C++ project, or a backend library (.so).")] = Path("."),
    server: ServerPath = None,
    docker: Annotated[bool, typer.Option("--docker", help="Resolve the libraries it needs in a container of the "
                                         "release's tritonserver image, as the server there loads it.")] = False,
    image: ImageOption = None,
    drift: Annotated[bool, typer.Option("--drift", help="Instead: which generated files you edited, and whether the "
                                        "template or the Triton release is behind (exit 1: `tbgen update` is "
                                        "due).")] = False,
) -> None:
    """Check a built backend library: its exports, its imports against the server, its dependencies."""
    if drift:
        _check_drift(project, docker or server is not None or image is not None)
        return
    with _user_errors():
        _check_docker_options(docker, image, gpu=False)
        if docker and server is not None:
            raise UsageError("--server names a local server; --docker checks in an image.", "Drop one of them.")
        report = _load("commands.build").check(project, server=server, docker=docker, image=image)
    console.print(escape(f"{report.library}" + (f" against {report.server}" if report.server else "")),
                  highlight=False)
    _print_findings(report.findings)
    if report.errors:
        console.print(f"[red]{len(report.errors)} error(s)[/red]")
        raise typer.Exit(1)
    console.print("[green]OK[/green]")


@app.command()
def bench(
    project: Annotated[Path, typer.Argument(help="The project whose model to load.")] = Path("."),
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model (default: the project's first).")] = None,
    protocol: Annotated[str, typer.Option("--protocol", help="grpc or http.")] = "grpc",
    concurrency: Annotated[str, typer.Option("--concurrency", help="Concurrency levels, comma-separated.")] = "1,8,32",
    duration: Annotated[str, typer.Option("--duration", help="Measurement time per level: 10s, 500ms, 2m.")] = "10s",
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Batch size of each request.")] = 1,
    tool: Annotated[str, typer.Option("--tool", help="auto (perf_analyzer when found), perf_analyzer or builtin "
                                      "(tbgen's asyncio gRPC generator).")] = "auto",
    url: Annotated[Optional[str], typer.Option("--url", help="A running server (HTTP host:port; gRPC on the next "
                                               "port, or give HTTP,GRPC) instead of starting one.")] = None,
    json_file: Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON.")] = None,
    compare_with: Annotated[Optional[Path], typer.Option("--compare", help="A report of an earlier run (--json): "
                                                         "print this run's ratios to it.")] = None,
    server: ServerPath = None,
    instance_kind: InstanceKindOption = None,
) -> None:
    """Load a model at several concurrency levels: throughput, latency percentiles, server queue/compute, CPU."""
    stats = _load("bench.stats")
    with _user_errors():
        levels, seconds = stats.parse_concurrency(concurrency), stats.parse_duration(duration)
        other = stats.BenchReport.read(compare_with) if compare_with else None
        report = _load("commands.bench").run_bench(
            load_project(project), model=model, protocol=protocol, concurrency=levels, seconds=seconds,
            batch_size=batch_size, tool=tool, url=url, server=server, instance_kind=_instance_kind(instance_kind),
            progress=lambda line: console.print(line, markup=False, highlight=False))
    table = Table(title=escape(f"{report.model} ({report.protocol}, batch {report.batch_size}, {report.tool}) "
                               f"against {report.server}"), title_justify="left")
    decoupled = any(level.responses_per_s for level in report.levels)
    columns = ["conc", "infer/s", *(["resp/s"] if decoupled else []), "p50", "p90", "p99", "queue", "compute",
               "client CPU", "server CPU", "errors"]
    for column in columns:
        table.add_column(column, justify="right")
    for level in report.levels:
        table.add_row(str(level.concurrency), f"{level.throughput:,.1f}",
                      *([f"{level.responses_per_s:,.1f}"] if decoupled else []),
                      f"{level.p50_us:,.0f}", f"{level.p90_us:,.0f}", f"{level.p99_us:,.0f}",
                      f"{level.server_queue_us:,.1f}", f"{level.server_compute_us:,.1f}",
                      f"{level.client_cpu:.0%}", f"{level.server_cpu:.0%}", str(level.errors))
    console.print(table)
    console.print("[dim]Latencies (p50-p99) and the server's queue and compute times per request in microseconds; "
                  "CPU: share of one core over the level (client and server share this machine's cores).[/dim]")
    if json_file:
        report.write(json_file)
        console.print(f"JSON: {escape(str(json_file))}", highlight=False)
    if other is not None:
        ratios = Table(title=escape(f"This run / {compare_with}"), title_justify="left")
        for column in ("concurrency", "throughput", "p50 latency", "p99 latency"):
            ratios.add_column(column, justify="right")
        for ratio in stats.compare(report, other):
            ratios.add_row(str(ratio.concurrency), f"{ratio.throughput:.2f}x", f"{ratio.p50:.2f}x", f"{ratio.p99:.2f}x")
        console.print(ratios)


@app.command()
def package(
    project: Annotated[Path, typer.Argument(help="The project to package.")] = Path("."),
    image_tag: Annotated[Optional[str], typer.Option("--image-tag", help="Tag of the image (default: "
                                                    "<project>:latest).")] = None,
    base_image: Annotated[Optional[str], typer.Option("--base-image", help="BASE_IMAGE of the Dockerfile (default: "
                                                      "the release's tritonserver image).")] = None,
    test: Annotated[bool, typer.Option("--test", help="Then run the smoke suite against a container of the "
                                       "image.")] = False,
) -> None:
    """Build the project's Dockerfile into a deployable image: the server, the backend and /models."""
    with _user_errors():
        loaded = load_project(project)
        result = _load("commands.package").package_project(
            loaded, tag=image_tag, base_image=base_image,
            progress=lambda line: console.print(line[:100], markup=False, highlight=False))
    if result.prebuilt:
        carried = f", carrying {', '.join(result.carried)}" if result.carried else ""
        source = f"the backend built on this machine{carried}"
    else:
        source = "Triton's sources from tbgen's cache" if result.offline else "the Dockerfile as it is"
    console.print(escape(f"Built {result.tag} ({result.image_id[:19]}) from {source}; log: {result.log_file}"),
                  highlight=False)
    if test:
        with _user_errors():
            report = _load("commands.test").run_project_tests(loaded, image=result.tag, packaged=True)
        _report_tests(report, junit_xml=None)


@app.command()
def update(
    project: Annotated[Path, typer.Option("--project", help="The project (default: the one here).")] = Path("."),
    triton_version: Annotated[Optional[str], typer.Option(
        "--triton-version", help="The release to move to: 26.02, r26.02 or 2.67.0 (default: the newest).")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Change an answer: --set key=value "
                                                       "(repeatable).")] = None,
    template_version: Annotated[Optional[str], typer.Option(
        "--template-version", help="The template version to move to (this tbgen ships one per template).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Run on a git work tree with uncommitted changes.")] = False,
) -> None:
    """Move a project to a newer release or template, or other answers, keeping your edits (a 3-way merge with
    what tbgen generated). Exit 1 when conflicts are left to resolve."""
    with _user_errors():
        updating = _load("commands.update")
        loaded = load_project(project)
        if not dry_run and not force:
            updating.check_clean(loaded.root)
        plan = updating.plan_project_update(loaded, triton_version=triton_version,
                                            settings=_load("scaffold").parse_set_options(set_ or []),
                                            template_version=template_version)
        if plan.reconstructed:
            console.print(f"[yellow]note[/yellow] {escape(updating.RECONSTRUCTED_NOTE)}", highlight=False)
        _print_update_plan(plan, dry_run)
        if dry_run:
            return
        updating.update_project(plan)
        _print_release_changes(plan.old_release, plan.new_release)
    if plan.conflicts:
        console.print(f"[red]{len(plan.conflicts)} file(s) with conflicts[/red] (marked <<<<<<< yours ... >>>>>>> "
                      "tbgen update): edit each to keep what you want and remove the markers, then check with "
                      f"`grep -n '^<<<<<<<' {' '.join(escape(c.path) for c in plan.conflicts)}`, tbgen build and "
                      "tbgen test.", highlight=False)
        raise typer.Exit(1)
    console.print("Next: tbgen build, tbgen test", highlight=False)


def _print_update_plan(plan: Any, dry_run: bool) -> None:
    old, new = plan.base.recipe, plan.new.recipe
    what = (f"{plan.project.name}: {old.template} {old.template_version} at r{old.triton_version} -> "
            f"{new.template_version} at r{new.triton_version}")
    if not plan.changes:
        console.print(escape(f"{what}: up to date, nothing to change."), highlight=False)
        return
    console.print(escape(f"{'Would update' if dry_run else 'Updated'} {what}:"), highlight=False)
    table = Table()
    for column in ("file", "action", "note"):
        table.add_column(column)
    colours = {"replaced": "green", "merged": "cyan", "added": "green", "conflict": "red"}
    for change in plan.changes:
        colour = colours.get(change.action, "yellow")
        table.add_row(escape(change.path), f"[{colour}]{change.action}[/]", escape(change.note))
    console.print(table)


def _print_release_changes(old: versions.Release, new: versions.Release) -> None:
    changes = versions.release_changes(old, new)
    if not changes:
        return
    table = Table(title=f"What changed from {old.container} to {new.container} for a backend", title_justify="left")
    for column in ("", old.container, new.container, "what to do"):
        table.add_column(column)
    for change in changes:
        table.add_row(change.what, change.old, change.new, escape(change.action))
    console.print(table)


def _check_drift(project: Path, other_options: bool) -> None:
    updating = _load("commands.update")
    with _user_errors():
        if other_options:
            raise UsageError("--drift compares the project with what tbgen generates; --server, --docker and --image "
                             "check a built library.", "Run them as two commands.")
        report = updating.drift(load_project(project))
    if report.reconstructed:
        console.print(f"[yellow]note[/yellow] {escape(updating.RECONSTRUCTED_NOTE)}", highlight=False)
    for label, files in (("edited by you", report.edited), ("deleted by you", report.deleted)):
        if files:
            console.print(f"{label}: " + escape(", ".join(files)), highlight=False)
    if not report.edited and not report.deleted:
        console.print("Every generated file is as tbgen wrote it.")
    recorded, shipped = report.template
    if report.template_behind:
        console.print(escape(f"template: {recorded} generated it; tbgen ships {shipped}, which renders "
                             f"{len(report.template_changed)} file(s) otherwise: update due"), highlight=False)
    else:
        console.print(escape(f"template: {shipped}, up to date"), highlight=False)
    if report.release_behind:
        console.print(escape(f"release: {report.release.container}; the newest tbgen knows is "
                             f"{report.newest.container}: update due"), highlight=False)
    else:
        console.print(escape(f"release: {report.release.container}, the newest tbgen knows"), highlight=False)
    if report.update_due:
        console.print("Next: tbgen update --dry-run, then tbgen update", highlight=False)
        raise typer.Exit(1)


@env_app.command("pack")
def env_pack(
    project: Annotated[Path, typer.Argument(help="The project.")] = Path("."),
    model: Annotated[Optional[str], typer.Option("--model", help="Only this model (default: every python model "
                                                 "with a requirements.txt).")] = None,
    docker: Annotated[bool, typer.Option("--docker", help="Build it inside the server's image (for tbgen test "
                                         "--docker and tbgen package), with the image's python3.")] = False,
    image: ImageOption = None,
) -> None:
    """Pack model_repository/MODEL/requirements.txt (with numpy) into the environment the python backend runs the
    model in: MODEL/python-env.tar.gz, named by EXECUTION_ENV_PATH in its config.pbtxt."""
    with _user_errors():
        _check_docker_options(docker, image, gpu=False)
        loaded = load_project(project)
        console.print(f"Packing for {escape(image or 'the release image') if docker else 'this machine'} "
                      "(pip's output: build/tbgen/env-MODEL.log) ...", highlight=False)
        packed = _load("commands.env").pack_envs(loaded, model=model, docker=docker, image=image)
    for result in packed:
        env = result.env
        size = env.path.stat().st_size / 1e6
        console.print(f"[green]Packed[/green] {escape(str(env.path))} ({size:.1f} MB): Python {env.python}, "
                      f"{len(env.modules)} modules, for {escape(result.target)}", highlight=False)
        if result.config_written:
            console.print(f"[yellow]Wrote[/yellow] EXECUTION_ENV_PATH into {escape(result.model)}/config.pbtxt "
                          "($$TRITON_MODEL_DIRECTORY/python-env.tar.gz)", highlight=False)
    console.print("Next: tbgen test" + (" --docker" if docker else ""), highlight=False)


@add_app.command("model")
def add_model(
    name: Annotated[str, typer.Argument(help="The new model's name (with --pattern: the top model's).")],
    project: Annotated[Path, typer.Option("--project", help="The project (default: the one here).")] = Path("."),
    template: Annotated[Optional[str], typer.Option("--template", "-t", help="The template of the model (default: "
                                                    "the project's).")] = None,
    pattern: PatternOption = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Set any answer: --set key=value.")] = None,
    inputs: Annotated[Optional[list[str]], typer.Option("--input", help="A model input NAME:DTYPE:DIMS[:optional] "
                                                        "(repeatable; give --output too).")] = None,
    outputs: Annotated[Optional[list[str]], typer.Option("--output", help="A model output NAME:DTYPE:DIMS.")] = None,
) -> None:
    """Add a model (or a composed model and its callees) to a project: new files and tbgen.toml entries only."""
    scaffold = _load("scaffold")
    with _user_errors():
        given: dict[str, Any] = scaffold.parse_set_options(set_ or [])
        flagged = signature.from_flags(inputs or [], outputs or [])
        if flagged is not None:
            given["signature"] = flagged.context()
        if pattern is not None:
            given["pattern"] = pattern
        written = scaffold.add_model(load_project(project), name, template, given)
    for file in written:
        console.print(f"[green]Wrote[/green] {escape(str(file))}", highlight=False)
    console.print(f"tbgen.toml lists the new models; next: tbgen test {escape(str(project))}", highlight=False)


@add_app.command("library")
def add_library(
    name: Annotated[str, typer.Argument(help="The library's name: it names cmake/libraries/NAME.cmake.")],
    project: Annotated[Path, typer.Argument(help="The C++ project.")] = Path("."),
    find_package: Annotated[Optional[str], typer.Option("--find-package", help="Find it with CMake's "
                                                        "find_package(PKG) and link its imported target.")] = None,
    components: Annotated[Optional[list[str]], typer.Option("--components", help="With --find-package: its "
                                                            "COMPONENTS (comma-separated or repeated).")] = None,
    target: Annotated[Optional[str], typer.Option("--target", help="With --find-package: the imported target to "
                                                  "link (default: PKG::PKG).")] = None,
    pkg_config: Annotated[Optional[str], typer.Option("--pkg-config", help="Find it with pkg-config's module "
                                                      "PKG (PKG.pc).")] = None,
    path: Annotated[Optional[Path], typer.Option("--path", help="A prefix holding its headers in include/ and "
                                                 "the library in lib/.")] = None,
) -> None:
    """Link a third-party library into a C++ backend: writes cmake/libraries/NAME.cmake (never over a file)."""
    with _user_errors():
        added = _load("commands.add_library").add_library(
            load_project(project), name, find_package=find_package, components=components or [], target=target,
            pkg_config=pkg_config, path=path)
    console.print(f"[green]Wrote[/green] {escape(str(added.file))}: {escape(added.spec.describe())}",
                  highlight=False)
    console.print("Include its headers in the backend's sources and use it; `tbgen package` carries the shared "
                  "objects the server's image lacks.", highlight=False)
    console.print(f"Next: tbgen build {escape(str(project))}", highlight=False)


DeployProject = Annotated[Path, typer.Option("--project", help="The project (default: the one here).")]
DeployOut = Annotated[Optional[Path], typer.Option("--out", help="Where to write (default: the project's {}).")]
DeployImage = Annotated[Optional[str], typer.Option("--image", help="The image the pods run (default: the tag tbgen "
                                                    "package gives, <project>:latest).")]
DeployReplicas = Annotated[Optional[int], typer.Option("--replicas", help="Pods while autoscaling is off "
                                                       "(replicaCount).")]
DeployControlMode = Annotated[Optional[str], typer.Option("--model-control-mode", help="none, explicit or poll "
                                                          "(server.modelControlMode).")]
DeployServerArg = Annotated[Optional[list[str]], typer.Option("--server-arg", help="One more tritonserver flag, e.g. "
                                                              "--server-arg=--log-verbose=1 (repeatable; "
                                                              "server.extraArgs).")]
DeploySet = Annotated[Optional[list[str]], typer.Option("--set", help="Any chart value: --set KEY=VALUE with KEY as "
                                                        "in values.yaml, e.g. autoscaling.enabled=true (repeatable).")]
DeployValues = Annotated[Optional[Path], typer.Option("--values", "-f", help="A YAML file of chart values, laid over "
                                                      "the defaults (then the options above).")]
DeployForce = Annotated[bool, typer.Option("--force", help="Write over tbgen's files in a directory that holds "
                                           "some already.")]


def _chart_options(image, replicas, model_control_mode, server_arg, set_, values):
    return _load("commands.deploy").ChartOptions(image=image, values_file=values, settings=set_ or [],
                                                 replicas=replicas, model_control_mode=model_control_mode,
                                                 server_args=server_arg or [])


def _print_rendered(what: str, written, project: Project) -> None:
    values = _load("commands.deploy.values")
    console.print(f"[green]Wrote[/green] {what} {escape(str(written.directory))} ({len(written.files)} files)",
                  highlight=False)
    load = _load("commands.load_time").read_load_time(project)
    console.print(escape(values.startup_probe(load)[1]), highlight=False)


@deploy_app.command("helm")
def deploy_helm(
    project: DeployProject = Path("."),
    out: Annotated[Optional[Path], typer.Option("--out", help="Where to write the chart (default: the project's "
                                                "deploy/helm/).")] = None,
    image: DeployImage = None,
    replicas: DeployReplicas = None,
    model_control_mode: DeployControlMode = None,
    server_arg: DeployServerArg = None,
    set_: DeploySet = None,
    values: DeployValues = None,
    force: DeployForce = False,
) -> None:
    """Render a Helm chart for the project's image: Deployment (probes, resources, GPU for KIND_GPU models,
    /dev/shm, non-root), Service, PodDisruptionBudget, optional HorizontalPodAutoscaler and ServiceMonitor."""
    with _user_errors():
        loaded = load_project(project)
        written = _load("commands.deploy").render_helm(
            loaded, _chart_options(image, replicas, model_control_mode, server_arg, set_, values), out, force=force)
    _print_rendered("the Helm chart", written, loaded)
    release = _load("commands.deploy.values").chart_name(loaded)
    console.print(f"Next: tbgen deploy check {escape(str(written.directory))}; tbgen deploy local; helm install "
                  f"{escape(release)} {escape(str(written.directory))}", highlight=False)


@deploy_app.command("manifests")
def deploy_manifests(
    project: DeployProject = Path("."),
    out: Annotated[Optional[Path], typer.Option("--out", help="Where to write the manifests (default: the "
                                                "project's deploy/k8s/).")] = None,
    image: DeployImage = None,
    replicas: DeployReplicas = None,
    model_control_mode: DeployControlMode = None,
    server_arg: DeployServerArg = None,
    set_: DeploySet = None,
    values: DeployValues = None,
    force: DeployForce = False,
) -> None:
    """Render plain Kubernetes YAML (the chart's objects, one file each) for users without Helm."""
    with _user_errors():
        loaded = load_project(project)
        written = _load("commands.deploy").render_manifests(
            loaded, _chart_options(image, replicas, model_control_mode, server_arg, set_, values), out, force=force)
    _print_rendered("manifests to", written, loaded)
    console.print(f"Next: tbgen deploy check {escape(str(written.directory))}; kubectl apply -f "
                  f"{escape(str(written.directory))}", highlight=False)


@deploy_app.command("check")
def deploy_check(
    directory: Annotated[Optional[Path], typer.Argument(help="A chart or a directory of manifests (default: "
                                                        "deploy/helm, else deploy/k8s).")] = None,
    kube_version: Annotated[Optional[list[str]], typer.Option("--kube-version", help="Validate for this Kubernetes "
                                                              "version (repeatable; default: 1.29 and the newest "
                                                              "kubernetes-validate bundles).")] = None,
) -> None:
    """Validate a rendered chart or manifests offline: helm lint and template, strict Kubernetes schemas for each
    version, the ServiceMonitor against tbgen's schema, yamllint. Exit 1 on any failure."""
    with _user_errors():
        deploy = _load("commands.deploy")
        if directory is None:
            directory = deploy.HELM_DIR if deploy.HELM_DIR.is_dir() else deploy.MANIFESTS_DIR
        report = deploy.check_deployment(directory, kube_version or None)
    steps: dict[str, list[int]] = {}
    for finding in report.findings:
        counts = steps.setdefault(finding.step, [0, 0])
        counts[0 if finding.passed else 1] += 1
        if not finding.passed:
            console.print(f"[red]FAIL[/red] {escape(finding.step)}: {escape(finding.subject)}: "
                          f"{escape(finding.detail)}", highlight=False)
        elif finding.skipped:
            console.print(f"[yellow]note[/yellow] {escape(finding.subject)}: {escape(finding.detail)}",
                          highlight=False)
    console.print(escape(f"{report.kind} {report.directory}: {report.objects} objects, Kubernetes "
                         f"{' and '.join(report.kube_versions)}"), highlight=False)
    table = Table()
    for column in ("check", "passed", "failed"):
        table.add_column(column)
    for step, (passed, failed) in steps.items():
        table.add_row(escape(step), str(passed), f"[red]{failed}[/red]" if failed else "0")
    console.print(table)
    if not report.passed:
        console.print(f"[red]{len(report.failures)} failure(s)[/red]")
        raise typer.Exit(1)
    console.print(f"[green]OK[/green] {escape(str(report.directory))}", highlight=False)


@deploy_app.command("local")
def deploy_local(
    project: DeployProject = Path("."),
    chart: Annotated[Optional[Path], typer.Option("--chart", help="The chart (or manifests) to run (default: the "
                                                  "project's deploy/helm/, rendered first when missing).")] = None,
    base_image: Annotated[Optional[str], typer.Option("--base-image", help="BASE_IMAGE when the project is packaged "
                                                      "first (default: the release's tritonserver image).")] = None,
    package: Annotated[bool, typer.Option("--package", help="Package the project first even when its image "
                                          "exists.")] = False,
    junit_xml: Annotated[Optional[Path], typer.Option("--junit-xml", help="Write the results as JUnit XML.")] = None,
) -> None:
    """Run the chart's pod spec as a container here (same image, command, args, env, ports, /dev/shm, user),
    probe it as the kubelet would, and run the smoke suite against it; the container is removed afterwards."""
    signals = _load("signals")
    with _user_errors(), signals.stop_on_signals():
        loaded = load_project(project)
        run = _load("commands.deploy").deploy_local(
            loaded, chart, base_image=base_image, repackage=package,
            progress=lambda line: console.print(line[:100], markup=False, highlight=False))
    if run.packaged is not None:
        console.print(escape(f"Packaged {run.packaged.tag} ({run.packaged.image_id[:19]})"), highlight=False)
    pod = run.pod
    ready = f"ready {run.ready_after:.1f} s after its start" if run.ready_after is not None else "never ready"
    console.print(escape(f"Pod spec of {run.chart}: {pod.image} as user {pod.user or 'of the image'}, ports "
                         f"{', '.join(f'{n} {p}' for n, p in pod.ports.items())}, /dev/shm "
                         f"{(pod.shm_bytes or 0) / 2**20:.0f} MiB; {ready}"), highlight=False)
    if run.memory_used is not None:
        limit = f" of its {pod.memory_limit / 2**20:.0f} MiB limit" if pod.memory_limit else ""
        console.print(escape(f"The server used {run.memory_used / 2**20:.0f} MiB{limit} after the tests "
                             "(resources in values.yaml)."), highlight=False)
    _report_tests(run.report, junit_xml)


@app.command()
def clean(
    containers: Annotated[bool, typer.Option("--containers", help="Stop and remove every container with tbgen's "
                                             "label (left behind by a killed tbgen).")] = False,
) -> None:
    """Remove what tbgen left behind."""
    with _user_errors():
        if not containers:
            raise UsageError("Say what to clean.", "tbgen clean --containers")
        engine = _load("engine")
        removed = engine.remove_containers(engine.tbgen_containers(engine.connect()))
    console.print(escape(f"Removed {len(removed)} container(s){': ' + ', '.join(removed) if removed else ''}."),
                  highlight=False)


class _user_errors:
    """Turn a TbgenError into a Rich message and its exit code (no traceback for user mistakes)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            return False
        if isinstance(exc, TbgenError):
            err_console.print(f"[bold red]error:[/bold red] {escape(exc.message)}", highlight=False)
            if exc.hint:
                err_console.print(f"[dim]hint:[/dim] {escape(exc.hint)}", highlight=False)
            raise typer.Exit(exc.exit_code)
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or SIGTERM/SIGHUP turned into one by the runtime
            err_console.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(getattr(exc, "exit_code", 130))
        return False


def main() -> None:
    app()
