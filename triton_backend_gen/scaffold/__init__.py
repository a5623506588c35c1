"""Scaffold stage: answers -> a project on disk.

``render_new_project`` is the library entry point of ``tbgen new``: it resolves and validates every answer
before anything is written, then renders the template atomically.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from triton_backend_gen import frameworks
from triton_backend_gen.errors import AnswerError
from triton_backend_gen.model_config.importing import ImportedModel, import_config
from triton_backend_gen.project import load_project
from triton_backend_gen.scaffold import compose, naming
from triton_backend_gen.scaffold.compose import add_model
from triton_backend_gen.scaffold.example_model import ExampleModel
from triton_backend_gen.scaffold.example_model import write_example_model as _write_with
from triton_backend_gen.scaffold.answers import Prompter, parse_set_options, read_answers_file, resolve_answers
from triton_backend_gen.scaffold.render import render_project
from triton_backend_gen.scaffold.templates import get_template, list_templates

__all__ = ["add_model", "ExampleModel", "ImportedModel", "import_config", "render_new_project", "write_example_model", "parse_set_options", "read_answers_file", "resolve_answers", "render_project", "get_template", "list_templates"]


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
    answers come under ``given`` and whose label files are written beside its config.pbtxt.
    """
    spec = get_template(template)
    name = naming.check_project_name(Path(target).name)  # as it is: answers are stripped, a directory name is not
    if "project_name" in given and str(given["project_name"]).strip() != name:
        raise AnswerError(
            f"project_name {given['project_name']!r} differs from the name of the project directory {name!r}.",
            "The project's name is the last part of PATH (tbgen new PATH): leave project_name out of --set and "
            "answers files.",
        )
    if imported is not None:
        given = {**imported.answers(template), **given}
    composition, given = compose.plan(template, given)
    if composition is None and given.get("signature") and "model_name" not in given:
        # A model of the user's own is no add/sub: it takes the project's name unless told otherwise.
        given = {**given, "model_name": name.lower()}
    answers = resolve_answers(spec, {"project_name": name, **given}, prompter)
    if composition is not None:
        compose.check_answers(composition, answers)
    model_dir = Path("model_repository", answers["model_name"])
    files = {model_dir / file: data for file, data in (imported.files if imported else {}).items()}
    grower = compose.Grower(composition, answers, {}, fresh_project=True) if composition is not None else None
    return render_project(spec, answers, Path(target), force=force, files=files,
                          extend=grower.grow if grower is not None else None)


def write_example_model(root: Path) -> ExampleModel | None:
    """The last step of ``tbgen new`` for a framework project: its example model file, written by its
    export_model.py (see scaffold.example_model). None for a project without a framework."""
    project = load_project(root)
    chosen = frameworks.framework(project.framework)
    if chosen is None:
        return None
    return _write_with(project.root, project.models[0].directory, chosen)
