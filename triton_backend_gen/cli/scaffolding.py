"""Commands that make and reshape a project: new, add model, add library, remove model, update, and the drift
report of `tbgen check --drift`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.prompt import Confirm, Prompt

from triton_backend_gen import signature, versions
from triton_backend_gen.cli.app import add_app, app, remove_app
from triton_backend_gen.cli.options import PatternOption, ProjectOption
from triton_backend_gen.cli.output import Column, console, note, records, say, user_errors
from triton_backend_gen.commands import update as updating
from triton_backend_gen.commands.add_library import add_library as add_library_to_project
from triton_backend_gen.errors import AnswerError, UsageError
from triton_backend_gen.model_config import load_model_config
from triton_backend_gen.model_config.importing import import_config
from triton_backend_gen.project import Project, load_project
from triton_backend_gen.scaffold import (
    add_batcher_to_project,
    add_model_to_project,
    list_templates,
    parse_set_options,
    remove_model_from_project,
    render_new_project,
    write_example_model,
)
from triton_backend_gen.scaffold.layering import given_answers
from triton_backend_gen.toolchain.sources import uncached_note

if TYPE_CHECKING:
    from triton_backend_gen.scaffold.templates import Option


class RichPrompter:
    """Asks for answers on a terminal with Rich prompts."""

    def ask(self, option: Option, default: Any) -> Any:
        if option.kind is dict:
            return self._ask_signature()
        if option.kind is bool:
            return Confirm.ask(option.help, default=bool(default), console=console)
        if option.choices:
            return Prompt.ask(
                option.help, choices=list(option.choices), default=str(default), console=console
            )
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


@app.command()
def new(
    path: Annotated[Path, typer.Argument(help="Project directory to create; its name is the project name.")],
    template: Annotated[
        Optional[str],
        typer.Option("--template", "-t", help="cpp-backend, python-backend or decoupled-backend."),
    ] = None,
    set_: Annotated[
        Optional[list[str]], typer.Option("--set", help="Set any answer: --set key=value (repeatable).")
    ] = None,
    gpu: Annotated[Optional[bool], typer.Option("--gpu/--no-gpu", help="CUDA kernels (cpp-backend).")] = None,
    triton_version: Annotated[
        Optional[str], typer.Option("--triton-version", help="Target release: 24.10, r24.10 or 2.51.0.")
    ] = None,
    backend_name: Annotated[Optional[str], typer.Option("--backend-name", help="Backend name.")] = None,
    model_name: Annotated[
        Optional[str], typer.Option("--model-name", help="Name of the example model.")
    ] = None,
    framework: Annotated[
        Optional[str],
        typer.Option(
            "--framework",
            help="cpp-backend: wrap an inference library, libtorch (model.pt) or opencv-dnn (model.onnx).",
        ),
    ] = None,
    answers_file: Annotated[
        Optional[Path],
        typer.Option("--answers", help="Answers from a file: a project's tbgen.toml, or TOML/JSON."),
    ] = None,
    pattern: PatternOption = None,
    inputs: Annotated[
        Optional[list[str]],
        typer.Option(
            "--input",
            help="A model input NAME:DTYPE:DIMS[:optional], e.g. "
            "IMG:FP16:3,224,224 (repeatable; give --output too).",
        ),
    ] = None,
    outputs: Annotated[
        Optional[list[str]],
        typer.Option("--output", help="A model output NAME:DTYPE:DIMS, e.g. SCORES:FP32:-1 (repeatable)."),
    ] = None,
    from_config: Annotated[
        Optional[Path],
        typer.Option(
            "--from-config",
            help="Serve the signature of this model configuration "
            "(a config.pbtxt, any file name): name, tensors, batching, instance groups.",
        ),
    ] = None,
    no_input: Annotated[bool, typer.Option("--no-input", help="Never prompt; take defaults.")] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Render into an existing directory, overwriting template files only."),
    ] = False,
) -> None:
    """Create a backend project from a template."""
    with user_errors():
        flags = {
            "gpu": gpu,
            "triton_version": triton_version,
            "backend_name": backend_name,
            "model_name": model_name,
            "framework": framework,
            "pattern": pattern,
        }
        given = given_answers(
            answers_file=answers_file,
            flags=flags,
            sets=set_ or [],
            inputs=inputs or [],
            outputs=outputs or [],
            from_config=from_config,
        )
        interactive = not no_input and sys.stdin.isatty()
        template = template or given.pop("template", None) or _ask_template(interactive)
        given.pop("template", None)
        imported = import_config(from_config, template) if from_config is not None else None
        prompter = RichPrompter() if interactive else None
        project = render_new_project(template, path, given, force=force, prompter=prompter, imported=imported)
    say(f"{project} from {template}", label="Created", style="green")
    _finish_new(load_project(project), composed=pattern is not None, imported=imported)
    say(f"Next: cd {path} and read README.md; `tbgen test` there proves the project in a real Triton.")


def _finish_new(loaded: Project, *, composed: bool, imported) -> None:
    """After rendering: a composed project's models, the framework's example model written, what
    --from-config took."""
    if composed:
        say("Models: " + ", ".join(m.name + (f" ({m.pattern})" if m.pattern else "") for m in loaded.models))
    example = write_example_model(loaded)
    if example is not None:
        colour = "green" if example.written or example.path.exists() else "yellow"
        say(example.message, label="Example model:", style=colour)
    if imported is not None:
        _print_imported(imported, loaded.models[0])


def _print_imported(imported, model) -> None:
    """What --from-config took, left out and changed."""
    served = load_model_config(model.config_file)
    say(f"Model {model.name}: {imported.signature.describe()}")
    for text in (*imported.changes(model.name, served.backend), *imported.notes):
        note(text)


def _ask_template(interactive: bool) -> str:
    if not interactive:
        return "cpp-backend"
    names = [t.name for t in list_templates()]
    return Prompt.ask("Template", choices=names, default="cpp-backend", console=console)


@app.command()
def update(
    project: ProjectOption = Path("."),
    triton_version: Annotated[
        Optional[str],
        typer.Option(
            "--triton-version",
            help="The release to move to: 26.06, r26.06 or 2.70.0 (default: $TBGEN_TRITON_VERSION, else the "
            "newest).",
        ),
    ] = None,
    set_: Annotated[
        Optional[list[str]], typer.Option("--set", help="Change an answer: --set key=value (repeatable).")
    ] = None,
    template_version: Annotated[
        Optional[str],
        typer.Option(
            "--template-version", help="The template version to move to (this tbgen ships one per template)."
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Run on a git work tree with uncommitted changes.")
    ] = False,
) -> None:
    """Move a project to a newer release or template, or other answers, keeping your edits (a 3-way merge with
    what tbgen generated). Exit 1 when conflicts are left to resolve."""
    with user_errors():
        loaded = load_project(project)
        if not dry_run and not force:
            updating.check_clean(loaded.root)
        plan = updating.plan_project_update(
            loaded,
            triton_version=triton_version,
            settings=parse_set_options(set_ or []),
            template_version=template_version,
        )
        if plan.reconstructed:
            note(updating.RECONSTRUCTED_NOTE)
        _print_update_plan(plan, dry_run)
        if dry_run:
            return
        updating.update_project(plan)
        _print_release_changes(plan.old_release, plan.new_release)
        if loaded.is_cpp:
            _say_whether_sources_are_at_hand(plan.new_release)
    if plan.conflicts:
        say(
            f"{len(plan.conflicts)} file(s) with conflicts (between <<<<<<< yours and >>>>>>> markers): edit "
            "each to keep what you want and remove the markers, then check with "
            f"`grep -n '^<<<<<<<' {' '.join(c.path for c in plan.conflicts)}`, `tbgen "
            f"build{loaded.path_argument()}` and `tbgen test{loaded.path_argument()}`.",
            style="red",
        )
        raise typer.Exit(1)
    say(f"Next: `tbgen build{loaded.path_argument()}`, then `tbgen test{loaded.path_argument()}`")


def _print_update_plan(plan: Any, dry_run: bool) -> None:
    old, new = plan.base.recipe, plan.new.recipe
    what = (
        f"{plan.project.name}: {old.template} {old.template_version} at r{old.triton_version} -> "
        f"{new.template_version} at r{new.triton_version}"
    )
    if not plan.changes:
        say(f"{what}: up to date, nothing to change.")
        return
    colours = {"replaced": "green", "merged": "cyan", "added": "green", "conflict": "red"}
    records(
        f"{'Would update' if dry_run else 'Updated'} {what}:",
        [Column("file"), Column("action"), Column("note", wide=True)],
        [(change.path, change.action, change.note) for change in plan.changes],
        styles=[colours.get(change.action, "yellow") for change in plan.changes],
    )


def _print_release_changes(old: versions.Release, new: versions.Release) -> None:
    changes = versions.release_changes(old, new)
    if not changes:
        return
    records(
        f"What changed from {old.container} to {new.container} for a backend",
        [Column(""), Column(old.container), Column(new.container), Column("what to do", wide=True)],
        [(change.what, change.old, change.new, change.action) for change in changes],
    )


def _say_whether_sources_are_at_hand(release: versions.Release) -> None:
    """After a C++ project moved to ``release``: whether its build finds Triton's sources offline."""
    uncached = uncached_note(release)
    if uncached:
        note(uncached)


def check_drift(project: Path, other_options: bool) -> None:
    """`tbgen check --drift`: edited generated files; whether the template or the release is behind (exit
    1)."""
    with user_errors():
        if other_options:
            raise UsageError(
                "--drift compares the project with what tbgen generates; --server, --docker and --image "
                "check a built library.",
                "Run them as two commands.",
            )
        loaded = load_project(project)
        report = updating.drift(loaded)
    if report.reconstructed:
        note(updating.RECONSTRUCTED_NOTE)
    for label, files in (("edited by you", report.edited), ("deleted by you", report.deleted)):
        if files:
            say(f"{label}: " + ", ".join(files))
    if report.plumbing:
        note(
            "generated plumbing you edited (`tbgen update` keeps the edits by merging them): "
            + ", ".join(report.plumbing)
            + "; your own code belongs in your files (README.md says which)"
        )
    if not report.edited and not report.deleted:
        say("Every generated file is as tbgen wrote it.")
    recorded, shipped = report.template
    if report.template_behind:
        say(
            f"template: {recorded} generated it; tbgen ships {shipped}, which renders "
            f"{len(report.template_changed)} file(s) otherwise: update due"
        )
    else:
        say(f"template: {shipped}, up to date")
    if report.release_behind:
        say(f"release: {report.release.container}; {_target_words(report.target)}: update due")
    else:
        say(f"release: {report.release.container}, {_target_words(report.target)}")
    if report.update_due:
        option = loaded.project_option()
        say(f"Next: `tbgen update --dry-run{option}`, then `tbgen update{option}`")
        raise typer.Exit(1)


def _target_words(target: versions.Release) -> str:
    """How the release `tbgen update` moves to was chosen, for --drift's line."""
    if target.container == versions.newest().container:
        return f"the newest tbgen knows is {target.container}"
    default = versions.default_release()
    if target.container == default.container:
        return f"the release tbgen targets is {target.container} (${versions.DEFAULT_VARIABLE})"
    return f"not older than the one tbgen targets, {default.container} (${versions.DEFAULT_VARIABLE})"


@add_app.command("model")
def add_model(
    name: Annotated[str, typer.Argument(help="The new model's name (with --pattern: the top model's).")],
    project: ProjectOption = Path("."),
    template: Annotated[
        Optional[str],
        typer.Option("--template", "-t", help="The template of the model (default: the project's)."),
    ] = None,
    pattern: PatternOption = None,
    set_: Annotated[
        Optional[list[str]], typer.Option("--set", help="Set any answer: --set key=value.")
    ] = None,
    inputs: Annotated[
        Optional[list[str]],
        typer.Option(
            "--input", help="A model input NAME:DTYPE:DIMS[:optional] (repeatable; give --output too)."
        ),
    ] = None,
    outputs: Annotated[
        Optional[list[str]], typer.Option("--output", help="A model output NAME:DTYPE:DIMS.")
    ] = None,
) -> None:
    """Add a model (or a composed model and its callees) to a project: new files and tbgen.toml entries."""
    with user_errors():
        given = given_answers(
            flags={"pattern": pattern}, sets=set_ or [], inputs=inputs or [], outputs=outputs or []
        )
        written = add_model_to_project(load_project(project), name, template, given)
    for file in written:
        say(str(file), label="Wrote", style="green")
    say(f"tbgen.toml lists the new models; next: `tbgen test{load_project(project).path_argument()}`")


@add_app.command("batcher")
def add_batcher(
    model: Annotated[str, typer.Argument(help="The model that gets the strategy (a model of the project).")],
    strategy: Annotated[
        str,
        typer.Option(
            "--strategy",
            "-s",
            help="single (one request per batch), volume (input bytes), tokens (elements of one input) or "
            "custom (your rule in batching/MODEL/decision.h).",
        ),
    ],
    limit: Annotated[
        int,
        typer.Option(
            "--limit", min=0, help="The strategy's limit (bytes, elements, requests; 0: sized for the model)."
        ),
    ] = 0,
    elements_input: Annotated[
        str,
        typer.Option("--input", help="tokens/custom: the input whose elements count (default: the first)."),
    ] = "",
    project: ProjectOption = Path("."),
) -> None:
    """Give a model a batching strategy of its own: batching/MODEL/ (a library `tbgen build` installs as the
    model's batchstrategy.so), its parameters in config.pbtxt, batch_strategy in tbgen.toml."""
    with user_errors():
        loaded = load_project(project)
        added = add_batcher_to_project(loaded, model, strategy, limit=limit, elements_input=elements_input)
    for file in added.written:
        say(str(file), label="Wrote", style="green")
    for key, value in added.parameters:
        say(f"{model}/config.pbtxt: {key} = {value}", label="Set", style="green")
    say(
        f"Next: `tbgen build{loaded.path_argument()}`, then `tbgen test{loaded.path_argument()}` (its check "
        '"batching strategy" proves the batches)'
    )


@remove_app.command("model")
def remove_model(
    name: Annotated[str, typer.Argument(help="A model `tbgen add model` added.")],
    project: ProjectOption = Path("."),
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Remove the files you edited or put under the model too, "
            "and work in a project without a generation record.",
        ),
    ] = False,
) -> None:
    """Remove a model `tbgen add model` added: its directory in the model repository, its reference, its
    tbgen.toml entry, and its part of the generation record, so that `tbgen update` does not bring it back.

    A composed model (`tbgen add model r --pattern bls --set callees=a,b`) goes with the models that command
    created with it, except one another model still calls. Refused, with nothing changed: a model other models
    call, the project's last model, and the models `tbgen new` made (the template's: the project's code is
    generated for them); without --force, files you edited or put under the model (named), and projects
    without a record.
    """
    with user_errors():
        removal = remove_model_from_project(load_project(project), name, force=force)
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
    find_package: Annotated[
        Optional[str],
        typer.Option(
            "--find-package", help="Find it with CMake's find_package(PKG) and link its imported target."
        ),
    ] = None,
    components: Annotated[
        Optional[list[str]],
        typer.Option(
            "--components", help="With --find-package: its COMPONENTS (comma-separated or repeated)."
        ),
    ] = None,
    target: Annotated[
        Optional[str],
        typer.Option(
            "--target", help="With --find-package: the imported target to link (default: PKG::PKG)."
        ),
    ] = None,
    pkg_config: Annotated[
        Optional[str], typer.Option("--pkg-config", help="Find it with pkg-config's module PKG (PKG.pc).")
    ] = None,
    path: Annotated[
        Optional[Path],
        typer.Option("--path", help="A prefix holding its headers in include/ and the library in lib/."),
    ] = None,
) -> None:
    """Link a third-party library into a C++ backend: writes cmake/libraries/NAME.cmake (never over one)."""
    with user_errors():
        added = add_library_to_project(
            load_project(project),
            name,
            find_package=find_package,
            components=components or [],
            target=target,
            pkg_config=pkg_config,
            path=path,
        )
    say(f"{added.file}: {added.spec.describe()}", label="Wrote", style="green")
    say(
        "Include its headers in the backend's sources and use it; `tbgen package` carries the shared "
        "objects the server's image lacks."
    )
    say(f"Next: `tbgen build{load_project(project).path_argument()}`")
