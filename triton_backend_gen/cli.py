"""tbgen's command line: one small function per command, each mapping flags onto one command or stage function.

The stages and commands are imported when a command runs, in one place (:func:`_load`), so that ``tbgen
--help`` starts without cookiecutter, protobuf, tritonclient or docker. Every piece of user or tool text that
reaches the console is escaped (it is never read as Rich markup).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.prompt import Confirm, Prompt

from triton_backend_gen import __version__, signature, terminal, versions
from triton_backend_gen.errors import AnswerError, ServerError, TbgenError, UsageError
from triton_backend_gen.project import Project, load_project, load_project_or_none
from triton_backend_gen.terminal import Column, console, err_console, note, on_terminal, records, say, warning

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
        say(f"{error.message} {error.hint}", style="red")

    def _ask_signature(self) -> dict[str, Any]:
        """The model's tensors, one per line; no input at all keeps the template's example."""
        say(f"Tensors as {signature.FLAG_GRAMMAR}; an empty line ends the list.")
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
    say(f"{project} from {template}", label="Created", style="green")
    if pattern is not None:
        models = load_project(project).models
        say("Models: " + ", ".join(m.name + (f" ({m.pattern})" if m.pattern else "") for m in models))
    example = _load("scaffold").write_example_model(project)
    if example is not None:
        colour = "green" if example.written or example.path.exists() else "yellow"
        say(example.message, label="Example model:", style=colour)
    if imported is not None:
        _print_imported(imported, load_project(project).models[0])
    say(f"Next: cd {path} and read README.md; `tbgen test` there proves the project in a real Triton.")


def _print_imported(imported, model) -> None:
    """What --from-config took, left out and changed."""
    served = _load("model_config").load_model_config(model.config_file)
    say(f"Model {model.name}: {imported.signature.describe()}")
    for text in (*imported.changes(model.name, served.backend), *imported.notes):
        note(text)


def _ask_template(interactive: bool) -> str:
    if not interactive:
        return "cpp-backend"
    names = [t.name for t in _load("scaffold").list_templates()]
    return Prompt.ask("Template", choices=names, default="cpp-backend", console=console)


@templates_app.command("list")
def templates_list() -> None:
    """Show the templates, their options and defaults."""
    for spec in _load("scaffold").list_templates():
        records(f"{spec.name} {spec.version}: {spec.description}",
                [Column("option"), Column("default"), Column("choices / type", wide=True)],
                [(option.key, str(option.default),
                  ", ".join(option.choices) if option.choices else option.kind.__name__) for option in spec.options])


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
        report = _load("commands.templates_check").check_templates(
            template or None, build=build, smoke=smoke, releases=releases, progress=say)
    for skipped in report.skipped:
        say(skipped, label="SKIP", style="yellow")
    for failure in report.failures:
        say(failure, label="FAIL", style="red")
    say(f"{report.variants} variants, {report.files} files, {len(report.failures)} failures"
        f"{f', {len(report.skipped)} not built' if report.skipped else ''}", style="red" if report.failures else "green")
    raise typer.Exit(1 if report.failures else 0)


@app.command("versions")
def versions_() -> None:
    """Show the supported Triton releases and what each implies."""
    records("Triton releases (newest is the default)",
            [Column(c) for c in ("release", "branch", "server", "python", "CUDA", "backend API", "server API",
                                 "CUDA archs", "CMake")],
            [(r.container, r.branch, r.server_version, r.python, r.cuda, "%d.%d" % r.backend_api,
              "%d.%d" % r.server_api, ";".join(r.cuda_architectures), f">= {r.min_cmake}") for r in versions.RELEASES])


@app.command()
def validate(
    path: Annotated[Path, typer.Argument(help="A project, a model repository or one config.pbtxt.")] = Path("."),
) -> None:
    """Validate every config.pbtxt under PATH with Triton's ModelConfig schema and semantic checks."""
    model_config = _load("model_config")
    with _user_errors():
        if not path.exists():
            raise UsageError(f"{path} does not exist.", "Pass a project, a model repository or a config.pbtxt.")
        configs = model_config.find_configs(path)
        if not configs:
            raise UsageError(f"{path} holds no config.pbtxt.", "Pass a project, a model repository or a config.pbtxt.")
        findings = model_config.validate_tree(path, gpus_visible=_load("discovery").gpus_visible())
    for finding in findings:
        say(str(finding), style="red" if finding.severity == "error" else "yellow")
    errors = sum(1 for f in findings if f.severity == "error")
    checked = f"{len(configs)} configuration{'s' if len(configs) != 1 else ''} checked under {path}"
    if errors:
        say(f"{errors} error(s); {checked}", style="red")
        raise typer.Exit(1)
    say(f"OK: {checked}", style="green")


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
            _print_server(triton, target if isinstance(target, Project) else None, verbose)
            say("Serving; press Ctrl-C to stop.")
            _wait_while_running(triton, follow_log=verbose)
    say("Server stopped.")


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


def _print_notes(run, project: Project | None, verbose: bool) -> None:
    """A run's warnings and notes (a server or a test report): the release note only the first time it is due
    for the project and pair of releases, unless ``verbose``."""
    for text in run.warnings:
        warning(text)
    for text in run.notes:
        note(text)
    said = run.release_note
    if said is not None and (said.warning or verbose or project is None
                             or _load("runtime.release_note").first_time(project, said)):
        (warning if said.warning else note)(said.text)


def _print_server(triton, project: Project | None, verbose: bool) -> None:
    _print_notes(triton, project, verbose)
    say(triton.describe())
    records("Endpoints", [Column("protocol"), Column("address")],
            [("HTTP", triton.http_url), ("gRPC", triton.grpc_url), ("metrics", f"http://{triton.metrics_url}/metrics")])
    states = triton.model_states()
    records("Models", [Column("model"), Column("version"), Column("state"), Column("reason", wide=True)],
            [(m.name, m.version, m.state or "not loaded", m.reason) for m in states],
            styles=["green" if m.state == "READY" else "red" for m in states])
    for model in project.models if project is not None else ():
        if model.metrics:
            say(f"Custom metrics of {model.name}: {', '.join(model.metrics)} "
                f"(`curl -s http://{triton.metrics_url}/metrics | grep {model.metrics[0]}`)")
    say(f"Log: {triton.log_file}")


QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the failed checks and the summary "
                                           "line.")]
VerboseNotesOption = Annotated[bool, typer.Option("--verbose", "-v", help="Say every note, also those said on an "
                                                  "earlier run (the server's release).")]


@app.command("test")
def test_(
    project: Annotated[Path, typer.Argument(help="The project to test.")] = Path("."),
    server: ServerPath = None,
    junit_xml: Annotated[Optional[Path], typer.Option("--junit-xml", help="Write the results as JUnit XML.")] = None,
    fuzz: Annotated[int, typer.Option("--fuzz", min=0, help="Also send N randomised malformed requests.")] = 0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fuzzer.")] = 0,
    sanitize: SanitizeOption = None,
    docker: DockerOption = False,
    image: ImageOption = None,
    gpu: GpuRequestOption = False,
    packaged: Annotated[bool, typer.Option("--packaged", help="With --docker --image: test the image as it is "
                                           "(an image made by `tbgen package`; nothing built or mounted).")] = False,
    instance_kind: InstanceKindOption = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Test this model only (default: every "
                                                 "model tbgen.toml lists).")] = None,
    quiet: QuietOption = False,
    verbose: VerboseNotesOption = False,
) -> None:
    """Start a real Triton, load the project's backend and run the smoke suite against it."""
    with _user_errors():
        _check_docker_options(docker, image, gpu)
        if packaged and not (docker and image):
            raise UsageError("--packaged tests an image made by `tbgen package`.", "Add --docker --image TAG.")
        sanitizers = _load("toolchain.build").parse_sanitizers(sanitize)
        kind = _instance_kind(instance_kind)
        loaded = load_project(project)
        with _TestProgress(quiet) as shown:
            report = _load("commands.test").run_project_tests(
                loaded, server=server, fuzz=fuzz, seed=seed, sanitize=sanitizers, docker=docker, image=image,
                gpu=gpu, packaged=packaged, instance_kind=kind, model=model, on_result=shown.result,
                on_check=shown.check, on_phase=shown.phase)
    _report_tests(report, junit_xml, quiet=quiet, verbose=verbose, streamed=True)


class _TestProgress:
    """What `tbgen test` shows while it runs. On a terminal: a live line with what runs now and for how long
    (a check that waits on purpose says why). Off a terminal: a line per step and per result, the result's
    detail wrapped beneath it; with ``quiet`` only the failures."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.live = on_terminal()
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                            console=console, transient=True) if self.live else None
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

    def check(self, check) -> None:
        self._show(f"check {self.count + 1}: {check.name} [{check.protocol}]" + (f": {check.waits}" if check.waits
                                                                                 else ""))
        if check.waits and not self.live and not self.quiet:
            say(f"... {check.name}: {check.waits}")

    def result(self, result) -> None:
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
    for line in terminal.wrap(result.detail, console.width, indent="    ", first_indent="    "):
        console.print(line, markup=False, soft_wrap=True)


def _report_tests(report, junit_xml: Path | None, *, quiet: bool = False, verbose: bool = False,
                  streamed: bool = False) -> None:
    """Print a test run's results (unless ``streamed`` off a terminal already) and write them as JUnit XML;
    exit 1 unless every check passed."""
    if quiet:
        for text in report.warnings:
            warning(text)
    else:
        _print_notes(report, report.project, verbose)
    shown = [r for r in report.results if not quiet or not r.passed]
    if on_terminal() and shown:
        records(f"{report.project.name}: smoke tests against {report.server}",
                [Column("check"), Column("protocol"), Column("result"), Column("detail", wide=True),
                 Column("seconds", justify="right")],
                [(r.name, r.protocol, "pass" if r.passed else "FAIL", r.detail, f"{r.seconds:.2f}") for r in shown],
                styles=["" if r.passed else "red" for r in shown])
    elif not streamed:
        for result in shown:
            _print_result(result)
    if len(report.statistics) > 1 and not quiet:
        records("the server's statistics of each model",
                [Column(c, justify="right" if c != "model" else "left") for c in
                 ("model", "ok", "failed", "inferences", "executions", "queue us", "compute us")],
                [(s.name, str(s.success), str(s.failed), str(s.inferences), str(s.executions), f"{s.queue_us:.0f}",
                  f"{s.compute_us:.0f}") for s in report.statistics])
    if junit_xml:
        _load("smoke").write_junit_xml(report.results, junit_xml, suite=report.project.name)
        if not quiet:
            say(f"JUnit XML: {junit_xml}")
    failed = sum(not r.passed for r in report.results)
    say(f"{len(report.results) - failed} passed, {failed} failed  (server log: {report.log_file})",
        style="red" if failed else "green")
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
    verbose: VerboseNotesOption = False,
) -> None:
    """Send one request and print the outputs (and the response's parameters)."""
    infer_ = _load("commands.infer")
    with _user_errors():
        sequencing = infer_.Sequencing(
            None if sequence_id is None else int(sequence_id) if sequence_id.isdigit() else sequence_id, start, end)
        loaded = load_project_or_none(project)
        outputs = infer_.infer_once(
            model, input_ or [], project=loaded, url=url, server=server,
            instance_kind=_instance_kind(instance_kind), param_options=param or [], sequencing=sequencing,
            on_parameters=lambda parameters: say(json.dumps(parameters), label="parameters", style="bold"),
            on_server=lambda triton: _print_notes(triton, loaded, verbose))
    for name, array in outputs.items():
        say(f"{array.dtype} {list(array.shape)}", label=name, style="bold")
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
    colours = {OK: "green", FAIL: "red"}
    records("What tbgen needs, and how to fix what is missing",
            [Column("check"), Column("status"), Column("found", wide=True), Column("fix", wide=True)],
            [(d.name, d.status, d.found, d.fix) for d in diagnoses],
            styles=[colours.get(d.status, "yellow") for d in diagnoses])
    failed = [d.name for d in diagnoses if d.failed]
    if failed:
        say(f"Missing what tbgen requires: {', '.join(failed)}; run the fix shown for each.", style="red")
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
        entry = _load("toolchain.sources").fetch_sources(release, organization=organization, force=force,
                                                         googletest=googletest, googletest_url=googletest_url,
                                                         progress=say)
    say(f"{release.branch} in {entry}", label="Cached", style="green")


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
    say(f"{release.branch} in {entry}", label="Cached", style="green")


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
        say(f"No Triton sources cached in {sources.sources_dir()}. Fill it with `tbgen deps fetch` (online), or "
            "register sources you have (`tbgen deps add --help`).")
        return
    records(f"Triton sources in {sources.sources_dir()}",
            [Column(c) for c in ("release", *REPOSITORIES, GOOGLETEST, "complete")],
            [(entry.branch, *(entry.repositories.get(name) or "missing" for name in REPOSITORIES),
              entry.repositories.get(GOOGLETEST) or "system", "yes" if entry.complete else "no") for entry in entries],
            styles=["" if entry.complete else "red" for entry in entries])


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
    with _user_errors(), _BuildProgress() as shown:
        _check_docker_options(docker, image, gpu=False)
        sanitizers = _load("toolchain.build").parse_sanitizers(sanitize)
        loaded = load_project(project)
        if model is not None and loaded.model(model).backend == "python":
            say(f"Nothing to build for {model}: Triton's python backend serves it.")
            raise typer.Exit(0)
        result = _load("commands.build").build(loaded, gpu=gpu, build_type=build_type, jobs=jobs, clean=clean,
                                               progress=shown.step, server=server, sanitize=sanitizers,
                                               docker=docker, image=image)
    for text in result.warnings:
        warning(text)
    for text in result.notes:
        note(text)
    if result.artifact is None:
        raise typer.Exit(0)
    verb = "Built" if result.work_done else "Up to date:"
    say(f"{result.artifact}  ({result.seconds:.1f}s, log: {result.log_file})", label=verb, style="green")
    _print_findings(result.findings)
    raise typer.Exit(1 if result.errors else 0)


class _BuildProgress:
    """A build's progress: a bar on a terminal; off it, a line at each quarter of the build tool's steps."""

    def __init__(self) -> None:
        columns = (TextColumn("[bold]building[/bold]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}", markup=False))
        self.bar = Progress(*columns, console=console, transient=True) if on_terminal() else None
        self.task = self.bar.add_task("configuring", total=None) if self.bar is not None else None
        self.said = 0  # quarters said off a terminal

    def __enter__(self):
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc_info)

    def step(self, done: int, total: int, line: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total, description=line[:80])
        elif total and done * 4 // total > self.said:
            self.said = done * 4 // total
            say(f"building: {done}/{total} {line[:120]}")


def _path_argument(project: Project) -> str:
    """What a suggested command that takes the project as its argument adds: "" in the project, else its path."""
    option = project.project_option()
    return option.replace(" --project", "", 1) if option else ""


def _print_findings(findings) -> None:
    for finding in findings:
        style = {"error": "red", "warning": "yellow"}.get(finding.severity, "dim")
        say(finding.message, label=f"{finding.severity}:", style=style)


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
    say(f"{report.library}" + (f" against {report.server}" if report.server else ""))
    _print_findings(report.findings)
    if report.errors:
        say(f"{len(report.errors)} error(s)", style="red")
        raise typer.Exit(1)
    say("OK", style="green")


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
            progress=say)
    decoupled = any(level.responses_per_s for level in report.levels)
    columns = ["conc", "infer/s", *(["resp/s"] if decoupled else []), "p50", "p90", "p99", "queue", "compute",
               "client CPU", "server CPU", "errors"]
    records(f"{report.model} ({report.protocol}, batch {report.batch_size}, {report.tool}) against {report.server}",
            [Column(column, justify="right") for column in columns],
            [(str(level.concurrency), f"{level.throughput:,.1f}",
              *([f"{level.responses_per_s:,.1f}"] if decoupled else []),
              f"{level.p50_us:,.0f}", f"{level.p90_us:,.0f}", f"{level.p99_us:,.0f}",
              f"{level.server_queue_us:,.1f}", f"{level.server_compute_us:,.1f}",
              f"{level.client_cpu:.0%}", f"{level.server_cpu:.0%}", str(level.errors)) for level in report.levels])
    say("Latencies (p50-p99) and the server's queue and compute times per request in microseconds; CPU: share of "
        "one core over the level (client and server share this machine's cores).", style="dim")
    if json_file:
        report.write(json_file)
        say(f"JSON: {json_file}")
    if other is not None:
        records(f"This run / {compare_with}",
                [Column(c, justify="right") for c in ("concurrency", "throughput", "p50 latency", "p99 latency")],
                [(str(r.concurrency), f"{r.throughput:.2f}x", f"{r.p50:.2f}x", f"{r.p99:.2f}x")
                 for r in stats.compare(report, other)])


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
            progress=say)
    if result.prebuilt:
        carried = f", carrying {', '.join(result.carried)}" if result.carried else ""
        source = f"the backend built on this machine{carried}"
    else:
        source = "Triton's sources from tbgen's cache" if result.offline else "the Dockerfile as it is"
    say(f"Built {result.tag} ({result.image_id[:19]}) from {source}; log: {result.log_file}")
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
            note(updating.RECONSTRUCTED_NOTE)
        _print_update_plan(plan, dry_run)
        if dry_run:
            return
        updating.update_project(plan)
        _print_release_changes(plan.old_release, plan.new_release)
    if plan.conflicts:
        say(f"{len(plan.conflicts)} file(s) with conflicts (between <<<<<<< yours and >>>>>>> markers): edit "
            "each to keep what you want and remove the markers, then check with "
            f"`grep -n '^<<<<<<<' {' '.join(c.path for c in plan.conflicts)}`, `tbgen build{_path_argument(loaded)}` "
            f"and `tbgen test{_path_argument(loaded)}`.", style="red")
        raise typer.Exit(1)
    say(f"Next: `tbgen build{_path_argument(loaded)}`, then `tbgen test{_path_argument(loaded)}`")


def _print_update_plan(plan: Any, dry_run: bool) -> None:
    old, new = plan.base.recipe, plan.new.recipe
    what = (f"{plan.project.name}: {old.template} {old.template_version} at r{old.triton_version} -> "
            f"{new.template_version} at r{new.triton_version}")
    if not plan.changes:
        say(f"{what}: up to date, nothing to change.")
        return
    colours = {"replaced": "green", "merged": "cyan", "added": "green", "conflict": "red"}
    records(f"{'Would update' if dry_run else 'Updated'} {what}:",
            [Column("file"), Column("action"), Column("note", wide=True)],
            [(change.path, change.action, change.note) for change in plan.changes],
            styles=[colours.get(change.action, "yellow") for change in plan.changes])


def _print_release_changes(old: versions.Release, new: versions.Release) -> None:
    changes = versions.release_changes(old, new)
    if not changes:
        return
    records(f"What changed from {old.container} to {new.container} for a backend",
            [Column(""), Column(old.container), Column(new.container), Column("what to do", wide=True)],
            [(change.what, change.old, change.new, change.action) for change in changes])


def _check_drift(project: Path, other_options: bool) -> None:
    updating = _load("commands.update")
    with _user_errors():
        if other_options:
            raise UsageError("--drift compares the project with what tbgen generates; --server, --docker and --image "
                             "check a built library.", "Run them as two commands.")
        loaded = load_project(project)
        report = updating.drift(loaded)
    if report.reconstructed:
        note(updating.RECONSTRUCTED_NOTE)
    for label, files in (("edited by you", report.edited), ("deleted by you", report.deleted)):
        if files:
            say(f"{label}: " + ", ".join(files))
    if not report.edited and not report.deleted:
        say("Every generated file is as tbgen wrote it.")
    recorded, shipped = report.template
    if report.template_behind:
        say(f"template: {recorded} generated it; tbgen ships {shipped}, which renders "
            f"{len(report.template_changed)} file(s) otherwise: update due")
    else:
        say(f"template: {shipped}, up to date")
    if report.release_behind:
        say(f"release: {report.release.container}; the newest tbgen knows is {report.newest.container}: update due")
    else:
        say(f"release: {report.release.container}, the newest tbgen knows")
    if report.update_due:
        option = loaded.project_option()
        say(f"Next: `tbgen update --dry-run{option}`, then `tbgen update{option}`")
        raise typer.Exit(1)


@env_app.command("pack")
def env_pack(
    project: Annotated[Path, typer.Argument(help="The project.")] = Path("."),
    model: Annotated[Optional[str], typer.Option("--model", help="Only this model (default: every python model "
                                                 "with a requirements.txt).")] = None,
    docker: Annotated[bool, typer.Option("--docker", help="Build it inside the server's image (for `tbgen test "
                                         "--docker` and `tbgen package`), with the image's python3.")] = False,
    image: ImageOption = None,
) -> None:
    """Pack model_repository/MODEL/requirements.txt (with numpy) into the environment the python backend runs the
    model in: MODEL/python-env.tar.gz, named by EXECUTION_ENV_PATH in its config.pbtxt."""
    with _user_errors():
        _check_docker_options(docker, image, gpu=False)
        loaded = load_project(project)
        say(f"Packing for {image or 'the release image' if docker else 'this machine'} ...")
        packed = _load("commands.env").pack_envs(loaded, model=model, docker=docker, image=image)
    for result in packed:
        env = result.env
        size = env.path.stat().st_size / 1e6
        say(f"{env.path} ({size:.1f} MB): Python {env.python}, {len(env.modules)} modules, for {result.target}; "
            f"pip's output: {result.log_file}", label="Packed", style="green")
        if result.config_written:
            say(f"EXECUTION_ENV_PATH into {result.model}/config.pbtxt ($$TRITON_MODEL_DIRECTORY/python-env.tar.gz)",
                label="Wrote", style="yellow")
    say(f"Next: `tbgen test{' --docker' if docker else ''}{_path_argument(loaded)}`")


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
        say(str(file), label="Wrote", style="green")
    say(f"tbgen.toml lists the new models; next: `tbgen test{_path_argument(load_project(project))}`")


remove_app = typer.Typer(help="Remove what `tbgen add` added to a project.", no_args_is_help=True)
app.add_typer(remove_app, name="remove")


@remove_app.command("model")
def remove_model(
    name: Annotated[str, typer.Argument(help="A model `tbgen add model` added.")],
    project: Annotated[Path, typer.Option("--project", help="The project (default: the one here).")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Remove the files you edited or put under the model too, "
                                        "and work in a project without a generation record.")] = False,
) -> None:
    """Remove a model `tbgen add model` added: its directory in the model repository, its reference, its tbgen.toml
    entry, and its part of the generation record, so that `tbgen update` does not bring it back.

    A composed model (`tbgen add model r --pattern bls --set callees=a,b`) goes with the models that command created
    with it, except one another model still calls. Refused, with nothing changed: a model other models call, the
    project's last model, and the models `tbgen new` made (the template's: the project's code is generated for
    them); without --force, files you edited or put under the model (named), and projects without a record.
    """
    with _user_errors():
        removal = _load("scaffold").remove_model(load_project(project), name, force=force)
    for file in removal.files:
        say(str(file), label="Removed", style="red")
    for model, callers in removal.kept.items():
        say(f"Kept {model}: {', '.join(callers)} call(s) it")
    lists = "tbgen.toml and the generation record list" if removal.record_updated else "tbgen.toml lists"
    say(f"{lists} {', '.join(removal.models)} no more")


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
    say(f"{added.file}: {added.spec.describe()}", label="Wrote", style="green")
    say("Include its headers in the backend's sources and use it; `tbgen package` carries the shared objects the "
        "server's image lacks.")
    say(f"Next: `tbgen build{_path_argument(load_project(project))}`")


DeployProject = Annotated[Path, typer.Option("--project", help="The project (default: the one here).")]
DeployOut = Annotated[Optional[Path], typer.Option("--out", help="Where to write (default: the project's {}).")]
DeployImage = Annotated[Optional[str], typer.Option("--image", help="The image the pods run (default: the tag "
                                                    "`tbgen package` gives, <project>:latest).")]
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
    say(f"{what} {written.directory} ({len(written.files)} files)", label="Wrote", style="green")
    load = _load("commands.load_time").read_load_time(project)
    say(values.startup_probe(load)[1])


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
    local = f" --chart {written.directory}" if out is not None else ""
    say(f"Next: `tbgen deploy check {written.directory}`; `tbgen deploy local{loaded.project_option()}{local}`; "
        f"`helm install {release} {written.directory}`")


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
    say(f"Next: `tbgen deploy check {written.directory}`; `kubectl apply -f {written.directory}`")


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
            say(f"{finding.step}: {finding.subject}: {finding.detail}", label="FAIL", style="red")
        elif finding.skipped:
            note(f"{finding.subject}: {finding.detail}")
    say(f"{report.kind} {report.directory}: {report.objects} objects, Kubernetes {' and '.join(report.kube_versions)}")
    records("", [Column("check"), Column("passed", justify="right"), Column("failed", justify="right")],
            [(step, str(passed), str(failed)) for step, (passed, failed) in steps.items()],
            styles=["red" if failed else "" for _, (_, failed) in steps.items()])
    if not report.passed:
        say(f"{len(report.failures)} failure(s)", style="red")
        raise typer.Exit(1)
    say(f"OK {report.directory}", style="green")


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
            progress=say)
    if run.packaged is not None:
        say(f"Packaged {run.packaged.tag} ({run.packaged.image_id[:19]})")
    pod = run.pod
    ready = f"ready {run.ready_after:.1f} s after its start" if run.ready_after is not None else "never ready"
    say(f"Pod spec of {run.chart}: {pod.image} as user {pod.user or 'of the image'}, ports "
        f"{', '.join(f'{n} {p}' for n, p in pod.ports.items())}, /dev/shm {(pod.shm_bytes or 0) / 2**20:.0f} MiB; "
        f"{ready}")
    if run.memory_used is not None:
        limit = f" of its {pod.memory_limit / 2**20:.0f} MiB limit" if pod.memory_limit else ""
        say(f"The server used {run.memory_used / 2**20:.0f} MiB{limit} after the tests (resources in values.yaml).")
    _report_tests(run.report, junit_xml)


@app.command()
def clean(
    containers: Annotated[bool, typer.Option("--containers", help="Stop and remove every container with tbgen's "
                                             "label (left behind by a killed tbgen).")] = False,
) -> None:
    """Remove what tbgen left behind."""
    with _user_errors():
        if not containers:
            raise UsageError("Say what to clean.", "`tbgen clean --containers`")
        engine = _load("engine")
        removed = engine.remove_containers(engine.tbgen_containers(engine.connect()))
    say(f"Removed {len(removed)} container(s){': ' + ', '.join(removed) if removed else ''}.")


class _user_errors:
    """Turn a TbgenError into a message with its hint and its exit code (no traceback for user mistakes)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            return False
        if isinstance(exc, TbgenError):
            terminal.error(exc.message, exc.hint)
            raise typer.Exit(exc.exit_code)
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or SIGTERM/SIGHUP turned into one by the runtime
            err_console.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(getattr(exc, "exit_code", 130))
        return False


def main() -> None:
    app()
