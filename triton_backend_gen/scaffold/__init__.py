"""Scaffold stage: answers -> a project on disk.

``render_new_project`` is the library entry point of ``tbgen new``: it resolves and validates every answer
before anything is written, then renders the template atomically.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from triton_backend_gen import frameworks
from triton_backend_gen.errors import AnswerError, TbgenError, UsageError
from triton_backend_gen.model_config.importing import ImportedModel, import_config
from triton_backend_gen.project import PROJECT_FILE, Project, load_project
from triton_backend_gen.scaffold import compose, naming
from triton_backend_gen.scaffold.answers import (
    Prompter,
    chosen_answers,
    parse_set_options,
    read_answers_file,
    resolve_answers,
)
from triton_backend_gen.scaffold.batcher import AddedBatcher, add_batcher
from triton_backend_gen.scaffold.example_model import ExampleModel
from triton_backend_gen.scaffold.example_model import write_example_model as _write_with
from triton_backend_gen.scaffold.record import (
    Addition,
    GeneratedFile,
    Recipe,
    Record,
    read_record,
    read_tree,
    record_tree,
    write_file,
    write_record_atomically,
)
from triton_backend_gen.scaffold.remove import Removal, remove_model_from_project
from triton_backend_gen.scaffold.render import render_project
from triton_backend_gen.scaffold.templates import Option, Template, get_template, list_templates

__all__ = [
    "ExampleModel",
    "ImportedModel",
    "Recipe",
    "Record",
    "Removal",
    "add_batcher_to_project",
    "add_model_to_project",
    "get_template",
    "import_config",
    "list_templates",
    "parse_set_options",
    "read_answers_file",
    "read_record",
    "remove_model_from_project",
    "render_new_project",
    "render_project",
    "render_recipe",
    "resolve_answers",
    "write_example_model",
]


def render_new_project(
    template: str,
    target: Path,
    given: Mapping[str, Any],
    *,
    force: bool = False,
    prompter: Prompter | None = None,
    imported: ImportedModel | None = None,
) -> Path:
    """Render ``template`` into ``target`` (the project directory; its name is the project name).

    ``given`` holds the answers the user set (values may be strings, as from ``--set``); the others take their
    defaults or are asked for through ``prompter``. ``imported``: the model of ``--from-config``, whose
    answers come under ``given`` and whose label files are written beside its config.pbtxt. The project
    gets its generation record (scaffold.record), the base of a later ``tbgen update``.
    """
    spec = get_template(template)
    name = naming.check_project_name(
        Path(target).name
    )  # as it is: answers are stripped, a directory name is not
    if "project_name" in given and str(given["project_name"]).strip() != name:
        raise AnswerError(
            f"project_name {given['project_name']!r} differs from the name of the project directory "
            f"{name!r}.",
            "The project's name is the last part of the path `tbgen new` is given: leave project_name out "
            "of --set and answers files.",
        )
    carried: dict[str, bytes] = {}
    if imported is not None:
        given = {**imported.answers(template), **given}
        carried = {
            f"model_repository/{given['model_name']}/{file}": data for file, data in imported.files.items()
        }
    recipe = Recipe(template, spec.version, {**given, "project_name": name}, carried=tuple(sorted(carried)))
    return render_recipe(recipe, Path(target), carried, force=force, prompter=prompter)[0]


def render_recipe(
    recipe: Recipe,
    target: Path,
    carried: Mapping[str, bytes],
    *,
    force: bool = False,
    prompter: Prompter | None = None,
) -> tuple[Path, Record]:
    """Render ``recipe`` (a new project's, or a recorded one with other answers) into ``target``, replaying
    the models it added, and record it there; the project's path and its record. ``carried``: the contents of
    ``recipe.carried``."""
    spec = get_template(recipe.template)
    composition, given = _plan_recipe(recipe)
    recording = _RecordingPrompter(prompter) if prompter is not None else None
    answers = resolve_answers(spec, {"project_name": recipe.project_name, **given}, recording)
    if composition is not None:
        compose.check_answers(composition, answers)
    recipe = _as_rendered(recipe, spec, answers, recording.answers if recording else {})
    records: list[Record] = []

    def finish(root: Path) -> None:
        if composition is not None:
            compose.compose_into_tree(root, composition, answers, {}, fresh_project=True)
        for addition in recipe.additions:
            replay(root, addition)
        records.append(record_tree(root, recipe))
        if force:
            _refuse_to_revert_edits(records[0].files, Path(target))

    path = render_project(
        spec,
        answers,
        Path(target),
        force=force,
        extend=finish,
        files={Path(relative): data for relative, data in carried.items()},
    )
    return path, records[0]


def _plan_recipe(recipe: Recipe) -> tuple[compose.Composition | None, dict[str, Any]]:
    """The composition ``recipe`` asks for (None for none) and the answers it leaves for the template."""
    given = {k: v for k, v in recipe.given.items() if k != "project_name"}
    composition, given = compose.plan(recipe.template, given)
    if composition is None and given.get("signature") and "model_name" not in given:
        # A model of the user's own is no add/sub: it takes the project's name unless told otherwise.
        given = {**given, "model_name": recipe.project_name.lower()}
    return composition, given


def _as_rendered(
    recipe: Recipe, spec: Template, answers: Mapping[str, Any], asked: Mapping[str, Any]
) -> Recipe:
    """``recipe`` as it is recorded once rendered with ``answers``: the template's version, the release, and
    the answers given at the prompts (``asked``) that are no default, as the user typed them."""
    release = answers["triton_version"]
    chosen = {key: asked[key] for key in chosen_answers(spec, answers) if key in asked}
    releases = recipe.releases if recipe.releases[-1:] == (release,) else (*recipe.releases, release)
    return replace(
        recipe,
        template_version=spec.version,
        given={**recipe.given, **chosen, "triton_version": release},
        releases=releases,
    )


def _refuse_to_revert_edits(rendered: Mapping[str, GeneratedFile], target: Path) -> None:
    """Over an existing tbgen project, --force replaces only the files tbgen generated and the user never
    edited (by its generation record; every differing file is taken for an edit when it has none)."""
    if not (target / PROJECT_FILE).is_file():
        return
    record = read_record(target)
    base = record.files if record is not None else {}
    edited = []
    for relative, file in rendered.items():
        current = target / relative
        if current.is_file() and current.read_bytes() not in (file.data, base.get(relative, file).data):
            edited.append(relative)
    if edited:
        listed = ", ".join(edited[:8]) + (f" and {len(edited) - 8} more" if len(edited) > 8 else "")
        raise UsageError(
            f"{target} is a tbgen project, and `tbgen new` with --force would replace {len(edited)} "
            f"file(s) you edited: {listed}.",
            "To move the project to other answers or a newer release and keep your edits: `tbgen update "
            "--dry-run` shows the plan, `tbgen update` applies it (with --set key=value or "
            "--triton-version for other answers or releases). To discard your edits, delete those files "
            "first.",
        )


class _RecordingPrompter:
    """A prompter that remembers the user's last answer to each option it asks, as typed (those that are no
    default, by answers.chosen_answers, join the recipe)."""

    def __init__(self, prompter: Prompter) -> None:
        self.prompter, self.answers = prompter, {}

    def ask(self, option: Option, default: Any) -> Any:
        self.answers[option.key] = value = self.prompter.ask(option, default)
        return value

    def show_error(self, error: AnswerError) -> None:
        self.prompter.show_error(error)


def add_model_to_project(
    project: Project, name: str, template: str | None, given: Mapping[str, Any]
) -> list[Path]:
    """``tbgen add model``: add model ``name`` to ``project`` (see scaffold.compose.compose_into_project); the
    generation record learns it, so that ``tbgen update`` renders it again. Returns the files written."""
    record = read_record(project.root)
    addition = Addition(name, template, dict(given))
    base = _replayed(record, addition) if record is not None else None
    written = compose.compose_into_project(project, name, template, given)
    if base is not None:
        write_record_atomically(project.root, base)
    return written


def add_batcher_to_project(
    project: Project, model: str, strategy: str, *, limit: int = 0, elements_input: str = ""
) -> AddedBatcher:
    """``tbgen add batcher``: give ``model`` of ``project`` a batching strategy (scaffold.batcher's
    add_batcher); the generation record learns it, so that ``tbgen update`` renders it again and ``tbgen
    remove model`` and ``tbgen check --drift`` tell its files from the user's edits."""
    record = read_record(project.root)
    given = {"strategy": strategy, "limit": limit, "elements_input": elements_input}
    addition = Addition(model, None, given, kind="batcher")
    base = _replayed(record, addition) if record is not None else None
    added = add_batcher(project, model, strategy, limit=limit, elements_input=elements_input)
    if base is not None:
        write_record_atomically(project.root, base)
    return added


def replay(root: Path, addition: Addition) -> None:
    """Run ``addition`` (a `tbgen add model` or `tbgen add batcher` run) again on the project at ``root``."""
    if addition.kind == "batcher":
        add_batcher(load_project(root), addition.name, **addition.given)
    else:
        compose.compose_into_project(load_project(root), addition.name, addition.template, addition.given)


def _replayed(record: Record, addition: Addition) -> Record | None:
    """``record`` with ``addition`` replayed on the files it holds; None when it cannot be (the project was
    grown by hand in a way the addition depends on: its files then count as the user's)."""
    with tempfile.TemporaryDirectory(prefix="tbgen-record-") as scratch:
        root = Path(scratch) / record.recipe.project_name
        for relative, file in record.files.items():
            write_file(root / relative, file)
        try:
            replay(root, addition)
        except TbgenError:
            return None
        return Record(record.recipe.with_additions(addition), read_tree(root))


def write_example_model(project: Project) -> ExampleModel | None:
    """The last step of ``tbgen new`` for a framework project: its example model file, written by its
    export_model.py (see scaffold.example_model). None for a project without a framework."""
    chosen = frameworks.framework(project.framework)
    if chosen is None:
        return None
    return _write_with(project.root, project.models[0].directory, chosen)
